"""Command line: ``costlearn collect | train | predict | evaluate | run | dispatch | tuning-db |
compact | features | space | migrate-models | info``.

Each command parses its arguments and calls the library with explicit
arguments (``run`` calls the same stage functions in turn); choices of
backends, kernel families, dtypes, feature sets and models come from their
registries. Run ``costlearn <command> --help`` for each command's options.
Each command group is one module of this package holding its parser setup
and its printing (``PARSERS``: command -> the function adding its parser);
this module assembles the parser and runs a command (:func:`main`).

Start-up: the modules that load pandas, scikit-learn or XGBoost (the
dataset, training, prediction, evaluation, ...) are imported inside the
command that runs them, so ``costlearn --help`` and a command's ``--help``
start without paying for those imports; everything else is imported at the
top of this package's modules (``tests/test_imports.py`` holds the rule).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import warnings

from costlearn.cli import collect, dispatch, evaluate, info, interop, predict, run, space, train, tuning_db
from costlearn.cli.common import renamed_notes
from costlearn.core.errors import CostlearnError
from costlearn.core.version import __version__

__all__ = ["main", "build_parser"]

_EPILOG = """\
typical use, once per device class (out/ keeps yours apart from a source tree's committed data/ and models/):
  costlearn collect --budget 600 --data out/data                # measure random shapes x tiles into out/data/<device>/
  costlearn train --data out/data --models out/models           # fit out/models/<device>/<family>/<dtype>/
  costlearn predict 1 1024 1024 --models out/models             # best tile for M=1, N=1024, K=1024
  costlearn evaluate --data out/data --models out/models        # measure fresh shapes, print regret vs baselines
or all four at once:
  costlearn run --budget 180 --data out/data --models out/models

each flag means one thing in every command: --device the backend that measures (auto, cuda, opencl, triton),
--preset a named device's description (h200, h100, a100), --model a model's device folder in the store,
--models the store's root, --learner the cost model train fits, --data a dataset root or one device's dataset
folder, --out where a command writes what it makes, --dtype an element type (one, or several where a command
filters by it), --shapes shapes given as M N K (--shape: one), --tuning-db the tuning database file.
"""


COMMANDS = ("collect", "recheck", "train", "import", "export", "predict", "dispatch", "tuning-db", "evaluate", "study",
            "transfer", "run", "compact", "features", "space", "migrate-models", "info")
"""The commands, in the order ``costlearn --help`` lists them."""

_PARSERS = {**collect.PARSERS, **train.PARSERS, **interop.PARSERS, **predict.PARSERS, **dispatch.PARSERS,
            **tuning_db.PARSERS, **evaluate.PARSERS, **run.PARSERS, **space.PARSERS, **info.PARSERS}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="costlearn", description="Learned cost model for GPU matmul tile "
                                 "selection: measure, learn, predict, evaluate.",
                                 epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"costlearn {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        _PARSERS[command](sub)
    return ap


def main(argv=None) -> int:
    shown = warnings.formatwarning
    warnings.formatwarning = one_line_warning     # from the first line: parsing, too, may warn
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        warnings.formatwarning = shown


def _run(argv: list) -> int:
    """:func:`main` with its warnings formatted: parse ``argv``, run the command, print an error as one line."""
    for token in argv:                  # argparse takes "-1x2x3" for an option and says a shape is missing
        if re.fullmatch(r"-\d+[x,]\S*", str(token)):
            command = next((a for a in argv if not str(a).startswith("-")), "")
            print(f"costlearn {command}: error: shape {token}: M={token.split('x')[0].split(',')[0]}; extents must "
                  "be integers >= 1".replace("  ", " "), file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    for note in renamed_notes(args):
        print(note, file=sys.stderr)
    try:
        return args.func(args)
    except (CostlearnError, ValueError) as e:      # costlearn's own errors and a bad argument: one line
        print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:                       # e.g. `costlearn predict ... | head`: the reader left
        try:                                      # Python's documented way: stdout to devnull, so exit's flush is quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as e:
        print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from costlearn.collect.summary import CollectionInterrupted
        from costlearn.interop.common import ImportInterrupted
        if isinstance(e, CollectionInterrupted):
            print(f"interrupted: {e}; the same command resumes where it stopped", file=sys.stderr)
        elif isinstance(e, ImportInterrupted):
            rest = "the rest (the rows written are not added again)" if e.report and e.report.rows_added else "it"
            print(f"interrupted: {e}; the same command imports {rest}", file=sys.stderr)
        else:
            print("interrupted; everything measured so far is saved", file=sys.stderr)
        return 130


PLAIN_WARNINGS = (UserWarning, RuntimeWarning)
"""Warning categories the command line prints without their name: costlearn's diagnostics are of these."""


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as the command line prints it: ``warning: <its words>``, one line, no source location or
    echoed source line (costlearn's own "costlearn: " prefix left out; a category other than
    :data:`PLAIN_WARNINGS` named)."""
    text = " ".join(str(message).split())
    text = text[len("costlearn: "):] if text.startswith("costlearn: ") else text
    kind = "" if category in PLAIN_WARNINGS else f"{category.__name__}: "
    return f"warning: {kind}{text}\n"


if __name__ == "__main__":
    sys.exit(main())
