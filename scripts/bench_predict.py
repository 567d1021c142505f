"""predict_best latency against the plain way, and whether they agree.

    python scripts/bench_predict.py [--models DIR] [--device SLUG] [--family gemm] [--dtype float32]
                                    [--shapes 1000] [--seed 3] [--out FILE]

On one core (the process is pinned to one CPU where the OS allows), one
thread, for two sets of ``--shapes`` unseen problems each: *drawn like the
training shapes* (the collection's sampler for the model's device, another
seed) and *log-uniform in [1, 16384]* per extent (mostly out of
distribution):

- plain: the model's features built for every fitting candidate by the
  feature set's pandas ``transform``, then the model's own ``predict`` (for
  XGBoost, ``inplace_predict`` on one thread), then the argmin: the *full
  model*;
- unseen: ``Predictor.predict`` on problems it has not seen, back to back,
  and again each right after a plain call (CPU caches disturbed, as between
  the calls of a compiler);
- repeated: ``costlearn.predict_best`` on a problem it answered before;
- NVIDIA's analytical ``nvidia-matmul-heuristics`` (when installed; an
  optional benchmark extra, closed licence): its top-1 query (``get``, count
  1) for the ``h200`` preset's GPU (H200 SXM, named explicitly) on the same
  problems.

Prints p50/p99 of each, ratios, model loading times, and the share of each
set on which the chosen config equals the full model's argmin; exits 1 if
that share is below 99 % on either set. ``--out FILE`` also writes the
tables as Markdown.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_LOAD_SNIPPET = """
import sys, time
t0 = time.perf_counter()
import costlearn.predict
t1 = time.perf_counter()
p = costlearn.predict.Predictor(sys.argv[1])
t2 = time.perf_counter()
print(f"{(t1 - t0) * 1e3:.1f} {(t2 - t1) * 1e3:.1f} {p.ranker.name}")
"""


def _load_times(folder: Path, cache: str | None) -> tuple[float, float, str]:
    """(import ms, Predictor load ms, ranker) in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if cache is not None:
        env["COSTLEARN_CACHE"] = cache
    out = subprocess.run([sys.executable, "-c", _LOAD_SNIPPET, str(folder)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), out[2]


def _nvidia_query(spec_name: str):
    """A function (m, n, k) -> NVIDIA heuristics' top-1 config, or None with
    the reason when the package is not installed."""
    try:
        import nvMatmulHeuristics as nvmh
    except ImportError as e:
        return None, f"not installed ({e}); pip install nvidia-matmul-heuristics to compare"
    gpu = {"NVIDIA H200": nvmh.NvMatmulHeuristicsNvidiaGpu.H200_SXM,
           "NVIDIA H100 80GB HBM3": nvmh.NvMatmulHeuristicsNvidiaGpu.H100_SXM,
           "NVIDIA A100-SXM4-80GB": nvmh.NvMatmulHeuristicsNvidiaGpu.A100_SXM_80GB}[spec_name]
    nv = nvmh.NvMatmulHeuristicsInterfaceEx(backend=nvmh.NvMatmulHeuristicsTarget.GENERIC, gpu=gpu)
    layout = nvmh.NvMatmulHeuristicsMatmulLayout.NN_ROW_MAJOR

    def query(m, n, k):
        return nv.get(nv.makeNvMatmulHeuristicsProblem(m, n, k, layout), 1, precision="SSS")
    return query, f"nvidia-matmul-heuristics, GPU {gpu.name}, precision SSS, layout NN_ROW_MAJOR"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="model store root (default: the committed models/)")
    ap.add_argument("--device", default=None, help="model device folder (default: the only one)")
    ap.add_argument("--family", default="gemm")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shapes", type=int, default=1000, help="problems per set (default: 1000)")
    ap.add_argument("--seed", type=int, default=3, help="seed of the problems (default: 3)")
    ap.add_argument("--out", default=None, help="also write the tables (Markdown) here")
    args = ap.parse_args(argv)
    if args.shapes < 10:
        ap.error(f"--shapes {args.shapes}: need at least 10")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import numpy as np
    import pandas as pd

    import costlearn
    from costlearn.device import preset
    from costlearn.predict import Predictor, load_predictor, resolve_model
    from costlearn.sampler import ShapeBounds, sample_shapes

    folder = resolve_model(args.device, args.family, args.dtype, args.models)
    shown = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
    pred = Predictor(folder)
    model = pred.artifact.model()
    if hasattr(model, "booster_"):
        model.booster_.set_param({"nthread": 1})
    cands = pd.DataFrame(dict(config_id=[c.config_id for c in pred.configs],
                              registers_per_thread=pred.artifact.candidates["registers_per_thread"].to_numpy()))
    train = {tuple(s) for s in pred.envelope.shapes}
    bounds = ShapeBounds.for_device(pred.spec.device_type == "cpu")
    rng = np.random.default_rng([args.seed, 5])
    sets = {
        "drawn like the training shapes": [s for s in sample_shapes(args.shapes * 2, bounds, rng)
                                           if s not in train][:args.shapes],
        "log-uniform in [1, 16384]": [tuple(int(v) for v in row) for row in
                                      np.round(2.0 ** rng.uniform(0, 14, size=(args.shapes, 3))).astype(int)],
    }

    def plain(problem):
        mask = pred.feasible(problem)
        mask = mask if mask.any() else np.ones(len(mask), bool)
        rows = cands[mask].assign(m=problem.m, n=problem.n, k=problem.k, dtype=problem.dtype,
                                  layout=problem.layout, family=pred.family)
        return np.flatnonzero(mask)[int(np.argmin(model.predict(rows)))]

    nv_query, nv_note = _nvidia_query(preset("h200").name)
    us = lambda a, q: float(np.quantile(a, q)) * 1e6       # noqa: E731
    dev = pred.device
    lines = [f"model: {shown} ({len(pred.configs)} candidates, {pred.artifact.scorer.n_trees} trees, ranker: "
             f"{pred.ranker.name}, cascade: {list(pred.artifact.scorer.cascade) or 'none'})",
             f"{args.shapes} unseen problems per set (seed {args.seed}); one core, one thread", ""]
    ok = True
    for name, shapes in sets.items():
        problems = [pred.problem(*s) for s in shapes]
        for q in problems[:20]:                                  # warm-up: imports, caches, branch predictors
            plain(q)
            pred.predict(q)
        t_plain, t_cold, t_mixed, t_rep, t_nv, agree = [], [], [], [], [], 0
        best = {}
        for q in problems:                                      # 1. the plain way (the full model)
            t0 = time.perf_counter()
            best[q] = plain(q)
            t_plain.append(time.perf_counter() - t0)
        pred.clear_results()
        for q in problems:                                      # 2. unseen problems back to back
            t0 = time.perf_counter()
            p = pred.predict(q)
            t_cold.append(time.perf_counter() - t0)
            agree += p.config == pred.configs[best[q]]
        pred.clear_results()
        for q in problems:                                      # 3. unseen, each after a plain call
            plain(q)
            t0 = time.perf_counter()
            pred.predict(q)
            t_mixed.append(time.perf_counter() - t0)
        # As a compiler calls it: the device named, other options only where not the default.
        kw = dict(device=dev, **({} if args.family == "gemm" else dict(family=args.family)),
                  **({} if args.dtype == "float32" else dict(dtype=args.dtype)),
                  **({} if args.models is None else dict(models_dir=args.models)))
        load_predictor(dev, args.family, args.dtype, args.models).clear_results()
        for s in shapes:
            costlearn.predict_best(*s, **kw)                    # first call fills the module cache
        for s in shapes:                                        # 4. repeated problems, module-level call
            t0 = time.perf_counter()
            costlearn.predict_best(*s, **kw)
            t_rep.append(time.perf_counter() - t0)
        if nv_query is not None:
            for s in shapes[:20]:
                nv_query(*s)
            for s in shapes:                                    # 5. NVIDIA's heuristics, top-1
                t0 = time.perf_counter()
                nv_query(*s)
                t_nv.append(time.perf_counter() - t0)
        cold = np.median(t_cold)
        lines += [f"**{name}**", "", "| path | p50 µs | p99 µs | p50 vs predict_best unseen |", "|---|---|---|---|",
                  f"| plain: pandas features + the model's predict | {us(t_plain, .5):.0f} | {us(t_plain, .99):.0f} | "
                  f"{np.median(t_plain) / cold:.0f}x slower |",
                  f"| predict_best, unseen problem | {us(t_cold, .5):.1f} | {us(t_cold, .99):.1f} | 1 |",
                  f"| predict_best, unseen, right after a plain call (cold caches) | {us(t_mixed, .5):.1f} | "
                  f"{us(t_mixed, .99):.1f} | {np.median(t_mixed) / cold:.2f}x |",
                  f"| predict_best, repeated problem | {us(t_rep, .5):.2f} | {us(t_rep, .99):.2f} | "
                  f"{cold / np.median(t_rep):.0f}x faster |"]
        if t_nv:
            lines.append(f"| NVIDIA heuristics top-1 (`get`, H200) | {us(t_nv, .5):.1f} | {us(t_nv, .99):.1f} | "
                         f"{np.median(t_nv) / cold:.2f}x slower |")
        lines += ["", f"chosen config equals the full model's argmin on {agree}/{len(problems)} problems "
                  f"({agree / len(problems):.1%})", ""]
        ok = ok and agree >= 0.99 * len(problems)
    imp_warm, load_warm, ranker = _load_times(folder, None)
    with tempfile.TemporaryDirectory() as tmp:
        imp_cold, load_cold, _ = _load_times(folder, tmp)
    lines += ["| load | import costlearn.predict ms | Predictor(folder) ms |", "|---|---|---|",
              f"| warm cache (compiled C ranker reused) | {imp_warm:.0f} | {load_warm:.0f} |",
              f"| empty cache (first use on a machine: compiles the C ranker) | {imp_cold:.0f} | {load_cold:.0f} |",
              "", f"NVIDIA heuristics: {nv_note}"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
