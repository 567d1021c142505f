"""Inductor lookup tables from a model, scored by leaving one log out.

The question: if Inductor's max-autotune times only the choices a
``costlearn export inductor-lut`` table lists, how much slower is the kernel it
picks than the one full autotuning picks, and how many candidates does it
time? On the A100 AutoHeuristic logs (``studies/a100.py`` imports them
and trains the fold models into ``out/a100-study``; this script trains a
missing fold itself), for each log left out and each problem of it no other
log measures:

- the fold's model (trained on the other logs) answers the problem
  (``costlearn.predict_many``), and the table's choices for K = 1..5 are
  :func:`costlearn.interop.inductor.lut.choices_for` of that answer;
- "autotune among the choices" picks the fastest the log measured among them;
  its regret is that time / the best measured of all (full autotuning, cuBLAS
  included) - 1, geometric mean over problems. A listed config the log did
  not measure cannot be scored and is left out of the minimum (the share of
  listed choices measured is reported); a problem none of whose choices was
  measured is not scored;
- against: cuBLAS every time; Inductor's own list (every config the log
  measured for the problem: regret 0 by definition, that many candidates);
  and, where PyTorch is installed, PyTorch's shipped AutoHeuristic ranking
  for the A100 (``_MMRankingA100``: its top 10 of the measured choices +
  ``extern_mm``, as ``tuned_mm`` asks for). PyTorch trained that ranking on
  A100 logs of this kind, likely these, so its figures are in-sample.

It also times ``export_lut`` on 1,000 log-uniform problems (one core).
Writes ``reports/inductor_lut.md`` and the ``lut`` block of docs/results.md.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from studies import docs_from_reports  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from costlearn.core.device import preset  # noqa: E402
from costlearn.families import VENDOR_CONFIG_ID, get_family  # noqa: E402
from costlearn.interop.inductor.autoheuristic import parse  # noqa: E402
from costlearn.interop.inductor.lut import choices_for, export_lut  # noqa: E402
from costlearn.interop.tool_names import from_tool  # noqa: E402
from costlearn.learn.metrics import geomean_regret  # noqa: E402
from costlearn.serve.predictor import Predictor  # noqa: E402
from costlearn.core.problem import Problem  # noqa: E402
from costlearn.learn.study import fold_model, log_folds, median_times  # noqa: E402

KS = (1, 2, 3, 4, 5)
TOP_RANKED = max(KS) + 1
"""Configs each answer ranks: enough for the largest K's tiles and the vendor call."""
PROBLEM = ["m", "n", "k", "dtype", "layout"]
TF32 = {"float16": "not_float_32", "bfloat16": "not_float_32", "float32": "False", "tfloat32": "True"}


def log_strides(raw: Path, spec) -> dict:
    """(m, n, k, dtype, layout) -> (a0, a1, b0, b1) as the logs recorded them."""
    out = {}
    for log in sorted(raw.glob("*.txt")):
        for x in parse(log, spec)[0]:
            out.setdefault((x.m, x.n, x.k, x.dtype, x.layout), x.strides)
    return out


def autoheuristic():
    """PyTorch's shipped A100 mm ranking as a function (m, n, k, dtype,
    strides, measured config ids) -> shortlisted config ids; None without
    PyTorch."""
    if importlib.util.find_spec("torch") is None:
        return None
    from torch._inductor.autoheuristic.artifacts._MMRankingA100 import MMRankingA100
    heuristic = MMRankingA100()

    class Context:                      # AHContext's get_value over the features the ranking reads
        def __init__(self, values):
            self.values = values

        def get_value(self, name):
            return self.values[name]

    def shortlist(m, n, k, dtype, strides, measured):
        ctx = Context({"m": m, "n": n, "k": k, "m*n": m * n, "k*n": k * n, "m*k": m * k,
                       "arith_intensity": m * k * n / (m * k + k * n + m * n), "mat1_stride_0": strides[0],
                       "mat1_stride_1": strides[1], "mat2_stride_0": strides[2], "mat2_stride_1": strides[3],
                       "using_tf32": TF32[dtype]})
        ids = []
        for choice in heuristic.get_decisions_ranked(ctx) or []:
            c = from_tool("triton_mm", "inductor", choice)
            if c is not None and c.config_id in measured and c.config_id not in ids:
                ids.append(c.config_id)
        ids = ids[:10]
        return ids + ([VENDOR_CONFIG_ID] if VENDOR_CONFIG_ID not in ids else [])
    return shortlist


def score(work: Path, device: str, log=print) -> tuple[pd.DataFrame, list]:
    data, spec = work / "data" / device, preset(device)
    strides = log_strides(work / "raw" / device, spec)
    shortlist = autoheuristic()
    fam = get_family("triton_mm")
    vendor = fam.config_from_id(fam.vendor_config_id)
    recs, skipped = [], []
    for fold in log_folds(data, "triton_mm", skipped=skipped):
        t0 = time.perf_counter()
        folder = fold_model(fold, work / "lolo")
        pred = Predictor(folder)
        test = median_times(fold.served(pred.layouts, skipped))
        groups = {key: dict(zip(g["config_id"], g["time_us"])) for key, g in test.groupby(PROBLEM, sort=True)}
        keys = list(groups)
        answers = pred.predict_many([Problem(*key) for key in keys], top_k=TOP_RANKED)
        for key, ans in zip(keys, answers):
            times = groups[key]
            best = min(times.values())
            rec = dict(zip(PROBLEM, key), log=fold.left_out, inductor_list=len(times),
                       vendor_regret=times[VENDOR_CONFIG_ID] / best - 1 if VENDOR_CONFIG_ID in times else math.nan)
            for k in KS:
                ids = [c.config_id for c in choices_for(ans, k, vendor)]
                got = [times[i] for i in ids if i in times]
                rec[f"k{k}_n"] = len(ids)
                rec[f"k{k}_measured"] = len(got)
                rec[f"k{k}_regret"] = min(got) / best - 1 if got else math.nan
            if shortlist is not None and key in strides:
                ids = shortlist(key[0], key[1], key[2], key[3], strides[key], times)
                rec["ah_n"] = len(ids)
                rec["ah_regret"] = min(times[i] for i in ids if i in times) / best - 1
            recs.append(rec)
        log(f"{fold.dtype} without {fold.left_out}: {len(keys)} problems, {time.perf_counter() - t0:.0f} s")
    return pd.DataFrame(recs), skipped


def _pct(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{v:.2%}"


def table(per: pd.DataFrame, torch_version: str | None) -> tuple:
    lines = ["| dtype | left-out log | problems | K | choices per problem: mean / max | single choice | "
             "listed choices measured | regret vs full autotune (geomean) | not scored |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = ["| dtype | left-out log | problems | cuBLAS only | Inductor's own list: candidates mean / max | "
            f"PyTorch {torch_version or ''}'s AutoHeuristic (top 10 + aten, in-sample): regret / candidates mean |",
            "|---|---|---|---|---|---|"]
    groups = list(per.groupby(["dtype", "log"], sort=True)) + [((dt, "all"), g) for dt, g in per.groupby("dtype")]
    for (dt, lg), g in groups:
        for k in KS:
            r = g[f"k{k}_regret"].to_numpy(np.float64)
            lines.append(f"| {dt} | {lg} | {len(g)} | {k} | {g[f'k{k}_n'].mean():.2f} / {g[f'k{k}_n'].max()} | "
                         f"{(g[f'k{k}_n'] == 1).mean():.0%} | "
                         f"{g[f'k{k}_measured'].sum() / g[f'k{k}_n'].sum():.0%} | "
                         f"{_pct(geomean_regret(r[np.isfinite(r)]))} | {int((~np.isfinite(r)).sum())} |")
        ah = (f"{_pct(geomean_regret(g['ah_regret'].dropna().to_numpy()))} / {g['ah_n'].mean():.1f}"
              if "ah_regret" in g and g["ah_regret"].notna().any() else "n/a (no PyTorch)")
        v = g["vendor_regret"].to_numpy(np.float64)
        base.append(f"| {dt} | {lg} | {len(g)} | {_pct(geomean_regret(v[np.isfinite(v)]))} | "
                    f"{g['inductor_list'].mean():.1f} / {g['inductor_list'].max()} | {ah} |")
    return "\n".join(lines), "\n".join(base)


def export_speed(work: Path, device: str, n: int = 1000, seed: int = 0) -> str:
    """Median and first of 5 exports of ``n`` log-uniform problems, in this process."""
    folder = next(iter(sorted((work / "lolo" / "float16").glob(f"without-*/{device}/triton_mm/float16"))))
    rng = np.random.default_rng(seed)
    ext = np.exp2(rng.uniform(4, 14, size=(n, 3))).astype(int)
    problems = [Problem(int(m), int(nn), int(k), "float16", "NN") for m, nn, k in ext]
    out = Path(tempfile.mkdtemp()) / "t.json"
    secs = []
    for _ in range(5):
        t0 = time.perf_counter()
        export_lut(problems, out, device=device, top_k=3, models_dir=folder.parents[2])
        secs.append(time.perf_counter() - t0)
    return (f"Exporting {n} log-uniform float16 problems (M, N, K in [16, 16384], K = 3) with the fold model "
            f"`{folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}`, in one process: first "
            f"{secs[0] * 1e3:.0f} ms (loads the model), median of 5 {np.median(secs) * 1e3:.0f} ms.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "a100-study",
                    help="studies/a100.py's work folder (default: out/a100-study)")
    ap.add_argument("--device", default="a100")
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "inductor_lut.md")
    args = ap.parse_args(argv)
    if not (args.work / "data" / args.device).is_dir():
        print(f"{args.work}/data/{args.device}: not found; run studies/a100.py first", file=sys.stderr)
        return 2
    per, skipped = score(args.work, args.device, log=lambda s: print(s, file=sys.stderr))
    version = importlib.metadata.version("torch") if importlib.util.find_spec("torch") else None
    choices, baselines = table(per, version)
    text = "\n\n".join([
        "# Inductor lookup tables from a model (leave one log out, A100 AutoHeuristic logs)",
        "Generated by `studies/lut.py`; see its docstring for the protocol. Regret: the fastest measured of "
        "the listed choices / the best measured of all (cuBLAS included) - 1, geometric mean over the left-out "
        "log's problems that no other log measures.",
        "## Autotuning among the exported choices", choices,
        "## Baselines", baselines,
        "## Export speed", export_speed(args.work, args.device)]
        + ([f"- {s}" for s in skipped] if skipped else []))
    args.report.write_text(text + "\n")
    per.to_csv(args.work / "inductor_lut.csv", index=False)     # per problem: beside the logs, never committed
    print(text)
    if args.report.resolve() == ROOT / "reports" / "inductor_lut.md":
        docs_from_reports.update(["lut"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
