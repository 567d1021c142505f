"""``costlearn predict``: the best tile config of shapes, printed (or as JSON lines), optionally measured and
recorded in the tuning database."""
from __future__ import annotations

import json
import sys

from costlearn.cli.common import (SHAPE_SYNTAX, add_device_arg, add_problem_args, check_family_dtype, device_backend,
                                  model_device, nonneg_int, parse_shapes, positive_int, tuning_db_target)
from costlearn.core.problem import Problem
from costlearn.families import get_family
from costlearn.serve.tuning_rows import check_file_target


def _check_shapes(triples, family: str, dtype: str, layout: str, epilogue: str = "none") -> None:
    """Raise the error of the first (M, N, K) the family cannot serve, naming the shape."""
    fam = get_family(family)
    for t in triples:
        try:
            fam.check_problem(Problem(*t, dtype, layout, epilogue))
        except (TypeError, ValueError) as e:
            raise type(e)(f"shape {'x'.join(map(str, t))}: {e}") from None


def predict_stage(triples, *, device, family: str, dtype: str, layout: str, top_k: int, models_dir,
                  as_json: bool = False, measure_top_k: int = 0, backend=None, tuning_db=None,
                  epilogue: str = "none", here=None) -> None:
    """Predict each (M, N, K) and print it (a JSON object per line with ``as_json``): all in one
    :func:`costlearn.serve.predict.predict_many` call, or one :func:`costlearn.serve.predict.predict_best` call each
    where they measure or read the tuning database. ``here``: the DeviceSpec of the device this process
    opened (:func:`model_device`)."""
    from costlearn.serve.predict import predict_best
    _check_shapes(triples, family, dtype, layout, epilogue)   # every triple is checked before anything is printed
    device = model_device(device, family, dtype, models_dir, here=here if here is not None else
                          (backend.spec if backend is not None else None))
    from costlearn.model.store import resolve_model
    print(f"model: {resolve_model(device, family, dtype, models_dir, cli=True)}", file=sys.stderr)
    from_db = recorded = unrecorded = 0
    if not measure_top_k and tuning_db is None:         # predictions only: every shape in one call
        from costlearn.serve.predict import load_predictor, predict_many
        m, n, k = triples[0]                # one dtype, layout and epilogue for all: served, named by a shape
        load_predictor(device, family, dtype, models_dir).check_served(Problem(m, n, k, dtype, layout, epilogue),
                                                                        "shape")
        preds = iter(predict_many([(m, n, k, layout, epilogue) for m, n, k in triples], dtype, device,
                                  family=family, top_k=top_k, models_dir=models_dir))
    else:
        preds = (predict_best(m, n, k, dtype=dtype, device=device, family=family, layout=layout, top_k=top_k,
                              models_dir=models_dir, measure_top_k=measure_top_k, backend=backend,
                              tuning_db=tuning_db, epilogue=epilogue) for m, n, k in triples)
    for p in preds:
        if as_json:
            print(json.dumps(dict(m=p.m, n=p.n, k=p.k, dtype=p.dtype, layout=p.layout, epilogue=p.epilogue,
                                  family=p.family,
                                  device=p.device, config=p.config.to_dict(), config_id=p.config.config_id,
                                  time_us=p.time_us, chosen_by=p.chosen_by, from_tuning_db=p.from_tuning_db,
                                  measured_us=dict(p.measured_us), tied_with=list(p.tied_with),
                                  tuning_db_source=p.tuning_db_source, tuning_db_note=p.tuning_db_note, ood=p.ood,
                                  ood_reasons=list(p.ood_reasons), model=p.model,
                                  top_k=[dict(config_id=c.config_id, time_us=t) for c, t in p.top_k])))
        if tuning_db is not None:
            from_db += p.from_tuning_db
            recorded += not p.from_tuning_db and not p.tuning_db_note
            unrecorded += bool(p.tuning_db_note)
        if as_json:
            continue
        earlier = ", an earlier answer" + ((" measured then" + (f": {p.tuning_db_source}" if p.tuning_db_source
                                                                  else "")) if p.chosen_by == "measured" else "")
        how = f"{p.chosen_by} {p.time_us:.1f} us" + (f" (from the tuning database{earlier})" if p.from_tuning_db
                                                     else "")
        fused = "" if p.epilogue == "none" else f" +{p.epilogue}"
        print(f"M={p.m} N={p.n} K={p.k} ({p.dtype} {p.layout}{fused}, {p.family} model {p.device}): "
              f"{p.config.config_id} "
              f"{how}" + (f"  [GUESS, out of distribution: {'; '.join(p.ood_reasons)}]" if p.ood else ""))
        for rank, (c, t) in enumerate(p.top_k, 1):
            print(f"  {rank:2d}. {c.config_id:<34} {t:10.1f} us predicted" + (" (guess)" if p.ood else ""))
        if p.measured_us:
            print("  measured: " + ", ".join(f"{cid} {t:.1f} us" for cid, t in p.measured_us))
        if p.tied_with:
            print(f"  tie: {', '.join(p.tied_with)} and {p.config.config_id} are within the measurement noise of "
                  "each other (their medians' 95 % intervals overlap); a tie goes to the vendor library, else to "
                  "the first config id in text order, so every host launches the same one")
        if p.tuning_db_note:
            print(f"  note: {p.tuning_db_note}")
    if tuning_db is not None:
        said = f", {unrecorded} not (see the notes)" if unrecorded else ""
        print(f"tuning database {tuning_db.path}: {recorded} answer{'' if recorded == 1 else 's'} recorded, "
              f"{from_db} read from it{said} (`costlearn tuning-db` lists it)", file=sys.stderr)


def cmd_predict(args) -> int:
    check_family_dtype(args)
    triples = parse_shapes(args.shape)
    _check_shapes(triples, args.family, args.dtype, args.layout, args.epilogue)
    if args.tuning_db is not None or args.measure_top_k:
        check_file_target(args.tuning_db)          # before the device is opened
    backend = device_backend(args.device, args.family) if args.measure_top_k else None
    db = None
    if args.tuning_db is not None or args.measure_top_k:
        from costlearn.serve.tuning import open_tuning_db
        db = open_tuning_db(args.tuning_db)
    predict_stage(triples, device=args.model, family=args.family, dtype=args.dtype, layout=args.layout,
                  top_k=args.top_k, models_dir=args.models, as_json=args.json, measure_top_k=args.measure_top_k,
                  backend=backend, tuning_db=db, epilogue=args.epilogue)
    if db is not None and db.set_aside:
        print(f"note: corrupt tuning database set aside as {', '.join(map(str, db.set_aside))}", file=sys.stderr)
    return 0


def add_predict(sub) -> None:
    p = sub.add_parser("predict", help="best tile config for shapes",
                       description="Predict the fastest tile config for each M N K triple.")
    p.add_argument("shape", nargs="+", metavar="SHAPE", help="one or more shapes: " + SHAPE_SYNTAX)
    p.add_argument("--model", default=None, help="model device folder, e.g. h200 (default: this machine's "
                   "device's model if the store has one, else the only one)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    add_problem_args(p, layout=True, epilogue=True)
    p.add_argument("--top-k", type=positive_int, default=5, help="how many ranked configs to list (default: 5)")
    p.add_argument("--json", action="store_true", help="one JSON object per shape")
    p.add_argument("--measure-top-k", type=nonneg_int, default=0, metavar="K",
                   help="measure the model's top K on the local device and keep the fastest (configs within "
                   "the measurement noise of it tie: the vendor library, else the first by name), recording it in "
                   "the tuning database; the vendor library (cuBLAS) is timed beside them where the family has "
                   "one (default: 0, predict only)")
    add_device_arg(p, "for --measure-top-k")
    p.add_argument("--tuning-db", default=None, metavar="PATH|URL", type=tuning_db_target,
                   help="tuning database to consult and record in, a file (created if missing) or a "
                   "postgresql:// URL shared by a fleet (its password in ~/.pgpass or $PGPASSWORD) (default with "
                   "--measure-top-k: $COSTLEARN_TUNING_DB, else tuning.sqlite in the user cache: $COSTLEARN_CACHE, "
                   "$XDG_CACHE_HOME/costlearn or ~/.cache/costlearn)")
    p.set_defaults(func=cmd_predict)


PARSERS = {"predict": add_predict}
"""The commands this module adds, each by its function of the subparsers."""
