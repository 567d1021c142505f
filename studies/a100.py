"""Quality of the triton_mm models on real A100 measurements (PyTorch
Inductor's AutoHeuristic mm logs, ../shared/data/inductor-autoheuristic-a100/),
scored the way users compile: on logs the model never saw.

Imports the logs with ``costlearn.interop.import_file`` (the product's
path), then, in this order:

1. **leave one log out** (``costlearn.learn.study.leave_one_log_out``, what
   ``costlearn study`` runs): for each log (random shapes, HuggingFace,
   timm) and each dtype two logs measure, train with ``costlearn.learn.train.train``
   on the other logs and score what ``predict_best`` answers (vendor floor,
   coverage and OOD fallback included) on the left-out log's problems;
2. **random shapes only -> real models' shapes**: train on ``a100_mm.txt``
   alone, score the HuggingFace and timm logs (each, and together);
3. shape-grouped 5-fold cross-validation over the problems of
   ``a100_mm.txt`` (a problem = M, N, K, dtype, layout; GroupKFold), the
   easier, second number: the model's ranking of the measured configs,
   the raw-feature ablation and the baselines.

Regret: measured time of the answer / best measured of all (the vendor
library included) - 1, geometric mean over problems; a config measured in
several sessions counts once, with its median time. An answer never
measured on its problem cannot be scored: it is counted, not dropped.

The data has no licence: the imported rows and models stay under --work
(default out/a100-study/), never in data/ or models/. Writes the tables to
--report (default reports/a100_inductor.md; the cross-validation to
reports/a100_inductor_cv.md). ``--source`` and ``--device``
run the same study on another GPU's logs of the same format (a zip of
Inductor mm logs).

    .venv/bin/python -m studies.a100            # about 50 min on 2 cores
    .venv/bin/python -m studies.a100 --no-cv    # the log tables only (about 25 min)
    .venv/bin/python -m studies.a100 --cv-only  # the cross-validation only (about 20 min)
    .venv/bin/python -m studies.a100 --quick    # 2 folds of CV over a quarter of the problems; no log study
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

from studies import docs_from_reports  # noqa: E402

from costlearn.collect.dataset import load, valid_rows  # noqa: E402
from costlearn.core.device import preset  # noqa: E402
from costlearn.interop import import_file  # noqa: E402
from costlearn.families import VENDOR_CONFIG_ID  # noqa: E402
from costlearn.learn.metrics import evaluate_rows, summarize, vendor_only_scores  # noqa: E402
from costlearn.model import get_model  # noqa: E402
from costlearn.model.base import shape_groups  # noqa: E402
from costlearn.model.xgb import XGBParams  # noqa: E402

DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "inductor-autoheuristic-a100" / "a100_mm.zip"
PROBLEM = ["m", "n", "k", "dtype", "layout"]


def split_of(name: str) -> str:
    """The kind of log a file is, from its name: ``hf`` (HuggingFace models),
    ``timm`` (timm models) or ``mm`` (random shapes)."""
    low = name.lower()
    return "hf" if "_hf_" in low or low.startswith("hf") else "timm" if "timm" in low else "mm"


def import_logs(source: Path, work: Path, device: str) -> pd.DataFrame:
    """Extract and import every log of the zip (idempotent); the valid rows
    with a ``split`` column (mm, hf, timm)."""
    raw = work / "raw"
    with zipfile.ZipFile(source) as z:
        names = [n for n in z.namelist() if n.endswith(".txt")]
        if not all((raw / n).is_file() for n in names):
            z.extractall(raw)
    for f in names:
        rep = import_file("inductor", raw / f, device=device, data_root=work / "data")
        print(rep.summary().splitlines()[0], file=sys.stderr)
    df, _ = load(work / "data" / device)
    df = valid_rows(df)
    return df.assign(split=df["source_file"].map(split_of)).reset_index(drop=True)


def models(jobs: int) -> dict:
    p = XGBParams(n_jobs=jobs)
    return {"xgboost (analytic)": lambda: get_model("xgboost", feature_set="analytic", params=p),
            "xgboost (raw ablation)": lambda: get_model("xgboost", feature_set="raw", params=p),
            "best fixed order": lambda: get_model("best_fixed"),
            "roofline": lambda: get_model("roofline")}


def predict_split(train: pd.DataFrame, test: pd.DataFrame, jobs: int, device: str) -> dict:
    """Every model's predictions on ``test`` after fitting on ``train``,
    per dtype (one model per dtype); aligned with ``test``."""
    spec = preset(device)
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
    vendor = test["config_id"].eq(VENDOR_CONFIG_ID).to_numpy()
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


def random_to_real(work: Path, device: str, rows: pd.DataFrame, jobs: int) -> tuple[pd.DataFrame, str]:
    """Train on the random-shape log(s) alone (``costlearn.learn.train.train``,
    every dtype they hold) and score predict_best on the real models' logs:
    the per-problem scores and a by-log table."""
    from costlearn.serve.predictor import Predictor
    from costlearn.learn.study import (by_source, decision_scores, flag_table, format_by_source, format_flag_table,
                                 reusable_model)
    from costlearn.learn.train import train
    real = sorted(rows.loc[rows["split"] != "mm", "source_file"].unique())
    mm_logs = sorted(rows.loc[rows["split"] == "mm", "source_file"].unique())
    frames = []
    for dtype in sorted(rows.loc[rows["split"] != "mm", "dtype"].astype(str).unique()):
        if not (rows["split"].eq("mm") & rows["dtype"].eq(dtype)).any():
            continue
        models = work / "random-only" / "models"
        n_rows = int((rows["dtype"].eq(dtype) & ~rows["source_file"].isin(real)).sum())
        folder = reusable_model(models, work / "data" / device, "triton_mm", dtype, tuple(real), n_rows)
        if folder is None:
            folder = train(work / "data" / device, models, family="triton_mm", dtype=dtype,
                           settings=dict(params=XGBParams(n_jobs=jobs)), exclude_sources=tuple(real)).path.parent
        pred = Predictor(folder)
        seen = set(map(tuple, rows[rows["split"] == "mm"][["m", "n", "k", "layout"]].drop_duplicates()
                       .itertuples(index=False, name=None)))
        test = rows[(rows["split"] != "mm") & rows["dtype"].eq(dtype) & rows["layout"].isin(pred.layouts)]
        test = test[[t not in seen for t in test[["m", "n", "k", "layout"]].itertuples(index=False, name=None)]]
        per = decision_scores(pred, test, best_fixed=pred.artifact.baseline("best_fixed"))
        frames.append(per)
        print(f"random only ({', '.join(mm_logs)}) -> {dtype}: {len(per)} real-model problems scored", file=sys.stderr)
    per = pd.concat(frames, ignore_index=True)
    together = by_source(per.assign(source="HuggingFace + timm"))
    table = pd.concat([by_source(per), together], ignore_index=True).drop_duplicates("source", keep="last")
    flags = pd.concat([flag_table(per), flag_table(per.assign(source="HuggingFace + timm"))],
                      ignore_index=True).drop_duplicates("source", keep="last")
    return per, "\n\n".join([
        format_by_source(table, f"Trained on the random-shape log only, scored on the real models' logs (every "
                         f"dtype they hold: {', '.join(sorted(per['dtype'].unique()))})"),
        format_flag_table(flags, "The same: the OOD flag against the model's own top-1 (no floor)")])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="zip of Inductor mm logs (a100_mm.zip)")
    ap.add_argument("--device", default="a100", help="device preset the logs were measured on (default: a100)")
    ap.add_argument("--work", type=Path, default=None, help="default: out/<device>-study")
    ap.add_argument("--report", type=Path, default=None, help="default: reports/a100_inductor.md for the A100")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="XGBoost threads")
    ap.add_argument("--quick", action="store_true", help="2 folds over a quarter of the problems; CV only")
    ap.add_argument("--no-cv", action="store_true", help="leave out the shape-grouped cross-validation")
    ap.add_argument("--cv-only", action="store_true", help="only the shape-grouped cross-validation")
    args = ap.parse_args(argv)
    work = args.work or ROOT / "out" / f"{args.device}-study"
    report = args.report or ROOT / "reports" / ("a100_inductor.md" if args.device == "a100"
                                                else f"{args.device}_inductor.md")
    if not args.source.is_file():
        print(f"{args.source}: not found (the Inductor logs are not part of costlearn)", file=sys.stderr)
        return 2
    from sklearn.model_selection import GroupKFold

    from costlearn.learn.study import leave_one_log_out
    t_start = time.perf_counter()
    rows = import_logs(args.source, work, args.device)
    logs = sorted(rows["source_file"].unique())
    other = "" if args.device == "a100" else f" --device {args.device} --source ZIP"
    text = [f"## Triton matmul on {preset(args.device).name} (PyTorch Inductor AutoHeuristic logs: "
            f"{', '.join(logs)})", "",
            f"Reproduce: `.venv/bin/python -m studies.a100{other}` "
            "(data not part of costlearn; `costlearn study --data DIR` runs the first table on any folder of "
            "imported logs). Regret: measured time of what `predict_best` answers (vendor floor, coverage and "
            "OOD fallback included) / best measured of all, the vendor library included, - 1; geometric mean "
            "over the problems of the scored log that no training log measured. 'prune path': the model "
            "choosing among exactly the configs measured on the problem (Triton's autotuner prune hook). "
            "'picks never measured': answers that cannot be scored, left out of the top-1 figures."]
    cv_text = []
    if not args.quick and not args.cv_only:
        if len(logs) >= 2:
            res = leave_one_log_out(work / "data" / args.device, work / "lolo", family="triton_mm",
                                    settings=dict(params=XGBParams(n_jobs=args.jobs)),
                                    progress=lambda line: print(line, file=sys.stderr))
            res.per_problem.to_csv(work / "lolo.csv", index=False)
            text += ["", "### Leave one log out (the headline)", "", res.format()]
        if (rows["split"] == "mm").any() and (rows["split"] != "mm").any():
            per, table = random_to_real(work, args.device, rows, args.jobs)
            per.to_csv(work / "random_to_real.csv", index=False)
            text += ["", table]
    if not args.no_cv:
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
            p = predict_split(mm.iloc[tr], mm.iloc[te].reset_index(drop=True), args.jobs, args.device)
            for name, v in p.items():
                preds.setdefault(name, np.full(len(mm), np.nan))[te] = v
        cv = summaries(mm, preds)
        cv_text += [text[0], "", f"### Second table: shape-grouped {folds}-fold cross-validation over the "
                    f"random-shape log ({len(mm)} rows, {mm[PROBLEM].drop_duplicates().shape[0]} problems)", "",
                    "The model ranks the configs measured on each held-out problem (no vendor floor); random "
                    "shapes like its training rows, so an easier number than the log tables.", "",
                    table(cv, f"Shape-grouped {folds}-fold cross-validation"), "",
                    f"Wall time {time.perf_counter() - t_start:.0f} s."]
        cv_report = report.with_name(report.stem + "_cv.md")
        cv_report.parent.mkdir(parents=True, exist_ok=True)
        cv_report.write_text("\n".join(cv_text) + "\n")
        print("\n".join(cv_text))
    if args.cv_only:
        return 0
    text += ["", f"The shape-grouped cross-validation is in {report.stem}_cv.md (`--cv-only`).", "",
             f"Wall time {time.perf_counter() - t_start:.0f} s."]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(text) + "\n")
    print("\n".join(text))
    if report.resolve() == ROOT / "reports" / "a100_inductor.md" and args.source == DEFAULT_SOURCE and not args.quick:
        for path in docs_from_reports.update(["lolo", "headline"]):
            print(f"{path.relative_to(ROOT)}: tables updated from {report.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
