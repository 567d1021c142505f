"""``costlearn dispatch``: a few configs and a launch-time selector for ranges of shapes, and its report
(computed by :mod:`costlearn.learn.dispatch_report`)."""
from __future__ import annotations

from pathlib import Path

from costlearn.cli.common import (add_device_arg, add_problem_args, device_backend, model_device, nonneg_int,
                                  positive_int, positive_seconds)
from costlearn.core.files import check_output


def cmd_dispatch(args) -> int:
    from costlearn.model.store import resolve_model
    from costlearn.serve.dispatch import check_name, fit_dispatch, parse_range
    from costlearn.learn.dispatch_report import (default_eval_dir, measure_fresh_shapes, measured_lines,
                                                 predicted_lines, report_title, write_report)
    from costlearn.serve.predictor import Predictor
    ranges = {d: parse_range(getattr(args, d.lower()), d) for d in "MNK"}
    check_name(args.name)
    check_output(args.out, "--out", folder=True)
    if args.measure and args.eval_dir:
        check_output(args.eval_dir, "--eval-dir", folder=True)
    folder = resolve_model(model_device(args.model, args.family, args.dtype, args.models), args.family, args.dtype,
                           args.models, cli=True)
    pred = Predictor(folder)
    eval_dir = Path(args.eval_dir) if args.eval_dir else default_eval_dir(pred.device, args.data)
    if args.measure and not args.eval_dir:
        check_output(eval_dir, "--data", folder=True)      # before the fit and the device: where rows will go
    d = fit_dispatch(pred, ranges, max_configs=args.configs, samples=args.samples, max_depth=args.depth,
                     seed=args.seed, epilogue=args.epilogue)
    paths = d.write(args.out, args.name)
    predicted = predicted_lines(d, pred.device, ranges, args.epilogue)     # printed, and written as <out>/report.md
    for line in predicted:
        print(line)
    print("wrote " + ", ".join(str(p) for p in paths) + f", {Path(args.out) / 'report.md'}")
    if args.measure:
        measure_fresh_shapes(pred, device_backend(args.device), ranges, eval_dir, n=args.measure, seed=args.seed,
                             budget_s=args.budget, epilogue=args.epilogue)
    measured, ev = measured_lines(d, pred, eval_dir, epilogue=args.epilogue, measured_now=bool(args.measure))
    for line in measured:
        print(line)
    if args.per_shape and ev is not None:
        print()
        print(ev.to_string(index=False))
    write_report(args.out, report_title(d, ranges, args.epilogue) + predicted + measured)
    return 0


def add_dispatch(sub) -> None:
    p = sub.add_parser("dispatch", help="a few configs + a launch-time selector for a range of shapes",
                       description="Choose up to --configs tile configs that together cover the shape "
                       "ranges with the least predicted regret, and write a selector that picks among them "
                       "from the actual extents at launch, as Python (NAME.py) and a C header (NAME.h). "
                       "With measured fresh shapes in range (--measure N, or already in --eval-dir), print "
                       "the selector's measured regret against the per-shape best.")
    p.add_argument("--m", required=True, metavar="LO:HI", help="range of M, inclusive, e.g. 1:1024")
    p.add_argument("--n", required=True, metavar="LO:HI", help="range of N")
    p.add_argument("--k", required=True, metavar="LO:HI", help="range of K")
    p.add_argument("--configs", type=positive_int, default=3, help="at most this many configs, 1-4 (default: 3)")
    p.add_argument("--samples", type=positive_int, default=2000, help="shapes sampled to fit (default: 2000)")
    p.add_argument("--depth", type=positive_int, default=3, help="depth of the selector's tree (default: 3)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of the sampled and measured shapes (default: 0)")
    p.add_argument("--model", default=None, help="model device folder (default: this machine's device's model if "
                   "the store has one, else the only one)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    add_problem_args(p, epilogue=True)
    p.add_argument("--out", default="out/dispatch", help="folder for the selector (default: out/dispatch)")
    p.add_argument("--name", default="select_tile", help="selector function and file name (default: select_tile)")
    p.add_argument("--measure", type=nonneg_int, default=0, metavar="N",
                   help="measure N fresh shapes in range (every candidate) for the evaluation (default: 0)")
    add_device_arg(p, "for --measure")
    p.add_argument("--data", default="data", help="dataset root or the model device's dataset folder, where the "
                   "measured fresh shapes go unless --eval-dir (default: data)")
    p.add_argument("--eval-dir", default=None, help="measured fresh shapes; resumed by --measure "
                   "(default: <data>/<model device>/dispatch-eval)")
    p.add_argument("--budget", type=positive_seconds, default=900.0, help="seconds of measuring (default: 900)")
    p.add_argument("--per-shape", action="store_true", help="also print the per-shape regrets")
    p.set_defaults(func=cmd_dispatch)


PARSERS = {"dispatch": add_dispatch}
"""The commands this module adds, each by its function of the subparsers."""
