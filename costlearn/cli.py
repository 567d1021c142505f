"""Command line: ``costlearn collect | train | predict | evaluate | run | dispatch | tuning-db |
compact | features | space``.

Run ``costlearn <command> --help`` for each command's options.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["main"]

_EPILOG = """\
typical use, once per device class:
  costlearn collect --budget 600          # measure random shapes x tiles into data/<device>/
  costlearn train                         # fit models/<device>/float32/ from data/<device>/
  costlearn predict 1 1024 1024           # best tile for M=1, N=1024, K=1024
  costlearn evaluate                      # measure fresh shapes, print regret vs baselines
or all four at once:
  costlearn run --budget 180
"""


def _number(kind: type, lo: float, strict: bool, what: str):
    """argparse type: a finite ``kind`` (int or float) >= lo (> lo if strict)."""
    import math

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(v) or v < lo or (strict and v == lo):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what} {'>' if strict else '>='} {lo:g}")
        return v
    return parse


_positive_int = _number(int, 1, False, "an integer")
_nonneg_int = _number(int, 0, False, "an integer")
_positive_seconds = _number(float, 0, True, "a finite number of seconds")
_positive_float = _number(float, 0, True, "a finite number")


def _backend(name: str):
    from .backends import get_backend
    return get_backend(name)


def _protocol(args):
    from .measure import Protocol
    return Protocol(rounds=args.rounds, distribution=args.distribution, density=args.density,
                    seed=args.seed)


def _add_measure_args(p, data: str = "data"):
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "opencl"],
                   help="backend to measure on; auto = CUDA if CuPy sees a GPU, else OpenCL (default: auto)")
    p.add_argument("--data", default=data, help=f"dataset root; rows go to <data>/<device>/ (default: {data})")
    p.add_argument("--rounds", type=_positive_int, default=7, help="interleaved timing rounds per candidate (default: 7)")
    p.add_argument("--distribution", default="normal", choices=["normal", "uniform", "sparse"],
                   help="input value distribution (default: normal)")
    p.add_argument("--density", type=_positive_float, default=1.0,
                   help="non-zero fraction for --distribution sparse (default: 1.0)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed of pool, shapes and inputs (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_collect_args(p, budget_s: float):
    p.add_argument("--budget", type=_positive_seconds, default=budget_s,
                   help=f"seconds of collection, compiling included (default: {budget_s:.0f})")
    p.add_argument("--pool", type=_positive_int, default=None,
                   help="candidate pool size, compiled once (default: 48 on a CPU, 160 on a GPU)")
    p.add_argument("--configs-per-shape", type=_positive_int, default=None,
                   help="pool configs measured per shape (default: all feasible)")
    p.add_argument("--max-extent", type=_positive_int, default=None,
                   help="largest M, N, K drawn (default: 1024 on a CPU, 8192 on a GPU)")
    p.add_argument("--shapes", nargs="+", default=None, metavar="M,N,K",
                   help="measure these shapes (every pool config feasible for each) instead of random ones")
    p.add_argument("--max-flops", type=_positive_float, default=None,
                   help="largest 2*M*N*K drawn (default: 2**26 on a CPU, none on a GPU)")


def _parse_shapes(items) -> list:
    """``["1,4096,4096", ...]`` -> [(1, 4096, 4096), ...], each checked."""
    from .space import check_shape
    out = []
    for item in items:
        parts = str(item).split(",")
        if len(parts) != 3:
            raise ValueError(f"shape {item!r}: give M,N,K (three integers separated by commas)")
        try:
            m, n, k = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"shape {item!r}: M, N, K must be integers") from None
        out.append(check_shape(m, n, k)[:3])
    return out


def _is_cpu(spec) -> bool:
    return spec.device_type == "cpu"


def cmd_collect(args) -> int:
    from .collect import collect, dataset_summary
    from .sampler import ShapeBounds
    shapes = _parse_shapes(args.shapes) if getattr(args, "shapes", None) else None
    be = _backend(args.device)
    spec = be.spec
    cpu = _is_cpu(spec)
    b = ShapeBounds.for_device(cpu)
    bounds = ShapeBounds(1, b.max_extent if args.max_extent is None else args.max_extent,
                         b.max_flops if args.max_flops is None else args.max_flops)
    out = Path(args.data) / spec.slug
    pool = args.pool if args.pool is not None else (48 if cpu else 160)
    print(f"device: {spec.name} ({be.name}); dataset: {out}; pool {pool} configs; "
          f"shapes M,N,K <= {bounds.max_extent}, 2MNK <= {bounds.max_flops:.3g}", file=sys.stderr)
    res = collect(be, out, budget_s=args.budget, pool_size=pool,
                  configs_per_shape=pool if args.configs_per_shape is None else args.configs_per_shape,
                  bounds=bounds, shapes=shapes,
                  protocol=_protocol(args), seed=args.seed, progress=not args.no_progress)
    secs = ", ".join(f"{k} {v:.1f}s" for k, v in res.seconds.items())
    if res.stopped:
        print(f"warning: {res.stopped}; rerun the same command to resume", file=sys.stderr)
    print(f"collected {res.rows_written} rows ({res.rows_valid} valid) over {res.shapes_done} shapes; "
          f"skipped {res.skipped} already measured; {secs}")
    print(f"noise floor: two timings of the same config in one session differ by {res.noise_floor:.1%} "
          f"(median); spread of a row's samples (p80-p20)/median: {res.spread_frac:.1%} (median)")
    print(f"dataset {out}: {dataset_summary(out)}")
    return 0


def _model_dir(args, dtype="float32") -> Path:
    from .predict import _resolve
    return _resolve(args.model, dtype, args.models)


def cmd_train(args) -> int:
    from .train import train
    data = Path(args.data)
    if not data.is_dir():
        raise ValueError(f"--data {args.data}: no such folder; collect first (`costlearn collect`)")
    if not (data / "device.json").is_file() and not list(data.glob("part-*.parquet")):
        subs = sorted(p.parent.name for p in data.glob("*/device.json")) if data.is_dir() else []
        if len(subs) == 1:
            data = data / subs[0]
        else:
            raise ValueError(f"--data {args.data} holds no dataset parts" if not subs else
                             f"--data {args.data} holds datasets for {subs}; pass --data {args.data}/<device>")
    t0 = time.perf_counter()
    from .model.artifact import default_models_dir
    res = train(data, args.models or default_models_dir(), feature_set=args.feature_set)
    print(f"trained on {res.rows} rows over {res.shapes} shapes in {time.perf_counter() - t0:.1f}s "
          f"-> {res.path.parent}")
    if res.holdout:
        print("held-out shapes (20%, shape-grouped): top-1 regret mean / geomean, top-5 mean, Kendall tau")
        for name, s in res.holdout.items():
            print(f"  {name:<11} {s['top1_mean']:7.1%} {s['top1_geomean']:7.1%} {s['top5_mean']:7.1%} "
                  f"{s['kendall_tau']:6.3f}")
    return 0


def cmd_predict(args) -> int:
    from .predict import predict_best
    from .space import check_shape
    shapes = args.shape
    if len(shapes) % 3:
        raise ValueError(f"give shapes as M N K triples, got {len(shapes)} numbers: {shapes}")
    triples = [tuple(shapes[i:i + 3]) for i in range(0, len(shapes), 3)]
    for t in triples:  # every triple is checked before anything is printed
        check_shape(*t, args.dtype)
    backend = _backend(args.device) if args.measure_top_k else None
    db = None
    if args.tuning_db is not None or args.measure_top_k:
        from .tuning_db import TuningDB
        db = TuningDB(args.tuning_db)
    for m, n, k in triples:
        p = predict_best(m, n, k, dtype=args.dtype, device=args.model, top_k=args.top_k,
                         models_dir=args.models, measure_top_k=args.measure_top_k, backend=backend, tuning_db=db)
        if args.json:
            print(json.dumps(dict(m=p.m, n=p.n, k=p.k, dtype=p.dtype, device=p.device,
                                  config=p.config.to_dict(), config_id=p.config.config_id,
                                  time_us=p.time_us, chosen_by=p.chosen_by, from_tuning_db=p.from_tuning_db,
                                  measured_us=dict(p.measured_us), ood=p.ood, ood_reasons=list(p.ood_reasons),
                                  top_k=[dict(config_id=c.config_id, time_us=t) for c, t in p.top_k])))
            continue
        how = f"{p.chosen_by} {p.time_us:.1f} us" + (" (tuning database)" if p.from_tuning_db else "")
        print(f"M={p.m} N={p.n} K={p.k} ({p.dtype}, model {p.device}): {p.config.config_id} {how}"
              + (f"  [OOD: {'; '.join(p.ood_reasons)}]" if p.ood else ""))
        for rank, (c, t) in enumerate(p.top_k, 1):
            print(f"  {rank:2d}. {c.config_id:<34} {t:10.1f} us predicted")
        if p.measured_us:
            print("  measured: " + ", ".join(f"{cid} {t:.1f} us" for cid, t in p.measured_us))
    if db is not None and db.set_aside:
        print(f"note: corrupt tuning database set aside as {', '.join(map(str, db.set_aside))}", file=sys.stderr)
    return 0


def cmd_dispatch(args) -> int:
    import numpy as np

    from .dispatch import check_name, evaluate_dispatch, fit_dispatch, parse_range
    from .predict import Predictor, _resolve
    ranges = {d: parse_range(getattr(args, d.lower()), d) for d in "MNK"}
    check_name(args.name)
    folder = _resolve(args.model, "float32", args.models)
    pred = Predictor(folder)
    d = fit_dispatch(pred, ranges, max_configs=args.configs, samples=args.samples, max_depth=args.depth,
                     seed=args.seed)
    paths = d.write(args.out, args.name)
    q = d.predicted
    print(f"{len(d.configs)} configs for M {ranges['M']}, N {ranges['N']}, K {ranges['K']} "
          f"(model {pred.device}; {q['shapes']} sampled shapes):")
    for i, c in enumerate(d.configs):
        print(f"  {i}. {c.config_id}")
    single = (f"one config for all ({d.single_best.config_id}) {q['single_best_geomean']:.1%}"
              if d.single_best is not None else "no single config fits every shape")
    print(f"predicted regret vs the per-shape best: selector geomean {q['selector_geomean']:.1%}, mean "
          f"{q['selector_mean']:.1%}, max {q['selector_max']:.1%}; best member per shape {q['subset_geomean']:.1%}; "
          + single)
    print("wrote " + ", ".join(str(p) for p in paths))
    eval_dir = Path(args.eval_dir) if args.eval_dir else Path("data") / pred.device / "dispatch-eval"
    if args.measure:
        from .collect import collect
        from .dispatch import range_shapes
        backend = _backend(args.device)
        if backend.spec.slug != pred.spec.slug:
            raise ValueError(f"the model is for {pred.spec.name}, this device is {backend.spec.name}; "
                             "measure on the model's device")
        fresh = [s for s in range_shapes(ranges, 4 * args.measure, args.seed + 1000, corners=False)
                 if tuple(s) not in {tuple(x) for x in pred.envelope.shapes} and pred._feasible(*s).any()]
        collect(backend, eval_dir, budget_s=args.budget, dtype=pred.dtype, shapes=fresh[:args.measure],
                pool=pred.artifact.candidate_configs(), configs_per_shape=len(pred._configs), seed=args.seed)
    if not eval_dir.is_dir():
        print(f"no measurements in {eval_dir} to evaluate the selector on; add --measure N")
    else:
        from .dataset import current_rows, load, noise_floor, valid_rows
        rows = valid_rows(current_rows(load(eval_dir)[0])[0])
        rows = rows[rows["device_slug"] == pred.spec.slug]
        noise = noise_floor(rows) if len(rows) else float("nan")
        ev = evaluate_dispatch(d, pred, rows, noise_rel=noise if np.isfinite(noise) else 0.0)
        if ev.empty:
            print(f"no measured shape in {eval_dir} lies in the ranges; add --measure N")
            return 0
        print(f"\nmeasured on {pred.spec.name}: {len(ev)} fresh shapes in range from {eval_dir} (every candidate "
              f"measured; noise floor {noise:.1%}, regrets at or below it count as 0)\n")
        print("| choice | shapes | top-1 regret mean | geomean | max |")
        print("|---|---|---|---|---|")
        choices = [("selector", f"selector ({len(d.configs)} configs, chosen at launch)"),
                   ("model", "predict_best per shape (a kernel per shape)")]
        if d.single_best is not None:
            choices.append(("single", f"one config for all ({d.single_best.config_id})"))
        for who, label in choices:
            r = ev[f"{who}_regret"].to_numpy(np.float64)
            r = r[np.isfinite(r)]
            print(f"| {label} | {len(r)} | {r.mean():.1%} | {np.exp(np.log1p(r).mean()) - 1:.1%} | {r.max():.1%} |")
        if args.per_shape:
            print()
            print(ev.to_string(index=False))
    return 0


def cmd_tuning_db(args) -> int:
    from .tuning_db import TuningDB
    db = TuningDB(args.path)
    entries = db.entries()
    print(f"{db.path}: {len(entries)} entries")
    for e in entries[-args.last:]:
        print(f"  {e.m}x{e.n}x{e.k} {e.dtype} {e.device} {e.config.config_id} {e.how} {e.time_us:.1f} us "
              f"(template {e.template_hash}, costlearn {e.costlearn_version}, {e.updated})")
    return 0


def cmd_evaluate(args) -> int:
    from .evaluate import evaluate, score
    if getattr(args, "no_measure", False):
        if not args.out or not args.model:
            raise ValueError("--no-measure scores measurements already made: give --model and --out DIR")
        from .dataset import load
        folder = _model_dir(args)
        rows, _ = load(args.out)
        res = score(folder, rows)
        print(f"scored {len(res.rows)} measurements from {args.out} (nothing measured):")
        _print_eval(res, args)
        return 0
    be = _backend(args.device)
    if not args.model:
        args.model = be.spec.slug       # the local device's model
    folder = _model_dir(args)
    if args.out:
        eval_dir = Path(args.out)
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        eval_dir = Path(args.data) / folder.parent.name / f"eval-{stamp}"
    if eval_dir.is_dir() and any(eval_dir.glob("part-*.parquet")):
        print(f"resuming the evaluation in {eval_dir}: shapes and configs measured there are not "
              "measured again", file=sys.stderr)
    print(f"fresh measurements go to {eval_dir}", file=sys.stderr)
    res = evaluate(be, folder, eval_dir, n_random=args.shapes, budget_s=args.budget,
                   protocol=_protocol(args), seed=args.seed + 1, progress=not args.no_progress)
    print(f"fresh shapes measured on {be.spec.name}, exhaustive over the model's candidates:")
    _print_eval(res, args)
    return 0


def _print_eval(res, args) -> None:
    from .evaluate import format_per_shape, format_table, write_report
    print(format_per_shape(res))
    print()
    print(format_table(res, "all"))
    print(f"noise floor of these measurements: {res.noise_floor:.1%}; regret at or below it counts as 0 (a tie)")
    if args.report:
        print(f"report: {write_report(res, args.report)}")
    if getattr(args, "plots", None):
        from .evaluate import write_plots
        for path in write_plots(res, args.plots):
            print(f"plot: {path}")


def cmd_run(args) -> int:
    """collect -> train -> predict -> evaluate on the local device."""
    t0 = time.perf_counter()
    be = _backend(args.device)
    print(f"== costlearn run on {be.spec.name} ({be.name})", flush=True)
    cmd_collect(args)
    print(f"== train  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    args.data_root = args.data
    data_root = args.data
    args.data = str(Path(data_root) / be.spec.slug)
    args.feature_set = "analytic"
    cmd_train(args)
    print(f"== predict  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    args.model = be.spec.slug
    cpu = _is_cpu(be.spec)
    args.shape = [1, 1024, 1024, 64, 64, 64, 300, 200, 500] if cpu else \
        [1, 4096, 4096, 4096, 4096, 4096, 8, 8192, 1024]
    args.dtype, args.top_k, args.json = "float32", 3, False
    args.measure_top_k, args.tuning_db = 0, None
    cmd_predict(args)
    print(f"== evaluate  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    args.data = data_root
    args.shapes = args.eval_shapes
    args.budget = args.eval_budget
    args.out = str(Path(data_root) / be.spec.slug / "eval")
    cmd_evaluate(args)
    print(f"== done in {time.perf_counter() - t0:.0f}s")
    return 0


def cmd_compact(args) -> int:
    from .dataset import compact
    n_parts, n_rows = compact(args.folder)
    if n_parts == 0:
        print(f"{args.folder}: nothing to merge (fewer than two readable parts)")
    else:
        print(f"{args.folder}: merged {n_parts} parts into one part of {n_rows} rows")
    return 0


def cmd_features(args) -> int:
    import pandas as pd

    from .collect import candidate_pool
    from .device import preset
    from .features import get_feature_set
    spec = preset(args.preset) if args.preset is not None else _backend(args.device).spec
    m, n, k = _parse_shapes([args.shape])[0]
    pool = [c for c in candidate_pool(spec, "float32", args.pool, args.seed)]
    rows = pd.DataFrame([dict(m=m, n=n, k=k, dtype="float32", config_id=c.config_id, **c.to_dict())
                         for c in pool])
    rows["registers_per_thread"] = float("nan")
    if spec.api == "cuda" and not args.no_nvcc:
        from .features.registers import NvccUnavailable, nvcc_registers
        arch = "sm_" + spec.compute_capability.replace(".", "")
        try:
            regs = nvcc_registers(pool, arch)
        except NvccUnavailable as e:
            raise ValueError(f"{e}; or pass --no-nvcc to use the register estimate") from None
        rows["registers_per_thread"] = rows["config_id"].map(regs).astype(float)
        print(f"registers per thread from nvcc -arch={arch}: min {min(regs.values())}, "
              f"max {max(regs.values())}", file=sys.stderr)
    table = pd.concat([rows[["config_id"]], get_feature_set(args.feature_set).transform(rows, spec)], axis=1)
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"{len(table)} configs x {table.shape[1] - 1} features -> {args.csv}")
    else:
        with pd.option_context("display.max_columns", 12, "display.width", 160):
            print(table.head(args.rows).to_string(index=False))
    return 0


def cmd_space(args) -> int:
    from .device import preset
    from .space import enumerate_space
    spec = preset(args.preset) if args.preset is not None else _backend(args.device).spec
    shape = tuple(args.shape) if args.shape else None
    res = enumerate_space(spec, "float32", shape)
    print(f"{spec.name}: " + res.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="costlearn", description="Learned cost model for GPU matmul tile "
                                 "selection: measure, learn, predict, evaluate.",
                                 epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    from . import __version__
    ap.add_argument("--version", action="version", version=f"costlearn {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("collect", help="measure random shapes x tile configs into a dataset",
                       description="Measure random feasible tile configs on random shapes (batch-1 and "
                       "skinny ones included) under a time budget; resumable.")
    _add_measure_args(p)
    _add_collect_args(p, 240.0)
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("train", help="fit the cost model on a dataset",
                       description="Fit the XGBoost cost model on data/<device>/ and write "
                       "models/<device>/float32/; prints held-out regret against the baselines.")
    p.add_argument("--data", default="data", help="dataset folder, or a root holding one device's "
                   "folder (default: data)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--feature-set", default="analytic", choices=["analytic", "raw", "derived"],
                   help="features the model uses (default: analytic; raw and derived are ablations)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("predict", help="best tile config for shapes",
                       description="Predict the fastest tile config for each M N K triple.")
    p.add_argument("shape", nargs="+", type=int, metavar="M N K", help="one or more M N K triples")
    p.add_argument("--model", default=None, help="model device folder, e.g. h200 (default: the only one)")
    p.add_argument("--models", default=None, help="model store root (default: the repo's models/)")
    p.add_argument("--dtype", default="float32", help="element type (default: float32, the only one so far)")
    p.add_argument("--top-k", type=_positive_int, default=5, help="how many ranked configs to list (default: 5)")
    p.add_argument("--json", action="store_true", help="one JSON object per shape")
    p.add_argument("--measure-top-k", type=_nonneg_int, default=0, metavar="K",
                   help="measure the model's top K on the local device and keep the fastest, recording it in "
                   "the tuning database (default: 0, predict only)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "opencl"],
                   help="backend for --measure-top-k (default: auto)")
    p.add_argument("--tuning-db", default=None, metavar="PATH",
                   help="tuning database to consult and record in (default with --measure-top-k: "
                   "$COSTLEARN_TUNING_DB, else ~/.cache/costlearn/tuning.sqlite)")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("dispatch", help="a few configs + a launch-time selector for a range of shapes",
                       description="Choose up to --configs tile configs that together cover the shape "
                       "ranges with the least predicted regret, and write a selector that picks among them "
                       "from the actual extents at launch, as Python (NAME.py) and a C header (NAME.h). "
                       "With measured fresh shapes in range (--measure N, or already in --eval-dir), print "
                       "the selector's measured regret against the per-shape best.")
    p.add_argument("--m", required=True, metavar="LO:HI", help="range of M, inclusive, e.g. 1:1024")
    p.add_argument("--n", required=True, metavar="LO:HI", help="range of N")
    p.add_argument("--k", required=True, metavar="LO:HI", help="range of K")
    p.add_argument("--configs", type=_positive_int, default=3, help="at most this many configs, 1-4 (default: 3)")
    p.add_argument("--samples", type=_positive_int, default=2000, help="shapes sampled to fit (default: 2000)")
    p.add_argument("--depth", type=_positive_int, default=3, help="depth of the selector's tree (default: 3)")
    p.add_argument("--seed", type=_nonneg_int, default=0)
    p.add_argument("--model", default=None, help="model device folder (default: the only one)")
    p.add_argument("--models", default=None, help="model store root (default: the repo's models/)")
    p.add_argument("--out", default="out/dispatch", help="folder for the selector (default: out/dispatch)")
    p.add_argument("--name", default="select_tile", help="selector function and file name (default: select_tile)")
    p.add_argument("--measure", type=_nonneg_int, default=0, metavar="N",
                   help="measure N fresh shapes in range (every candidate) for the evaluation (default: 0)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "opencl"],
                   help="backend for --measure (default: auto)")
    p.add_argument("--eval-dir", default=None, help="measured fresh shapes; resumed by --measure "
                   "(default: data/<model device>/dispatch-eval)")
    p.add_argument("--budget", type=_positive_seconds, default=900.0, help="seconds of measuring (default: 900)")
    p.add_argument("--per-shape", action="store_true", help="also print the per-shape regrets")
    p.set_defaults(func=cmd_dispatch)

    p = sub.add_parser("tuning-db", help="list the tuning database",
                       description="List the tuning database's entries (shape, device, config, how chosen, "
                       "time). A corrupt file is reported and set aside.")
    p.add_argument("--path", default=None, help="database file (default: $COSTLEARN_TUNING_DB, else "
                   "~/.cache/costlearn/tuning.sqlite)")
    p.add_argument("--last", type=_positive_int, default=50, help="entries to print, newest (default: 50)")
    p.set_defaults(func=cmd_tuning_db)

    p = sub.add_parser("evaluate", help="measure fresh shapes and report regret vs baselines",
                       description="Measure fresh shapes (batch-1, skinny, small, past a tile multiple, "
                       "random) exhaustively over the model's candidates on the local device; print "
                       "per-shape and summary top-k regret and Kendall tau for the model and the "
                       "roofline, best-fixed and random baselines.")
    _add_measure_args(p)
    p.add_argument("--model", default=None, help="model device folder (default: the local device's)")
    p.add_argument("--models", default=None, help="model store root (default: the repo's models/)")
    p.add_argument("--shapes", type=_nonneg_int, default=4, help="random fresh shapes besides the fixed set (default: 4)")
    p.add_argument("--budget", type=_positive_seconds, default=600.0,
                   help="seconds of measuring (default: 600)")
    p.add_argument("--out", default=None, help="dataset folder for the fresh measurements; an existing "
                   "one is resumed (default: a new <data>/<device>/eval-<UTC time>/)")
    p.add_argument("--report", default=None, help="write markdown + CSV report here")
    p.add_argument("--plots", default=None, help="write PNG plots into this folder (needs matplotlib)")
    p.add_argument("--no-measure", action="store_true",
                   help="score the measurements already in --out with --model; needs no device")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("run", help="collect, train, predict and evaluate on the local device",
                       description="The main job end to end on the local device: collect for --budget "
                       "seconds, train, predict a few shapes (M=1 included), evaluate on fresh shapes.")
    _add_measure_args(p, data="out/data")
    _add_collect_args(p, 180.0)
    p.add_argument("--models", default="out/models", help="model store root (default: out/models)")
    p.add_argument("--eval-shapes", type=_nonneg_int, default=2, help="random fresh shapes (default: 2)")
    p.add_argument("--eval-budget", type=_positive_seconds, default=100.0, help="seconds for evaluation (default: 100)")
    p.add_argument("--report", default=None, help="write the evaluation report here")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compact", help="merge a dataset folder's parts into one",
                       description="Merge every readable Parquet part of a dataset folder into one part "
                       "(atomic; safe to interrupt). Corrupt parts are left in place.")
    p.add_argument("folder", help="dataset folder, e.g. data/h200")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("features", help="feature table of a device's candidate pool at one shape",
                       description="Build the analytic feature table of a candidate pool on the local "
                       "device or a preset (e.g. h200, with registers per thread read from nvcc "
                       "-Xptxas -v, so no GPU is needed).")
    p.add_argument("--preset", default=None, help="a named device (h200, h100, a100); default: the local one")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "opencl"],
                   help="local backend when no --preset (default: auto)")
    p.add_argument("--shape", required=True, metavar="M,N,K", help="the problem shape, e.g. 4096,4096,4096")
    p.add_argument("--pool", type=_positive_int, default=64, help="candidate pool size (default: 64)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="pool seed (default: 0)")
    p.add_argument("--feature-set", default="analytic", choices=["analytic", "raw", "derived"])
    p.add_argument("--no-nvcc", action="store_true", help="use the register estimate instead of nvcc")
    p.add_argument("--csv", default=None, help="write the whole table here instead of printing")
    p.add_argument("--rows", type=_positive_int, default=10, help="rows to print (default: 10)")
    p.set_defaults(func=cmd_features)

    p = sub.add_parser("space", help="enumerate the feasible tile space of a device",
                       description="Count the feasible tile configs of the local device or a preset, and "
                       "how many each feasibility rule rejected.")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "opencl"],
                   help="local backend to describe (default: auto)")
    p.add_argument("--preset", default=None, help="a named device instead of the local one (h200, h100, a100)")
    p.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"),
                   help="also reject block tiles larger than this problem")
    p.set_defaults(func=cmd_space)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as e:
        print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        from .backends import BackendUnavailable
        from .dataset import DatasetError
        if isinstance(e, (BackendUnavailable, DatasetError)):
            print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
            return 2
        raise
    except OSError as e:
        print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; everything measured so far is saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
