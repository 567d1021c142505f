"""The vendor decision in distribution, and what predicts its errors (issue 35).

1. **The H100 random log, 80/20 by problem**: the 20 % held out are the problems
   whose columns ``m k n mat1_dtype mat2_dtype mat1_stride_0 mat1_stride_1
   mat2_stride_0 mat2_stride_1 using_tf32`` (as pandas reads them, joined with
   ``|``) give ``int(sha256, 16) % 5 == 0``; the rest are imported and trained
   with ``costlearn.learn.train.train`` (every dtype), and what ``predict_best``
   answers on the held-out problems is scored beside the model's plain argmin
   among the measured configs and cuBLAS alone.
2. **What predicts an answer that loses more than 5 %**: the AUROC of
   candidate per-problem scores (the vendor model's deviation and its margin
   over the deviation, the neighbours' held-out regrets the first floor used,
   the problem's size)
   on the split above and, where ``studies/a100.py`` left them in its
   work folder, on the A100's leave-one-log-out and random-only problems; and
   the regret on the problems each score flags (its top quarter) and does
   not.

The logs have no licence: rows and models stay under --work (default
out/decision-study/). Writes --report (default reports/decision_study.md).

    .venv/bin/python -m studies.decision      # about 3 min on 2 cores (after a100_study.py: its tables too)
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from costlearn.collect.dataset import current_rows, load, valid_rows  # noqa: E402
from costlearn.interop import import_file  # noqa: E402
from costlearn.learn.metrics import geomean_regret  # noqa: E402
from costlearn.model import artifact_layout  # noqa: E402
from costlearn.serve.predictor import Predictor  # noqa: E402
from costlearn.learn.study import decision_scores  # noqa: E402
from costlearn.learn.train import train  # noqa: E402
from studies.thin_data import hashed, subset  # noqa: E402

DEFAULT_H100 = ROOT.parent / "shared" / "data" / "inductor-autoheuristic-h100-random" / "h100_mm.zip"
LOSES = 0.05
"""An answer 'loses' when its top-1 regret is above this."""


def split_log(text: str) -> tuple[str, str]:
    """(training log, held-out log) of an AutoHeuristic log's text: the issue's 20 % rule
    (:func:`thin_data_study.hashed` of 5 is 0)."""
    return subset(text, lambda d: hashed(d, 5) != 0), subset(text, lambda d: hashed(d, 5) == 0)


def h100_split(source: Path, work: Path) -> pd.DataFrame:
    """Train on the 80 %, score every dtype's model on the 20 %: decision_scores rows."""
    with zipfile.ZipFile(source) as z:
        name = next(n for n in z.namelist() if n.endswith(".txt"))
        text = z.read(name).decode()
    tr, te = split_log(text)
    work.mkdir(parents=True, exist_ok=True)
    (work / "h100_train.txt").write_text(tr)
    (work / "h100_test.txt").write_text(te)
    import_file("inductor", work / "h100_train.txt", device="h100", data_root=work / "train")
    import_file("inductor", work / "h100_test.txt", device="h100", data_root=work / "test")
    rows = valid_rows(current_rows(load(work / "test" / "h100")[0])[0])
    frames = []
    for dtype in sorted(rows["dtype"].astype(str).unique()):
        folder = artifact_layout.model_folder(work / "models", "h100", "triton_mm", dtype)
        # Trained afresh every run: a model left by an earlier run was trained by earlier code
        # (it kept the H100 rows at the old coverage after COVERAGE_MARGIN_LOG2 changed).
        train(work / "train" / "h100", work / "models", family="triton_mm", dtype=dtype)
        frames.append(decision_scores(Predictor(folder), rows).assign(split=dtype))
        print(f"h100 {dtype}: scored", file=sys.stderr)
    return pd.concat(frames, ignore_index=True)


def _pct(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.2%}"


def decision_table(per: pd.DataFrame, title: str, by: str) -> str:
    """predict_best against the plain argmin, cuBLAS alone and the best of the top 5, by ``by`` and in all."""
    head = ["", "problems", "predict_best (the decision)", "plain argmin", "cuBLAS alone", "best of top-5",
            "vendor chosen"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, g in list(per.groupby(by, sort=True)) + [("all", per)]:
        lines.append(f"| {name} | {len(g)} | {_pct(geomean_regret(g['top1_regret']))} | "
                     f"{_pct(geomean_regret(g['model_regret']))} | {_pct(geomean_regret(g['vendor_regret']))} | "
                     f"{_pct(geomean_regret(g['top5_regret']))} | {g['pick'].eq('vendor').mean():.0%} |")
    return "\n".join(lines)


def scores(per: pd.DataFrame) -> dict:
    """Candidate per-problem scores, higher = less sure."""
    sd = per["estimate_sd_log2"].to_numpy(np.float64)
    mean = per["estimate_log2"].to_numpy(np.float64)
    return {"the vendor model's deviation": sd,
            "its deviation over its distance from a tie (sd / abs(mean))": sd / np.maximum(np.abs(mean), 1e-3),
            "the neighbours' held-out model regret (the first floor's flag)": per["model_near"].to_numpy(np.float64),
            "the neighbours' held-out cuBLAS regret": per["vendor_near"].to_numpy(np.float64),
            "a small problem (-log2 of M N K)": -np.log2(per[["m", "n", "k"]].to_numpy(np.float64).prod(axis=1))}


def flag_table(parts: dict) -> str:
    """AUROC of each score for 'the answer loses more than 5 %', and the regret on the quarter it flags."""
    from sklearn.metrics import roc_auc_score
    head = ["score", "problems", "AUROC (answer loses > 5 %)", "regret on the flagged quarter", "on the rest"]
    lines = ["| where | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for where, per in parts.items():
        per = per[np.isfinite(per["top1_regret"].to_numpy(np.float64))]
        y = per["top1_regret"].to_numpy() > LOSES
        for name, s in scores(per).items():
            ok = np.isfinite(s)
            if ok.sum() < 10 or y[ok].all() or not y[ok].any():
                continue
            flag = s >= np.quantile(s[ok], 0.75)
            lines.append(f"| {where} | {name} | {int(ok.sum())} | {roc_auc_score(y[ok], s[ok]):.2f} | "
                         f"{_pct(geomean_regret(per['top1_regret'][flag & ok]))} | "
                         f"{_pct(geomean_regret(per['top1_regret'][~flag & ok]))} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--h100", type=Path, default=DEFAULT_H100, help="zip of the H100 random-shape Inductor log")
    ap.add_argument("--a100-work", type=Path, default=ROOT / "out" / "a100-study",
                    help="studies/a100.py's work folder (its lolo.csv and random_to_real.csv)")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "decision-study")
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "decision_study.md")
    args = ap.parse_args(argv)
    if not args.h100.is_file():
        print(f"{args.h100}: not found (the Inductor logs are not part of costlearn)", file=sys.stderr)
        return 2
    per = h100_split(args.h100, args.work)
    per.to_csv(args.work / "h100_split.csv", index=False)
    parts = {"H100 80/20": per}
    for name, file in (("A100 leave one log out", "lolo.csv"), ("A100 random only -> HF + timm",
                                                                "random_to_real.csv")):
        path = args.a100_work / file
        if path.is_file():
            got = pd.read_csv(path)
            if "estimate_log2" in got:
                parts[name] = got[got["dtype"] == "float16"] if "dtype" in got else got
    text = ["# The vendor decision: in distribution, and what predicts its errors", "",
            "Reproduce: `.venv/bin/python -m studies.decision` (after `studies/a100.py --no-cv` for the "
            "A100 rows). Regret: measured time of the answer / best measured of all (cuBLAS included) - 1, "
            "geometric mean over the held-out problems.", "",
            decision_table(per, "H100 random log: trained on 80 % of its problems, scored on the other 20 %",
                           "split"), "",
            "### What predicts an answer that loses more than 5 % (the A100 rows: float16)", "",
            flag_table(parts), "",
            "The flagged quarter is each score's highest quarter of the problems."]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(text) + "\n")
    print("\n".join(text))
    print(f"report: {args.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
