"""The tuning database under a fleet's load, on a PostgreSQL server and on
an SQLite file, in one run:

    python -m benchmarks.tuning_db [--url postgresql://...] [--clients 8] [--ops 10000]
                                      [--out reports/bench_tuning_db.md]

Without ``--url`` a throwaway server is started (scripts/throwaway_postgres.py;
loopback unix socket, ``fsync=off``: it measures the client and the
protocol, not a disk). For each store:

- *mixed*: ``--clients`` processes start together and each runs ``--ops``
  operations on 2,000 stored keys: 90 % ``get`` of a random key (stored or
  not), 10 % ``put`` of a predicted entry; all gets per second over the
  slowest client's wall time (so writes count: SQLite's writers queue on
  the file's one lock and each write checkpoints its log, which holds its
  clients back though a get alone is faster), and a get's p50/p99 over
  every client's;
- *get_many*: one graph's 30 problems in one query (``get_many``), p50/p99
  of 300;
- *record*: one tuning's 4 measurements and the key's new answer in one
  transaction (``record``), p50/p99 of 300.

Then the answer while the server is away (a URL whose socket has no
server): ``predict_best(..., tuning_db=URL)`` of unseen problems, the first
call (it pays the connect timeout's refusal) and the median of the next
200, beside ``predict_best`` without a tuning database on the same
problems (today's answer without the fleet).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

KEYS = 2000


def _problem(i: int):
    from costlearn.core.problem import Problem
    return Problem(64 + i, 128, 256)


def _entry(i: int, how: str = "measured"):
    from costlearn import __version__
    from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
    from costlearn.serve.tuning_db import TuningEntry
    cfg = GemmConfig(32, 32, 8, 4, 4)
    return TuningEntry(_problem(i), "gemm", "bench", TEMPLATE_HASH, __version__, cfg, how, 10.0 + i % 7,
                       {cfg.config_id: 10.0}, "bench")


def worker(target: str, ops: int, seed: int, start_at: float) -> dict:
    """One client: ``ops`` mixed operations from ``start_at`` (time.time()); its get latencies' p50/p99 and wall
    time."""
    from costlearn.families.gemm import TEMPLATE_HASH
    from costlearn.serve.tuning_db_server import open_store
    db = open_store(target)
    rng = random.Random(seed)
    db.get(_problem(0), "gemm", "bench", TEMPLATE_HASH)                # connected before the clock starts
    plan = [(rng.random() < 0.9, rng.randrange(2 * KEYS)) for _ in range(ops)]
    time.sleep(max(0.0, start_at - time.time()))
    lat, t0 = [], time.perf_counter()
    for is_get, i in plan:
        if is_get:
            t = time.perf_counter_ns()
            db.get(_problem(i), "gemm", "bench", TEMPLATE_HASH)
            lat.append(time.perf_counter_ns() - t)
        else:
            db.put(_entry(KEYS + seed * ops + i, "predicted"))
    wall = time.perf_counter() - t0
    return {"gets": len(lat), "wall_s": wall, "lat_ns": lat}


def run_store(name: str, target: str, clients: int, ops: int) -> dict:
    from costlearn.families.gemm import TEMPLATE_HASH
    from costlearn.serve.fleet import Measurement
    from costlearn.serve.tuning_db_server import open_store
    db = open_store(target, create=True)
    for i in range(KEYS):
        db.put(_entry(i))
    start_at = time.time() + 3.0 + 0.3 * clients
    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([sys.executable, "-m", __spec__.name, "--worker", target, str(ops), str(c),
                                   repr(start_at), str(Path(tmp) / f"w{c}.json")], cwd=Path(__file__).parents[1])
                 for c in range(clients)]
        if any(p.wait() for p in procs):
            raise SystemExit(f"{name}: a client failed")
        results = [json.loads((Path(tmp) / f"w{c}.json").read_text()) for c in range(clients)]
    lat = sorted(v for r in results for v in r["lat_ns"])
    out = {"store": name, "gets_per_s": sum(r["gets"] for r in results) / max(r["wall_s"] for r in results),
           "get_p50_ms": lat[len(lat) // 2] / 1e6, "get_p99_ms": lat[int(len(lat) * 0.99)] / 1e6}
    batches = [[_problem(random.randrange(2 * KEYS)) for _ in range(30)] for _ in range(300)]
    times = []
    for b in batches:
        t = time.perf_counter()
        db.get_many(b, "gemm", "bench", TEMPLATE_HASH)
        times.append(time.perf_counter() - t)
    out.update(get_many_p50_ms=1e3 * statistics.median(times), get_many_p99_ms=1e3 * sorted(times)[297])
    ids = ["m32n32k8_t4x4_outer_p0_row", "m64n64k16_t4x4_outer_p0_row", "m16n32k8_t2x4_outer_p0_row",
           "m32n64k8_t4x4_outer_p0_row"]
    times = []
    for i in range(300):
        ms = [Measurement(c, 9.9 + j, 10.0 + j, 10.1 + j, 5, "bench", f"{i:010x}") for j, c in enumerate(ids)]
        t = time.perf_counter()
        db.record(_problem(3 * KEYS + i), "gemm", "bench", TEMPLATE_HASH, ms, source="bench")
        times.append(time.perf_counter() - t)
    out.update(record_p50_ms=1e3 * statistics.median(times), record_p99_ms=1e3 * sorted(times)[297])
    return out


def server_away(device: str | None) -> dict:
    """predict_best with a tuning database whose server is not there, against predict_best without one."""
    from costlearn import predict_best
    from costlearn.core.problem import Problem  # noqa: F401  (the import cost outside the clock)
    with tempfile.TemporaryDirectory(prefix="costlearn-no-server-") as nowhere:   # a socket folder no server uses
        url = f"postgresql://bench@/none?host={nowhere}"
        rng = random.Random(5)
        shapes = [(rng.randrange(1, 8192), rng.randrange(1, 8192), rng.randrange(1, 8192)) for _ in range(402)]
        kw = {"device": device} if device else {}
        predict_best(7, 7, 7, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            first = predict_best(*shapes[0], tuning_db=url, **kw)
            first_s = time.perf_counter() - t
            away = []
            for s in shapes[1:201]:
                t = time.perf_counter()
                predict_best(*s, tuning_db=url, **kw)
                away.append(time.perf_counter() - t)
        plain = []
        for s in shapes[201:]:
            t = time.perf_counter()
            predict_best(*s, **kw)
            plain.append(time.perf_counter() - t)
    return {"first_call_ms": 1e3 * first_s, "away_p50_ms": 1e3 * statistics.median(away),
            "plain_p50_ms": 1e3 * statistics.median(plain), "note": first.tuning_db_note}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a PostgreSQL database to use (default: a throwaway server)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--ops", type=int, default=10000)
    ap.add_argument("--device", default=None, help="model device for the server-away rows (default: the local one)")
    ap.add_argument("--out", help="also write the tables as Markdown")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        target, ops, seed, start_at, out = args.worker
        Path(out).write_text(json.dumps(worker(target, int(ops), int(seed), float(start_at))))
        return 0
    server = None
    url = args.url
    if url is None:
        from scripts.throwaway_postgres import PostgresServer
        server = PostgresServer.make()
        url = server.url(server.new_database())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [run_store("PostgreSQL", url, args.clients, args.ops),
                    run_store("SQLite", str(Path(tmp) / "bench.sqlite"), args.clients, args.ops)]
    finally:
        if server is not None:
            server.remove()
    away = server_away(args.device)
    lines = [f"# Tuning database: {args.clients} clients x {args.ops} operations (90 % get), {os.cpu_count()} CPUs",
             "", "| store | gets/s | get p50 ms | get p99 ms | get_many(30) p50 ms | p99 | record p50 ms | p99 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['store']} | {r['gets_per_s']:,.0f} | {r['get_p50_ms']:.3f} | {r['get_p99_ms']:.3f} | "
                     f"{r['get_many_p50_ms']:.3f} | {r['get_many_p99_ms']:.3f} | {r['record_p50_ms']:.3f} | "
                     f"{r['record_p99_ms']:.3f} |")
    lines += ["", "| server away | first call ms | later calls p50 ms | without a tuning database p50 ms |",
              "|---|---|---|---|",
              f"| predict_best | {away['first_call_ms']:.1f} | {away['away_p50_ms']:.3f} | "
              f"{away['plain_p50_ms']:.3f} |",
              "", f"the answer's note: {away['note']}"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        from studies import docs_from_reports
        docs_from_reports.write_report(text, args.out, "fleet-bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
