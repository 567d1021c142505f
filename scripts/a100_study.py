"""Quality of the triton_mm model on real A100 measurements (PyTorch
Inductor's AutoHeuristic mm logs, ../shared/data/inductor-autoheuristic-a100/).

Imports the logs with ``costlearn.interop.import_file`` (the product's
path), then scores, per dtype model (one per dtype, as ``costlearn train``
makes them):

1. shape-grouped 5-fold cross-validation over the problems of ``a100_mm.txt``
   (a problem = M, N, K, dtype, layout; GroupKFold, so a problem's rows are
   all in train or all in test);
2. train on all of ``a100_mm.txt``, test on the HuggingFace and timm files
   (problems of those files that also occur in ``a100_mm.txt`` are left out
   of the test, so it is on unseen problems only).

Models: the product (XGBoost, analytic features), the raw-feature ablation
(XGBoost on log2 M, N, K and the config's parameters), the best fixed order
and the roofline baselines, and "vendor only" (always call the library).
Metrics (costlearn.metrics): top-1 and best-of-top-5 regret, geometric mean
over problems, against the best Triton config (vendor rows left out) and
against the best of all (vendor included). A config measured in several
sessions counts once, with its median time.

The data has no licence: the imported rows and models stay under --work
(default out/a100-study/), never in data/ or models/. Writes the tables to
--report (default reports/a100_inductor.md).

    .venv/bin/python scripts/a100_study.py            # about 25 min on 2 cores
    .venv/bin/python scripts/a100_study.py --quick    # 2 folds, a quarter of the problems
"""
from __future__ import annotations

import argparse
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costlearn.dataset import load, valid_rows  # noqa: E402
from costlearn.device import preset  # noqa: E402
from costlearn.interop import import_file  # noqa: E402
from costlearn.metrics import VENDOR_ID, evaluate_rows, summarize, vendor_only_scores  # noqa: E402
from costlearn.model import get_model  # noqa: E402
from costlearn.model.base import shape_groups  # noqa: E402
from costlearn.model.xgb import XGBParams  # noqa: E402

DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "inductor-autoheuristic-a100" / "a100_mm.zip"
FILES = {"mm": "a100/a100_mm.txt", "hf": "a100/a100_hf_train_mm.txt", "timm": "a100/a100_timm_train_mm.txt"}
PROBLEM = ["m", "n", "k", "dtype", "layout"]


def import_logs(source: Path, work: Path) -> pd.DataFrame:
    """Extract and import the three logs (idempotent); the valid rows with a
    ``split`` column (mm, hf, timm)."""
    raw = work / "raw"
    if not all((raw / f).is_file() for f in FILES.values()):
        with zipfile.ZipFile(source) as z:
            z.extractall(raw)
    for f in FILES.values():
        rep = import_file("inductor", raw / f, device="a100", data_root=work / "data")
        print(rep.summary().splitlines()[0], file=sys.stderr)
    df, _ = load(work / "data" / "a100")
    df = valid_rows(df)
    names = {Path(f).name: key for key, f in FILES.items()}
    return df.assign(split=df["source_file"].map(names)).reset_index(drop=True)


def models(jobs: int) -> dict:
    p = XGBParams(n_jobs=jobs)
    return {"xgboost (analytic)": lambda: get_model("xgboost", feature_set="analytic", params=p),
            "xgboost (raw ablation)": lambda: get_model("xgboost", feature_set="raw", params=p),
            "best fixed order": lambda: get_model("best_fixed"),
            "roofline": lambda: get_model("roofline")}


def predict_split(train: pd.DataFrame, test: pd.DataFrame, jobs: int) -> dict:
    """Every model's predictions on ``test`` after fitting on ``train``,
    per dtype (one model per dtype); aligned with ``test``."""
    spec = preset("a100")
    out = {name: np.full(len(test), np.nan) for name in models(jobs)}
    for dtype in sorted(test["dtype"].unique()):
        tr, te = train[train["dtype"] == dtype], test["dtype"].eq(dtype).to_numpy()
        for name, make in models(jobs).items():
            t0 = time.perf_counter()
            out[name][te] = make().fit(tr, spec).predict(test[te])
            print(f"  {dtype:<9} {name:<24} fit+predict {time.perf_counter() - t0:6.1f}s", file=sys.stderr)
    out["vendor only"] = vendor_only_scores(test)
    return out


def summaries(test: pd.DataFrame, preds: dict) -> pd.DataFrame:
    """One row per (model, dtype or "all", candidates): top-1 / top-5
    geomean and mean regret."""
    vendor = test["config_id"].eq(VENDOR_ID).to_numpy()
    recs = []
    for name, pred in preds.items():
        for cands, mask in (("triton", ~vendor), ("all", np.ones(len(test), bool))):
            if name == "vendor only" and cands == "triton":
                continue
            per = evaluate_rows(test[mask], pred[mask])
            for dt, sub in [("all", per)] + list(per.groupby("dtype")):
                s = summarize(sub)
                recs.append(dict(model=name, dtype=dt, candidates=cands, problems=s["shapes"],
                                 top1_geomean=s["top1_geomean"], top1_mean=s["top1_mean"],
                                 top5_geomean=s["top5_geomean"], top1_p90=s["top1_p90"]))
    return pd.DataFrame(recs)


def cross_split_facts(mm: pd.DataFrame, other: pd.DataFrame) -> str:
    """How the test files differ from a100_mm.txt: configs never measured
    there, problems whose best Triton config is one of those, extents beyond
    its range, and configs far slower than the problem's best."""
    seen = {dt: set(g["config_id"]) for dt, g in mm.groupby("dtype")}
    med = other.groupby(PROBLEM + ["config_id"], observed=True)["time_us"].median().reset_index()
    tri = med[med["config_id"] != VENDOR_ID]
    best = tri.loc[tri.groupby(PROBLEM, observed=True)["time_us"].idxmin()]
    new_best = np.mean([c not in seen.get(d, set()) for c, d in zip(best["config_id"], best["dtype"])])
    configs = other[["dtype", "config_id"]].drop_duplicates()
    unseen = sum(c not in seen.get(d, set()) for d, c in configs.itertuples(index=False))
    hi = int(mm[["m", "n", "k"]].to_numpy().max())
    beyond = float((best[["m", "n", "k"]] > hi).any(axis=1).mean())
    ratio = tri.merge(best[PROBLEM + ["time_us"]], on=PROBLEM, suffixes=("", "_best"))
    cliff = float((ratio["time_us"] / ratio["time_us_best"] > 10).groupby(
        [ratio[c] for c in PROBLEM], observed=True).any().mean())
    return (f"Why this split is harder: of the {len(configs)} (dtype, config) pairs these files measure, {unseen} "
            f"never occur in a100_mm.txt, and on {new_best:.1%} of the problems the best Triton config is one of "
            f"them (the model scores it from its features alone); {beyond:.1%} of the problems have an extent "
            f"above a100_mm.txt's largest ({hi}); on {cliff:.1%} some measured config is more than 10x slower "
            "than the problem's best.")


def table(summ: pd.DataFrame, title: str) -> str:
    lines = [f"### {title}", "",
             "| model | vs best Triton: top-1 geomean | top-5 geomean | top-1 mean | top-1 p90 "
             "| vs best of all (vendor incl.): top-1 geomean | top-5 geomean |",
             "|---|---|---|---|---|---|---|"]
    s = summ[summ["dtype"] == "all"]
    for name in s["model"].unique():
        t = s[(s["model"] == name) & (s["candidates"] == "triton")]
        a = s[(s["model"] == name) & (s["candidates"] == "all")].iloc[0]
        tt = (f"{t.iloc[0].top1_geomean:.2%} | {t.iloc[0].top5_geomean:.2%} | {t.iloc[0].top1_mean:.2%} | "
              f"{t.iloc[0].top1_p90:.2%}") if len(t) else "n/a | n/a | n/a | n/a"
        lines.append(f"| {name} | {tt} | {a.top1_geomean:.2%} | {a.top5_geomean:.2%} |")
    lines += ["", f"Problems: {int(s.iloc[0].problems)}.", "", "By dtype (top-1 geomean; vs best Triton / vs best "
              "of all):", "", "| model | " + " | ".join(sorted(d for d in summ["dtype"].unique() if d != "all"))
              + " |", "|---|" + "---|" * (summ["dtype"].nunique() - 1)]
    for name in s["model"].unique():
        cells = []
        for dt in sorted(d for d in summ["dtype"].unique() if d != "all"):
            q = summ[(summ["model"] == name) & (summ["dtype"] == dt)].set_index("candidates")
            t = f"{q.loc['triton', 'top1_geomean']:.2%}" if "triton" in q.index else "n/a"
            n = int(q.loc["all", "problems"])
            cells.append(f"{t} / {q.loc['all', 'top1_geomean']:.2%} ({n})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a100_mm.zip")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "a100-study")
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "a100_inductor.md")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="XGBoost threads")
    ap.add_argument("--quick", action="store_true", help="2 folds over a quarter of the problems; no cross-split")
    args = ap.parse_args(argv)
    if not args.source.is_file():
        print(f"{args.source}: not found (the A100 logs are not part of costlearn)", file=sys.stderr)
        return 2
    from sklearn.model_selection import GroupKFold
    t_start = time.perf_counter()
    rows = import_logs(args.source, args.work)
    mm = rows[rows["split"] == "mm"].reset_index(drop=True)
    folds = args.folds
    if args.quick:
        g = shape_groups(mm)
        keep = np.random.default_rng(0).permutation(g.max() + 1)[: (g.max() + 1) // 4]
        mm = mm[np.isin(g, keep)].reset_index(drop=True)
        folds = 2
    groups = shape_groups(mm)
    preds = {}
    for i, (tr, te) in enumerate(GroupKFold(n_splits=folds).split(mm, groups=groups)):
        print(f"fold {i + 1}/{folds}: {len(tr)} train rows, {len(te)} test rows", file=sys.stderr)
        p = predict_split(mm.iloc[tr], mm.iloc[te].reset_index(drop=True), args.jobs)
        for name, v in p.items():
            preds.setdefault(name, np.full(len(mm), np.nan))[te] = v
    cv = summaries(mm, preds)
    text = [f"## Triton matmul on an A100 (PyTorch Inductor AutoHeuristic logs): {len(mm)} rows, "
            f"{mm[PROBLEM].drop_duplicates().shape[0]} problems of a100_mm.txt", "",
            f"Reproduce: `.venv/bin/python scripts/a100_study.py{' --quick' if args.quick else ''}` "
            f"(data: ../shared/data/inductor-autoheuristic-a100/, not part of costlearn). Regret: measured time of "
            "the model's pick (median over sessions) / best measured - 1, geometric mean over problems.", "",
            table(cv, f"Shape-grouped {folds}-fold cross-validation")]
    if not args.quick:
        seen = set(map(tuple, mm[PROBLEM].drop_duplicates().itertuples(index=False, name=None)))
        other = rows[rows["split"].isin(["hf", "timm"])]
        key = list(map(tuple, other[PROBLEM].itertuples(index=False, name=None)))
        other = other[[k not in seen for k in key]].reset_index(drop=True)
        print(f"cross split: train on a100_mm ({len(mm)} rows), test on hf+timm ({len(other)} rows)",
              file=sys.stderr)
        xs = summaries(other, predict_split(mm, other, args.jobs))
        text += ["", table(xs, "Train on a100_mm.txt, test on the HuggingFace and timm files (unseen problems)"),
                 "", cross_split_facts(mm, other)]
    text += ["", f"Wall time {time.perf_counter() - t_start:.0f} s."]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
