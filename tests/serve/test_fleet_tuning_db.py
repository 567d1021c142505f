"""What a fleet shares (costlearn.serve.fleet, costlearn.serve.spool): the rule that decides a key's answer from
every host's measurements, measurements kept per tuning and host, leases, and the spool of measurements taken while
the database was away. Every store test runs on an SQLite file and on the throwaway PostgreSQL server."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from costlearn import __version__
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
from costlearn.serve.fleet import NOISE_FLOOR, Measurement, decide
from costlearn.serve.spool import Spool
from costlearn.serve.tuning_db import TuningDB, key_values

A, B, C = (GemmConfig(16, 32, 8, 2, 4).config_id, GemmConfig(32, 32, 8, 4, 4).config_id,
           GemmConfig(64, 64, 16, 4, 4).config_id)
P = Problem(64, 64, 64)
KEY = (P, "gemm", "dev", TEMPLATE_HASH)


def tuning(host: str, tid: str, times: dict, spread: float = 0.01, rse: float = 0.002) -> list:
    """One tuning's measurements: each config's p50 as given, p20/p80 ``spread`` either side, 10 samples whose median
    has relative standard error ``rse`` (a 95 % interval of about 2.3 ``rse`` either side)."""
    return [Measurement(c, t * (1 - spread), t, t * (1 + spread), 10, host, tid, {"sm_clock_mhz": 1410.0},
                        {"costlearn": __version__}, rse=rse) for c, t in times.items()]


@pytest.fixture(params=["sqlite", "server"])
def store(request, tmp_path):
    """An empty tuning database: an SQLite file, or a fresh database on the throwaway server."""
    if request.param == "sqlite":
        return TuningDB(tmp_path / "t.sqlite", create=True)
    from costlearn.serve.tuning_db_server import ServerTuningDB
    return ServerTuningDB(request.getfixturevalue("pg_url"))


# -- the rule ------------------------------------------------------------------------------------------------------

def test_the_fastest_wins_when_its_interval_overlaps_no_other():
    v = decide(tuning("h", "t1", {A: 10.0, B: 12.0, C: 15.0}))
    assert v.config_id == A and v.tied == () and v.times_us == {A: 10.0, B: 12.0, C: 15.0}


def test_configs_within_the_noise_are_a_tie_decided_by_the_config_id_not_the_times():
    first = decide(tuning("h", "t1", {A: 10.05, B: 10.0}))       # B faster by 0.5 %, the medians' intervals overlap
    second = decide(tuning("h", "t2", {A: 10.0, B: 10.05}))      # the noise reorders them
    assert first.config_id == second.config_id == min(A, B)
    assert set(first.tied) == {max(A, B)}


def test_a_wide_spread_of_samples_is_no_tie_when_the_medians_are_known_well():
    """Regression: ties were decided by the samples' p20-p80 overlapping, so on PoCL a config up to 18 % slower by
    the pooled medians was chosen as "tied"; a tie is the medians' 95 % intervals overlapping (the protocol's)."""
    v = decide(tuning("h", "t1", {A: 10.0, B: 11.0}, spread=0.2, rse=0.005))
    assert v.config_id == min(A, B, key=lambda c: {A: 10.0, B: 11.0}[c]) and v.tied == ()
    unknown = decide(tuning("h", "t1", {A: 10.0, B: 11.0}, rse=float("inf")))      # too few samples to judge
    assert unknown.config_id == min(A, B) and unknown.tied


def test_a_tie_with_the_vendor_goes_to_the_vendor():
    v = decide(tuning("h", "t1", {A: 10.0, "vendor": 10.04}), vendor_id="vendor")
    assert v.config_id == "vendor" and v.tied == (A,)
    assert decide(tuning("h", "t1", {A: 10.0, "vendor": 11.0}), vendor_id="vendor").config_id == A


def test_the_noise_floor_ties_configs_measured_without_spread():
    exact = tuning("h", "t1", {A: 10.0, B: 10.0 * (1 + NOISE_FLOOR / 2)}, spread=0.0, rse=0.0)
    assert decide(exact).tied != ()
    apart = tuning("h", "t1", {A: 10.0, B: 10.0 * (1 + 3 * NOISE_FLOOR)}, spread=0.0, rse=0.0)
    assert decide(apart).tied == ()


def test_the_answer_is_the_same_in_every_order_on_every_host():
    rng = random.Random(3)
    ms = [m for h in range(4) for m in tuning(f"h{h}", f"t{h}", {A: rng.uniform(9, 11), B: rng.uniform(9, 11),
                                                                  C: rng.uniform(9, 11)})]
    verdicts = set()
    for _ in range(20):
        rng.shuffle(ms)
        verdicts.add(repr(decide(ms)))
    assert len(verdicts) == 1


def test_no_measurements_is_an_error():
    with pytest.raises(ValueError, match="no measurements"):
        decide([])


# -- stores ---------------------------------------------------------------------------------------------------------

def test_every_host_s_measurements_decide_one_answer_and_a_tuning_recorded_twice_adds_nothing(store):
    entry, verdict = store.record(*KEY, tuning("h1", "aaaaaaaa01", {A: 10.0, B: 14.0}), source="s")
    assert entry.config.config_id == A and entry.chosen_by == "measured" and verdict.hosts == ("h1",)
    store.record(*KEY, tuning("h1", "aaaaaaaa01", {A: 10.0, B: 14.0}), source="s")       # delivered again
    entry, verdict = store.record(*KEY, tuning("h2", "aaaaaaaa02", {A: 20.0, B: 12.0}), source="s")
    assert verdict.hosts == ("h1", "h2") and verdict.times_us == {A: 15.0, B: 13.0}
    got = store.get(*KEY)
    assert got.config.config_id == B and got.time_us == 13.0 and got.times_us == {A: 15.0, B: 13.0}
    measured = store.measurements()
    assert [len(v) for v in measured.values()] == [4]
    m = next(iter(measured.values()))[0]
    assert m.clocks == {"sm_clock_mhz": 1410.0} and m.env == {"costlearn": __version__} and m.measured


def test_a_key_s_verdict_read_back_is_the_one_its_tunings_were_told(store):
    assert store.verdict(*KEY) is None                                  # nothing measured
    _, told = store.record(*KEY, tuning("h1", "aaaaaaaa01", {A: 10.0, B: 10.01, C: 15.0}), source="s")
    assert told.tied == (max(A, B),)                                     # the test means a tie
    assert store.verdict(*KEY) == told
    _, told = store.record(*KEY, tuning("h2", "aaaaaaaa02", {A: 10.0, B: 14.0}), source="s")
    assert store.verdict(*KEY) == told and store.verdict(P, "gemm", "other-dev", TEMPLATE_HASH) is None


def test_a_prediction_never_replaces_what_the_fleet_measured(store):
    from costlearn.serve.tuning_db import TuningEntry
    store.record(*KEY, tuning("h1", "aaaaaaaa01", {A: 10.0}), source="s")
    predicted = TuningEntry(P, "gemm", "dev", TEMPLATE_HASH, __version__, GemmConfig.from_id(B), "predicted", 1.0,
                            {}, "model")
    assert not store.put(predicted) and store.get(*KEY).config.config_id == A


@pytest.mark.parametrize("bad", [dict(config_id="m1n1"), dict(p20_us=float("nan")), dict(p20_us=30.0),
                                 dict(samples=0), dict(host=""), dict(clocks=[1])])
def test_a_measurement_no_store_may_hold_is_refused_naming_it(store, bad):
    m = tuning("h1", "aaaaaaaa01", {A: 10.0})[0]
    with pytest.raises((TypeError, ValueError)):
        store.record(*KEY, [Measurement(**{**m.__dict__, **bad})], source="s")
    assert store.measurements() == {}


def test_hostile_measurement_rows_decide_nothing(store, tmp_path, request):
    store.record(*KEY, tuning("h1", "aaaaaaaa01", {A: 10.0, B: 14.0}), source="s")
    sql = "UPDATE measurements SET p50_us = -1 WHERE config_id = '%s'" % A
    if isinstance(store, TuningDB):
        import sqlite3
        with sqlite3.connect(store.path) as c:
            c.execute(sql)
    else:
        server = request.getfixturevalue("pg_server")
        server.execute(sql, store.path.split("@/", 1)[1].split("?")[0])
    entry, verdict = store.record(*KEY, tuning("h2", "aaaaaaaa02", {B: 14.0}), source="s")
    assert entry.config.config_id == B and A not in verdict.times_us


def test_a_lease_is_held_by_one_holder_until_freed_or_expired(store):
    import time
    assert store.take_lease(*KEY, "host-a", seconds=60)
    assert not store.take_lease(*KEY, "host-b", seconds=60)
    assert store.take_lease(*KEY, "host-a", seconds=60)              # its own: renewed
    store.free_lease(*KEY, "host-b")                                  # not its to free
    assert not store.take_lease(*KEY, "host-b", seconds=60)
    store.free_lease(*KEY, "host-a")
    assert store.take_lease(*KEY, "host-b", seconds=0.05)
    time.sleep(0.2)                                                   # a host that died holding it
    assert store.take_lease(*KEY, "host-c", seconds=60)
    other = Problem(128, 64, 64)
    assert store.take_lease(other, *KEY[1:], "host-a", seconds=60)    # leases are per key


_HOST = """
import random, sys
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
from costlearn.serve.fleet import Measurement
from costlearn.serve.tuning_db_server import open_store
target, host, keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = open_store(target, create=True)
ids = [GemmConfig(16, 32, 8, 2, 4).config_id, GemmConfig(32, 32, 8, 4, 4).config_id]
rng = random.Random(host)
for i in range(keys):
    tid = f"{abs(hash(host)) % 10**8:08d}{i:04d}"
    ms = [Measurement(c, t * 0.99, t, t * 1.01, 5, host, tid) for c in ids for t in [rng.uniform(9, 11)]]
    db.record(Problem(64 + i, 64, 64), "gemm", "dev", TEMPLATE_HASH, ms, source=host)
"""


@pytest.mark.parametrize("kind", ["sqlite", "server"])
def test_four_hosts_at_once_leave_every_key_the_answer_of_all_their_measurements(kind, tmp_path, request):
    """Concurrency across processes: each key's entry is decided from every host's measurements, none lost or
    doubled, whatever order the hosts' transactions ran in."""
    target = str(tmp_path / "t.sqlite") if kind == "sqlite" else request.getfixturevalue("pg_url")
    script = tmp_path / "host.py"
    script.write_text(_HOST)
    procs = [subprocess.Popen([sys.executable, str(script), target, f"host{h}", "15"]) for h in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 4
    from costlearn.serve.tuning_db_server import open_store
    db = open_store(target)
    measured = db.measurements()
    assert len(measured) == 15 and all(len(ms) == 8 for ms in measured.values())
    for key, ms in measured.items():
        entry = db.get(Problem(*key[:6]), *key[6:9])
        verdict = decide(ms, None)
        assert entry.config.config_id == verdict.config_id and entry.times_us == verdict.times_us


# -- the spool -------------------------------------------------------------------------------------------------------

class _Away:
    """A store that cannot be reached."""
    path = "away"

    def record(self, *a, **kw):
        raise OSError("server away")


def test_a_spooled_tuning_is_delivered_once_even_when_delivered_twice(store, tmp_path):
    spool = Spool("t", folder=tmp_path / "spool")
    ms = tuning("h1", "bbbbbbbb01", {A: 10.0, B: 12.0})
    path = spool.add(key_values(*KEY, __version__), ms, "s")
    saved = path.read_bytes()
    assert spool.deliver(_Away()) == 0 and spool.pending() == [path]      # still away: kept
    assert spool.deliver(store) == 1 and spool.pending() == []
    path.write_bytes(saved)                          # as if killed between the record and the removal
    spool._maybe_pending = True
    assert spool.deliver(store) == 1
    assert [len(v) for v in store.measurements().values()] == [2]         # exactly once in effect
    assert store.get(*KEY).config.config_id == A


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"format": "other"}', b"\x00" * 10,
                                     json.dumps({"format": "costlearn-tuning-spool", "version": 1, "key": [1] * 10,
                                                 "source": "s", "measurements": []}).encode()])
def test_a_damaged_or_hand_made_spool_file_is_kept_aside_and_the_rest_delivered(tmp_path, content):
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    spool = Spool("t", folder=tmp_path / "spool")
    good = spool.add(key_values(*KEY, __version__), tuning("h1", "cccccccc01", {A: 10.0}), "s")
    bad = tmp_path / "spool" / "dddddddd01.json"
    bad.write_bytes(content)
    with pytest.warns(RuntimeWarning, match="cannot be delivered"):
        assert spool.deliver(db) == 1
    assert not good.exists() and not bad.exists()
    assert [p.read_bytes() for p in (tmp_path / "spool").glob("dddddddd01.json.bad-*")] == [content]


def test_measuring_while_the_database_is_away_spools_and_the_next_call_delivers(tmp_path, monkeypatch):
    """Tuner: measurements taken while the store refuses are spooled (said in the answer) and delivered by the
    first call that reaches the store again; nothing measured twice, nothing lost."""
    from costlearn.serve.tuning import Tuner
    pred, db = _model(tmp_path)
    backend = type("Backend", (), {"spec": pred.spec, "provenance": lambda self: {}})()
    tuner = Tuner(pred, db, backend)
    tuner.spool = Spool("t", folder=tmp_path / "spool")
    tuner._measure = lambda q, configs: tuning("h1", "eeeeeeee" + str(q.m), {c.config_id: 10.0 + i
                                                                           for i, c in enumerate(configs)})
    real = db.record
    monkeypatch.setattr(db, "record", _Away().record)
    with pytest.warns(RuntimeWarning, match="spooled"):
        p = tuner.tune(pred.problem(48, 64, 96), measure_top_k=2)
    assert p.chosen_by == "measured" and "spooled" in p.tuning_db_note and len(tuner.spool.pending()) == 1
    monkeypatch.setattr(db, "record", real)
    again = tuner.tune(pred.problem(48, 64, 96), measure_top_k=2)          # delivers, then answers from it
    assert tuner.spool.pending() == [] and again.from_tuning_db and again.chosen_by == "measured"
    got = db.get(pred.problem(48, 64, 96), "gemm", pred.spec.slug, pred.artifact.family.template_hash)
    assert got.chosen_by == "measured" and got.config == p.config


def test_another_host_holding_the_lease_means_answering_from_the_model_without_measuring(tmp_path):
    from costlearn.serve.tuning import Tuner
    pred, db = _model(tmp_path)
    tuner = Tuner(pred, db, type("Backend", (), {"spec": pred.spec, "provenance": lambda self: {}})())
    tuner._measure = lambda q, configs: pytest.fail("measured under another host's lease")
    problem = pred.problem(48, 64, 96)
    assert db.take_lease(problem, "gemm", pred.spec.slug, pred.artifact.family.template_hash, "other", seconds=60)
    p = tuner.tune(problem, measure_top_k=2)
    assert p.chosen_by != "measured" and "another host is measuring" in p.tuning_db_note


def _model(tmp_path):
    from costlearn.serve.predictor import Predictor
    from conftest import committed_model
    return Predictor(committed_model()), TuningDB(tmp_path / "t.sqlite", create=True)


# -- the SQLite file's holes ----------------------------------------------------------------------------------------

def test_a_store_whose_file_was_replaced_writes_to_the_new_file_and_spares_its_log(tmp_path):
    """Regression: a process kept writing into a file set aside, deleted or renamed over (10 of 10 puts said True,
    the live database held none), and closing that stale connection deleted ``<path>-wal``, the new file's log."""
    import os
    import sqlite3
    from costlearn.serve.tuning_db import TuningEntry
    path = tmp_path / "t.sqlite"
    db = TuningDB(path, create=True)
    cfg = GemmConfig(16, 32, 8, 2, 4)

    def entry(m):
        return TuningEntry(Problem(m, 64, 64), "gemm", "dev", TEMPLATE_HASH, __version__, cfg, "measured", 1.0, {},
                           "s")
    assert db.put(entry(1))
    other = TuningDB(tmp_path / "other.sqlite", create=True)
    other.put(entry(2))
    other.close()
    os.replace(tmp_path / "other.sqlite", path)              # another database renamed over it
    keeper = sqlite3.connect(path, isolation_level=None)     # the new file's own writer, its rows in the WAL
    keeper.execute("PRAGMA journal_mode = WAL")
    keeper.execute("PRAGMA wal_autocheckpoint = 0")
    keeper.execute("INSERT INTO tuned SELECT 3, n, k, dtype, layout, epilogue, family, device, template_hash, "
                   "costlearn_version, config_id, how, time_us, times_json, source, updated FROM tuned WHERE m = 2")
    with pytest.warns(RuntimeWarning, match="no longer the file"):
        assert db.put(entry(4))
    fresh = TuningDB(path, read_only=True)
    assert sorted(e.problem.m for e in fresh.entries()) == [2, 3, 4]
    keeper.close()


def test_a_tuning_database_that_may_only_be_read_answers_and_lists(tmp_path):
    """Regression: on a read-only file predict_best(..., tuning_db=P) raised OSError instead of answering, and
    `costlearn tuning-db` could not list it (its WAL's -shm could not be made in a read-only folder)."""
    import os
    import pwd
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "t.sqlite"
    db = TuningDB(path, create=True)
    db.record(*KEY, tuning("h1", "ffffffff01", {A: 10.0}), source="s")
    db.close()
    folder.chmod(0o555)
    path.chmod(0o444)
    run_as = []
    if os.geteuid() == 0:                                   # root reads and writes anything: ask another user
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root with no user 'postgres' to read as")
        run_as = ["runuser", "-u", "postgres", "--"]
        for parent in [tmp_path, *tmp_path.parents]:
            parent.chmod(parent.stat().st_mode | 0o005)
        can_run = subprocess.run([*run_as, sys.executable, "-c", "import costlearn"], capture_output=True, text=True,
                                 timeout=120)
        if can_run.returncode != 0:                         # e.g. the interpreter lies under root's private home
            pytest.skip(f"user 'postgres' cannot run this interpreter: {can_run.stderr.strip()[-200:]}")
    script = ("import warnings, sys\n"
              "from costlearn.serve.tuning import open_tuning_db\n"
              "from costlearn.core.problem import Problem\n"
              "from costlearn.families.gemm import TEMPLATE_HASH\n"
              "warnings.simplefilter('ignore')\n"
              "db = open_tuning_db(sys.argv[1])\n"
              "print(db.read_only, db.get(Problem(64, 64, 64), 'gemm', 'dev', TEMPLATE_HASH).time_us)\n")
    env = {**os.environ, "HOME": str(tmp_path), "COSTLEARN_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([*run_as, sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stdout.split() == ["True", "10.0"], out.stderr
    listing = subprocess.run([*run_as, sys.executable, "-m", "costlearn", "tuning-db", "--tuning-db", str(path)],
                             capture_output=True, text=True, env=env, timeout=120)
    assert listing.returncode == 0 and "1 entry" in listing.stdout and "measured on 1 host" in listing.stdout, \
        listing.stderr
    folder.chmod(0o755)


def test_a_schema_3_file_is_upgraded_with_its_entries_and_gains_measurements(tmp_path):
    import sqlite3
    from costlearn.serve.tuning_db import CREATE_TABLE
    from costlearn.serve.tuning_file import COLUMNS
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as c:
        c.execute(CREATE_TABLE)
        c.execute("PRAGMA user_version = 3")
        c.execute(f"INSERT INTO tuned VALUES ({', '.join('?' * len(COLUMNS[3]))})",
                  (64, 64, 64, "float32", "NN", "none", "gemm", "dev", TEMPLATE_HASH, __version__, A, "measured", 7.5,
                   "{}", "old", "2026-01-01"))
    assert TuningDB(path, read_only=True).measurements() == {}       # read as it is
    db = TuningDB(path)
    assert db.get(*KEY).time_us == 7.5
    db.record(Problem(8, 8, 8), *KEY[1:], tuning("h1", "abababab01", {A: 3.0}), source="s")
    assert len(db.measurements()) == 1


# -- the command line ------------------------------------------------------------------------------------------------

def test_the_listing_names_each_entry_s_hosts_and_spread(tmp_path, capsys):
    from costlearn.cli import main
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    db.record(*KEY, tuning("h1", "abcdabcd01", {A: 10.0}), source="s")
    db.record(*KEY, tuning("h2", "abcdabcd02", {A: 11.0}), source="s")
    assert main(["tuning-db", "--tuning-db", str(db.path), "--measurements"]) == 0
    out = capsys.readouterr().out
    assert "2 measurements by 2 hosts" in out and "measured on 2 hosts (h1, h2)" in out and "spread 10.0 %" in out
    assert f"{A} on h2: p20/p50/p80" in out


def test_a_password_on_the_command_line_is_refused_without_echoing_it(capsys):
    from costlearn.cli import main
    with pytest.raises(SystemExit):
        main(["tuning-db", "--tuning-db", "postgresql://u:hunter2@db.example/x"])
    err = capsys.readouterr().err
    assert "password" in err and "~/.pgpass" in err
    with pytest.raises(SystemExit):
        main(["predict", "64", "64", "64", "--tuning-db", "postgresql://u@db.example/x?password=hunter2"])


def test_get_many_answers_each_problem_as_get_does_in_one_query(store):
    from costlearn.core.device import preset
    from costlearn.serve.tuning_db import TuningEntry
    huge = GemmConfig(256, 256, 64, 16, 16)
    for m, cfg in ((64, GemmConfig.from_id(A)), (8, huge)):
        store.put(TuningEntry(Problem(m, 64, 64), "gemm", "dev", TEMPLATE_HASH, __version__, cfg, "measured", 2.0,
                              {}, "s"))
    problems = [Problem(m, 64, 64) for m in (64, 65, 8)] + [Problem(64, 64, 64, epilogue="bias")]
    for spec in (None, preset("a100")):
        want = [store.get(p, "gemm", "dev", TEMPLATE_HASH, spec=spec) for p in problems]
        assert store.get_many(problems, "gemm", "dev", TEMPLATE_HASH, spec=spec) == want
    assert [e is not None for e in want] == [True, False, False, False]
    assert store.get_many([], "gemm", "dev", TEMPLATE_HASH) == []


# -- Triton's remote cache -------------------------------------------------------------------------------------------

def test_triton_s_remote_cache_round_trips_files_and_a_store_away_is_a_miss(store):
    from costlearn.interop.triton_cache import TuningDBCacheBackend
    backend = TuningDBCacheBackend("KEY1", tuning_db=store)
    assert backend.get(["mm.autotune.json"]) == {}
    backend.put("mm.autotune.json", b'{"configs_timings": []}')
    backend.put("mm.cubin", bytes(range(256)) * 4)
    backend.put("mm.cubin", b"\x00newer")                                    # replaced
    assert backend.get(["mm.autotune.json", "mm.cubin", "absent"]) == {"mm.autotune.json": b'{"configs_timings": []}',
                                                                         "mm.cubin": b"\x00newer"}
    assert TuningDBCacheBackend("KEY2", tuning_db=store).get(["mm.cubin"]) == {}   # another kernel or target
    with pytest.warns(RuntimeWarning, match="not shared"):
        backend.put("x" * 2000, b"1")
    away = TuningDBCacheBackend("KEY1", tuning_db=store)
    away._db = type("Away", (), {"get_blobs": _Away.record, "put_blob": _Away.record})()
    with pytest.warns(RuntimeWarning, match="not read"):
        assert away.get(["mm.cubin"]) == {}


def test_triton_s_own_remote_cache_manager_runs_on_the_tuning_database(tmp_path, monkeypatch):
    """With Triton installed: TRITON_REMOTE_CACHE_BACKEND names the class, and Triton's RemoteCacheManager stores
    an autotune result and a group through it that a second manager (another host) reads back."""
    triton_cache = pytest.importorskip("triton.runtime.cache", reason="Triton is not installed")
    monkeypatch.setenv("COSTLEARN_TUNING_DB", str(tmp_path / "fleet.sqlite"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("TRITON_REMOTE_CACHE_BACKEND", "costlearn.interop.triton_cache:TuningDBCacheBackend")
    first = triton_cache.RemoteCacheManager("k" * 20)
    first.put('{"key": [1], "configs_timings": []}', "mm.autotune.json", binary=False)
    first.put_group("mm.json", {"mm.cubin": "path"})
    first.put(b"\x7fELF", "mm.cubin")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other-host"))
    second = triton_cache.RemoteCacheManager("k" * 20)
    with open(second.get_file("mm.autotune.json")) as fh:
        assert fh.read() == '{"key": [1], "configs_timings": []}'
    assert list(second.get_group("mm.json")) == ["mm.cubin"]


_ASKER = """
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
from costlearn import predict_best
from costlearn.serve.tuning import open_tuning_db
target, ready, go = sys.argv[1], sys.argv[2], sys.argv[3]
open_tuning_db(target)
predict_best(8, 8, 8)                                   # the model loaded before the race
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.001)
p = predict_best(192, 160, 224, measure_top_k=2, tuning_db=target)
print(json.dumps([p.chosen_by, p.from_tuning_db, p.tuning_db_note]))
"""


@pytest.mark.opencl
@pytest.mark.parametrize("kind", ["sqlite", "server"])
def test_two_hosts_asking_one_unmeasured_problem_at_once_measure_it_once(kind, tmp_path, request):
    """Leases, on the local OpenCL device: two host processes ask the same unmeasured problem at the same moment;
    one measures, the other answers from the model (saying so) or reads the measurement: one tuning is stored."""
    import os
    import time
    from conftest import HAS_OPENCL
    if not HAS_OPENCL:
        pytest.skip("no OpenCL device (pip install 'pyopencl[pocl]')")
    from costlearn.serve.tuning_db_server import open_store
    target = str(tmp_path / "fleet.sqlite") if kind == "sqlite" else request.getfixturevalue("pg_url")
    script, go = tmp_path / "asker.py", tmp_path / "go"
    script.write_text(_ASKER)
    procs = [subprocess.Popen([sys.executable, str(script), target, str(tmp_path / f"ready{h}"), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "COSTLEARN_HOST": f"host{h}"}) for h in range(2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready{h}").exists() for h in range(2)) and time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            break                                             # one ended before the race: say why below
        time.sleep(0.01)
    go.write_text("")
    ends = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-3000:] for _, err in ends]
    answers = [json.loads(out.strip().splitlines()[-1]) for out, _ in ends]
    measured_here = [a for a in answers if a[0] == "measured" and not a[1]]
    assert len(measured_here) == 1, answers
    other = next(a for a in answers if a is not measured_here[0])
    assert (other[0] == "measured" and other[1]) or "another host is measuring" in other[2], answers
    tunings = {m.tuning_id for ms in open_store(target).measurements().values() for m in ms}
    assert len(tunings) == 1


_RECORDER = """
import os, sys
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
from costlearn.serve.fleet import Measurement
from costlearn.serve.tuning_db_server import open_store
db = open_store(sys.argv[1], create=True)
ids = [GemmConfig(16, 32, 8, 2, 4).config_id, GemmConfig(32, 32, 8, 4, 4).config_id]
for i in range(100000):
    tid = os.urandom(6).hex()
    ms = [Measurement(c, 0.9 * t, t, 1.1 * t, 5, "h", tid, rse=0.01) for c, t in zip(ids, (10 + i % 3, 11 - i % 3))]
    db.record(Problem(64 + i % 7, 64, 64), "gemm", "dev", TEMPLATE_HASH, ms, source="h")
    if i == 30:
        print("recording", flush=True)
"""


@pytest.mark.parametrize("kind", ["sqlite", "server"])
def test_a_host_killed_mid_record_leaves_whole_tunings_and_answers_they_decide(kind, tmp_path, request):
    """kill -9 while recording: a tuning's measurements and its key's answer are one transaction."""
    import os
    import signal
    import time
    from costlearn.serve.tuning_db_server import open_store
    target = str(tmp_path / "t.sqlite") if kind == "sqlite" else request.getfixturevalue("pg_url")
    script = tmp_path / "recorder.py"
    script.write_text(_RECORDER)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, str(script), target], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "recording"
        time.sleep(random.uniform(0.05, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    db = open_store(target)
    measured = db.measurements()
    per_tuning: dict = {}
    for ms in measured.values():
        for m in ms:
            per_tuning[m.tuning_id] = per_tuning.get(m.tuning_id, 0) + 1
    assert len(per_tuning) > 90 and set(per_tuning.values()) == {2}
    for key, ms in measured.items():
        assert db.get(Problem(*key[:6]), *key[6:9]).config.config_id == decide(ms, None).config_id


# -- found by attacking it (regressions) -------------------------------------------------------------------------------

def _sql(store, request, sql, params=()):
    """Run ``sql`` on the store's database behind its back (as a hostile writer would)."""
    if isinstance(store, TuningDB):
        import sqlite3
        with sqlite3.connect(store.path) as c:
            c.execute(sql, params)
    else:
        database = store.path.split("@/", 1)[1].split("?")[0]        # the fixture's URL holds no password
        request.getfixturevalue("pg_server").execute(sql.replace("?", "%s"), database, params or None)


@pytest.mark.parametrize("times_json", ["[" * 100000 + "]" * 100000, '{"a": 1' + "0" * 400 + "}", "x" * (2 << 20)])
def test_deep_huge_or_overflowing_json_in_an_entry_is_a_miss_not_a_traceback(store, request, times_json):
    """Regression: a times_json nested 100,000 deep, or a time of 401 digits, raised RecursionError or
    OverflowError out of get, get_many, entries and predict_best."""
    from costlearn.serve.tuning_db import TuningEntry
    store.put(TuningEntry(P, "gemm", "dev", TEMPLATE_HASH, __version__, GemmConfig.from_id(A), "measured", 2.0, {},
                          "s"))
    _sql(store, request, "UPDATE tuned SET times_json = ?", (times_json,))
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert store.get(*KEY) is None
        assert store.get_many([P], *KEY[1:]) == [None] and store.entries() == []


def test_a_time_stored_as_bytes_is_a_miss(tmp_path, request):
    """Regression: a time_us stored as the bytes b'10' (SQLite keeps any type in any column) decoded as 10.0 and
    was returned for launch."""
    from costlearn.serve.tuning_db import TuningEntry
    store = TuningDB(tmp_path / "t.sqlite", create=True)
    store.put(TuningEntry(P, "gemm", "dev", TEMPLATE_HASH, __version__, GemmConfig.from_id(A), "measured", 2.0, {},
                          "s"))
    _sql(store, request, "UPDATE tuned SET time_us = x'3130'")
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert store.get(*KEY) is None


def test_a_hostile_measurement_row_never_stops_its_key(store, request):
    """Regression: one measurements row with clocks nested 100,000 deep made every later record of its key, and
    the listing, raise RecursionError."""
    store.record(*KEY, tuning("h1", "aaaaaaaa01", {A: 10.0, B: 12.0}), source="s")
    _sql(store, request, "UPDATE measurements SET clocks_json = ? WHERE config_id = ?",
         ("[" * 100000 + "]" * 100000, A))
    entry, verdict = store.record(*KEY, tuning("h2", "aaaaaaaa02", {A: 10.0, B: 12.0}), source="s")
    assert sum(map(len, store.measurements().values())) == 3 and verdict.hosts == ("h1", "h2")


@pytest.mark.parametrize("expires", ["'never'", "1e300"])
def test_a_lease_that_claims_to_last_for_ever_is_free(store, request, expires):
    """Regression: a lease row expiring 'never' (text) or in 10^300 s held its key for good: no host measured it."""
    assert store.take_lease(*KEY, "dead-host", seconds=60)
    _sql(store, request, f"UPDATE leases SET expires_s = {expires}" if isinstance(store, TuningDB) or
         expires != "'never'" else "UPDATE leases SET expires_s = 'Infinity'")
    assert store.take_lease(*KEY, "live-host", seconds=60)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 0, -5, 1e9, True, "60"])
def test_a_lease_of_no_finite_length_is_refused(store, seconds):
    """Regression: take_lease(seconds=nan) stored NaN on the server, which blocked every other host for good."""
    with pytest.raises(ValueError, match="lease lasts"):
        store.take_lease(*KEY, "h", seconds=seconds)


@pytest.mark.parametrize("host", ["a\x00b", "line\nforged", "x" * 2000])
def test_a_name_with_control_characters_is_refused_before_the_store(store, host):
    """Regression: a host name holding NUL raised psycopg.DataError out of record."""
    with pytest.raises(ValueError, match="control characters|at most 1024"):
        store.record(*KEY, tuning(host, "aaaaaaaa01", {A: 10.0}), source="s")


def test_get_many_of_thousands_of_problems_answers(store):
    """Regression: 10,900 problems in one get_many exceeded PostgreSQL's 65,535 parameters and marked the server
    away for 10 s."""
    problems = [Problem(m, 64, 64) for m in range(1, 2602)]
    assert store.get_many(problems, *KEY[1:]) == [None] * len(problems)


@pytest.mark.parametrize("make", ["fifo", "deep", "huge-number", "nul-host"])
def test_a_hostile_spool_file_is_set_aside_without_hanging_or_a_traceback(tmp_path, make):
    """Regression: a FIFO named like a spooled tuning hung every predict_best; deep JSON, a 401-digit time or a host
    with a NUL raised out of the delivery, and the file stayed first in line."""
    import os
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    spool = Spool("t", folder=tmp_path / "spool")
    good = spool.add(key_values(*KEY, __version__), tuning("h1", "cccccccc01", {A: 10.0}), "s")
    bad = tmp_path / "spool" / "00000000aa.json"
    doc = json.loads(good.read_text())
    if make == "fifo":
        os.mkfifo(bad)
    elif make == "deep":
        bad.write_text("[" * 100000 + "]" * 100000)
    else:
        m = doc["measurements"][0]
        if make == "huge-number":
            m["p80_us"] = 10 ** 400
        else:
            m["host"] = "a\x00b"
        m["tuning_id"] = "00000000aa"
        bad.write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="cannot be delivered"):
        assert spool.deliver(db) == 1
    assert not good.exists() and not os.path.lexists(bad) and len(list((tmp_path / "spool").glob("*.bad-*"))) == 1


def test_a_temporary_file_a_killed_spooler_left_is_removed_after_an_hour(tmp_path):
    """Regression: kill -9 inside Spool.add left .<id>.json.<pid>.<random>.tmp files that nothing removed."""
    import os
    import time
    spool = Spool("t", folder=tmp_path / "spool")
    path = spool.add(key_values(*KEY, __version__), tuning("h1", "cccccccc01", {A: 10.0}), "s")
    old, new = tmp_path / "spool" / ".x.json.1.ab.tmp", tmp_path / "spool" / ".y.json.1.cd.tmp"
    old.write_text("{")
    new.write_text("{")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert spool.pending() == [path] and not old.exists() and new.exists()


def test_a_fifo_at_the_database_path_is_refused_not_waited_on(tmp_path):
    """Regression: `costlearn tuning-db` and predict_best(tuning_db=P) hung on a FIFO at P."""
    import os
    os.mkfifo(tmp_path / "t.sqlite")
    with pytest.raises(OSError, match="not a regular file"):
        TuningDB(tmp_path / "t.sqlite", create=True)


def test_the_listing_escapes_control_characters(tmp_path, capsys):
    """Regression: a newline in a stored name forged a line of `costlearn tuning-db`'s listing."""
    import sqlite3
    from costlearn.cli import main
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    db.record(*KEY, tuning("h1", "abcdabcd01", {A: 10.0}), source="s")
    with sqlite3.connect(db.path) as c:
        c.execute("UPDATE measurements SET env_json = ?", (json.dumps({"driver": "1\n  FORGED 1x1x1 measured"}),))
    assert main(["tuning-db", "--tuning-db", str(db.path), "--measurements"]) == 0
    out = capsys.readouterr().out
    assert "\n  FORGED" not in out and "\\n  FORGED" in out


_CREATOR = """
import sys, time
from costlearn.serve.tuning_db import TuningDB
go = float(sys.argv[2])
while time.time() < go:
    pass
TuningDB(sys.argv[1], create=True)
print("ok")
"""


def test_processes_creating_one_new_file_at_once_all_open_it(tmp_path):
    """Regression: a process read the file's version before another created it and its tables after, and refused
    costlearn's own new file as "not a costlearn tuning database"; another got "database is locked" switching it to
    write-ahead logging while a third created it (about 1 in 30 opens of six processes at once)."""
    import time
    script = tmp_path / "creator.py"
    script.write_text(_CREATOR)
    for round_ in range(3):
        path = tmp_path / f"t{round_}.sqlite"
        go = repr(time.time() + 3.0)
        procs = [subprocess.Popen([sys.executable, str(script), str(path), go], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(6)]
        ends = [p.communicate(timeout=120) for p in procs]
        assert [out.strip() for out, _ in ends] == ["ok"] * 6, [err[-500:] for _, err in ends]
