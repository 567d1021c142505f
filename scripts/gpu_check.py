"""GPU check: correctness, repeatability, clocks, and our best tile against
cuBLAS, in one time-boxed run (under 8 minutes on one H200).

    python scripts/gpu_check.py --out OUTDIR               # CUDA (CuPy)
    python scripts/gpu_check.py --out OUTDIR --device opencl --quick   # the same steps, small, on PoCL

Runs from the source tree (no install, no xgboost). Never changes clocks, power
limits or any GPU setting: clocks are only read. Writes ``gpu_check.json`` and
``gpu_check.md`` (the tables) into OUTDIR and prints the tables.

Steps, each skipped with a note if the time budget is spent:

1. device description (queried) and clocks before;
2. compile a stratified sample of feasible configs (registers per thread);
3. verify each against the float64 reference on shapes that are not tile
   multiples, M = 1 included;
4. repeatability: time 8 configs on one shape in two separate sessions, with a
   repeat inside each session; report both differences and the noise floor;
5. best of the sample at 4096^3 float32 (384^3 with --quick) and cuBLAS
   (CuPy matmul, TF32 off) timed the same way: TFLOP/s and the ratio;
6. clocks after.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "0")    # cuBLAS float32 without TF32 (CuPy's default, made explicit)

import numpy as np  # noqa: E402

from costlearn.collect.loop import candidate_pool  # noqa: E402
from costlearn.collect.measure import measure_shape  # noqa: E402
from costlearn.collect.protocol import Protocol  # noqa: E402
from costlearn.core.problem import Problem  # noqa: E402
from costlearn.collect.space import check_config  # noqa: E402

CHECK_SHAPES = [(1, 1, 1), (1, 4096, 4096), (10, 500, 64), (130, 293, 237), (257, 31, 1000), (64, 64, 1),
                (1000, 1000, 1000)]
QUICK_SHAPES = [(1, 1, 1), (1, 256, 256), (10, 50, 64), (130, 93, 37), (64, 64, 1)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md")
    ap.add_argument("--device", default="cuda", choices=["cuda", "opencl"])
    ap.add_argument("--budget", type=float, default=420.0, help="seconds before later steps are skipped (420)")
    ap.add_argument("--configs", type=int, default=48, help="configs sampled (default: 48)")
    ap.add_argument("--quick", action="store_true", help="small shapes (for a CPU OpenCL device)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    left = lambda: args.budget - (time.monotonic() - t0)  # noqa: E731

    from costlearn.collect.backends import get_backend
    be = get_backend(args.device)
    spec = be.spec
    report: dict = dict(device=spec.to_dict(), provenance=be.provenance(), clocks_before=be.clocks(),
                        overhead_us=be.launch_overhead_us(), steps={})
    print(f"device: {spec.name}, {spec.multiprocessors} multiprocessors, cc {spec.compute_capability}; "
          f"launch overhead {report['overhead_us']:.2f} us; clocks {report['clocks_before'] or 'not reported'}")

    # 2. compile a stratified sample
    pool = candidate_pool(spec, "gemm", "float32", args.configs, seed=0)
    t = time.monotonic()
    kernels = be.compile_many(pool)
    ok = [k for k in kernels if k.status == "ok"]
    regs = [k.registers_per_thread for k in ok if k.registers_per_thread]
    report["steps"]["compile"] = dict(configs=len(pool), ok=len(ok), seconds=time.monotonic() - t,
                                      errors={k.config.config_id: k.error[:300] for k in kernels
                                              if k.status != "ok"},
                                      registers=dict(min=min(regs, default=None), max=max(regs, default=None)))
    print(f"compiled {len(ok)}/{len(pool)} configs in {time.monotonic() - t:.1f}s; registers per thread "
          f"{report['steps']['compile']['registers']}")

    # 3. correctness
    shapes = QUICK_SHAPES if args.quick else CHECK_SHAPES
    wrong, checked = [], 0
    for shape in shapes:
        if left() < 0.6 * args.budget:
            report["steps"]["verify_skipped_after"] = str(shape)
            break
        with be.workspace(Problem(*shape), seed=sum(shape)) as ws:
            for k in ok:
                if check_config(k.config, spec, problem=Problem(*shape)) is not None:
                    continue
                good, err = ws.verify(k)
                checked += 1
                if not good:
                    wrong.append(dict(config=k.config.config_id, shape=shape, max_abs_err=err))
    report["steps"]["verify"] = dict(checked=checked, wrong=wrong)
    print(f"verified {checked} (config, shape) pairs against float64: {len(wrong)} wrong")

    # 4. repeatability: two sessions on one shape, a repeat inside each
    rep_shape = (256, 256, 256) if args.quick else (2048, 2048, 2048)
    sample = [k for k in ok if check_config(k.config, spec, problem=Problem(*rep_shape)) is None][:8]
    sessions = []
    if sample and left() > 0.4 * args.budget:
        for session in range(2):
            with be.workspace(Problem(*rep_shape), seed=session) as ws:
                rows = measure_shape(ws, sample, Protocol(rounds=7), report["overhead_us"],
                                     rng=np.random.default_rng(session), repeat_index=0)
            sessions.append({r["config_id"]: r for r in rows})
        diffs = [abs(sessions[0][c]["time_us"] / sessions[1][c]["time_us"] - 1) for c in sessions[0]
                 if sessions[0][c]["status"] == sessions[1][c]["status"] == "ok"] or [float("nan")]
        within = [abs(s[sample[0].config.config_id]["repeat_time_us"] / s[sample[0].config.config_id]["time_us"] - 1)
                  for s in sessions]
        report["steps"]["repeatability"] = dict(
            shape=rep_shape, configs=len(sample), between_sessions_median=float(np.median(diffs)),
            between_sessions_max=float(np.max(diffs)), within_session_repeat=within,
            rows=[dict(config=c, time_us_1=sessions[0][c]["time_us"], time_us_2=sessions[1][c]["time_us"])
                  for c in sessions[0]])
        print(f"repeatability at {rep_shape}: median {np.median(diffs):.2%}, max {np.max(diffs):.2%} between "
              f"two sessions; within-session repeat {', '.join(f'{x:.2%}' for x in within)}")

    # 5. best tile vs cuBLAS
    big = (384, 384, 384) if args.quick else (4096, 4096, 4096)
    flops = 2.0 * big[0] * big[1] * big[2]
    if left() > 0.15 * args.budget:
        cands = [k for k in ok if check_config(k.config, spec, problem=Problem(*big)) is None]
        with be.workspace(Problem(*big), seed=1) as ws:
            rows = measure_shape(ws, cands, Protocol(rounds=5, timeout_us=2e6 if args.quick else 2e5),
                                 report["overhead_us"])
            timed = [r for r in rows if r["status"] == "ok"]
            best = min(timed, key=lambda r: r["time_us"]) if timed else None
        cublas_us = be.vendor_time_us(*big) if args.device == "cuda" else None
        entry = dict(shape=big, candidates=len(cands), timed=len(timed))
        if best:
            entry.update(best_config=best["config_id"], best_time_us=best["time_us"],
                         best_tflops=flops / best["time_us"] / 1e6,
                         median_candidate_time_us=float(np.median([r["time_us"] for r in timed])))
        if cublas_us:
            entry.update(cublas_time_us=cublas_us, cublas_tflops=flops / cublas_us / 1e6,
                         best_over_cublas=(cublas_us / best["time_us"]) if best else None)
        report["steps"]["vs_cublas"] = entry
        print(f"best of {len(timed)} timed configs at {big}: {entry.get('best_config')} "
              f"{entry.get('best_time_us', float('nan')):.1f} us = {entry.get('best_tflops', float('nan')):.2f} TFLOP/s"
              + (f"; cuBLAS {cublas_us:.1f} us = {entry['cublas_tflops']:.2f} TFLOP/s; ours/cuBLAS throughput "
                 f"{entry['best_over_cublas']:.1%}" if cublas_us else ""))
    else:
        report["steps"]["vs_cublas"] = "skipped: time budget spent"

    report["clocks_after"] = be.clocks()
    report["wall_s"] = time.monotonic() - t0
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    md = [f"# gpu_check on {spec.name}", "", "| step | result |", "|---|---|",
          f"| compile | {len(ok)}/{len(pool)} ok, registers {report['steps']['compile']['registers']} |",
          f"| verify | {checked} pairs, {len(wrong)} wrong |"]
    r = report["steps"].get("repeatability")
    if r:
        md.append(f"| repeatability {r['shape']} | between sessions median {r['between_sessions_median']:.2%}, "
                  f"max {r['between_sessions_max']:.2%} |")
    v = report["steps"].get("vs_cublas")
    if isinstance(v, dict) and "best_time_us" in v:
        md.append(f"| best at {v['shape']} | {v['best_config']}: {v['best_time_us']:.1f} us, "
                  f"{v['best_tflops']:.2f} TFLOP/s |")
        if v.get("cublas_time_us"):
            md.append(f"| cuBLAS (TF32 off) | {v['cublas_time_us']:.1f} us, {v['cublas_tflops']:.2f} TFLOP/s; "
                      f"ours {v['best_over_cublas']:.1%} of cuBLAS |")
    md.append(f"| clocks before / after | {report['clocks_before']} / {report['clocks_after']} |")
    md.append(f"| wall time | {report['wall_s']:.0f} s |")
    (out_dir / "gpu_check.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
