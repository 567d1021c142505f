"""``costlearn run``: collect, train, predict and evaluate on the local device, each stage called with explicit
arguments."""
from __future__ import annotations

import time

from costlearn.cli.collect import add_collect_args, collect_stage, resolve_strategy
from costlearn.cli.common import (add_measure_args, add_problem_args, check_family_dtype, check_report_path,
                                  device_backend, is_cpu, models_out, nonneg_int, old_spelling, parse_shapes,
                                  positive_seconds, protocol_of)
from costlearn.core.files import check_output
from costlearn.cli.evaluate import evaluate_stage
from costlearn.cli.predict import predict_stage
from costlearn.cli.train import train_stage


def cmd_run(args) -> int:
    """collect -> train -> predict -> evaluate on the local device, each stage
    called with explicit arguments."""
    from costlearn.model.artifact_layout import model_folder
    t0 = time.perf_counter()
    check_family_dtype(args)
    check_output(args.data, "--data", folder=True)
    models_out(args.models)
    check_report_path(args.report)
    shapes = parse_shapes(args.shapes, files=True, dtype=args.dtype) if args.shapes else None
    be = device_backend(args.device)
    print(f"== costlearn run on {be.spec.name} ({be.name})", flush=True)
    protocol = protocol_of(args)
    data, _ = collect_stage(be, args.data, family=args.family, dtype=args.dtype, budget_s=args.budget,
                            pool=args.pool, configs_per_shape=args.configs_per_shape, max_extent=args.max_extent,
                            max_flops=args.max_flops, shapes=shapes,
                            protocol=protocol, seed=args.seed, progress=not args.no_progress,
                            recheck=args.recheck, epilogues=args.epilogues or args.default_epilogues,
                            strategy=resolve_strategy(args.strategy, shapes))
    print(f"== train  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    trained = train_stage(data, args.models, family=args.family, dtypes=[args.dtype], learner="xgboost",
                          feature_set="analytic")[-1]
    print(f"== predict  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    triples = [(1, 1024, 1024), (64, 64, 64), (300, 200, 500)] if is_cpu(be.spec) else \
        [(1, 4096, 4096), (4096, 4096, 4096), (8, 8192, 1024)]
    predict_stage(triples, device=be.spec.slug, family=trained.family, dtype=trained.dtype, layout="NN", top_k=3,
                  models_dir=args.models, here=be.spec)
    print(f"== evaluate  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    evaluate_stage(be, model_folder(args.models, be.spec.slug, trained.family, trained.dtype), data / "eval",
                   n_random=args.eval_random_shapes, budget_s=args.eval_budget, protocol=protocol,
                   seed=args.seed + 1, progress=not args.no_progress, report=args.report,
                   recheck=min(args.recheck, 2))
    print(f"== done in {time.perf_counter() - t0:.0f}s")
    return 0


def add_run(sub) -> None:
    p = sub.add_parser("run", help="collect, train, predict and evaluate on the local device",
                       description="The main job end to end on the local device: collect for --budget "
                       "seconds, train, predict a few shapes (M=1 included), evaluate on fresh shapes.")
    add_measure_args(p, data="out/data")
    add_problem_args(p)
    add_collect_args(p, 180.0, epilogues=("none",))
    p.add_argument("--models", default="out/models", help="model store root (default: out/models)")
    p.add_argument("--eval-random-shapes", type=nonneg_int, default=2, metavar="N",
                   help="evaluate's --random-shapes: random fresh shapes besides the fixed set of 8 (default: 2)")
    old_spelling(p, "--eval-shapes", "--eval-random-shapes", check=nonneg_int)
    p.add_argument("--eval-budget", type=positive_seconds, default=100.0, help="seconds for evaluation (default: 100)")
    p.add_argument("--report", default=None, help="write the evaluation report here")
    p.set_defaults(func=cmd_run)


PARSERS = {"run": add_run}
"""The commands this module adds, each by its function of the subparsers."""
