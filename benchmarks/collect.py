"""Collection throughput on the local device: measurements per second and the
share of wall time spent compiling, measuring and writing.

    python -m benchmarks.collect [--device auto] [--budget 90] [--pool 32] [--fresh-cache]
    python -m benchmarks.collect --ray [--workers 1 2] [--device opencl] [--budget 60] [--pool 16]

Runs one short collection into a temporary folder (nothing is kept) and prints
a table. ``--fresh-cache`` points PoCL's kernel cache at an empty folder, so
compile time is what a first run on a new machine pays; without it, kernels
compiled before are reused.

``--ray`` collects on a local Ray cluster instead (:mod:`costlearn.collect.fleet`),
once per worker count, each for ``--budget`` seconds on the same seed, and
prints measurements per second for each: over the wall time, and after the
workers started (steady state). On one machine the workers share its cores
(and, on a CPU OpenCL device, the cores the kernels run on).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "opencl"])
    ap.add_argument("--budget", type=float, default=90.0, help="seconds of collection (default: 90)")
    ap.add_argument("--pool", type=int, default=32, help="candidate pool size (default: 32)")
    ap.add_argument("--seed", type=int, default=7, help="seed of pool and shapes (default: 7)")
    ap.add_argument("--fresh-cache", action="store_true", help="empty PoCL kernel cache for this run")
    ap.add_argument("--ray", action="store_true", help="collect on a local Ray cluster, once per --workers count")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                    help="with --ray: the worker counts to compare (default: 1 2)")
    args = ap.parse_args(argv)
    if args.ray:
        with tempfile.TemporaryDirectory(prefix="costlearn-bench-ray-") as tmp:
            return bench_fleet(args, tmp)
    with tempfile.TemporaryDirectory(prefix="costlearn-bench-") as tmp:
        return bench_local(args, tmp)


def bench_local(args, tmp: str) -> int:
    """Measurements per second of a collection on the local device into
    ``tmp`` (a temporary folder the caller removes); prints a table."""
    if args.fresh_cache:
        os.environ["POCL_CACHE_DIR"] = os.path.join(tmp, "pocl-cache")   # before PoCL starts
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect

    be = get_backend(args.device)
    res = collect(be, Path(tmp) / "data", budget_s=args.budget, pool_size=args.pool,
                  configs_per_shape=args.pool, seed=args.seed, progress=False)
    total = res.seconds["total"]
    phases = {k: res.seconds.get(k, 0.0) for k in ("compile", "measure", "write")}
    other = max(0.0, total - sum(phases.values()))
    print(f"device: {be.spec.name} ({be.name}); pool {args.pool}; budget {args.budget:.0f} s; "
          f"kernel cache: {'fresh' if args.fresh_cache else 'reused'}")
    print()
    print("| quantity | value |")
    print("|---|---|")
    print(f"| shapes measured | {res.problems_done} |")
    print(f"| rows (valid) | {res.rows_written} ({res.rows_valid}) |")
    print(f"| measurements per second (wall) | {res.rows_written / total:.2f} |")
    print(f"| measurements per second of measuring | {res.rows_written / max(phases['measure'], 1e-9):.2f} |")
    for k, v in phases.items():
        print(f"| {k} | {v:.1f} s ({v / total:.0%}) |")
    print(f"| other (setup, sampling, loading) | {other:.1f} s ({other / total:.0%}) |")
    print(f"| wall total | {total:.1f} s |")
    print(f"| noise floor (repeat timings) | {res.noise_floor:.1%} |")
    print(f"| median sample spread (p80-p20)/median | {res.spread_frac:.1%} |")
    return 0


def bench_fleet(args, tmp: str) -> int:
    """``--ray``: measurements per second of a fleet collection on a local
    Ray cluster, for each worker count, into ``tmp`` (a temporary folder the
    caller removes); prints a table."""
    import ray

    from costlearn.collect.fleet import collect_fleet, start_fleet
    if args.fresh_cache:
        os.environ["POCL_CACHE_DIR"] = os.path.join(tmp, "pocl-cache")   # inherited by the Ray workers
    ray.init(num_cpus=max(max(args.workers), os.cpu_count() or 1), include_dashboard=False, logging_level="WARNING")
    rows = []
    try:
        for n in args.workers:
            with start_fleet(args.device, workers=n) as fleet:
                spec = fleet.spec
                res = collect_fleet(fleet, Path(tmp) / f"data-{n}", budget_s=args.budget, pool_size=args.pool,
                                    configs_per_shape=args.pool, seed=args.seed, progress=False)
            total, start = res.seconds["total"], res.seconds["start"]
            rows.append((n, res, total, start))
    finally:
        ray.shutdown()
    print(f"device: {spec.name} ({args.device}) on a local Ray cluster of {os.cpu_count()} CPUs; pool {args.pool}; "
          f"budget {args.budget:.0f} s per run; kernel cache: {'fresh' if args.fresh_cache else 'reused'}")
    print()
    print("| workers | problems | rows (valid) | measurements/s (wall) | measurements/s after start | start s | "
          "wall s | lost |")
    print("|---|---|---|---|---|---|---|---|")
    for n, res, total, start in rows:
        print(f"| {n} | {res.problems_done} | {res.rows_written} ({res.rows_valid}) | {res.rows_written / total:.2f} | "
              f"{res.rows_written / max(total - start, 1e-9):.2f} | {start:.1f} | {total:.1f} | {len(res.lost)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
