"""``costlearn info`` (or ``models``): what each model of the store knows, as lines or JSON (computed by
:mod:`costlearn.model.catalog`)."""
from __future__ import annotations

import json
from pathlib import Path

from costlearn.cli.common import add_dtypes_arg
from costlearn.families import FAMILIES


def cmd_info(args) -> int:
    from costlearn.model.catalog import describe_store, summary_lines
    from costlearn.model.store import store_hint
    store = describe_store(args.models, device=args.model, family=args.family, dtypes=args.dtype)
    if args.json:
        print(json.dumps(store, indent=1))
        return 0
    if not store["models"]:
        which = " ".join(f"{flag} {v if isinstance(v, str) else ' '.join(v)}" for flag, v in (
            ("--model", args.model), ("--family", args.family), ("--dtype", args.dtype)) if v)
        print(f"{store['root']}: no model{' of ' + which if which else ''} (`costlearn train` makes one)"
              + (store_hint(Path(store["root"]), cli=True) if not which and not store["old"] else ""))
    else:
        print(f"{store['root']}: {len(store['models'])} model{'' if len(store['models']) == 1 else 's'}")
    for model in store["models"]:
        for line in summary_lines(model):
            print(line)
    for folder in store["old"]:
        print(f"{folder}: a model of the layout before kernel families; `costlearn migrate-models {store['root']}` "
              "converts it")
    return 0


def add_info(sub) -> None:
    p = sub.add_parser("info", aliases=["models"], help="what each model of the store knows",
                       description="List each model of the store: its device, kernel family, dtype, layouts and "
                       "epilogues, the extents it was trained on (min and max M, N, K) and where its answers are "
                       "flagged out of distribution, its held-out scores against the baselines, when it was trained "
                       "and on what, and its size. A model that does not load is listed with why.")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--model", default=None,
                   help="model device folder: only its models (e.g. a100) (default: every one)")
    p.add_argument("--family", default=None, choices=FAMILIES.names(), help="only this kernel family")
    add_dtypes_arg(p, "every one")
    p.add_argument("--json", action="store_true", help="one JSON document: the store's root, its models, each with "
                   "every fact above as plain values (sizes in bytes, regrets as fractions)")
    p.set_defaults(func=cmd_info)


PARSERS = {"info": add_info}
"""The commands this module adds, each by its function of the subparsers."""
