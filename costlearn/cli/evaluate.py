"""``costlearn evaluate`` and ``study``: fresh measurements (or a dataset's) scored against the baselines, and
leave one log out; and what an evaluation prints."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from costlearn.cli.collect import recheck_in_new_session
from costlearn.cli.common import (DATA_HELP, add_dtypes_arg, add_measure_args, add_problem_args, check_family_dtype,
                                  check_report_path,
                                  dataset_folder, device_backend, nonneg_int, old_spelling, positive_seconds,
                                  protocol_of)
from costlearn.core.files import check_output
from costlearn.core.progress import ProgressLog
from costlearn.collect.protocol import Protocol
from costlearn.families import FAMILIES


def _default_protocol():
    return Protocol()


def evaluate_stage(backend, folder, eval_dir, *, n_random: int, budget_s: float, protocol, seed: int,
                   progress: bool, report=None, plots=None, recheck: int = 0):
    """Measure fresh problems on ``backend`` into ``eval_dir``, score the model
    in ``folder`` and print (and write) the report; returns the EvalResult."""
    from costlearn.learn.evaluate import evaluate
    eval_dir = Path(eval_dir)
    if eval_dir.is_dir() and any(eval_dir.glob("part-*.parquet")):
        print(f"resuming the evaluation in {eval_dir}: shapes and configs measured there are not "
              "measured again", file=sys.stderr)
    print(f"fresh measurements go to {eval_dir}", file=sys.stderr)
    res = evaluate(backend, folder, eval_dir, n_random=n_random, budget_s=budget_s, protocol=protocol, seed=seed,
                   progress=progress, before_score=(lambda: recheck_in_new_session(
                       backend.name, eval_dir, recheck, protocol or _default_protocol())) if recheck else None)
    print(f"fresh shapes measured on {backend.spec.name}, exhaustive over the model's candidates:")
    _print_eval(res, report, plots)
    return res


def cmd_evaluate(args) -> int:
    from costlearn.model.store import resolve_model
    check_report_path(args.report)
    if args.plots:
        check_output(args.plots, "--plots", folder=True)
    if args.no_measure:
        if args.data is not None and args.out:
            raise ValueError(f"--out {args.out}: evaluate --no-measure measures nothing, so it writes no dataset; "
                             "--report FILE writes the report (and its CSV)")
        source, flag = args.data, "--data"
        if source is None and args.out:             # the spelling before --data, kept for one release
            source, flag = args.out, "--out"
            print("note: `costlearn evaluate --no-measure --out DIR` is now `--data DIR` (--out is where fresh "
                  "measurements go); --out will stop meaning this in the next release", file=sys.stderr)
        if source is None:
            raise ValueError("--no-measure scores measurements already made: give --data DIR (and --model DEVICE "
                             "where the store holds several devices' models)")
        out = dataset_folder(source, flag)
        from costlearn.learn.study import answers_by_log, score_measurements
        with ProgressLog() as progress:
            progress(f"scoring the {args.family}/{args.dtype} model on the measurements of {out}")
            scored = score_measurements(out, args.model, args.family, args.dtype, args.models)
        print(f"scored {len(scored.result.rows)} measurements from {out} (nothing measured):")
        for note in scored.notes:
            print(note, file=sys.stderr)
        _print_eval(scored.result, args.report, args.plots)
        with ProgressLog() as progress:
            progress(f"what predict_best answers on the {len(scored.result.rows)} measurements' problems, by log")
            table = answers_by_log(scored)
        print()
        print(table)
        if args.report:
            with open(args.report, "a") as f:
                f.write("\n" + table + "\n")
        return 0
    check_output(args.out or args.data or "data", "--out" if args.out else "--data", folder=True)
    check_family_dtype(args)                        # what the family measures, before a device is opened
    be = device_backend(args.device, args.family)
    # default: this device's model
    folder = resolve_model(args.model or be.spec.slug, args.family, args.dtype, args.models, cli=True)
    if args.out:
        eval_dir = Path(args.out)
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        from costlearn.collect.dataset import device_dataset_folder
        eval_dir = device_dataset_folder(args.data or "data", folder.parents[1].name) / f"eval-{stamp}"
    evaluate_stage(be, folder, eval_dir, n_random=args.random_shapes, budget_s=args.budget, protocol=protocol_of(args),
                   seed=args.seed + 1, progress=not args.no_progress, report=args.report, plots=args.plots,
                   recheck=args.recheck)
    return 0


PER_SHAPE_PRINT_MAX = 100
"""Most problems whose per-problem table ``evaluate`` prints (an imported
log has thousands; the report file holds them all)."""


def _print_eval(res, report=None, plots=None) -> None:
    from costlearn.learn.evaluate import epilogue_subsets, format_per_shape, format_table, header_lines, write_report
    print(header_lines(res)[0])
    n_problems = int((res.per_shape["model"] == res.model).sum())
    if n_problems <= PER_SHAPE_PRINT_MAX:
        print(format_per_shape(res))
    else:
        print(f"{n_problems} problems: the per-problem table is not printed; "
              + (f"it is in {report} and its CSV" if report else "--report FILE writes it, with a CSV"))
    print()
    print(format_table(res, "all"))
    if any("tile_only" in sub for sub in res.summary.values()):
        print("\nwith the vendor candidate left out (regret against the best tile config):")
        print(format_table(res, "tile_only"))
    for subset in epilogue_subsets(res.per_shape):
        print(f"\nproblems with the {subset}:")
        print(format_table(res, subset))
    print(f"ties: a regret at or below {res.noise_floor:.1%} counts as 0; "
          + (res.noise_floors.describe() if res.noise_floors is not None else ""))
    if res.hidden_by_noise:
        from costlearn.learn.evaluate import header_lines
        print(header_lines(res)[-1], file=sys.stderr)
    if report:
        path = write_report(res, report)
        print(f"report: {path} (per-problem metrics: {path.with_suffix('.csv')})")
    if plots:
        from costlearn.learn.evaluate import write_plots
        for path in write_plots(res, plots):
            print(f"plot: {path}")


def cmd_study(args) -> int:
    from costlearn.learn.study import FOOTNOTE, leave_one_log_out
    check_report_path(args.report)
    folder = dataset_folder(args.data)
    work = check_output(Path(args.out) if args.out else Path("out") / "study" / folder.name, "--out", folder=True)
    print(f"leave one log out over {folder}: models go to {work}", file=sys.stderr)
    with ProgressLog() as progress:
        res = leave_one_log_out(folder, work, family=args.family, dtypes=args.dtype or None, progress=progress)
    text = res.format() + "\n\n" + FOOTNOTE + " Scored: the left-out log's problems that no training log measured."
    print(text)
    if args.report:
        path = Path(args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        res.per_problem.to_csv(path.with_suffix(".csv"), index=False)
        print(f"report: {path} (per-problem scores: {path.with_suffix('.csv')})")
    return 0


def add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="measure fresh shapes and report regret vs baselines",
                       description="Measure fresh shapes (batch-1, skinny, small, past a tile multiple, "
                       "random) exhaustively over the model's candidates on the local device; print "
                       "per-shape and summary top-k regret and Kendall tau for the model and the "
                       "roofline, best-fixed and random baselines.")
    add_measure_args(p, data=None, data_help=f"{DATA_HELP}: fresh measurements go to a new eval-<UTC time>/ "
                      "in the model device's folder unless --out names a folder; with --no-measure, the dataset "
                      "whose measurements are scored, which it then needs (default: data)")
    p.add_argument("--model", default=None, help="model device folder (default: the local device's)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    add_problem_args(p)
    p.add_argument("--random-shapes", type=nonneg_int, default=4, metavar="N",
                   help="random fresh shapes besides the fixed set of 8 (default: 4)")
    old_spelling(p, "--shapes", "--random-shapes", check=nonneg_int)
    p.add_argument("--budget", type=positive_seconds, default=600.0,
                   help="seconds of measuring (default: 600)")
    p.add_argument("--out", default=None, help="dataset folder for the fresh measurements; an existing "
                   "one is resumed (default: a new <data>/<device>/eval-<UTC time>/)")
    p.add_argument("--report", default=None, help="write markdown + CSV report here")
    p.add_argument("--plots", default=None, help="write PNG plots into this folder (needs matplotlib)")
    p.add_argument("--recheck", type=nonneg_int, default=4, metavar="SHAPES",
                   help="after measuring, re-time configs of this many shapes in a new process; ties then use "
                   "the across-session noise floor; 0: do not (default: 4)")
    p.add_argument("--no-measure", action="store_true",
                   help="measure nothing: score the measurements of the dataset folder --data with --model (default "
                   "there: the model of that folder's device, else the store's only one); needs no device")
    p.set_defaults(func=cmd_evaluate)


def add_study(sub) -> None:
    p = sub.add_parser("study", help="leave one log out: train on every log of a folder but one, score that one",
                       description="The honest score on logs of the kind users compile: for each log (an "
                       "imported file) of a dataset folder and each dtype, train on the other logs and score what "
                       "predict_best answers (vendor floor and coverage included) on the left-out log's problems, "
                       "one table row per log.")
    p.add_argument("--data", default="data", help=f"{DATA_HELP} holding several logs; of a root, the one device's "
                   "folder in it, else this machine's (default: data)")
    p.add_argument("--family", default="triton_mm", choices=FAMILIES.names(), help="kernel family (default: "
                   "triton_mm)")
    add_dtypes_arg(p, "every dtype with two logs")
    p.add_argument("--out", default=None, help="folder the folds' models are written to (default: out/study/<device>)")
    old_spelling(p, "--work", "--out")
    p.add_argument("--report", default=None, help="write the tables (markdown) and per-problem CSV here")
    p.set_defaults(func=cmd_study)


PARSERS = {"evaluate": add_evaluate, "study": add_study}
"""The commands this module adds, each by its function of the subparsers."""
