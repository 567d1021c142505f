"""Model study: the cost models of the registry side by side (XGBoost and
scikit-learn's HistGradientBoosting), training objective, feature ablation
and learning curve, all judged by top-k regret on problem-grouped
cross-validation and on the fresh (exhaustively measured) evaluation shapes.

    python -m studies.models [--data data/ocl-pthread-amd-epyc] [--out reports/model_study.md]
                                  [--sections models,objective,ablation,curve]

Prints markdown tables and writes them to --out. Nothing is measured: it
reads the committed training dataset and its ``eval/`` folder.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd


from studies import docs_from_reports  # noqa: E402

from costlearn.collect.dataset import current_rows, load, noise_floor, valid_rows  # noqa: E402
from costlearn.core.device import DeviceSpec  # noqa: E402
from costlearn.learn.evaluate import ranked_rows  # noqa: E402
from costlearn.families import get_family  # noqa: E402
from costlearn.learn.metrics import evaluate_rows, summarize  # noqa: E402
from costlearn.model import get_model  # noqa: E402
from costlearn.model.base import shape_groups  # noqa: E402
from costlearn.model.xgb import XGBParams  # noqa: E402


def _fresh_rows(eval_dir: Path, candidates: set, caps) -> pd.DataFrame:
    rows = valid_rows(current_rows(load(eval_dir)[0])[0])
    return ranked_rows(rows[rows["config_id"].isin(candidates)], caps)


def _score(model, rows, noise) -> dict:
    return summarize(evaluate_rows(rows, model.predict(rows), noise))


def _cv(rows, spec, make, folds, noise) -> dict:
    from sklearn.model_selection import GroupKFold
    groups = shape_groups(rows)
    per = []
    for tr, te in GroupKFold(n_splits=folds).split(rows, groups=groups):
        m = make().fit(rows.iloc[tr], spec)
        per.append(evaluate_rows(rows.iloc[te], m.predict(rows.iloc[te]), noise))
    return summarize(pd.concat(per, ignore_index=True))


def _line(name, cv, fresh, seconds) -> str:
    return (f"| {name} | {cv['top1_geomean']:.1%} | {cv['top5_geomean']:.1%} | {fresh['top1_mean']:.1%} | "
            f"{fresh['top1_geomean']:.1%} | {fresh['top5_mean']:.1%} | {fresh['kendall_tau']:.3f} | {seconds:.0f} s |")


HEAD = ("| variant | CV top-1 geomean | CV top-5 geomean | fresh top-1 mean | fresh top-1 geomean | "
        "fresh top-5 mean | fresh Kendall τ | fit time |\n|---|---|---|---|---|---|---|---|")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/ocl-pthread-amd-epyc")
    ap.add_argument("--out", default="reports/model_study.md")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--sections", default="models,objective,ablation,curve",
                    help="comma-separated sections to run (default: all)")
    args = ap.parse_args(argv)
    sections = set(args.sections.split(","))
    data = Path(args.data)
    spec = DeviceSpec.from_dict(json.loads((data / "device.json").read_text()))
    train = valid_rows(current_rows(load(data)[0])[0]).reset_index(drop=True)
    cands = set(train["config_id"])
    fresh = _fresh_rows(data / "eval", cands, get_family("gemm").min_tile_caps(spec))
    noise = noise_floor(train)
    noise = 0.0 if not np.isfinite(noise) else noise
    out = [f"# Model study on {spec.name}", "",
           f"Training: {len(train)} rows over {train[['m', 'n', 'k']].drop_duplicates().shape[0]} shapes; "
           f"fresh: {len(fresh)} rows over {fresh[['m', 'n', 'k']].drop_duplicates().shape[0]} shapes "
           f"(exhaustive over the feasible candidates). CV: {args.folds}-fold GroupKFold by shape. "
           f"Regrets at or below the noise floor ({noise:.1%}) count as 0.", ""]

    def run(name, make, rows=train):
        t = time.perf_counter()
        cv = _cv(rows, spec, make, args.folds, noise)
        model = make().fit(rows, spec)
        fr = _score(model, fresh, noise)
        line = _line(name, cv, fr, time.perf_counter() - t)
        print(line, flush=True)
        return line, cv, fr

    def xgb(feature_set="analytic", **params):
        return lambda: get_model("xgboost", feature_set=feature_set, params=XGBParams(**params))

    if "models" in sections:
        out += ["## Cost models (analytic features, log2-time regression)", "", HEAD]
        print(HEAD)
        out.append(run("xgboost", xgb())[0])
        out.append(run("hgb (scikit-learn HistGradientBoosting)", lambda: get_model("hgb"))[0])
        out += [""]
    best = ("log_time", None)
    if "objective" in sections:
        out += ["## Objective (analytic features)", "", HEAD]
        print(HEAD)
        best = None
        for obj in ("log_time", "log_slowdown", "rank_pairwise"):
            line, cv, fr = run(obj, xgb(objective=obj))
            out.append(line)
            if best is None or cv["top1_geomean"] < best[1]:
                best = (obj, cv["top1_geomean"])
        out += ["", f"Chosen by cross-validated top-1 regret: `{best[0]}`.", ""]
    if "ablation" in sections:
        out += ["## Feature ablation (objective " + best[0] + ")", "", HEAD]
        print(HEAD)
        for fs in ("raw", "derived", "analytic"):
            out.append(run(fs, xgb(fs, objective=best[0]))[0])
        out += [""]
    if "curve" in sections:
        out += ["## Learning curve (analytic, objective " + best[0] + ")", "",
                HEAD.replace("| variant |", "| share of training shapes (rows) |")]
        print(HEAD)
        shapes = train[["m", "n", "k"]].drop_duplicates().sample(frac=1.0, random_state=0)
        for frac in (0.1, 0.25, 0.5, 1.0):
            keep = shapes.iloc[: max(5, int(round(frac * len(shapes))))]
            sub = train.merge(keep, on=["m", "n", "k"]).reset_index(drop=True)
            out.append(run(f"{frac:.0%} ({len(sub)})", xgb(objective=best[0]), sub)[0])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(out) + "\n")
    print(f"written: {args.out}")
    if Path(args.out).resolve() == Path(docs_from_reports.REPORTS / "model_study.md"):
        docs_from_reports.update(["model-study"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
