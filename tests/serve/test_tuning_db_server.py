"""The tuning database on a real PostgreSQL server (the pg_server fixture starts one): the rules of the
SQLite store, hostile rows, a foreign table, a read-only role, and a server that dies."""
from __future__ import annotations

import warnings

import pytest

from costlearn import __version__
from costlearn.core.device import preset
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.serve.tuning_db import TuningDBError, TuningEntry
from costlearn.serve.tuning_db_server import open_store

CFG = TileConfig(16, 32, 8, 2, 4)
P = Problem(64, 64, 64)


def entry(chosen_by="predicted", t=10.0, config=CFG, m=64, **kw):
    base = dict(problem=Problem(m, 64, 64), family="gemm", device="dev", template_hash=TEMPLATE_HASH,
                costlearn_version=__version__, config=config, chosen_by=chosen_by, time_us=t,
                times_us={config.config_id: t}, source="test")
    base.update(kw)
    return TuningEntry(**base)


def _database(url: str) -> str:
    """The database name of a fixture's URL, postgresql://user@/NAME?host=..."""
    return url.split("@/", 1)[1].split("?", 1)[0]


def get(db, problem=P, **kw):
    return db.get(problem, "gemm", "dev", TEMPLATE_HASH, **kw)


def test_round_trip_and_a_measured_entry_is_never_replaced_by_a_predicted_one(pg_url):
    db = open_store(pg_url, create=True)
    assert type(db).__name__ == "ServerTuningDB" and get(db) is None
    assert db.put(entry("measured", 5.0))
    assert not db.put(entry("predicted", 1.0))
    hit = get(db)
    assert (hit.config, hit.chosen_by, hit.time_us) == (CFG, "measured", 5.0)
    assert get(db, costlearn_version="0.0.0") is None         # the version is in the key
    other = open_store(pg_url)                                 # another host of the fleet reads it
    assert get(other).time_us == 5.0 and [e.time_us for e in other.entries()] == [5.0]


def test_a_config_no_longer_feasible_is_a_miss_never_launched(pg_url):
    db = open_store(pg_url)
    huge = TileConfig(256, 256, 64, 16, 16)
    db.put(entry("measured", 3.0, config=huge, m=8, times_us={huge.config_id: 3.0}))
    assert get(db, Problem(8, 64, 64)) is not None
    assert get(db, Problem(8, 64, 64), spec=preset("a100")) is None


@pytest.mark.parametrize("column, value", [("config_id", "not-a-config"), ("time_us", -5.0),
                                           ("times_json", "[1, 2]"), ("times_json", '{"a": "NaN"}')])
def test_hostile_rows_are_misses_and_left_out_of_the_listing(pg_server, pg_url, column, value):
    db = open_store(pg_url)
    db.put(entry("measured", 5.0))
    db.put(entry("measured", 6.0, m=128))
    pg_server.execute(f"UPDATE tuned SET {column} = %s WHERE m = 64", _database(pg_url), (value,))
    with pytest.warns(RuntimeWarning, match="damaged or not costlearn's"):
        assert get(db) is None
    with pytest.warns(RuntimeWarning, match="never launched"):
        assert [e.problem.m for e in db.entries()] == [128]


def test_a_table_tuned_that_is_not_costlearn_s_is_refused(pg_server, pg_url):
    pg_server.execute("CREATE TABLE tuned (m INTEGER, note TEXT)", _database(pg_url))
    db = open_store(pg_url)                                    # nothing asked of the server yet
    with pytest.raises(TuningDBError, match="not costlearn's"):
        get(db)
    with pytest.raises(TuningDBError, match="not costlearn's"):
        db.put(entry("measured", 5.0))


def test_a_read_only_role_reads_and_its_write_is_a_clear_error_that_names_no_password(pg_server, pg_url):
    database = _database(pg_url)
    open_store(pg_url).put(entry("measured", 5.0))
    pg_server.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reader') THEN "
                      "CREATE ROLE reader LOGIN; END IF; END $$")
    pg_server.execute("GRANT SELECT ON tuned TO reader", database)
    url = pg_server.url(database, user="reader", password="s3cret-pw")
    reader = open_store(url, read_only=True)
    assert get(reader).time_us == 5.0 and "s3cret-pw" not in reader.path
    with pytest.raises(OSError, match="read-only"):
        reader.put(entry("measured", 1.0))
    writer_by_mistake = open_store(url)                        # a serving host's role, opened for writing
    with pytest.raises(OSError) as err:
        writer_by_mistake.put(entry("measured", 1.0, m=128))
    assert "permission denied" in str(err.value) and "s3cret-pw" not in str(err.value)


def test_a_server_that_dies_is_an_oserror_in_bounded_time_and_what_it_committed_survives(pg_server, pg_url):
    import time
    from costlearn.serve.tuning_db_server import ServerTuningDB
    db = ServerTuningDB(pg_url, timeout_s=2.0)
    db.put(entry("measured", 5.0))
    pg_server.stop("immediate")                                # as in a crash
    try:
        t0 = time.perf_counter()
        with pytest.raises(OSError, match="cannot use the tuning database"):
            db.put(entry("measured", 4.0, m=128))
        first_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        with pytest.raises(OSError, match="not retried"):      # remembered away: no second wait
            get(db)
        assert first_s < 10.0 and time.perf_counter() - t1 < 1.0
    finally:
        pg_server.start()
    assert get(ServerTuningDB(pg_url)).time_us == 5.0
    db._away = None                                            # (as AWAY_S later)
    assert get(db).time_us == 5.0                              # the pool reconnects


def test_predict_best_records_to_the_server_and_answers_from_the_model_while_it_is_down(
        pg_server, pg_url, model_dir, device_name):
    from costlearn.serve.predict import Predictor, predict_best
    slug = Predictor(model_dir).spec.slug
    p = predict_best(300, 200, 100, device=device_name, tuning_db=pg_url)
    hit = open_store(pg_url).get(Problem(300, 200, 100), "gemm", slug, TEMPLATE_HASH)
    assert hit.config == p.config and hit.chosen_by == "predicted"
    pg_server.stop("immediate")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            q = predict_best(301, 200, 100, device=device_name, tuning_db=pg_url)
        assert q.chosen_by == "predicted" and not q.from_tuning_db
        assert any("tuning database" in str(w.message) for w in caught)
    finally:
        pg_server.start()


def test_a_server_restarted_between_calls_is_reconnected_without_an_error(pg_server, pg_url):
    db = open_store(pg_url)
    db.put(entry("measured", 5.0))
    pg_server.stop("immediate")
    pg_server.start()                                          # the connection this thread held is dead
    assert get(db).time_us == 5.0 and db.put(entry("measured", 4.0, m=128))


def test_a_compile_starting_while_the_server_is_away_answers_from_the_model(model_dir, device_name, tmp_path):
    pytest.importorskip("psycopg", reason="the server store needs psycopg 3: pip install 'costlearn[server]'")
    from costlearn.serve.predict import predict_best
    url = f"postgresql://costlearn:pw-not-shown@/db?host={tmp_path}"   # no server on that socket
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = predict_best(302, 200, 100, device=device_name, tuning_db=url)
    assert p.chosen_by == "predicted" and not p.from_tuning_db
    said = [str(w.message) for w in caught if "tuning database" in str(w.message)]
    assert said and not any("pw-not-shown" in m for m in said)


def test_a_client_killed_mid_write_leaves_only_whole_entries(pg_server, pg_url, tmp_path):
    """kill -9 of a host while it writes: each entry is one statement, committed whole or not at all."""
    import os
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "writer.py"
    script.write_text(
        "import sys\n"
        "from costlearn import __version__\n"
        "from costlearn.core.problem import Problem\n"
        "from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig\n"
        "from costlearn.serve.tuning_db import TuningEntry\n"
        "from costlearn.serve.tuning_db_server import open_store\n"
        "db = open_store(sys.argv[1])\n"
        "cfg = GemmConfig(16, 32, 8, 2, 4)\n"
        "for m in range(1, 100000):\n"
        "    db.put(TuningEntry(Problem(m, 64, 64), 'gemm', 'dev', TEMPLATE_HASH, __version__, cfg, 'measured',\n"
        "                       float(m), {cfg.config_id: float(m)}, 'writer'))\n"
        "    if m == 20:\n"
        "        print('writing', flush=True)\n")
    proc = subprocess.Popen([sys.executable, str(script), pg_url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    rows = pg_server.execute("SELECT count(*) FROM tuned", _database(pg_url))[0][0]
    entries = open_store(pg_url).entries()
    assert rows >= 20 and len(entries) == rows
    assert all(e.time_us == e.problem.m and e.chosen_by == "measured" for e in entries)


def _tuning(host, tid, times):
    from costlearn.serve.fleet import Measurement
    return [Measurement(c, t * 0.99, t, t * 1.01, 5, host, tid) for c, t in times.items()]


def test_init_makes_a_writer_role_that_tunes_and_a_reader_role_every_write_of_which_is_refused(pg_server, pg_url):
    from costlearn.serve.tuning_db_server import ServerTuningDB, initialize
    database = _database(pg_url)
    assert any("created role" in line or "exists" in line for line in initialize(pg_url))
    assert initialize(pg_url)                                          # again: idempotent
    for login, group in (("tuner_host", "costlearn_writer"), ("serving_host", "costlearn_reader")):
        pg_server.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{login}') THEN "
                          f"CREATE ROLE {login} LOGIN IN ROLE {group}; END IF; END $$")
    writer = ServerTuningDB(pg_server.url(database, user="tuner_host"))
    writer.record(P, "gemm", "dev", TEMPLATE_HASH, _tuning("h1", "a1b2c3d4e5", {CFG.config_id: 5.0}), source="s")
    assert writer.take_lease(P, "gemm", "dev", TEMPLATE_HASH, "h1", seconds=60) and writer.put(entry("predicted",
                                                                                                      m=128))
    reader = ServerTuningDB(pg_server.url(database, user="serving_host", password="pw-never-shown"))
    assert get(reader).time_us == 5.0 and len(reader.measurements()) == 1
    assert len(list(reader.device_measurements("dev"))) == 1           # the import's cursor: the reader may stream
    refused = 0
    for write in (lambda: reader.put(entry("measured", 1.0, m=256)),
                  lambda: reader.record(Problem(256, 64, 64), "gemm", "dev", TEMPLATE_HASH,
                                        _tuning("h2", "a1b2c3d4e6", {CFG.config_id: 1.0}), source="s"),
                  lambda: reader.take_lease(P, "gemm", "dev", TEMPLATE_HASH, "h2", seconds=60)):
        with pytest.raises(PermissionError, match="may only read") as err:
            write()
        refused += "pw-never-shown" not in str(err.value)
    assert refused == 3 and len(writer.entries()) == 2


_FLAKY_HOST = """
import sys, time
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
from costlearn.serve.fleet import Measurement
from costlearn.serve.spool import Spool
from costlearn.serve.tuning_db import key_values
from costlearn.serve.tuning_db_server import ServerTuningDB
url, host, n, spool_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
db = ServerTuningDB(url, timeout_s=2.0)
spool = Spool(db.path, folder=spool_dir)
ids = [GemmConfig(16, 32, 8, 2, 4).config_id, GemmConfig(32, 32, 8, 4, 4).config_id]
spooled = 0
for i in range(n):
    tid = f"{int(host[1:]):02x}{i:08x}"
    ms = [Measurement(c, 0.99 * (j + 1), j + 1.0, 1.01 * (j + 1), 5, host, tid) for j, c in enumerate(ids)]
    args = (Problem(64 + i, 64, 64), "gemm", "dev", TEMPLATE_HASH)
    spool.deliver(db)
    try:
        db.record(*args, ms, source=host)
    except OSError:
        spool.add(key_values(*args, "0.1.0"), ms, host)
        spooled += 1
    time.sleep(0.01)
    if i == 5:
        print("running", flush=True)
deadline = time.time() + 120
while spool.pending() and time.time() < deadline:
    db._away = None
    spool.deliver(db)
    time.sleep(0.2)
print(spooled, len(spool.pending()), flush=True)
"""


def test_a_server_killed_mid_run_loses_and_doubles_no_measurement(pg_server, pg_url, tmp_path):
    """Two hosts record while the server is killed (pg_ctl stop -m immediate) and restarted, twice: what could not
    be written is spooled and delivered when the server is back; every tuning lands exactly once."""
    import subprocess
    import sys
    import time
    from costlearn.serve.tuning_db_server import open_store
    open_store(pg_url).entries()                                       # the tables exist
    script = tmp_path / "host.py"
    script.write_text(_FLAKY_HOST.replace('"0.1.0"', repr(__version__)))
    hosts = [subprocess.Popen([sys.executable, str(script), pg_url, f"h{h}", "60", str(tmp_path / f"spool{h}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for h in range(2)]
    for proc in hosts:
        assert proc.stdout.readline().strip() == "running"
    for _ in range(2):
        pg_server.stop("immediate")
        time.sleep(0.5)
        pg_server.start()
        time.sleep(0.3)
    outs = [(proc.communicate(timeout=300), proc.returncode) for proc in hosts]
    # a host that ends without its last line (seen once in a fresh clone's full run, under load) shows why
    assert all(len(out.split()) == 2 for (out, _), _ in outs), outs
    spooled, left = zip(*(map(int, out.split()) for (out, _), _ in outs))
    assert sum(spooled) > 0 and left == (0, 0)
    rows = pg_server.execute("SELECT tuning_id, count(*) FROM measurements GROUP BY tuning_id", _database(pg_url))
    assert len(rows) == 120 and all(count == 2 for _, count in rows)
    assert len(open_store(pg_url).entries()) == 60


def test_an_old_sqlite_file_is_copied_into_the_server_once(pg_url, tmp_path, capsys):
    """A host's schema-1 file (winners only) and a schema-4 file (with measurements) go into the fleet's server;
    the copy run twice adds nothing, and the source file is not changed."""
    import hashlib
    from costlearn.cli import main
    from costlearn.serve.tuning_db import TuningDB
    from test_tuning_db import _schema_1_file
    old = tmp_path / "old.sqlite"
    _schema_1_file(old)
    before = hashlib.sha256(old.read_bytes()).hexdigest()
    new = TuningDB(tmp_path / "new.sqlite", create=True)
    new.record(Problem(128, 64, 64), "gemm", "dev", TEMPLATE_HASH, _tuning("h1", "a1b2c3d4e5", {CFG.config_id: 5.0}),
               source="s")
    for _ in range(2):
        assert main(["tuning-db", "copy", str(old), "--to", pg_url]) == 0
        assert main(["tuning-db", "copy", str(new.path), "--to", pg_url]) == 0
    assert hashlib.sha256(old.read_bytes()).hexdigest() == before
    server = open_store(pg_url)
    assert sorted(e.problem.m for e in server.entries()) == sorted(
        [e.problem.m for e in TuningDB(old, read_only=True).entries()] + [128])
    assert [len(v) for v in server.measurements().values()] == [1]
    assert "copied 1 tunings' measurements" in capsys.readouterr().out


def test_tls_through_libpq_s_sslmode_verifies_the_server_and_carries_the_fleet(pg_server, tmp_path):
    """A server on loopback TCP with TLS (a self-signed certificate for localhost): the store connects with
    sslmode=verify-full against that certificate, the connection is encrypted (pg_stat_ssl), and a certificate the
    client does not trust is refused with a clear OSError, not a hang. (pg_server: the session's server, asked for
    its skip where no server can be had.)"""
    import shutil
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make the server's certificate")
    from conftest import import_script
    from costlearn.serve.tuning_db_server import ServerTuningDB
    server = import_script("scripts.throwaway_postgres").PostgresServer.make(tls=True)
    try:
        url = server.tls_url()
        db = ServerTuningDB(url)
        db.record(P, "gemm", "dev", TEMPLATE_HASH, _tuning("h1", "a1b2c3d4e5", {CFG.config_id: 5.0}), source="s")
        assert get(db).time_us == 5.0
        import psycopg
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0]
        other = tmp_path / "other.pem"                          # a certificate of another server
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-keyout", str(tmp_path / "other.key"), "-out", str(other)], check=True,
                       capture_output=True)
        with pytest.raises(OSError, match="cannot use the tuning database"):
            get(ServerTuningDB(url.replace(str(server.root / "cert.pem"), str(other))))
    finally:
        server.remove()


@pytest.mark.parametrize("url", ["postgresql://r:Sec%zzret@/db?host=/tmp/none",
                                 "postgresql://r@/db?host=/tmp/none&bogus=Sec%zzret"])
def test_a_url_libpq_cannot_read_is_a_valueerror_that_repeats_no_password(url):
    """Regression: a bad percent-escape in the password raised psycopg.ProgrammingError quoting the password."""
    pytest.importorskip("psycopg")
    from costlearn.serve.tuning_db_server import ServerTuningDB
    with pytest.raises(ValueError) as err:
        ServerTuningDB(url)
    assert "Sec" not in str(err.value) and "zzret" not in str(err.value)


def test_a_connect_parameter_libpq_refuses_is_an_oserror(pg_server, pg_url):
    """Regression: connect_timeout=x raised a raw psycopg.ProgrammingError out of predict_best's lookup."""
    from costlearn.serve.tuning_db_server import ServerTuningDB
    with pytest.raises(OSError, match="cannot use the tuning database"):
        get(ServerTuningDB(pg_url + "&connect_timeout=x"))


def test_a_trigger_on_the_server_s_tables_is_refused(pg_server, pg_url):
    """Regression: the server store checked column names only; a BEFORE INSERT trigger setting how = 'measured'
    served every recorded prediction as measured (the SQLite store refuses such a file)."""
    database = _database(pg_url)
    open_store(pg_url).entries()                               # the tables
    pg_server.execute("CREATE FUNCTION f() RETURNS trigger AS $$ BEGIN NEW.how := 'measured'; RETURN NEW; END $$ "
                      "LANGUAGE plpgsql", database)
    pg_server.execute("CREATE TRIGGER t BEFORE INSERT ON tuned FOR EACH ROW EXECUTE FUNCTION f()", database)
    with pytest.raises(TuningDBError, match="trigger"):
        open_store(pg_url).put(entry("predicted"))
    pg_server.execute("DROP TRIGGER t ON tuned", database)
    pg_server.execute("ALTER TABLE tuned ALTER COLUMN time_us TYPE TEXT", database)
    with pytest.raises(TuningDBError, match="columns"):
        get(open_store(pg_url))


_MAKER = """
import os, signal, subprocess, sys, time
from scripts.throwaway_postgres import PostgresServer
if sys.argv[1] == "initdb":              # killed while initdb runs: initdb outlives it
    def init(self):
        subprocess.Popen([*self.run_as, str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                          "postgres", "--no-sync"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(self.root, flush=True)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    PostgresServer.init = init
server = PostgresServer.make()
print(server.root, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("when", ["running", "stopped", "initdb"])
def test_a_killed_maker_leaves_no_throwaway_server_running(pg_server, when):
    """Regression: a pytest run killed mid-suite (kill -9) left its throwaway PostgreSQL server running and its
    folder in /tmp for good. The server's watchdog stops it and deletes the folder once its maker is gone: a server
    running, one whose postmaster was stopped (SIGSTOP, a test of a hung server), and one whose initdb was still
    running (it outlives the maker and makes the folder again). (pg_server: the session's server, asked for its
    skip where no server can be had.)"""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    root_dir = Path(__file__).resolve().parents[2]
    maker = subprocess.Popen([sys.executable, "-c", _MAKER, when], cwd=root_dir, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(root_dir)})
    try:
        root = Path(maker.stdout.readline().strip())
        if when != "initdb":
            postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
            if when == "stopped":
                os.kill(postmaster, signal.SIGSTOP)
    finally:
        if maker.poll() is None:
            os.kill(maker.pid, signal.SIGKILL)
        maker.wait()
    for _ in range(900):
        if not root.exists():
            break
        time.sleep(0.1)
    time.sleep(5)                                                   # and it stays gone
    assert not root.exists()
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(root) not in running


def test_a_throwaway_server_keeps_its_dynamic_shared_memory_in_its_folder(pg_server, pg_url):
    """Regression: a throwaway server that was killed (SIGKILL by its watchdog, as after a killed test run) left its
    dynamic shared memory segments in /dev/shm for good, about 1 MB each. They are files of its data folder now,
    deleted with it."""
    import psycopg
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SHOW dynamic_shared_memory_type").fetchone()[0] == "mmap"
    assert any((pg_server.data / "pg_dynshmem").iterdir())
