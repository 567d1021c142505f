"""Which problems to measure (issue 38): the collection strategies scored by
replaying real GPU logs.

**A100, random log as the pool.** The A100's random-shape Inductor log
(``a100_mm.txt``, float16) is replayed (``costlearn.collect.backends.replay``):
a collection may measure only its problems and the configs it recorded on
each, and gets their recorded (median) times. For each strategy (random,
prior, active) and seed, one dataset folder grows through the budgets
(problems measured); at each budget the folder is trained with
``costlearn.learn.train.train`` (the product's training, vendor floor and all)
and what ``predict_best`` answers is scored on the HuggingFace and timm logs'
problems that the random log does not hold (top-1 regret against the best
measured of all, cuBLAS included; geometric mean over problems; picks never
measured on their problem are counted, not scored). The layouts are
collected one after another, each up to its share of the pool.

**A100 -> H100, the destination problems a transfer learns from**
(``--transfer``). The source model is trained on the A100 random log's float16
problems (the imported log, no hold-out). A third
of the H100 random log's float16 problems (seeded) is held out for scoring;
the rest is the pool ``costlearn.learn.transfer.transfer(..., problems=k,
strategy=...)`` chooses k problems from (random, or active: rounds of an
ensemble of multi-device models on the source's rows and the problems chosen
so far). Scored like the A100 points, on the held-out H100 problems.

**Leave one real log out** (``--lolo``). The problems a strategy chose at
``--lolo-budget`` (the log's rows of them) plus every row of the other real
log train a model, scored on the left-out real log (HuggingFace, then timm):
does a strategy still pay where a real-model log is in training?

The logs have no licence: rows and models stay under --work (default
out/sampling-study/). Each point's scores (regrets and seconds, no rows) are
kept beside the report, committed (``reports/sampling_study_points.csv``,
``_lolo.csv``, ``_transfer.csv``), so an interrupted study resumes and a fresh
checkout extends the tables instead of losing them. A row's ``provenance``
says where it came from; a point replayed again replaces the rows recovered
for its strategy and budget. Writes --report (default
reports/sampling_study.md).

    .venv/bin/python -m studies.sampling               # about 60 min on 2 cores
    .venv/bin/python -m studies.sampling --budgets 50 100 --seeds 0   # a quick look
    .venv/bin/python -m studies.sampling --transfer    # the A100 -> H100 part (about 40 min)
    .venv/bin/python -m studies.sampling --lolo --seeds 0   # leave one real log out at 400 problems
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from studies import docs_from_reports  # noqa: E402
from studies.a100 import DEFAULT_SOURCE, import_logs  # noqa: E402

from costlearn.collect.active_shapes import ActiveSettings  # noqa: E402
from costlearn.collect.backends.replay import ReplayBackend  # noqa: E402
from costlearn.collect.dataset import load  # noqa: E402
from costlearn.collect.loop import collect  # noqa: E402
from costlearn.collect.sampler import STRATEGIES  # noqa: E402
from costlearn.learn.active import active_settings  # noqa: E402
from costlearn.core.device import preset  # noqa: E402
from costlearn.learn.study import by_source, decision_scores  # noqa: E402
from costlearn.learn.train import train  # noqa: E402
from costlearn.model.xgb import XGBParams  # noqa: E402
from costlearn.serve.predictor import Predictor  # noqa: E402

FAMILY, DTYPE = "triton_mm", "float16"
BUDGETS = (50, 100, 200, 400, 800)
H100_SOURCE = ROOT.parent / "shared" / "data" / "inductor-autoheuristic-h100-random" / "h100_mm.zip"
TRANSFER_K = (8, 16, 32, 64)


def layout_targets(pool: pd.DataFrame, n: int) -> dict:
    """Problems per layout at a budget of ``n``: each layout's share of the pool's problems."""
    counts = pool.groupby("layout", observed=True).size()
    share = counts / counts.sum()
    return {lay: int(min(counts[lay], round(n * share[lay]))) for lay in sorted(counts.index)}


def grow(backend, folder: Path, strategy: str, seed: int, targets: dict, jobs: int) -> float:
    """Collect into ``folder`` until each layout holds its target; returns the seconds spent.

    Raises
    ------
    SystemExit
        The folder already holds more problems of a layout than its target (a larger budget was replayed into
        it first): scoring it would label the larger folder with the smaller budget.
    """
    t0 = time.perf_counter()
    for lay, want in targets.items():
        have = 0
        if folder.exists():
            df, _ = load(folder)
            have = len(df.loc[df["layout"].eq(lay), ["m", "n", "k"]].drop_duplicates()) if len(df) else 0
        if have > want:
            raise SystemExit(f"{folder} holds {have} {lay} problems, more than this budget's {want}: a larger budget "
                             "was replayed into it first; give a fresh --work, or the budgets in increasing order")
        if want > have:
            collect(backend, folder, budget_s=1e9, family=FAMILY, dtype=DTYPE, layout=lay, configs_per_shape=10**6,
                    seed=seed, max_problems=want - have, strategy=strategy, progress=False,
                    active=active_settings(n_jobs=jobs))
    return time.perf_counter() - t0


def score(folder: Path, models: Path, test: pd.DataFrame, jobs: int) -> dict:
    """Train on ``folder`` and score predict_best on ``test``: the by-log table's 'all' row."""
    shutil.rmtree(models, ignore_errors=True)
    t0 = time.perf_counter()
    res = train(folder, models, family=FAMILY, dtype=DTYPE, settings=dict(params=XGBParams(n_jobs=jobs)))
    fit_s = time.perf_counter() - t0
    pred = Predictor(res.path.parent)
    per = decision_scores(pred, test[test["layout"].isin(pred.layouts)])
    per = per.assign(source="HuggingFace + timm")
    row = by_source(per).iloc[-1].to_dict()
    row.update(fit_s=fit_s, model_regret=float(np.exp(np.log1p(per["model_regret"].dropna()).mean()) - 1))
    return row


def scores_path(report: Path, part: str) -> Path:
    """Where a part's per-point scores are kept: ``<report stem>_<part>.csv`` beside the report."""
    return report.with_name(f"{report.stem}_{part}.csv")


def read_scores(path: Path, key: list) -> pd.DataFrame:
    """The scores cached in ``path`` (empty with the ``key`` columns where there are none yet)."""
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=key + ["provenance"])


def is_done(done: pd.DataFrame, **key) -> bool:
    """Whether ``done`` holds a row of this exact key (a recovered row, seed unknown, never matches a seed)."""
    hit = pd.Series(True, index=done.index)
    for col, value in key.items():
        hit &= done[col] == value
    return bool(hit.any())


def recovered(done: pd.DataFrame) -> pd.Series:
    """Which rows were recovered from an earlier report (their ``provenance`` starts with "recovered")."""
    return done["provenance"].astype(str).str.startswith("recovered")


def add_score(done: pd.DataFrame, row: dict, path: Path, same: list) -> pd.DataFrame:
    """Append a replayed point's ``row`` and write ``path``; it replaces the recovered rows of its ``same`` key.

    The rows recovered from an earlier report (``provenance`` "recovered ...") stand for their point until it is
    replayed again: one of an unknown seed (the report gave only mean, min and max) gives way to any seed replayed
    for its ``same`` key, one of a known seed only to that seed.
    """
    row = dict(row, provenance=PROVENANCE)
    stale = recovered(done) & (done["seed"].isna() | (done["seed"] == row["seed"]))
    for col in same:
        stale &= done[col] == row[col]
    done = pd.concat([done[~stale], pd.DataFrame([row])], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    done.to_csv(tmp, index=False)
    tmp.replace(path)                    # a killed run leaves the old scores whole, never half a file
    return done


def seeds_of(done: pd.DataFrame) -> tuple:
    """(seeds per point, a phrase naming them) of a part's points: the seed labels where every row has one."""
    n = int(done.groupby([c for c in ("strategy", "budget", "k", "left_out") if c in done], dropna=False)
            .size().max())
    seeds = done["seed"].dropna().unique()
    if done["seed"].isna().any() or len(seeds) != n:
        return n, f"{n} seeds" if n > 1 else "1 seed"
    return n, ("seed " if n == 1 else "seeds ") + ", ".join(str(int(x)) for x in sorted(seeds))


def provenance_lines(done: pd.DataFrame, path: Path, by: str, label: str) -> list:
    """Where a table's points come from: a line per ``provenance``, naming the values of ``by`` it holds
    (``label`` a format string for them, e.g. ``"{} problems"``)."""
    lines = [f"Where the points come from (`{path.name}`):", ""]
    for prov, g in done.groupby(done["provenance"].fillna("not recorded"), sort=False):
        values = [str(int(v)) if isinstance(v, (float, np.floating, np.integer)) else str(v)
                  for v in sorted(g[by].unique())]
        lines.append("- " + label.format(", ".join(values)) + f": {prov}.")
    return lines + [""]


def _git_revision() -> str:
    """The checkout's short commit (``+changes`` where the tree differs), or ``unknown`` outside git."""
    import subprocess
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "costlearn", "scripts"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+changes" if dirty else "")


PROVENANCE = f"replayed at {_git_revision()} on {time.strftime('%Y-%m-%d')}"
"""What a point replayed by this run records as its ``provenance``."""


def transfer_points(args, source_rows: pd.DataFrame) -> pd.DataFrame:
    """The A100 -> H100 part: a row per (strategy, seed, k), cached in ``scores_path(report, "transfer")``."""
    from costlearn.collect.dataset import write_part
    from costlearn.collect.plan import write_device_json
    from costlearn.learn.metrics import geomean_regret
    from costlearn.learn.transfer import transfer
    from costlearn.model import artifact_layout
    work = args.work / "transfer"
    src_models = work / "models-source"
    if not (artifact_layout.model_folder(src_models, "a100", FAMILY, DTYPE) / artifact_layout.SIDECAR).exists():
        src_folder = work / "source" / "a100"            # the imported log's rows (the H100's are imported too)
        if not src_folder.is_dir():
            write_device_json(preset("a100"), src_folder)
            write_part(source_rows, src_folder)
        train(src_folder, src_models, family=FAMILY, dtype=DTYPE, holdout=False,
              settings=dict(params=XGBParams(n_jobs=args.jobs)))
    h100 = import_logs(H100_SOURCE, args.work / "h100-import", "h100")
    h100 = h100[h100["dtype"].eq(DTYPE)].drop(columns=["split"]).reset_index(drop=True)
    problems = h100[["m", "n", "k", "layout"]].drop_duplicates().sort_values(["m", "n", "k", "layout"])
    held = problems.iloc[np.random.default_rng(100).permutation(len(problems))[:len(problems) // 3]]
    is_test = pd.MultiIndex.from_frame(h100[["m", "n", "k", "layout"]]).isin(pd.MultiIndex.from_frame(held))
    test, pool = h100[is_test], h100[~is_test]
    pool_folder = work / "pool" / "h100"
    if not pool_folder.is_dir():
        write_device_json(preset("h100"), pool_folder)
        write_part(pool, pool_folder)
    cache = scores_path(args.report, "transfer")
    done = read_scores(cache, ["strategy", "seed", "k"])
    for k in args.transfer_k:
        for strategy in [s for s in ("random", "active") if s in args.strategies]:
            for seed in args.seeds:
                if is_done(done, strategy=strategy, seed=seed, k=k):
                    continue
                models = work / "models"
                shutil.rmtree(models, ignore_errors=True)
                shutil.copytree(artifact_layout.model_folder(src_models, "a100", FAMILY, DTYPE),
                                artifact_layout.model_folder(models, "a100", FAMILY, DTYPE))
                t0 = time.perf_counter()
                res = transfer(models, "a100", "h100", data_dir=pool_folder, family=FAMILY, dtype=DTYPE, seed=seed,
                               problems=k, strategy=strategy,
                               active=ActiveSettings(member_problems=600, n_jobs=args.jobs))[0]
                secs = time.perf_counter() - t0
                per = decision_scores(Predictor(res.path.parent), test)
                row = dict(strategy=strategy, seed=seed, k=k, pool=len(problems) - len(held), test=len(per),
                           top1=geomean_regret(per["top1_regret"].dropna()),
                           prune=geomean_regret(per["prune_regret"].dropna()),
                           argmin=geomean_regret(per["model_regret"].dropna()),
                           vendor=geomean_regret(per["vendor_regret"].dropna()),
                           unmeasured=int(per["top1_regret"].isna().sum()), transfer_s=secs)
                print(f"a100 -> h100 {strategy:<6} seed {seed} k {k:3d}: top-1 {row['top1']:.2%} prune "
                      f"{row['prune']:.2%} argmin {row['argmin']:.2%} ({secs:.0f}s)", file=sys.stderr)
                done = add_score(done, row, cache, ["strategy", "k"])
    return done


REAL_LOGS = {"hf": "HuggingFace", "timm": "timm"}
"""The real models' logs (``split``) a leave-one-log-out point leaves out in turn."""


def lolo_points(args, backend, rows: pd.DataFrame, pool: pd.DataFrame) -> pd.DataFrame:
    """Leave one real log out (``--lolo``): a row per (strategy, seed, left-out log), cached in
    ``scores_path(report, "lolo")``.

    The log's rows of the problems a strategy chose at ``--lolo-budget`` (the study's folder of that budget where
    it holds exactly that many, else a folder of its own grown to it in one go), plus every row of the other real
    log, train a model; it is scored on the left-out log's problems that neither holds. The reference (strategy
    ``all``) trains on the whole random log plus the other real log.
    """
    from costlearn.collect.dataset import write_part
    from costlearn.collect.plan import write_device_json
    key = ["m", "n", "k", "layout"]
    cache = scores_path(args.report, "lolo")
    done = read_scores(cache, ["strategy", "seed", "budget", "left_out"])
    problems = pool[key].drop_duplicates()
    n_all = len(problems)
    for strategy, seed in [("all", 0)] + [(s, seed) for s in args.strategies for seed in args.seeds]:
        budget = n_all if strategy == "all" else args.lolo_budget
        if all(is_done(done, strategy=strategy, seed=seed, budget=budget, left_out=n) for n in REAL_LOGS.values()):
            continue
        chosen = pool
        if strategy != "all":
            folder = args.work / "runs" / f"{strategy}-s{seed}" / "data" / "a100"
            got = load(folder)[0][key].drop_duplicates() if folder.is_dir() else pd.DataFrame(columns=key)
            if len(got) != budget:
                folder = args.work / "lolo-runs" / f"{strategy}-s{seed}-{budget}" / "data" / "a100"
                grow(backend, folder, strategy, seed, layout_targets(problems, budget), args.jobs)
                got = load(folder)[0][key].drop_duplicates()
            chosen = pool.merge(got.astype({"m": int, "n": int, "k": int}), on=key)
        for left, name in REAL_LOGS.items():
            if is_done(done, strategy=strategy, seed=seed, budget=budget, left_out=name):
                continue
            other = rows[rows["split"].ne("mm") & rows["split"].ne(left) & rows["dtype"].eq(DTYPE)]
            train_rows = pd.concat([chosen, other], ignore_index=True).drop(columns=["split"])
            seen = pd.MultiIndex.from_frame(train_rows[key].drop_duplicates())
            test = rows[rows["split"].eq(left) & rows["dtype"].eq(DTYPE)]
            test = test[~pd.MultiIndex.from_frame(test[key]).isin(seen)]
            folder = args.work / "lolo" / "data" / "a100"
            shutil.rmtree(folder, ignore_errors=True)
            write_device_json(preset("a100"), folder)
            write_part(train_rows, folder)
            row = score(folder, args.work / "lolo" / "models", test, args.jobs)
            row.update(strategy=strategy, seed=seed, budget=budget, left_out=name)
            print(f"lolo {strategy:<7} seed {seed} budget {budget} {name} left out: top-1 {row['top1']:.2%} "
                  f"(cuBLAS {row['vendor_only']:.2%}, {int(row['problems'])} problems)", file=sys.stderr)
            done = add_score(done, row, cache, ["strategy", "budget", "left_out"])
    return done


def lolo_report(done: pd.DataFrame, report: Path) -> list:
    """The leave-one-log-out table: top-1 per strategy and left-out log (mean over seeds, min-max)."""
    ref = done[done["strategy"] == "all"]
    pts = done[done["strategy"] != "all"]
    if ref.empty or pts.empty:
        return []
    budget = int(pts["budget"].iloc[0])
    n_seeds, named = seeds_of(pts)
    seeds = named if n_seeds == 1 else f"mean over {named} (min-max)"
    lines = ["## Leave one real log out", "",
             f"The {budget} problems of the random log a strategy chose (the folder of its {budget}-problem point "
             f"above, or one grown to {budget} in one go; the log's rows of them) plus every row of the other real "
             "log train a model (a full `train`); it is scored on the left-out log's float16 problems that "
             f"neither holds: top-1 of `predict_best` against the best measured of all, geometric mean; {seeds}.", "",
             "| trained on | " + " | ".join(f"{n} left out" for n in REAL_LOGS.values()) + " |",
             "|---|" + "---|" * len(REAL_LOGS)]
    for s in [s for s in STRATEGIES if s in set(pts["strategy"])]:
        g = pts[pts["strategy"] == s]
        lines.append(f"| {s}, {budget} problems + the other log | " + " | ".join(
            _cell(g.loc[g["left_out"] == n, "top1"], n_seeds) for n in REAL_LOGS.values()) + " |")
    row = {n: ref.loc[ref["left_out"] == n] for n in REAL_LOGS.values()}
    lines.append(f"| the whole random log ({int(ref['budget'].iloc[0])}) + the other log | " + " | ".join(
        f"{float(r['top1'].iloc[0]):.2%}" if len(r) else "not run" for r in row.values()) + " |")
    lines.append("| cuBLAS alone | " + " | ".join(
        f"{float(r['vendor_only'].iloc[0]):.2%}" if len(r) else "not run" for r in row.values()) + " |")
    return lines + [""] + provenance_lines(done, scores_path(report, "lolo"), "strategy", "trained on {}")


def _cell(values: pd.Series, seeds: int) -> str:
    """Mean [min-max] of a point's seeds, naming how many where fewer than ``seeds`` ran."""
    v = values.astype(float)
    if v.empty:
        return "not run"
    fewer = f" ({len(v)} of {seeds} seeds)" if len(v) < seeds else ""
    if len(v) == 1:
        return f"{v.iloc[0]:.2%}{fewer}"
    return f"{v.mean():.2%} [{v.min():.2%}-{v.max():.2%}]{fewer}"


def transfer_report(done: pd.DataFrame, report: Path) -> list:
    """The A100 -> H100 table: regret against k per strategy (mean over seeds, min-max)."""
    r0 = done.iloc[0]
    n_seeds, named = seeds_of(done)
    lines = ["## A100 -> H100: which destination problems a transfer learns from", "",
             f"Source: the model of the A100 random log's float16 problems. Pool: {int(r0['pool'])} of the H100 "
             f"random log's float16 problems; scored on the other {int(r0['test'])} (held out, the same for every "
             f"point): top-1 of `predict_best` against the best measured of all, geometric mean; mean over {named} "
             "(min-max). cuBLAS alone: "
             f"{done['vendor'].iloc[0]:.2%}.", "",
             "| destination problems k | random: top-1 | active: top-1 | random: plain argmin | active: plain argmin |",
             "|---|---|---|---|---|"]
    for k, g in done.groupby("k"):
        cells = []
        for metric in ("top1", "argmin"):
            for s in ("random", "active"):
                cells.append(_cell(g.loc[g["strategy"] == s, metric], n_seeds))
        lines.append(f"| {k} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    secs = done.groupby("strategy")["transfer_s"].median().dropna() if "transfer_s" in done else pd.Series()
    if len(secs):
        lines += ["", "Seconds per transfer (choosing included; the machine shared with the A100 points), median: "
                  + ", ".join(f"{s} {v:.0f}" for s, v in secs.items()) + "."]
    return lines + [""] + provenance_lines(done, scores_path(report, "transfer"), "k", "k = {}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "sampling-study")
    ap.add_argument("--imported", type=Path, default=ROOT / "out" / "a100-study",
                    help="where studies/a100.py imports the logs (reused)")
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "sampling_study.md")
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--transfer", action="store_true", help="also the A100 -> H100 part (after the A100 points)")
    ap.add_argument("--transfer-k", type=int, nargs="+", default=list(TRANSFER_K),
                    help="destination problems a transfer learns from")
    ap.add_argument("--lolo", action="store_true", help="also leave one real log out (after the A100 points): "
                    "the problems chosen at --lolo-budget plus the other real log, scored on the left-out one")
    ap.add_argument("--lolo-budget", type=int, default=400)
    ap.add_argument("--transfer-only", action="store_true", help="only the A100 -> H100 part (its tables are "
                    "written with the A100 points cached so far)")
    ap.add_argument("--report-only", action="store_true", help="write the tables from the points cached so far "
                    "(nothing measured or trained)")
    args = ap.parse_args(argv)
    if not args.source.is_file():
        print(f"{args.source}: not found (the Inductor logs are not part of costlearn)", file=sys.stderr)
        return 2
    rows = import_logs(args.source, args.imported, "a100")
    pool = rows[rows["split"].eq("mm") & rows["dtype"].eq(DTYPE)].reset_index(drop=True)
    seen = set(map(tuple, pool[["m", "n", "k", "layout"]].drop_duplicates().itertuples(index=False, name=None)))
    test = rows[rows["split"].ne("mm") & rows["dtype"].eq(DTYPE)]
    test = test[[t not in seen for t in test[["m", "n", "k", "layout"]].itertuples(index=False, name=None)]]
    backend = None if args.report_only else ReplayBackend(pool.drop(columns=["split"]), preset("a100"))
    problems = pool[["m", "n", "k", "layout"]].drop_duplicates()
    n_all = len(problems)
    cache = scores_path(args.report, "points")
    done = read_scores(cache, ["strategy", "seed", "budget"])
    budgets = sorted(set(min(b, n_all) for b in args.budgets))
    for budget in budgets if not (args.transfer_only or args.report_only) else ():
        for strategy in args.strategies:
            for seed in args.seeds:
                if is_done(done, strategy=strategy, seed=seed, budget=budget):
                    continue
                folder = args.work / "runs" / f"{strategy}-s{seed}" / "data" / "a100"
                collect_s = grow(backend, folder, strategy, seed, layout_targets(problems, budget), args.jobs)
                got = len(load(folder)[0][["m", "n", "k", "layout"]].drop_duplicates())
                row = score(folder, args.work / "runs" / f"{strategy}-s{seed}" / "models", test, args.jobs)
                row.update(strategy=strategy, seed=seed, budget=budget, problems_measured=got, collect_s=collect_s)
                print(f"{strategy:<7} seed {seed} budget {budget:4d} ({got} problems): top-1 {row['top1']:.2%} "
                      f"prune {row['prune']:.2%} argmin {row['model_regret']:.2%}; collect {collect_s:.0f}s "
                      f"train {row['fit_s']:.0f}s", file=sys.stderr)
                done = add_score(done, row, cache, ["strategy", "budget"])
    whole = args.work / "runs" / "all" / "data" / "a100"          # the whole random log, replayed
    if not (args.transfer_only or args.report_only) and not (
            (done["strategy"] == "all") & (done["budget"] == n_all) & ~recovered(done)).any():
        collect_s = grow(backend, whole, "random", 0, layout_targets(problems, n_all), args.jobs)
        row = score(whole, args.work / "runs" / "all" / "models", test, args.jobs)
        row.update(strategy="all", seed=0, budget=n_all, problems_measured=n_all, collect_s=collect_s)
        done = add_score(done, row, cache, ["strategy", "budget"])
    if args.lolo and not (args.transfer_only or args.report_only):
        lolo_points(args, backend, rows, pool)
    if (args.transfer or args.transfer_only) and not args.report_only:
        transfer_points(args, pool.drop(columns=["split"]))
    write_report(args, n_all, len(test[["m", "n", "k", "layout"]].drop_duplicates()))
    return 0


def write_report(args, n_all: int, n_test: int) -> None:
    """Write ``args.report`` from every point its score files hold, whichever budgets this run replayed."""
    done, lolo, tr = (pd.read_csv(path) if path.is_file() else None
                      for path in (scores_path(args.report, p) for p in ("points", "lolo", "transfer")))
    extra = (lolo_report(lolo, args.report) if lolo is not None else []) + (
        transfer_report(tr, args.report) if tr is not None and len(tr) else [])
    if done is not None and (done["strategy"] == "all").any():
        report(done, n_all, n_test, args, extra)
    elif extra:
        print("\n".join(extra))


def report(done: pd.DataFrame, n_all: int, n_test: int, args, extra: list) -> None:
    """Write the tables: regret against problems measured, per strategy (mean over seeds, and the spread)."""
    whole = done[done["strategy"] == "all"].iloc[-1]
    pts = done[done["strategy"] != "all"]
    n_seeds, named = seeds_of(pts)
    lines = ["## Which problems to measure: strategies replayed on the A100's random log", "",
             f"Reproduce: `.venv/bin/python -m studies.sampling` (data not part of costlearn). Pool: the "
             f"{n_all} float16 problems of `a100_mm.txt`, replayed (their recorded configs and median times). "
             f"Scored: what `predict_best` answers on the {n_test} HuggingFace + timm float16 problems the pool "
             "does not hold, top-1 regret against the best measured of all (cuBLAS included), geometric mean; "
             f"each point a full `train` of the folder collected so far. Mean over {named} (min-max in brackets).",
             "",
             f"The whole random log ({n_all} problems): top-1 {whole['top1']:.2%}, prune path {whole['prune']:.2%}, "
             f"plain argmin {whole['model_regret']:.2%}; cuBLAS alone {whole['vendor_only']:.2%}.", ""]
    for metric, name in (("top1", "top-1 of predict_best"), ("prune", "prune path (the measured configs)"),
                         ("model_regret", "plain argmin among the measured configs")):
        strategies = [s for s in STRATEGIES if s in set(pts["strategy"])]
        lines += [f"### {name}", "", "| problems measured | " + " | ".join(strategies) + " |",
                  "|---|" + "---|" * len(strategies)]
        for b, g in pts.groupby("budget"):
            cells = []
            for s in strategies:
                cells.append(_cell(g.loc[g["strategy"] == s, metric], n_seeds))
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
        lines += [f"| {n_all} (all) | " + " | ".join([f"{float(whole[metric]):.2%}"] * len(strategies)) + " |", ""]
    timed = pts[pts["fit_s"].notna()] if "fit_s" in pts else pts.iloc[:0]
    if len(timed):
        lines += ["Seconds collecting (replay: the active refits are the cost; a folder grown from empty) and "
                  "training, median over the seeds of the points that recorded them:", "",
                  "| problems measured | strategy | collect s | train s |", "|---|---|---|---|"]
        for (b, s), g in timed.groupby(["budget", "strategy"]):
            lines.append(f"| {b} | {s} | {g['collect_s'].median():.1f} | {g['fit_s'].median():.1f} |")
        lines.append("")
    lines += provenance_lines(done, scores_path(args.report, "points"), "budget", "{} problems") + extra
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.report.resolve() == ROOT / "reports" / "sampling_study.md":
        for path in docs_from_reports.update(["sampling"]):
            print(f"{path.relative_to(ROOT)}: tables updated from {args.report.name}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
