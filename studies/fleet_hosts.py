"""Two hosts tune the same shapes: how often their winners differ, and the
one answer the fleet's rule gives.

    python -m studies.fleet_hosts [--shapes 100] [--top-k 3] [--seed 7] [--out reports/fleet_hosts_pocl.md]

Two processes, one after the other, with their own host names
(``COSTLEARN_HOST``), each run ``predict_best(M, N, K, measure_top_k=K,
tuning_db=<its own file>)`` on the same ``--shapes`` problems (log-uniform
extents in [32, 384]) on the local device with the committed model (PoCL
here): two independent tunings of each shape. Then, per shape:

- the *fastest-median* winner of each host (what a host alone launched
  before the fleet rule) and whether the two hosts' differ (a flip);
- the *fleet rule*'s winner on each host's measurements alone
  (:func:`costlearn.serve.fleet.decide`), and whether those differ;
- the fleet's answer from both hosts' measurements (one config per key by
  construction: every host reads the same entry), and its regret against
  the fastest config by the two hosts' pooled medians;
- for the flips, how far apart the two winners are by the pooled medians:
  a flip inside the measurement noise is a tie, not a disagreement.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def tune_as_host(host: str, db: str, shapes: list, top_k: int) -> None:
    """One host's tuning of every shape into its own database."""
    os.environ["COSTLEARN_HOST"] = host
    from costlearn import predict_best
    for m, n, k in shapes:
        predict_best(m, n, k, measure_top_k=top_k, tuning_db=db)


def study(args) -> str:
    import random
    from costlearn.core.problem import Problem
    from costlearn.serve.fleet import decide
    from costlearn.serve.tuning_db import TuningDB
    rng = random.Random(args.seed)
    shapes = [tuple(int(round(2 ** rng.uniform(5, math.log2(384)))) for _ in range(3)) for _ in range(args.shapes)]
    work = Path(tempfile.mkdtemp(prefix="costlearn-fleet-study-"))
    (work / "shapes.json").write_text(json.dumps(shapes))
    for host in ("host-a", "host-b"):
        subprocess.run([sys.executable, "-m", __spec__.name, "--as-host", host, str(work / f"{host}.sqlite"),
                        str(work / "shapes.json"), str(args.top_k)], check=True, cwd=Path(__file__).parents[1])
    per_host = [TuningDB(work / f"{h}.sqlite", read_only=True).measurements() for h in ("host-a", "host-b")]
    fleet = TuningDB(work / "fleet.sqlite", create=True)
    rows = []
    for key in sorted(set(per_host[0]) & set(per_host[1])):
        a, b = per_host[0][key], per_host[1][key]
        fastest = [min(ms, key=lambda m: (m.p50_us, m.config_id)).config_id for ms in (a, b)]
        stable = [decide(ms, None).config_id for ms in (a, b)]
        args_ = (Problem(*key[:6]), *key[6:9])
        fleet.record(*args_, a, source="host-a", costlearn_version=key[9])
        entry, verdict = fleet.record(*args_, b, source="host-b", costlearn_version=key[9])
        pooled = verdict.times_us
        best = min(pooled.values())
        rows.append(dict(key=key, fastest=fastest, stable=stable, fleet=entry.config.config_id,
                         regret=pooled[entry.config.config_id] / best - 1,
                         flip_gap=abs(pooled[fastest[0]] / pooled[fastest[1]] - 1) if fastest[0] != fastest[1] else 0,
                         spread=[statistics.median((m.p80_us - m.p20_us) / m.p50_us for m in ms) for ms in (a, b)]))
    n = len(rows)
    flips = [r for r in rows if r["fastest"][0] != r["fastest"][1]]
    stable_flips = sum(r["stable"][0] != r["stable"][1] for r in rows)
    gaps = sorted(r["flip_gap"] for r in flips)
    regrets = [r["regret"] for r in rows]
    geo = math.exp(statistics.fmean(math.log1p(x) for x in regrets)) - 1
    spread = statistics.median(s for r in rows for s in r["spread"])
    lines = [f"# Two hosts tune the same {n} shapes (top {args.top_k} measured, {os.cpu_count()} CPUs, "
             f"the committed model on the local device)", "",
             "| rule | winners that differ between the hosts | configs the fleet launches per key |",
             "|---|---|---|",
             f"| fastest median, each host alone | {len(flips)} of {n} ({100 * len(flips) / n:.0f} %) | up to 2 |",
             f"| fleet rule, each host alone | {stable_flips} of {n} ({100 * stable_flips / n:.0f} %) | up to 2 |",
             "| fleet rule on both hosts' measurements | - | 1 (every host reads one entry) |", "",
             "| fleet answer | value |", "|---|---|",
             f"| regret vs the fastest by pooled medians, geomean | {100 * geo:.2f} % |",
             f"| regret, max | {100 * max(regrets):.2f} % |",
             f"| flips' gap between the two winners (pooled medians), median | "
             f"{100 * statistics.median(gaps) if gaps else 0:.2f} % |",
             f"| flips' gap, max | {100 * max(gaps) if gaps else 0:.2f} % |",
             f"| a measurement's p20-p80 spread / median, median | {100 * spread:.2f} % |"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=100)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None, help="also write the tables as Markdown")
    ap.add_argument("--as-host", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.as_host:
        host, db, shapes, top_k = args.as_host
        tune_as_host(host, db, [tuple(s) for s in json.loads(Path(shapes).read_text())], int(top_k))
        return 0
    text = study(args)
    print(text)
    if args.out:
        from studies import docs_from_reports
        docs_from_reports.write_report(text, args.out, "fleet-hosts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
