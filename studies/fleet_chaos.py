"""Hosts record tunings into one PostgreSQL tuning database while the server
and the hosts are killed: is any acknowledged measurement lost or doubled,
and does every host answer each measured key with the same config?

    python -m studies.fleet_chaos [--hosts 4] [--server-kills 20] [--host-kills 20] [--out reports/fleet_chaos.md]

A throwaway server is started (scripts/throwaway_postgres.py).
Each host process records tunings (two configs' measurements each, times
drawn per host) for keys shared by all hosts; a tuning the server did not
take is spooled (:class:`costlearn.serve.spool.Spool`). A host appends a
tuning's id to its journal only once the tuning is recorded or spooled
(acknowledged: what a host may rely on). Meanwhile the server is stopped
with ``pg_ctl stop -m immediate`` (as a crash) and restarted
``--server-kills`` times, and a random host is killed with SIGKILL and
started again (delivering its spool first) ``--host-kills`` times. At the
end every host delivers what it spooled, and the study counts:

- acknowledged tunings missing from the database (lost) and tunings stored
  twice (a tuning's config measured more than once: doubled);
- keys whose entry is not the answer its stored measurements decide
  (:func:`costlearn.serve.fleet.decide`), read by every host's own
  connection: configs launched per key.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOST = """
import os, random, sys, time
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
from costlearn.serve.fleet import Measurement
from costlearn.serve.spool import Spool
from costlearn.serve.tuning_db import key_values
from costlearn.serve.tuning_db_server import ServerTuningDB
from costlearn import __version__
url, host, keys, folder, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
db = ServerTuningDB(url, timeout_s=2.0)
spool = Spool(db.path, folder=os.path.join(folder, host + "-spool"))
journal = open(os.path.join(folder, host + ".journal"), "a")
ids = [GemmConfig(16, 32, 8, 2, 4).config_id, GemmConfig(32, 32, 8, 4, 4).config_id]
rng = random.Random()
spooled = 0
while not os.path.exists(stop):
    db._away = None                                  # a study: retry the server at once, not after AWAY_S
    spool.deliver(db)
    i = rng.randrange(keys)
    tid = os.urandom(8).hex()
    ms = [Measurement(c, t * 0.98, t, t * 1.02, 5, host, tid) for c in ids for t in [rng.uniform(9, 11)]]
    args = (Problem(64 + i, 64, 64), "gemm", "chaos", TEMPLATE_HASH)
    try:
        db.record(*args, ms, source=host)
    except OSError:
        spool.add(key_values(*args, __version__), ms, host)
        spooled += 1
    journal.write(tid + "\\n")
    journal.flush()
    os.fsync(journal.fileno())
    time.sleep(0.005)
deadline = time.time() + 120
while spool.pending() and time.time() < deadline:
    db._away = None
    spool.deliver(db)
    time.sleep(0.2)
print(spooled, len(spool.pending()), flush=True)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--keys", type=int, default=50)
    ap.add_argument("--server-kills", type=int, default=20)
    ap.add_argument("--host-kills", type=int, default=20)
    ap.add_argument("--out", default=None, help="also write the table as Markdown")
    args = ap.parse_args(argv)
    from scripts.throwaway_postgres import PostgresServer
    from costlearn.core.problem import Problem
    from costlearn.serve.fleet import decide
    from costlearn.serve.tuning_db_server import ServerTuningDB
    server = PostgresServer.make()
    url = server.url(server.new_database())
    ServerTuningDB(url).entries()                                # the tables
    work = Path(tempfile.mkdtemp(prefix="costlearn-chaos-"))
    script, stop = work / "host.py", work / "stop"
    script.write_text(HOST)

    def start(h):
        return subprocess.Popen([sys.executable, str(script), url, f"h{h}", str(args.keys), str(work), str(stop)],
                                stdout=subprocess.PIPE, text=True)
    procs = {h: start(h) for h in range(args.hosts)}
    rng = random.Random(11)
    events = ["server"] * args.server_kills + ["host"] * args.host_kills
    rng.shuffle(events)
    try:
        time.sleep(2.0)
        for ev in events:
            if ev == "server":
                server.stop("immediate")
                time.sleep(rng.uniform(0.2, 0.8))
                server.start()
            else:
                h = rng.randrange(args.hosts)
                os.kill(procs[h].pid, signal.SIGKILL)
                procs[h].wait()
                procs[h] = start(h)
            time.sleep(rng.uniform(0.3, 1.0))
        stop.write_text("")
        ends = [p.communicate(timeout=300)[0].split() for p in procs.values()]
        spooled = sum(int(e[-2]) for e in ends)            # by the last run of each host (a killed run says nothing)
        left = [int(e[-1]) for e in ends]
        acknowledged = set()
        for h in range(args.hosts):
            acknowledged |= set((work / f"h{h}.journal").read_text().split())
        rows = server.execute("SELECT tuning_id, config_id, count(*) FROM measurements GROUP BY tuning_id, config_id",
                              url.split("@/", 1)[1].split("?")[0])
        stored = {}
        for tid, _, count in rows:
            stored[tid] = stored.get(tid, 0) + count
        lost = sorted(acknowledged - set(stored))
        doubled = sum(1 for c in stored.values() if c != 2)
        launched, keys = 0, 0
        readers = [ServerTuningDB(url) for _ in range(args.hosts)]
        for key, ms in readers[0].measurements().items():
            want = decide(ms, None).config_id
            got = {r.get(Problem(*key[:6]), *key[6:9]).config.config_id for r in readers}
            keys += 1
            launched = max(launched, len(got | {want}))
    finally:
        stop.write_text("")
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        server.remove()
    lines = [f"# {args.hosts} hosts, {args.server_kills} server kills, {args.host_kills} host kills "
             f"(kill -9), {os.cpu_count()} CPUs", "", "| measure | value |", "|---|---|",
             f"| tunings acknowledged | {len(acknowledged)} |", f"| lost | {len(lost)} |",
             f"| doubled | {doubled} |", f"| spooled while the server was away (hosts' last runs) | {spooled} |",
             f"| left in a spool at the end | {sum(left)} |",
             f"| keys measured | {keys} |", f"| configs launched per key (every host), most | {launched} |"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        from studies import docs_from_reports
        docs_from_reports.write_report(text, args.out, "fleet-chaos")
    return 0 if not lost and not doubled and launched == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
