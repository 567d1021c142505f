"""Does a fused epilogue change the best tile config, and does the model that
knows epilogues pick as well with one as without? Measured answers, from
the committed PoCL data (issue 26).

Two sources, both measured by ``costlearn collect`` on this device:

1. **Fresh shapes, every epilogue, every candidate** (``--eval``, default
   ``<data>/eval-epilogues``, written by ``costlearn evaluate --out``): each shape is measured with each
   epilogue, every candidate of the model, in one session. Per shape and
   epilogue e: the measured best config with e against the best without an
   epilogue, and the regret of launching the epilogue-free best with e,
   t_e(best_none) / min t_e - 1 (at or below the noise floor it counts as
   0: the same config within the noise).
2. **The training data's pairs** (``<data>``): a collection draws one
   epilogue per random shape; shapes first measured without one (the
   protocol-3 collection) were measured again with the drawn epilogue,
   on the same config subset, in a later session. The same questions on the
   configs measured both ways (a drift between sessions scales a shape's
   configs alike, so the argmin is unaffected).

Then the model: top-1 regret per epilogue on the fresh shapes of (a) the
model given each problem's epilogue and (b) the same model asked as if
there were none (an epilogue-blind cost model), against the per-problem
best measured.

Usage::

    python -m studies.epilogue [--data data/ocl-pthread-amd-epyc-1w] [--eval DIR] [--models models]

Writes ``reports/epilogue_study.md`` and the ``epilogue`` block of
``docs/results.md`` (:mod:`docs_from_reports`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

from costlearn.collect.dataset import current_rows, load, noise_floor, valid_rows  # noqa: E402
from costlearn.learn.evaluate import ranked_rows  # noqa: E402
from costlearn.learn.metrics import evaluate_rows, geomean_regret, summarize  # noqa: E402
from costlearn.model import artifact, artifact_layout  # noqa: E402
from costlearn.core.problem import EPILOGUES  # noqa: E402

SHAPE = ["m", "n", "k"]


def best_config_change(rows: pd.DataFrame, noise: float) -> pd.DataFrame:
    """Per (shape, epilogue e != none) measured both with e and without:
    ``changed`` (the best config with e differs, by more than ``noise``),
    ``regret`` (t_e of the epilogue-free best / min t_e - 1, 0 within the
    noise), ``slowdown`` (median over the configs of t_e / t_none - 1: what
    the epilogue costs), ``configs`` (measured both ways)."""
    med = rows.groupby(SHAPE + ["epilogue", "config_id"], observed=True)["time_us"].median().reset_index()
    none = med[med["epilogue"] == "none"].drop(columns="epilogue").rename(columns={"time_us": "t_none"})
    out = []
    for e in EPILOGUES[1:]:
        fused = med[med["epilogue"] == e].drop(columns="epilogue").merge(none, on=SHAPE + ["config_id"])
        for (m, n, k), g in fused.groupby(SHAPE):
            if len(g) < 2:
                continue
            t_e, t_n = g["time_us"].to_numpy(), g["t_none"].to_numpy()
            regret = float(t_e[np.argmin(t_n)] / t_e.min() - 1.0)
            regret = 0.0 if regret <= noise else regret
            out.append(dict(m=m, n=n, k=k, epilogue=e, configs=len(g), changed=regret > 0, regret=regret,
                            slowdown=float(np.median(t_e / t_n) - 1.0)))
    return pd.DataFrame(out)


def change_table(ch: pd.DataFrame) -> list:
    lines = ["| epilogue | shapes | configs per shape (median) | best config changes | regret of the epilogue-free "
             "best: mean / geomean / max | the epilogue's cost (median slowdown) |", "|---|---|---|---|---|---|"]
    for e in EPILOGUES[1:]:
        g = ch[ch["epilogue"] == e]
        if g.empty:
            continue
        r = g["regret"].to_numpy()
        lines.append(f"| {e} | {len(g)} | {int(g['configs'].median())} | {g['changed'].mean():.0%} | "
                     f"{r.mean():.1%} / {geomean_regret(r):.1%} / {r.max():.1%} | {g['slowdown'].median():+.1%} |")
    r = ch["regret"].to_numpy()
    lines.append(f"| all | {len(ch)} | {int(ch['configs'].median())} | {ch['changed'].mean():.0%} | "
                 f"{r.mean():.1%} / {geomean_regret(r):.1%} / {r.max():.1%} | {ch['slowdown'].median():+.1%} |")
    return lines


def model_table(art, rows: pd.DataFrame, noise: float) -> tuple[list, dict]:
    """Top-1 regret per epilogue of the model told the epilogue and asked
    as if there were none."""
    rows = ranked_rows(rows[rows["config_id"].isin(set(art.candidates["config_id"]))],
                       art.family.min_tile_caps(art.spec)).reset_index(drop=True)
    mdl = art.model()
    told = evaluate_rows(rows, mdl.predict(rows), noise_rel=noise)
    blind = evaluate_rows(rows, mdl.predict(rows.assign(epilogue="none")), noise_rel=noise)
    lines = ["| epilogue | problems | top-1 regret mean / geomean (told the epilogue) | top-5 mean | "
             "asked as if none: top-1 mean / geomean |", "|---|---|---|---|---|"]
    got = {}
    for e in EPILOGUES:
        a, b = summarize(told[told["epilogue"] == e]), summarize(blind[blind["epilogue"] == e])
        if not a.get("shapes"):
            continue
        got[e] = a
        lines.append(f"| {e} | {a['shapes']} | {a['top1_mean']:.1%} / {a['top1_geomean']:.1%} | "
                     f"{a['top5_mean']:.1%} | {b['top1_mean']:.1%} / {b['top1_geomean']:.1%} |")
    return lines, got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "data" / "ocl-pthread-amd-epyc-1w"))
    ap.add_argument("--eval", default=None,
                    help="fresh measurements of every epilogue (default: <data>/eval-epilogues)")
    ap.add_argument("--models", default=str(ROOT / "models"))
    ap.add_argument("--out", default=str(ROOT / "reports" / "epilogue_study.md"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    train = valid_rows(current_rows(load(data)[0])[0])
    eval_dir = Path(args.eval) if args.eval else data / "eval-epilogues"
    fresh = valid_rows(current_rows(load(eval_dir)[0])[0])
    fresh = fresh[fresh.groupby(SHAPE)["epilogue"].transform("nunique") == len(EPILOGUES)]
    noise_fresh, noise_train = noise_floor(fresh), noise_floor(train)
    ch_fresh = best_config_change(fresh, noise_fresh)
    ch_train = best_config_change(train, noise_train)
    art = artifact.load(artifact_layout.model_folder(Path(args.models), data.name, "gemm", "float32"))
    mt, got = model_table(art, fresh, noise_fresh)
    none = got.get("none", {}).get("top1_mean", float("nan"))
    worst = max((g["top1_mean"] - none for e, g in got.items() if e != "none"), default=float("nan"))
    text = [
        "# Does the epilogue change the best tile config?", "",
        f"Generated by `python -m studies.epilogue` from "
        f"`{data.relative_to(ROOT) if data.is_relative_to(ROOT) else data}` "
        f"(PoCL's CPU device, costlearn's gemm template, float32). Regret: measured time of a pick / the best "
        "measured of the problem - 1; at or below the noise floor it counts as 0.", "",
        f"## Fresh shapes, each with every epilogue ({fresh[SHAPE].drop_duplicates().shape[0]} shapes, every "
        f"candidate of the model, one session; noise floor {noise_fresh:.1%})", "",
        *change_table(ch_fresh), "",
        f"## Training shapes measured without an epilogue and again with one ({len(ch_train)} pairs, the configs "
        f"measured both ways, two sessions; noise floor {noise_train:.1%})", "",
        *change_table(ch_train), "",
        f"## The model on the fresh shapes (model {art.model_sha256[:12]}, trained on epilogues "
        f"{', '.join(art.epilogues)})", "",
        *mt, "",
        f"Worst epilogue's top-1 mean minus the epilogue-free one: {worst * 100:+.1f} points "
        "(target: at most +1).", ""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(text))
    print("\n".join(text))
    from studies.docs_from_reports import update
    update()
    return 0


if __name__ == "__main__":
    sys.exit(main())
