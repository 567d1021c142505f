"""predict_best latency against the plain way and NVIDIA's heuristics, whether
the answers agree, and what the fast path costs in regret.

    python -m benchmarks.predict [--model FOLDER ...] [--shapes 1000] [--seed 3]
                                    [--heldout-data DIR] [--out FILE]

For each ``--model`` (an artifact folder, ``<store>/<device>/<family>/<dtype>``;
default: the committed ``gemm`` model), on one core (the process is pinned to
one CPU where the OS allows), one thread, garbage collection off while
timing (as :mod:`timeit`), in one run, for two sets of
``--shapes`` unseen problems each: *drawn like the training shapes* (the
collection's sampler for the model's device, another seed) and
*log-uniform in [1, 16384]* per extent (mostly out of distribution):

- plain: the candidate rule's candidates, their features built by the
  feature set's pandas ``transform``, the model's own ``predict`` (for
  XGBoost, ``inplace_predict`` on one thread), the argmin: *the full model*;
- unseen: ``costlearn.predict_best`` on problems it has not seen, its
  arguments written out as at a compiler's call site (unpacking a dict of
  keywords at every call cost 0.7 µs more on this project's VM), back to
  back, and again each right after a plain call (CPU caches disturbed, as
  between the calls of a compiler);
- repeated: ``costlearn.predict_best`` on a problem it answered before, the
  same way;
- batch: ``costlearn.predict_many`` of 30 unseen problems (a graph's fused
  groups), p50 and p99 over the set's batches;
- the ranker alone: ``Ranker.rank_served`` of each unseen problem and
  ``Ranker.rank_many_served`` of the same batches (the C call and its
  ``RankResult``, no ``Prediction``): the floor the Python around it adds to;
- NVIDIA's analytical ``nvidia-matmul-heuristics`` (when installed; an
  optional benchmark extra, closed licence): its top-1 query (``get``, count
  1) on the same problems, each timed right after ``predict_best`` of the
  problem (a machine whose speed drifts moves both; the per-problem ratio's
  median is printed too), for the model's GPU (A100 SXM, H100 SXM or H200
  SXM by the model's device name; the H200 for a model of another device),
  the TRITON target for a ``triton_mm`` model (GENERIC for ``gemm``) and the
  model's dtype (precision TST bfloat16, HSH float16, SFS TF32, SSS float32);
- agreement: the share of problems on which the ranking's best candidate
  (before the vendor floor) equals the full model's argmin.

With ``--heldout-data DIR`` (a dataset folder of the model's device), the
problems of DIR that are not among a model's training shapes (for a model
trained with a log left out: that log's) are scored: the geometric-mean
top-1 regret of ``predict_best`` (vendor floor included) and of the plain
argmin, against the best measured, as served and with the
scorer's every tree (no cascade, no shortlist table): what the fast path
costs.

Prints the tables, with model load times (fresh interpreters, the median of
five, Python's bytecode cached as an installed package's is; costlearn's
cache warm, then empty: the import, the load, the load and first prediction,
and a second load of the same folder in that process); ``--out FILE`` also
writes them as Markdown.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from studies import docs_from_reports  # noqa: E402

BATCH = 30
"""Problems of one predict_many call (a graph's fused groups)."""

_LOAD_SNIPPET = """
import sys, time
t0 = time.perf_counter()
import costlearn.serve.predictor
t1 = time.perf_counter()
p = costlearn.serve.predictor.Predictor(sys.argv[1])
t2 = time.perf_counter()
p.predict(p.problem(1000, 1000, 1000))
t3 = time.perf_counter()
costlearn.serve.predictor.Predictor(sys.argv[1])
t4 = time.perf_counter()
print(f"{(t1 - t0) * 1e3:.1f} {(t2 - t1) * 1e3:.1f} {(t3 - t1) * 1e3:.1f} {(t4 - t3) * 1e3:.1f} {p.ranker.name}")
"""

_NV_GPU = {"NVIDIA A100-SXM4-80GB": "A100_SXM_80GB", "NVIDIA A100-SXM4-40GB": "A100_SXM_80GB",
           "NVIDIA H100 80GB HBM3": "H100_SXM", "NVIDIA H200": "H200_SXM"}
_NV_PRECISION = {"bfloat16": "TST", "float16": "HSH", "tfloat32": "SFS", "float32": "SSS"}


LOAD_RUNS = 5
"""Fresh processes a load time is the median of (one load varies by a few ms)."""


def _load_times(folder: Path, cache: str | None, pycache: str, runs_n: int = LOAD_RUNS) -> tuple:
    """In fresh interpreters, the median of ``runs_n`` (:data:`LOAD_RUNS`): (import ms,
    Predictor load ms, load and first prediction ms, a second load of the
    same folder ms), and the ranker. Python's bytecode is cached in
    ``pycache`` (``PYTHONPYCACHEPREFIX``, warmed by a first, untimed run) as
    an installed package's is: an interpreter told not to write bytecode
    compiles every module it imports, the family's included, at every load.
    ``cache``: the costlearn cache (None: the user's; a folder: an empty one
    for each run, so the C ranker is compiled in each)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=pycache)

    def run(i: int) -> list:
        if cache is not None:
            env["COSTLEARN_CACHE"] = os.path.join(cache, str(i))
        return subprocess.run([sys.executable, "-c", _LOAD_SNIPPET, str(folder)], env=env, check=True,
                              capture_output=True, text=True).stdout.split()
    if cache is None:
        run(-1)                                             # bytecode and the C ranker compiled, not timed
    runs = [run(i) for i in range(runs_n)]
    import numpy as np
    return tuple(float(np.median([float(r[j]) for r in runs])) for j in range(4)) + (runs[0][4],)


def _nvidia_query(spec_name: str, family: str, dtype: str):
    """A function (m, n, k) -> NVIDIA heuristics' top-1 config and a note,
    or (None, the reason) when the package is not installed."""
    try:
        import nvMatmulHeuristics as nvmh
    except ImportError as e:
        return None, f"not installed ({e}); pip install nvidia-matmul-heuristics to compare"
    gpu = getattr(nvmh.NvMatmulHeuristicsNvidiaGpu, _NV_GPU.get(spec_name, "H200_SXM"))
    target = nvmh.NvMatmulHeuristicsTarget.TRITON if family == "triton_mm" else nvmh.NvMatmulHeuristicsTarget.GENERIC
    precision = _NV_PRECISION[dtype]
    nv = nvmh.NvMatmulHeuristicsInterfaceEx(backend=target, gpu=gpu)
    layout = nvmh.NvMatmulHeuristicsMatmulLayout.NN_ROW_MAJOR

    def query(m, n, k):
        return nv.get(nv.makeNvMatmulHeuristicsProblem(m, n, k, layout), 1, precision=precision)
    return query, f"nvidia-matmul-heuristics, GPU {gpu.name}, target {target.name}, precision {precision}, " \
                  "layout NN_ROW_MAJOR"


def _ranker_in(pred) -> str:
    """Which ranker answers: the C one, or numpy with why."""
    from costlearn.ranker.native_library import library_unavailable
    if pred.ranker.name == "native":
        return "C (the install's `_native` build)"
    return f"numpy ({library_unavailable() or 'forced'})"


def _us(a, q):
    import numpy as np
    return float(np.quantile(a, q)) * 1e6


def _heldout(folder: Path, data_dir: Path, lines: list) -> None:
    """The held-out regret table of one model (see the module)."""
    import numpy as np

    from costlearn.collect.dataset import load, valid_rows
    from costlearn.families import VENDOR_CONFIG_ID
    from costlearn.learn.metrics import geomean_regret
    from costlearn.serve.predictor import Predictor
    from costlearn.core.problem import Problem
    from costlearn.learn.study import decision_scores
    served, full = Predictor(folder), Predictor(folder, cascade=False)
    rows = valid_rows(load(data_dir)[0])
    train = {tuple(int(v) for v in s) for s in served.envelope.shapes}
    rows = rows[[(int(m), int(n), int(k)) not in train for m, n, k in rows[["m", "n", "k"]].to_numpy()]]
    rows = rows[(rows["family"] == served.family) & (rows["dtype"] == served.dtype)]
    if rows.empty:
        lines += [f"held-out: no problem of {data_dir} outside the model's training shapes", ""]
        return
    got = {}
    for name, p in (("served", served), ("every tree", full)):
        d = decision_scores(p, rows)
        argmin = []
        for g, r in rows.groupby(["m", "n", "k", "layout"], observed=True):
            times = r.groupby("config_id")["time_us"].median()
            best = times.min()
            res = p.ranker.rank(Problem(*(int(v) for v in g[:3]), p.dtype, g[3]), top=2, cascade=p.cascade)
            pick = next(p.configs[c].config_id for c in res.order
                        if p.configs[c].config_id != VENDOR_CONFIG_ID)
            argmin.append(times[pick] / best - 1.0 if pick in times else math.nan)
        got[name] = (d, np.array(argmin))
    (d_s, a_s), (d_f, a_f) = got["served"], got["every tree"]
    same = float((d_s["pick"].to_numpy() == d_f["pick"].to_numpy()).mean())
    lines += [f"**held-out problems**: {len(d_s)} problems of {data_dir} not among the model's training shapes "
              f"(sources {sorted(d_s['source'].unique().tolist())})", "",
              "| path | predict_best top-1 regret (geomean) | plain argmin tile regret (geomean) | picks measured |",
              "|---|---|---|---|",
              "| served (cascade, shortlist table where the model has one) | "
              f"{geomean_regret(d_s['top1_regret']):.2%} | "
              f"{geomean_regret(a_s):.2%} | {d_s['pick_measured'].mean():.0%} |",
              f"| every tree (the full model) | {geomean_regret(d_f['top1_regret']):.2%} | {geomean_regret(a_f):.2%} | "
              f"{d_f['pick_measured'].mean():.0%} |", "",
              f"predict_best picks the same config as the full model on {same:.1%} of them", ""]


def bench_model(folder: Path, n_shapes: int, seed: int, lines: list, load_runs: int = LOAD_RUNS) -> bool:
    """The latency tables of one model; False when the agreement is below
    99 % on a set of a model without a shortlist table."""
    import numpy as np
    import pandas as pd

    import costlearn
    from costlearn.serve.predictor import Predictor, load_predictor
    from costlearn.collect.sampler import ShapeBounds, sample_shapes

    pred = Predictor(folder)
    model = pred.artifact.model()
    if hasattr(model, "booster_"):
        model.booster_.set_param({"nthread": 1})
    cands = pd.DataFrame(dict(config_id=[c.config_id for c in pred.configs],
                              registers_per_thread=pred.artifact.candidates["registers_per_thread"].to_numpy()))
    train = {tuple(s) for s in pred.envelope.shapes}
    bounds = ShapeBounds.for_device(pred.spec.device_type == "cpu")
    rng = np.random.default_rng([seed, 5])
    sets = {
        "drawn like the training shapes": [s for s in sample_shapes(n_shapes * 2, bounds, rng)
                                           if s not in train][:n_shapes],
        "log-uniform in [1, 16384]": [tuple(int(v) for v in row) for row in
                                      np.round(2.0 ** rng.uniform(0, 14, size=(n_shapes, 3))).astype(int)],
    }
    layout = pred.layouts[0]

    def plain(problem):
        mask, _ = pred.ranker.candidate_rule(problem)
        rows = cands[mask].assign(m=problem.m, n=problem.n, k=problem.k, dtype=problem.dtype,
                                  layout=problem.layout, family=pred.family)
        return int(np.flatnonzero(mask)[int(np.argmin(model.predict(rows)))])

    nv_query, nv_note = _nvidia_query(pred.spec.name, pred.family, pred.dtype)
    sl = pred.artifact.shortlist
    shown = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
    lines += [f"### {pred.device}/{pred.family}/{pred.dtype}", "",
              f"model: {shown} ({len(pred.configs)} candidates, {pred.artifact.scorer.n_trees} trees, ranker: "
              f"{pred.ranker.name}, cascade: {list(pred.artifact.scorer.cascade) or 'none'}, shortlist table: "
              + (f"{sl.tiles} tiles + vendor per point, {sl.trees} trees at the query, grid step {sl.step} "
                 f"doublings ({'x'.join(map(str, sl.n))} points per layout)" if sl is not None else "none") + ")",
              f"{n_shapes} unseen problems per set (seed {seed}), layout {layout}; one core, one thread; "
              f"ranker: {_ranker_in(pred)}", ""]
    ok = True
    kw = dict(device=pred.device, family=pred.family, dtype=pred.dtype, models_dir=str(folder.resolve().parents[2]))
    dev, fam, dt, md = kw["device"], kw["family"], kw["dtype"], kw["models_dir"]
    served = load_predictor(dev, fam, dt, md)                   # what costlearn.predict_best answers with
    for name, shapes in sets.items():
        problems = [pred.problem(*s, layout) for s in shapes]
        for q, (m, n, k) in zip(problems[:20], shapes):        # warm-up: imports, caches, branch predictors
            plain(q)
            costlearn.predict_best(m, n, k, dt, dev, family=fam, layout=layout, models_dir=md)
        t_plain, t_cold, t_mixed, t_rep, t_nv, t_batch, agree, used = [], [], [], [], [], [], 0, 0
        t_rank, t_rank_batch = [], []
        best = {}
        gc.collect()
        gc.disable()                                            # as timeit: a collection's pause is not a call's
        for q in problems:                                      # 1. the plain way (the full model)
            t0 = time.perf_counter()
            best[q] = plain(q)
            t_plain.append(time.perf_counter() - t0)
        served.clear_results()
        if nv_query is not None:
            for s in shapes[:20]:
                nv_query(*s)
        for m, n, k in shapes:                                  # 2. unseen problems back to back, as a compiler
            t0 = time.perf_counter()                            # calls (module level, arguments written out),
            costlearn.predict_best(m, n, k, dt, dev, family=fam, layout=layout, models_dir=md)
            t_cold.append(time.perf_counter() - t0)             # each with NVIDIA's top-1 of it right after, so
            if nv_query is not None:                            # that a drifting machine moves both alike
                t0 = time.perf_counter()
                nv_query(m, n, k)
                t_nv.append(time.perf_counter() - t0)
        for q in problems:                                      # (not timed) the ranking's best vs the full model's
            res = pred.ranker.rank(q, top=6)
            agree += int(res.order[0]) == best[q]
            used += res.shortlist
        served.clear_results()
        for q, (m, n, k) in zip(problems, shapes):              # 3. unseen, each after a plain call
            plain(q)
            t0 = time.perf_counter()
            costlearn.predict_best(m, n, k, dt, dev, family=fam, layout=layout, models_dir=md)
            t_mixed.append(time.perf_counter() - t0)
        costlearn.predict_many([s + (layout,) for s in shapes[:BATCH]], **kw)   # 4. batches of a graph
        served.clear_results()
        for i in range(0, len(shapes) - BATCH + 1, BATCH):
            t0 = time.perf_counter()
            costlearn.predict_many([s + (layout,) for s in shapes[i:i + BATCH]], **kw)
            t_batch.append(time.perf_counter() - t0)
        # 4b. the ranker alone, what predict_best and predict_many build their answers from: the C call and its
        # RankResult, no Prediction (the floor of this design's serving on this machine)
        ranker, top = served.ranker, 5 + (served.vendor_index is not None)     # predict_best's top_k=5, the vendor
        for m, n, k in shapes:
            t0 = time.perf_counter()
            ranker.rank_served(m, n, k, layout, "none", top, served.cascade)
            t_rank.append(time.perf_counter() - t0)
        for i in range(0, len(shapes) - BATCH + 1, BATCH):
            batch = [s + (layout, "none") for s in shapes[i:i + BATCH]]
            t0 = time.perf_counter()
            ranker.rank_many_served(batch, top, served.cascade)
            t_rank_batch.append(time.perf_counter() - t0)
        # 5. repeated problems, module-level call, the arguments written out as a compiler's call site has them
        for m, n, k in shapes:
            costlearn.predict_best(m, n, k, dt, dev, family=fam, layout=layout, models_dir=md)
        for m, n, k in shapes:
            t0 = time.perf_counter()
            costlearn.predict_best(m, n, k, dt, dev, family=fam, layout=layout, models_dir=md)
            t_rep.append(time.perf_counter() - t0)
        t_timer = []
        for _ in shapes:                                        # the timer's own cost, in every time above
            t0 = time.perf_counter()
            t_timer.append(time.perf_counter() - t0)
        gc.enable()
        cold = float(np.median(t_cold))
        lines += [f"**{name}**", "", "| path | p50 µs | p99 µs | p50 vs predict_best unseen |", "|---|---|---|---|",
                  f"| plain: pandas features + the model's predict (the full model) | {_us(t_plain, .5):.0f} | "
                  f"{_us(t_plain, .99):.0f} | {np.median(t_plain) / cold:.0f}x slower |",
                  f"| predict_best, unseen problem | {_us(t_cold, .5):.1f} | {_us(t_cold, .99):.1f} | 1 |",
                  f"| predict_best, unseen, right after a plain call (cold caches) | {_us(t_mixed, .5):.1f} | "
                  f"{_us(t_mixed, .99):.1f} | {np.median(t_mixed) / cold:.2f}x |",
                  f"| predict_best, repeated problem | {_us(t_rep, .5):.2f} | {_us(t_rep, .99):.2f} | "
                  f"{cold / np.median(t_rep):.0f}x faster |",
                  f"| predict_many, {BATCH} unseen problems (per call) | {_us(t_batch, .5):.0f} | "
                  f"{_us(t_batch, .99):.0f} | {np.median(t_batch) / BATCH / cold:.2f}x per problem |",
                  f"| the ranker alone (rank_served: the C call and its RankResult, no Prediction), unseen problem | "
                  f"{_us(t_rank, .5):.1f} | {_us(t_rank, .99):.1f} | {np.median(t_rank) / cold:.2f}x |",
                  f"| the ranker alone (rank_many_served: one C call), {BATCH} unseen problems (per call) | "
                  f"{_us(t_rank_batch, .5):.0f} | {_us(t_rank_batch, .99):.0f} | "
                  f"{np.median(t_rank_batch) / BATCH / cold:.2f}x per problem |"]
        if t_nv:
            nv50 = float(np.median(t_nv))
            paired = float(np.median(np.array(t_cold) / np.array(t_nv)))
            lines += [f"| NVIDIA heuristics top-1 (`get`), each right after predict_best of the same problem | "
                      f"{_us(t_nv, .5):.1f} | {_us(t_nv, .99):.1f} | {nv50 / cold:.2f}x slower (per problem, "
                      f"predict_best / NVIDIA: median {paired:.2f}x) |",
                      f"| NVIDIA heuristics, {BATCH} problems (one at a time) | {nv50 * BATCH * 1e6:.0f} | | |"]
        lines += ["", f"each time includes the timer's own: an empty interval reads {_us(t_timer, .5):.2f} µs (p50)"]
        lines += ["", f"the ranking's best equals the full model's argmin on {agree}/{len(problems)} problems "
                  f"({agree / len(problems):.1%}); the shortlist table ranked {used}/{len(problems)}", ""]
        ok = ok and (sl is not None or agree >= 0.99 * len(problems))
    with tempfile.TemporaryDirectory() as pycache:
        warm = _load_times(folder, None, pycache, load_runs)
        with tempfile.TemporaryDirectory() as tmp:
            empty = _load_times(folder, tmp, pycache, load_runs)
    lines += [f"| load, a fresh process (median of {load_runs}; Python bytecode cached, as installed) | "
              "import costlearn.serve.predictor ms | Predictor(folder) ms | "
              "first prediction after import ms | a second Predictor(folder) in that process ms |",
              "|---|---|---|---|---|",
              "| warm cache (the artifact's forest check recorded) | "
              + " | ".join(f"{v:.0f}" for v in warm[:4]) + " |",
              "| empty cache (first use on a machine: the forest checked) | "
              + " | ".join(f"{v:.0f}" for v in empty[:4]) + " |",
              "", f"NVIDIA heuristics: {nv_note}", ""]
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", type=Path, default=None,
                    help="artifact folder <store>/<device>/<family>/<dtype> (repeatable; default: the committed "
                         "gemm model)")
    ap.add_argument("--shapes", type=int, default=1000, help="problems per set (default: 1000)")
    ap.add_argument("--seed", type=int, default=3, help="seed of the problems (default: 3)")
    ap.add_argument("--heldout-data", type=Path, default=None,
                    help="dataset folder: score each model's regret on its problems the model did not see")
    ap.add_argument("--out", default=None, help="also write the tables (Markdown) here")
    ap.add_argument("--load-runs", type=int, default=LOAD_RUNS,
                    help=f"fresh processes each load time is the median of (default: {LOAD_RUNS})")
    args = ap.parse_args(argv)
    if args.load_runs < 1:
        ap.error(f"--load-runs {args.load_runs}: need at least 1")
    if args.shapes < 2 * BATCH:
        ap.error(f"--shapes {args.shapes}: need at least {2 * BATCH}")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from costlearn.model.store import resolve_model
    folders = args.model or [resolve_model(None, "gemm", "float32", None)]
    for f in folders:
        if not (f / "model.json").is_file():
            ap.error(f"--model {f}: no model artifact there (need <store>/<device>/<family>/<dtype>/model.json)")
    if args.heldout_data is not None and not args.heldout_data.is_dir():
        ap.error(f"--heldout-data {args.heldout_data}: not a folder")
    # the interpreter's build moves every Python microsecond above (the deep model's unseen problem on this
    # project's VM, back to back: 41-44.5 us under a CPython built with --enable-shared and no PGO, 33-38 us
    # under Debian's; NVIDIA's C++ does not move: docs/results.md, "Speed")
    lines, ok = [f"Python {platform.python_version()} ({sys.executable}; {platform.python_compiler()}), "
                 f"{platform.machine()}, {os.cpu_count()} CPUs", ""], True
    for f in folders:
        ok = bench_model(f, args.shapes, args.seed, lines, args.load_runs) and ok
        if args.heldout_data is not None:
            _heldout(f, args.heldout_data, lines)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        if Path(args.out).resolve() == ROOT / "reports" / "bench_predict.md":
            docs_from_reports.update(["speed", "headline"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
