"""Active against random collection on a real device: PoCL's CPU OpenCL
device (issue 38), the main job's budget, fresh shapes, three runs.

Each run r (seed r + 1) collects gemm float32 for --budget seconds (the main
job's, 180 s) twice, into two folders: ``collect --strategy random`` and
``--strategy active``, both with one candidate pool (drawn with seed 0, so
the models rank the same configs), then trains each (``costlearn.learn.train.train``).
Both models are scored (``costlearn.learn.evaluate.score``) on one set of fresh
shapes measured once, exhaustively over the pool: the evaluation's fixed
CPU shapes plus --eval-random random ones, none a training shape of either
strategy. A sample of the fresh shapes is re-timed in a new process
(``costlearn recheck``) for the across-session noise floor a difference must
exceed.

Everything is measured here (no recorded data): it goes under --work
(default out/strategy-pocl/); the tables to --report (default
reports/sampling_study_pocl.md). Keep the machine otherwise idle.

    .venv/bin/python -m studies.strategy_pocl         # about 30 min on 2 cores
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"

from studies import docs_from_reports  # noqa: E402

from costlearn.collect.backends import get_backend  # noqa: E402
from costlearn.collect.dataset import load  # noqa: E402
from costlearn.collect.loop import collect  # noqa: E402
from costlearn.collect.noise import noise_floors  # noqa: E402
from costlearn.collect.plan import candidate_pool  # noqa: E402
from costlearn.collect.sampler import ShapeBounds  # noqa: E402
from costlearn.collect.active_shapes import ActiveSettings  # noqa: E402
from costlearn.learn.active import active_settings  # noqa: E402
from costlearn.learn.evaluate import FIXED_SHAPES, fresh_shapes, score  # noqa: E402
from costlearn.learn.train import train  # noqa: E402

FAMILY, DTYPE, POOL = "gemm", "float32", 48


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "strategy-pocl")
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "sampling_study_pocl.md")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds of each collection (the main job's)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--eval-random", type=int, default=8, help="random fresh shapes besides the fixed ones")
    ap.add_argument("--eval-budget", type=float, default=600.0)
    ap.add_argument("--pool", type=int, default=POOL, help="candidate configs (one pool for every collection)")
    ap.add_argument("--first-round", type=int, default=ActiveSettings.first_round,
                    help="random problems active measures before its first refit")
    ap.add_argument("--max-problems", type=int, default=None,
                    help="stop each collection after this many problems too (a smoke run that does not depend on "
                    "the machine's speed; active then ranks per problem)")
    args = ap.parse_args(argv)
    be = get_backend("opencl", family=FAMILY)
    spec = be.spec
    pool = candidate_pool(spec, FAMILY, DTYPE, args.pool, 0)
    bounds = ShapeBounds.for_device(True)
    folders, seconds = {}, {}
    for r in range(args.runs):
        for strategy in ("random", "active"):
            folder = args.work / f"run{r}-{strategy}" / "data" / spec.slug
            folders[r, strategy] = folder
            if (folder / "done").is_file():
                continue
            t0 = time.perf_counter()
            res = collect(be, folder, budget_s=args.budget, family=FAMILY, dtype=DTYPE, pool=pool,
                          configs_per_shape=args.pool, bounds=bounds, seed=r + 1, strategy=strategy, progress=False,
                          max_problems=args.max_problems,
                          active=active_settings(first_round=args.first_round) if strategy == "active" else None)
            seconds[r, strategy] = time.perf_counter() - t0
            print(f"run {r} {strategy}: {res.problems_done} problems, {res.rows_valid} valid rows in "
                  f"{seconds[r, strategy]:.0f}s", file=sys.stderr)
            (folder / "done").write_text(f"{res.problems_done}\n")
    trained = {}
    for key, folder in folders.items():
        models = folder.parents[1] / "models"
        side = list(models.glob(f"*/{FAMILY}/{DTYPE}/model.json"))
        trained[key] = side[0].parent if side else train(folder, models, family=FAMILY, dtype=DTYPE).path.parent
    seen = set()
    for folder in folders.values():
        df, _ = load(folder)
        seen |= set(map(tuple, df[["m", "n", "k"]].drop_duplicates().to_numpy().tolist()))
    eval_dir = args.work / "eval" / spec.slug
    shapes = fresh_shapes(sorted(seen), args.eval_random, bounds, "cpu", seed=1000)
    collect(be, eval_dir, budget_s=args.eval_budget, family=FAMILY, dtype=DTYPE, shapes=shapes, pool=pool,
            configs_per_shape=args.pool, seed=1000, progress=False)
    if not (eval_dir / "recheck").is_dir():
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        subprocess.run([sys.executable, "-m", "costlearn", "recheck", "--device", "opencl", "--data", str(eval_dir),
                        "--random-shapes", "6"], env=env, check=True)
    floors = noise_floors(eval_dir)
    rows, _ = load(eval_dir)
    rows = rows.merge(pd.DataFrame(shapes, columns=["m", "n", "k"]), on=["m", "n", "k"])
    recs = []
    for (r, strategy), art in trained.items():
        res = score(art, rows, data=eval_dir)
        s = res.summary[res.model]["all"]
        df, _ = load(folders[r, strategy])
        recs.append(dict(run=r, strategy=strategy, problems=int(len(df[["m", "n", "k", "epilogue"]]
                                                                    .drop_duplicates())),
                         top1_geomean=s["top1_geomean"], top1_mean=s["top1_mean"], top5_geomean=s["top5_geomean"],
                         shapes=s["shapes"]))
    out = pd.DataFrame(recs)
    args.work.mkdir(parents=True, exist_ok=True)
    out.to_csv(args.work / "points.csv", index=False)
    tie = floors.tie
    lines = [f"## Active against random collection on {spec.name} (PoCL, measured here)", "",
             f"Reproduce: `.venv/bin/python -m studies.strategy_pocl`. Each run collects gemm float32 for "
             f"{args.budget:.0f} s per strategy (the main job's budget; one candidate pool of {args.pool} configs), "
             f"trains, and both models are scored on the same {len(shapes)} fresh shapes ({len(FIXED_SHAPES['cpu'])} "
             f"fixed, {args.eval_random} random; no training shape of either), measured exhaustively over the pool: "
             "top-1 regret against the best measured config, geometric mean (and mean).", "",
             f"The fresh measurements' {floors.describe()}; a difference within {tie:.1%} is a tie.", "",
             "| run | random: problems | random: top-1 geomean (mean) | active: problems | active: top-1 geomean "
             "(mean) | random - active | beyond the floor |", "|---|---|---|---|---|---|---|"]
    wins = 0
    for r, g in out.groupby("run"):
        a = g[g["strategy"] == "active"].iloc[0]
        b = g[g["strategy"] == "random"].iloc[0]
        diff = b["top1_geomean"] - a["top1_geomean"]
        beyond = "active better" if diff > tie else "random better" if diff < -tie else "tie"
        wins += beyond == "active better"
        lines.append(f"| {r} | {b['problems']} | {b['top1_geomean']:.2%} ({b['top1_mean']:.2%}) | {a['problems']} | "
                     f"{a['top1_geomean']:.2%} ({a['top1_mean']:.2%}) | {diff:+.2%} | {beyond} |")
    lines += ["", f"Active better beyond the noise floor in {wins} of {out['run'].nunique()} runs "
              f"(mean top-1 geomean: random {out.loc[out['strategy'] == 'random', 'top1_geomean'].mean():.2%}, "
              f"active {out.loc[out['strategy'] == 'active', 'top1_geomean'].mean():.2%}).", ""]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.report.resolve() == REPORTS / "sampling_study_pocl.md" and (REPORTS / "sampling_study.md").is_file():
        for path in docs_from_reports.update(["sampling"]):
            print(f"{path.relative_to(ROOT)}: tables updated from {args.report.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
