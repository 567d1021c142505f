"""Where the data is thin: does predict_best stay at or below cuBLAS alone?

Every split below imports its training logs into a fresh folder, trains with
``costlearn.learn.train.train`` (the hold-out by region or by log, the
vendor model and its transfer, as a user's ``costlearn train``) and scores
what ``predict_best`` answers on the held-out problems
(``costlearn.learn.study.decision_scores``) beside the plain argmin of the
model among the measured configs, cuBLAS alone and the best of the top 5:

- **H100 80/20**: the H100 random log, the problems whose key (columns ``m k
  n mat1_dtype mat2_dtype mat1_stride_0 mat1_stride_1 mat2_stride_0
  mat2_stride_1 using_tf32`` joined with ``|``) gives ``int(sha256, 16) % 5
  == 0`` held out; every dtype.
- **H100 regions**: the same log trained on N >= 2048 (or K >= 2048) and
  scored on the rest: a leave-region-out split.
- **A100 random at 12 % / 35 % / whole**: the A100 random log, the problems
  whose key gives ``int(sha256, 16) % 1000 < 120`` (350, all), scored on the
  HuggingFace and timm logs: the thin-data proxy.
- **A100 leave one log out**: each of the three logs scored by a model of
  the other two.

The A100 and H100 splits are float16 unless named (the H100 80/20 is every
dtype). Per split: each log (each dtype) and its layouts. ``far``: the share
of answers beyond the vendor floor's reach of every training shape (decided
by the transfer); ``sure``: the answers with ``Prediction.sure``, their
geometric-mean regret and the worst; ``unmeasured``: picks the log never
timed on the problem (left out of the regrets, counted).

The logs have no licence: rows and models stay under --work (default
out/thin-data-study/). Writes --report (default reports/thin_data_study.md).

    .venv/bin/python -m studies.thin_data            # about 25 min on 2 cores
    .venv/bin/python -m studies.thin_data --splits h100_8020,a100_12pct
"""
from __future__ import annotations

import argparse
import hashlib
import io
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from costlearn.collect.dataset import current_rows, load, valid_rows  # noqa: E402
from costlearn.interop import import_file  # noqa: E402
from costlearn.learn.metrics import geomean_regret  # noqa: E402
from costlearn.learn.study import decision_scores  # noqa: E402
from costlearn.learn.train import train  # noqa: E402
from costlearn.model import artifact_layout  # noqa: E402
from costlearn.serve.predictor import Predictor  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
DEFAULT_A100 = DATA / "inductor-autoheuristic-a100" / "a100_mm.zip"
DEFAULT_H100 = DATA / "inductor-autoheuristic-h100-random" / "h100_mm.zip"
KEY_COLUMNS = "m k n mat1_dtype mat2_dtype mat1_stride_0 mat1_stride_1 mat2_stride_0 mat2_stride_1 using_tf32".split()
FAR_WORDS = "no training problem within"
"""How an answer decided by the transfer begins its reason (VendorFloor.transfer_reason)."""


def log_text(zpath: Path, suffix: str) -> str:
    with zipfile.ZipFile(zpath) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(suffix))).decode()


def subset(text: str, keep) -> str:
    """The log's header lines and the rows ``keep(frame)`` marks."""
    lines = text.splitlines()
    df = pd.read_csv(io.StringIO("\n".join(lines[1:])))
    return "\n".join(lines[:2] + [ln for ln, k in zip(lines[2:], keep(df)) if k]) + "\n"


def hashed(df: pd.DataFrame, modulus: int) -> np.ndarray:
    """Per row of an AutoHeuristic log's frame: ``int(sha256(key), 16) % modulus``, the key
    :data:`KEY_COLUMNS` as pandas reads them, joined with ``|``."""
    key = df[KEY_COLUMNS].astype(str).agg("|".join, axis=1)
    return key.map(lambda s: int(hashlib.sha256(s.encode()).hexdigest(), 16) % modulus).to_numpy()


def splits(a100: Path, h100: Path) -> dict:
    """name -> (title, device, dtypes or None (every dtype), {training log: text}, {held-out log: text})."""
    out = {}
    if h100.is_file():
        h = log_text(h100, "h100_mm.txt")
        out["h100_8020"] = ("H100 random log 80/20 (every dtype)", "h100", None,
                            {"h100_train.txt": subset(h, lambda d: hashed(d, 5) != 0)},
                            {"h100_test.txt": subset(h, lambda d: hashed(d, 5) == 0)})
        for ext in ("n", "k"):
            out[f"h100_region_{ext}"] = (
                f"H100 random log, {ext.upper()} >= 2048 -> {ext.upper()} < 2048", "h100", ["float16"],
                {f"h100_{ext}_ge_2048.txt": subset(h, lambda d: d[ext].to_numpy() >= 2048)},
                {f"h100_{ext}_lt_2048.txt": subset(h, lambda d: d[ext].to_numpy() < 2048)})
    if a100.is_file():
        mm, hf, timm = (log_text(a100, s) for s in ("a100_mm.txt", "a100_hf_train_mm.txt", "a100_timm_train_mm.txt"))
        real = {"a100_hf_train_mm.txt": hf, "a100_timm_train_mm.txt": timm}
        for share in (120, 350):
            out[f"a100_{share // 10}pct"] = (f"A100 random log at {share / 10:g} % -> HuggingFace, timm", "a100",
                                             ["float16"], {f"a100_mm_{share}.txt": subset(
                                                 mm, lambda d, s=share: hashed(d, 1000) < s)}, real)
        out["a100_random"] = ("A100 random log (whole) -> HuggingFace, timm", "a100", ["float16"],
                              {"a100_mm.txt": mm}, real)
        logs = {"a100_mm.txt": mm, **real}
        for left in logs:
            out["a100_lolo_" + left.split("_")[1].removesuffix(".txt")] = (
                f"A100 leave one log out: {left}", "a100", ["float16"],
                {k: v for k, v in logs.items() if k != left}, {left: logs[left]})
    return out


def imported(folder: Path, files: dict, device: str) -> Path:
    for name, text in files.items():
        path = folder / "raw" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        import_file("inductor", path, device=device, data_root=folder / "data")
    return folder / "data" / device


def run_split(name: str, spec: tuple, work: Path) -> pd.DataFrame:
    title, device, dtypes, train_logs, test_logs = spec
    folder = work / name
    tr = imported(folder / "train", train_logs, device)
    te = valid_rows(current_rows(load(imported(folder / "test", test_logs, device))[0])[0])
    frames = []
    trained = set(valid_rows(load(tr)[0])["dtype"].astype(str))
    for dtype in dtypes or sorted(set(te["dtype"].astype(str)) & trained):
        t0 = time.perf_counter()
        res = train(tr, folder / "models", family="triton_mm", dtype=dtype)
        tr_fit = res.floor.get("transfer") or {}
        pred = Predictor(artifact_layout.model_folder(folder / "models", device, "triton_mm", dtype))
        frames.append(decision_scores(pred, te).assign(
            split=name, transfer_intercept=tr_fit.get("intercept"), transfer_slope=tr_fit.get("slope"),
            transfer_layouts=", ".join(f"{lay} {a:+.2f}" for lay, a in sorted(tr_fit.get("intercepts", {}).items()))))
        print(f"{name} {dtype}: trained in {time.perf_counter() - t0:.0f} s ({res.holdout_kind}; transfer "
              f"{tr_fit.get('intercept', float('nan')):+.2f} + {tr_fit.get('slope', float('nan')):.2f} x estimate)",
              file=sys.stderr, flush=True)
    return pd.concat(frames, ignore_index=True)


def _pct(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.2%}"


HEAD = ["", "problems", "predict_best", "plain argmin", "cuBLAS alone", "best of top-5", "vendor chosen", "far",
        "unmeasured", "sure: answers, geomean, worst"]


def row(label: str, g: pd.DataFrame) -> str:
    sure = g[g["sure"].astype(bool)]
    far = g["ood_reasons"].fillna("").astype(str).str.contains(FAR_WORDS, regex=False)
    worst = sure["top1_regret"].max() if len(sure) else float("nan")
    return (f"| {label} | {len(g)} | {_pct(geomean_regret(g['top1_regret']))} | "
            f"{_pct(geomean_regret(g['model_regret']))} | {_pct(geomean_regret(g['vendor_regret']))} | "
            f"{_pct(geomean_regret(g['top5_regret']))} | {g['pick'].eq('vendor').mean():.0%} | {far.mean():.0%} | "
            f"{int((~g['pick_measured'].astype(bool)).sum())} | {len(sure)}, "
            f"{_pct(geomean_regret(sure['top1_regret']))}, {_pct(worst)} |")


def split_table(title: str, per: pd.DataFrame) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    by = "dtype" if per["dtype"].nunique() > 1 else "source"
    groups = list(per.groupby(by, sort=True))
    for name, g in groups:
        lines.append(row(str(name), g))
    if len(groups) > 1:
        lines.append(row("all", per))
    for (head, lay), g in per.groupby([by, "layout"], sort=True):     # each log's (each dtype's) layouts
        lines.append(row(f"{head} {lay}" if len(groups) > 1 else lay, g))
    tr = per.drop_duplicates("dtype")[["dtype", "transfer_intercept", "transfer_slope", "transfer_layouts"]]
    fits = ", ".join(f"{d}: {a:+.2f} + {b:.2f} x estimate" + (f" (intercepts {own})" if own else "")
                     for d, a, b, own in tr.itertuples(index=False) if a is not None and np.isfinite(a))
    return "\n".join(lines + ["", f"Transfer measured at training: {fits or 'none'}."])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--a100", type=Path, default=DEFAULT_A100, help="zip of the A100 Inductor logs")
    ap.add_argument("--h100", type=Path, default=DEFAULT_H100, help="zip of the H100 random-shape Inductor log")
    ap.add_argument("--splits", default="", help="comma-separated split names (default: all)")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "thin-data-study")
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "thin_data_study.md")
    args = ap.parse_args(argv)
    every = splits(args.a100, args.h100)
    if not every:
        print(f"{args.a100}, {args.h100}: not found (the Inductor logs are not part of costlearn)", file=sys.stderr)
        return 2
    names = [s for s in args.splits.split(",") if s] or list(every)
    unknown = sorted(set(names) - set(every))
    if unknown:
        print(f"unknown splits {unknown}; there are {sorted(every)}", file=sys.stderr)
        return 2
    text = ["# Where the data is thin: predict_best against cuBLAS alone", "",
            "Reproduce: `.venv/bin/python -m studies.thin_data`. Regret: measured time of the answer / best "
            "measured of all (cuBLAS included) - 1, geometric mean over the held-out problems; far: answers beyond "
            "the vendor floor's reach of every training shape; sure: answers with `Prediction.sure`.", ""]
    for name in names:
        per = run_split(name, every[name], args.work)
        per.to_csv(args.work / name / "per_problem.csv", index=False)
        text += [split_table(every[name][0], per), ""]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(text))
    print("\n".join(text))
    if args.report.resolve() == (ROOT / "reports" / "thin_data_study.md").resolve():
        from studies import docs_from_reports
        docs_from_reports.update(["thin-data"])
    print(f"report: {args.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
