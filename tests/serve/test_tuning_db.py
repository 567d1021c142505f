"""Tuning database: keyed lookups, measured entries win, stale configs miss,
corrupt files are set aside, many processes write at once."""
from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import warnings

import pytest

from costlearn import __version__
from costlearn.core.device import preset
from costlearn.families.gemm import TEMPLATE_HASH
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.core.problem import Problem
from costlearn.serve.tuning_db import SCHEMA, TuningDB, TuningDBError, TuningEntry
from costlearn.serve.fleet import Measurement

from conftest import ROOT, needs_opencl
import threading

CFG = TileConfig(16, 32, 8, 2, 4)
P = Problem(64, 64, 64)


def entry(chosen_by="predicted", t=10.0, config=CFG, m=64, n=64, k=64, **kw):
    base = dict(problem=Problem(m, n, k), family="gemm", device="dev", template_hash=TEMPLATE_HASH,
                costlearn_version=__version__, config=config, chosen_by=chosen_by, time_us=t,
                times_us={config.config_id: t},
                source="test")
    base.update(kw)
    return TuningEntry(**base)


def get(db, problem=P, device="dev", template=TEMPLATE_HASH, **kw):
    return db.get(problem, "gemm", device, template, **kw)


def test_round_trip_and_key(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    assert get(db) is None
    assert db.put(entry())
    got = get(db)
    assert got.config == CFG and got.chosen_by == "predicted" and got.time_us == 10.0
    assert got.times_us == {CFG.config_id: 10.0} and got.problem == P and got.family == "gemm"
    assert get(db, Problem(64, 64, 65)) is None                                  # shape
    assert get(db, device="other") is None                                       # device
    assert get(db, template="0" * 12) is None                                    # template
    assert get(db, costlearn_version="0.0.0") is None


def test_a_path_that_does_not_exist_is_an_error_for_reading_and_nothing_is_created(tmp_path):
    """Regression: `costlearn tuning-db --path /no/such/dir/x.sqlite` created
    the folder and an empty database and exited 0."""
    from costlearn.cli import main
    missing = tmp_path / "no" / "such" / "x.sqlite"
    with pytest.raises(FileNotFoundError, match="no tuning database"):
        TuningDB(missing)
    assert main(["tuning-db", "--tuning-db", str(missing)]) == 2
    assert not (tmp_path / "no").exists()
    assert TuningDB(missing, create=True).entries() == [] and missing.is_file()


def test_tuning_db_with_a_path_alone_lists_that_database(tmp_path, capsys):
    """Regression (a fresh-clone user): `costlearn tuning-db FILE`, as the README's `costlearn tuning-db` line
    suggests, failed with "invalid choice: 'FILE' (choose from 'list', 'init', 'copy')"."""
    from costlearn.cli import main
    path = tmp_path / "t.sqlite"
    TuningDB(path, create=True).put(entry())
    assert main(["tuning-db", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: 1 entry, 0 measurements")
    assert main(["tuning-db", "lsit", str(path)]) == 2                 # a wrong action beside a path is named
    assert "tuning-db action 'lsit'; allowed: list, init, copy" in capsys.readouterr().err
    assert main(["tuning-db", "postgresql://u:secret@db.example/t"]) == 2     # a password in a URL, refused
    assert "carries a password" in capsys.readouterr().err

def _schema_1_file(path):
    with sqlite3.connect(path) as c:
        c.execute("""CREATE TABLE tuned (m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
            dtype TEXT NOT NULL, device TEXT NOT NULL, template_hash TEXT NOT NULL, costlearn_version TEXT NOT NULL,
            config_id TEXT NOT NULL, how TEXT NOT NULL, time_us REAL NOT NULL, times_json TEXT NOT NULL,
            source TEXT NOT NULL, updated TEXT NOT NULL,
            PRIMARY KEY (m, n, k, dtype, device, template_hash, costlearn_version))""")
        c.execute("INSERT INTO tuned VALUES (64, 64, 64, 'float32', 'dev', ?, ?, ?, 'measured', 7.5, '{}', 'old', "
                  "'2026-01-01T00:00:00')", (TEMPLATE_HASH, __version__, CFG.config_id))
        c.execute("PRAGMA user_version = 1")


def test_a_schema_1_file_is_upgraded_to_gemm_nn_epilogue_none_entries(tmp_path):
    path = tmp_path / "old.sqlite"
    _schema_1_file(path)
    got = get(TuningDB(path))
    assert got.chosen_by == "measured" and got.time_us == 7.5 and got.problem.layout == "NN"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA
    assert got.problem.epilogue == "none"


def test_measured_entry_is_never_replaced_by_a_predicted_one(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    db.put(entry("predicted", 10.0))
    assert db.put(entry("measured", 12.0))                  # measured replaces predicted
    assert not db.put(entry("predicted", 5.0))              # ... but not the other way round
    got = get(db)
    assert got.chosen_by == "measured" and got.time_us == 12.0


def test_a_config_no_longer_feasible_is_a_miss_never_launched(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    big = TileConfig(128, 128, 32, 8, 8)                    # block tile far larger than 2x2x2
    db.put(entry(config=big, m=2, n=2, k=2))
    assert get(db, Problem(2, 2, 2)) is not None
    assert get(db, Problem(2, 2, 2), spec=preset("h200")) is None


def test_bad_entries_are_refused(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    with pytest.raises(ValueError, match="chosen_by='guessed'"):
        db.put(entry(chosen_by="guessed"))
    with pytest.raises(ValueError, match="time_us=nan"):
        db.put(entry(t=float("nan")))
    with pytest.raises(ValueError, match="M=0"):
        db.put(entry(m=0))
    with pytest.raises(TypeError, match="path=5"):
        TuningDB(5)


@pytest.mark.parametrize("damage", ["overwritten_pages", "truncated"])
def test_corrupt_file_is_reported_and_set_aside_not_used(tmp_path, damage):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path, create=True)
    for i in range(300):
        db.put(entry(m=i + 1, source="x" * 200))
    db.close()
    raw = path.read_bytes()
    path.write_bytes(raw[:4096] + b"garbage!" * 1024 + raw[4096 + 8192:] if damage == "overwritten_pages"
                     else raw[: len(raw) // 2])
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"t.sqlite{suffix}").unlink(missing_ok=True)
    with pytest.raises(TuningDBError, match="corrupt.*read-only"):
        TuningDB(path, read_only=True).entries()                 # listing reports, changes nothing
    assert path.read_bytes()[:16] == b"SQLite format 3\x00" and not list(tmp_path.glob("*.corrupt-*"))
    with pytest.warns(RuntimeWarning, match="corrupt.*set aside"):
        db2 = TuningDB(path)
        get(db2, Problem(5, 64, 64))
    assert len(db2.set_aside) == 1 and db2.set_aside[0].exists()
    assert get(db2, Problem(5, 64, 64)) is None       # fresh database
    assert db2.put(entry()) and get(db2) is not None


@pytest.mark.parametrize("how", ["open", "cli_list", "cli_predict"])
def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path, how, device_name):
    """Regression: `--tuning-db notes.csv` (or `tuning-db --path notes.csv`)
    renamed the user's CSV aside and put a database in its place."""
    from costlearn.cli import main
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n1,2\n")
    if how == "open":
        with pytest.raises(TuningDBError, match="not an SQLite database.*leaves it alone"):
            TuningDB(path, create=True)
    elif how == "cli_list":
        assert main(["tuning-db", "--tuning-db", str(path)]) == 2
    else:
        assert main(["predict", "8", "8", "8", "--model", device_name, "--tuning-db", str(path)]) == 2
    assert path.read_text() == "a,b\n1,2\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.csv"]


def test_listing_changes_no_file_even_a_schema_1_one(tmp_path):
    path = tmp_path / "old.sqlite"
    _schema_1_file(path)
    before = path.read_bytes()
    got = TuningDB(path, read_only=True).entries()
    assert len(got) == 1 and got[0].problem.layout == "NN" and got[0].family == "gemm"
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite"]
    with pytest.raises(OSError, match="read-only"):
        TuningDB(path, read_only=True).put(entry())


def test_a_read_only_database_found_corrupt_in_a_query_is_left_where_it_is(tmp_path):
    """Regression: a read-only TuningDB that met corruption in a query (not at
    open) renamed the user's file aside."""
    import sqlite3
    path = tmp_path / "old.sqlite"
    _schema_1_file(path)
    with sqlite3.connect(path) as c:
        for i in range(300):
            c.execute("INSERT INTO tuned SELECT m + ?, n, k, dtype, device, template_hash, costlearn_version, "
                      "config_id, how, time_us, times_json, ?, updated FROM tuned LIMIT 1", (i + 1, "x" * 300))
    c.close()
    ro = TuningDB(path, read_only=True)
    assert len(ro.entries()) == 301
    raw = bytearray(path.read_bytes())
    raw[4096 * 3:4096 * 6] = b"garbage!" * (3 * 512)
    raw[24:28] = (int.from_bytes(raw[24:28], "big") + 1).to_bytes(4, "big")   # change counter: caches are stale
    path.write_bytes(bytes(raw))
    with pytest.raises(TuningDBError, match="corrupt.*read-only"):
        ro.entries()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite"] and path.read_bytes() == bytes(raw)


def test_the_schema_1_upgrade_tolerates_another_process_finishing_it_first(tmp_path, monkeypatch):
    """Regression: the column check ran before the transaction, so a file
    another process upgraded in between was refused."""
    path = tmp_path / "old.sqlite"
    _schema_1_file(path)
    from costlearn.serve.tuning_file import TuningFile
    real = TuningFile._upgrade_from

    def racing(self, conn, version, found):
        monkeypatch.setattr(TuningFile, "_upgrade_from", real)
        TuningDB(path).close()                                    # the other process upgrades first
        real(self, conn, version, found)
    monkeypatch.setattr(TuningFile, "_upgrade_from", racing)
    assert get(TuningDB(path)).time_us == 7.5


_WRITER = """
import sys
from costlearn.serve.tuning_db import SCHEMA, TuningDB, TuningDBError, TuningEntry
from costlearn.families.gemm import GemmConfig, TEMPLATE_HASH
from costlearn.core.problem import Problem
from costlearn import __version__
db = TuningDB(sys.argv[1])
w = int(sys.argv[2])
for i in range(40):
    db.put(TuningEntry(Problem(w * 1000 + i + 1, 8, 8), "gemm", "dev", TEMPLATE_HASH, __version__,
                       GemmConfig(16, 32, 8, 2, 4), "predicted", 1.0 + i, {}, "w"))
    db.get(Problem(w * 1000 + 1, 8, 8), "gemm", "dev", TEMPLATE_HASH)
"""


def test_many_processes_write_at_once(tmp_path):
    path = tmp_path / "t.sqlite"
    TuningDB(path, create=True).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = TuningDB(path).entries()
    assert len(got) == 160
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_predict_best_records_and_reuses(model_dir, device_name, tmp_path):
    from costlearn.serve.predict import Predictor, predict_best
    spec = Predictor(model_dir).spec
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    p = predict_best(300, 200, 100, device=device_name, tuning_db=db)
    assert p.chosen_by == "predicted" and not p.from_tuning_db
    hit = get(db, Problem(300, 200, 100), device=spec.slug)
    assert hit.config == p.config and hit.chosen_by == "predicted"
    # A measured entry (here written by hand) wins over the model from then on.
    other = p.top_k[2][0]
    db.put(entry("measured", 7.0, config=other, m=300, n=200, k=100, device=spec.slug))
    q = predict_best(300, 200, 100, device=device_name, tuning_db=db)
    assert q.config == other and q.chosen_by == "measured" and q.from_tuning_db and q.time_us == 7.0
    assert q.tuning_db_source == "test"          # who measured it (a new user's report: it was not said)


def test_tuners_of_predictors_that_clear_cache_dropped_are_freed(model_dir, device_name, tmp_path):
    """tuning._TUNERS kept every Predictor that ever used a tuning database: 61 clear_cache() + predict
    loops held 61 tuners (RSS 111 -> 158 MiB)."""
    import gc
    import weakref
    from costlearn.serve import tuning
    from costlearn.serve.predict import clear_cache, predict_best
    from costlearn.serve.predictor import Predictor
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    dropped = []
    for i in range(6):
        clear_cache()
        p = predict_best(300 + i, 200, 100, device=device_name, tuning_db=db)
        assert p.chosen_by == "predicted"
        dropped += [weakref.ref(pred) for pred in tuning._TUNERS.keys()]
    clear_cache()
    gc.collect()
    assert [r for r in dropped if r() is not None and isinstance(r(), Predictor)] == []


def test_an_answer_measured_under_another_model_says_which(model_dir, device_name, tmp_path, capsys):
    """Regression (found by a new user): `measure_top_k` answered from an entry another model's top k had
    measured, without saying so."""
    from costlearn.cli import main
    from costlearn.serve.predictor import Predictor
    pred = Predictor(model_dir)
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    src = "models/other/gemm/float32 model 0123456789ab, measured top 3"
    db.put(entry("measured", 7.0, config=pred.predict_best(300, 200, 100).top_k[1][0], m=300, n=200, k=100,
                 device=pred.spec.slug, source=src))
    assert main(["predict", "300", "200", "100", "--model", device_name,
                 "--tuning-db", str(tmp_path / "t.sqlite")]) == 0
    out = capsys.readouterr().out
    assert f"an earlier answer measured then: {src}" in out


def test_measuring_with_the_default_backend_keeps_the_running_on_reason(model_dir, device_name, dataset_dir,
                                                                         tmp_path, monkeypatch):
    """Regression: predict_best(..., measure_top_k=k) without backend= dropped
    "trained on X, running on Y": running_on was set only from a backend
    passed in, and the default backend was made later."""
    import dataclasses
    import json

    import costlearn.serve.tuning
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.dataset import load, valid_rows
    from costlearn.core.device import DeviceSpec
    from costlearn.serve.predict import Predictor, predict_best
    pred = Predictor(model_dir)
    rows = valid_rows(load(dataset_dir)[0])
    rows = rows[rows["epilogue"] == "none"]             # the problems asked below have no epilogue
    spec = DeviceSpec.from_dict(json.loads((dataset_dir / "device.json").read_text()))
    other = dataclasses.replace(spec, name="Another Device 9000")
    recorded = rows.groupby(["m", "n", "k"])["config_id"].apply(set)
    shape = next(s for s, ids in recorded.items()
                 if {c.config_id for c, _ in pred.predict_best(*s).top_k[:2]} <= ids)
    monkeypatch.setattr(costlearn.serve.tuning, "_BACKEND", {"gemm": ReplayBackend(rows, spec=other)})
    p = predict_best(*shape, device=device_name, measure_top_k=2, tuning_db=tmp_path / "t.sqlite")
    assert p.chosen_by == "measured"
    assert any(f"trained on {spec.name}, running on Another Device 9000" in r for r in p.ood_reasons)


@needs_opencl
@pytest.mark.opencl
def test_measure_top_k_measures_on_the_device_and_records(model_dir, tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.serve.predictor import Predictor
    pred = Predictor(model_dir)
    backend = get_backend("opencl")
    if backend.spec.slug != pred.spec.slug:
        pytest.skip("the committed model is for another OpenCL device")
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    from costlearn.serve.tuning import Tuner
    tuner = Tuner(pred, db, backend)
    p = tuner.tune(pred.problem(48, 64, 96), measure_top_k=3)
    top3 = [c.config_id for c, _ in pred.predict_best(48, 64, 96).top_k[:3]]
    assert p.chosen_by == "measured" and not p.from_tuning_db
    assert 1 <= len(p.measured_us) <= 3 and {cid for cid, _ in p.measured_us} <= set(top3)
    assert p.config.config_id == p.measured_us[0][0] and p.time_us == p.measured_us[0][1] > 0
    again = tuner.tune(pred.problem(48, 64, 96), measure_top_k=3)
    assert again.from_tuning_db and again.config == p.config and again.time_us == p.time_us


def _stood_in_tuner(tmp_path):
    """A tuner of a triton_mm model with a vendor model whose measuring is stood in for (the configs it was asked to
    time are recorded; the first asked is the fastest)."""
    from costlearn.model import artifact_layout
    from costlearn.serve.predictor import Predictor
    from costlearn.serve.tuning import Tuner
    from inductor_fixture import DEVICE, build_models
    pred = Predictor(artifact_layout.model_folder(build_models(tmp_path), DEVICE, "triton_mm", "float16"))
    backend = type("Backend", (), {"spec": pred.spec, "provenance": lambda self: {}})()
    tuner = Tuner(pred, TuningDB(tmp_path / "t.sqlite", create=True), backend=backend)
    asked = []
    tuner._measure = lambda q, configs: (asked.extend(configs), [
        Measurement(c.config_id, 0.99 + i, 1.0 + i, 1.01 + i, 5, "host", "0" * 12, rse=0.001)
        for i, c in enumerate(configs)])[1]
    return pred, tuner, asked


@pytest.mark.parametrize("estimate", [(0.5, 0.4, 0.6), (0.9, 0.7, 1.2)])
def test_measure_top_k_measures_the_top_k_tiles_and_the_vendor_sure_or_not(tmp_path, estimate):
    """Measuring only the best tile and the vendor where the answer is sure lost 0.8-2.7 % on the A100's
    logs left out (top 3 tiles and the vendor 0.2-0.8 %): sure or not, the top k tile configs are timed."""
    pred, tuner, asked = _stood_in_tuner(tmp_path)
    problem = pred.problem(512, 512, 512, "NN")
    p = pred.predict(problem, 5)
    vendor = pred.configs[pred.vendor_index]
    tiles = [c for c, _ in p.top_k if c != vendor]
    p = p._replace(config=tiles[0], top_k=tuple((c, 1.0) for c in tiles), chosen_by="predicted", ood=False,
                   ood_reasons=(), tile_vendor_estimate=estimate)
    pred.predict = lambda *a, **kw: p
    got = tuner.tune(problem, measure_top_k=3)
    assert asked == tiles[:3] + [vendor] and got.chosen_by == "measured" and got.config == tiles[0]


def test_measuring_one_config_where_the_vendor_is_the_answer_times_the_best_tile_too(tmp_path):
    """Regression: with top_k=1 and measure_top_k=1 a vendor answer's ranking held the vendor alone, so only the
    vendor was timed (and what was timed depended on top_k)."""
    pred, tuner, asked = _stood_in_tuner(tmp_path)
    vendor = pred.configs[pred.vendor_index]
    for m in (8, 64, 512, 4096):                    # the first problem where the model keeps the vendor
        problem = pred.problem(m, 4096, 4096, "NN")
        if pred.predict(problem, 1).config == vendor:
            break
    else:
        problem = pred.problem(512, 512, 512, "NN")
        answer = pred.predict(problem, 5)
        pred.predict = lambda q, k, running_on=None: answer._replace(
            config=vendor, top_k=((vendor, 1.0),) + tuple(x for x in answer.top_k if x[0] != vendor)[:k - 1],
            chosen_by="vendor_floor")
    tuner.tune(problem, top_k=1, measure_top_k=1)
    assert len(asked) == 2 and asked[-1] == vendor and asked[0] != vendor


def test_a_folder_or_unwritable_path_is_an_error_not_corruption(tmp_path):
    """Regression: an OperationalError (cannot open) must not rename the path aside."""
    folder = tmp_path / "db"
    folder.mkdir()
    with pytest.raises(OSError, match="cannot use the tuning database"):
        TuningDB(folder, create=True)
    assert folder.is_dir() and not list(tmp_path.glob("db.corrupt-*"))


def _entry(m=64, **kw):
    base = dict(problem=Problem(m, 64, 64), family="gemm", device="dev", template_hash=TEMPLATE_HASH,
                costlearn_version="0.1.0", config=TileConfig(16, 32, 8, 2, 4), chosen_by="predicted", time_us=10.0)
    base.update(kw)
    return TuningEntry(**base)


def _get(db, m=64):
    return db.get(Problem(m, 64, 64), "gemm", "dev", TEMPLATE_HASH, costlearn_version="0.1.0")


def test_bad_entry_does_not_set_a_healthy_database_aside(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    db.put(_entry())
    for bad in (dict(device=None), dict(source=None), dict(config="m16"), dict(times_us=[1, 2]),
                dict(family="conv"), dict(problem=(64, 64, 64))):
        with pytest.raises((TypeError, ValueError)):
            db.put(_entry(**bad))
    assert not db.set_aside and _get(db)


def test_damaged_rows_are_misses_not_answers(tmp_path):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path, create=True)
    db.put(_entry(m=1))
    db.put(_entry(m=2))
    with sqlite3.connect(path) as c:
        c.execute("UPDATE tuned SET time_us = -5 WHERE m = 1")
        c.execute("UPDATE tuned SET times_json = '[1, 2]' WHERE m = 2")
    for m in (1, 2):
        with pytest.warns(RuntimeWarning, match="damaged or not costlearn's"):
            assert _get(db, m) is None


def test_newer_schema_or_foreign_database_is_left_alone(tmp_path):
    # each connection closed here: one left to the garbage collector checkpoints the WAL into the file whenever
    # a collection runs, which may be while the file is compared below
    newer = tmp_path / "newer.sqlite"
    TuningDB(newer, create=True).close()
    with contextlib.closing(sqlite3.connect(newer)) as c:
        c.execute("PRAGMA user_version = 99")
    foreign = tmp_path / "app.sqlite"
    with contextlib.closing(sqlite3.connect(foreign)) as c, c:
        c.execute("CREATE TABLE users (id INTEGER)")
    for path, says in ((newer, "newer than"), (foreign, "not a costlearn tuning database")):
        before = path.read_bytes()
        with pytest.raises(TuningDBError, match=says):
            TuningDB(path)
        assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


@pytest.mark.parametrize("extra", [
    "CREATE TRIGGER fake AFTER INSERT ON tuned BEGIN UPDATE tuned SET how = 'measured', time_us = 0.001, "
    "config_id = 'hostile' WHERE rowid = new.rowid; END",
    "CREATE VIEW v AS SELECT * FROM tuned",
    "CREATE INDEX by_time ON tuned (time_us)",
    "ALTER TABLE tuned ADD COLUMN note TEXT",
])
def test_a_valid_database_carrying_a_trigger_or_other_foreign_schema_is_refused_and_left_alone(tmp_path, extra):
    """A trigger in a valid file passed the open checks and rewrote every recorded prediction into a
    'measured' entry of its own."""
    path = tmp_path / "t.sqlite"
    db = TuningDB(path, create=True)
    db.put(entry())
    db.close()
    with contextlib.closing(sqlite3.connect(path)) as c, c:
        c.execute(extra)
    before = path.read_bytes()
    for kw in (dict(create=True), dict(read_only=True)):
        with pytest.raises(TuningDBError, match="only costlearn's own schema|claims tuning-database schema"):
            TuningDB(path, **kw)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


def test_a_table_left_without_its_schema_version_by_a_kill_is_taken_as_costlearn_s_own(tmp_path):
    """Creation ran CREATE TABLE and PRAGMA user_version as two commits: a process killed between them left a
    file every later open refused as "not a costlearn tuning database"."""
    from costlearn.serve.tuning_db import CREATE_TABLE
    path = tmp_path / "t.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as c, c:
        c.execute(CREATE_TABLE)                                  # user_version still 0
    assert TuningDB(path, read_only=True).entries() == []
    db = TuningDB(path, create=True)
    assert db.put(entry())
    db.close()
    with contextlib.closing(sqlite3.connect(path)) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA
    assert get(TuningDB(path)).config == CFG
    other = tmp_path / "other.sqlite"                       # a table of that name but not ours stays refused
    with contextlib.closing(sqlite3.connect(other)) as c, c:
        c.execute("CREATE TABLE tuned (m INTEGER)")
    with pytest.raises(TuningDBError, match="not a costlearn tuning database"):
        TuningDB(other, create=True)


def test_after_a_set_aside_every_thread_writes_to_the_fresh_file(tmp_path):
    """A thread's old connection kept writing into the set-aside copy."""
    path = tmp_path / "t.sqlite"
    db = TuningDB(path, create=True)
    db.put(_entry(m=1))                                 # this thread's connection is open
    done = threading.Event()

    def other():
        db._set_aside("test", None)                     # what a corruption error in another thread does
        done.set()

    with pytest.warns(RuntimeWarning):
        threading.Thread(target=other).start()
        done.wait(10)
    assert db.put(_entry(m=888))
    assert _get(db, 888) is not None
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT COUNT(*) FROM tuned WHERE m = 888").fetchone()[0] == 1


def _schema_2_file(path):
    """A tuning database as schema 2 wrote it (no epilogue in the key)."""
    import sqlite3
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE tuned (m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, "
                  "dtype TEXT NOT NULL, layout TEXT NOT NULL, family TEXT NOT NULL, device TEXT NOT NULL, "
                  "template_hash TEXT NOT NULL, "
                  "costlearn_version TEXT NOT NULL, config_id TEXT NOT NULL, how TEXT NOT NULL, time_us REAL NOT NULL, "
                  "times_json TEXT NOT NULL, source TEXT NOT NULL, updated TEXT NOT NULL, PRIMARY KEY (m, n, k, "
                  "dtype, layout, family, device, template_hash, costlearn_version))")
        c.execute("INSERT INTO tuned VALUES (8, 8, 8, 'float32', 'NN', 'gemm', 'dev', ?, ?, ?, 'measured', 7.5, "
                  "'{}', 's', '2026-01-01T00:00:00+00:00')", (TEMPLATE_HASH, __version__, CFG.config_id))
        c.execute("PRAGMA user_version = 2")
    c.close()


def test_a_schema_2_file_reads_its_entries_as_epilogue_none_and_upgrades_on_write(tmp_path):
    """Entries written before epilogues were measured without one: read-only
    they list as ``none``; opened for writing the file gains the column and
    an epilogue entry of the same shape is kept apart."""
    path = tmp_path / "v2.sqlite"
    _schema_2_file(path)
    ro = TuningDB(path, read_only=True)
    assert [e.problem.epilogue for e in ro.entries()] == ["none"]
    assert ro.get(Problem(8, 8, 8), "gemm", "dev", TEMPLATE_HASH).time_us == 7.5
    assert ro.get(Problem(8, 8, 8, epilogue="bias"), "gemm", "dev", TEMPLATE_HASH) is None
    db = TuningDB(path)
    assert db.get(Problem(8, 8, 8), "gemm", "dev", TEMPLATE_HASH).time_us == 7.5
    db.put(TuningEntry(Problem(8, 8, 8, epilogue="bias_relu"), "gemm", "dev", TEMPLATE_HASH, __version__, CFG,
                       "measured", 9.0, {}, "s"))
    assert db.get(Problem(8, 8, 8, epilogue="bias_relu"), "gemm", "dev", TEMPLATE_HASH).time_us == 9.0
    assert db.get(Problem(8, 8, 8), "gemm", "dev", TEMPLATE_HASH).time_us == 7.5
    assert sorted(e.problem.epilogue for e in db.entries()) == ["bias_relu", "none"]


def test_an_empty_file_opened_read_only_is_no_database_yet_not_no_such_table(tmp_path):
    """`costlearn tuning-db list EMPTY` (and `copy EMPTY --to ...`) said "cannot use the tuning database ...: no
    such table: tuned"; a writer takes an empty file as a new database, a reader now says it is empty."""
    path = tmp_path / "t.sqlite"
    path.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="is an empty file .*nothing recorded there yet"):
        TuningDB(path, read_only=True)
    assert path.read_bytes() == b""
    db = TuningDB(path)                                         # a writer: a new database in the empty file
    db.put(entry())
    assert len(TuningDB(path, read_only=True).entries()) == 1


def test_a_replayed_fleets_entries_carry_the_template_of_the_kernel_its_recording_timed(tmp_path):
    """Regression: a tuner keyed its entries by the family's own kernel template whatever its backend timed, so the
    measurements of a replayed Inductor log (Inductor's kernel) became rows of costlearn's template, and training
    refused the folder holding both ("rows come from 2 kernel templates")."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.dataset import load
    from costlearn.families import get_family
    from costlearn.interop import import_file
    from costlearn.model import artifact_layout
    from costlearn.serve.predictor import Predictor
    from costlearn.serve.tuning import Tuner
    from inductor_fixture import DEVICE, build_models, write_log
    pred = Predictor(artifact_layout.model_folder(build_models(tmp_path), DEVICE, "triton_mm", "float16"))
    write_log(tmp_path / "stream.txt", [(640, 768, 512)], ["NN"])
    import_file("inductor", tmp_path / "stream.txt", device=DEVICE, data_root=tmp_path / "stream")
    backend = ReplayBackend(tmp_path / "stream" / DEVICE)
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    got = Tuner(pred, db, backend).tune(pred.problem(640, 768, 512, "NN"), measure_top_k=2)
    assert got.chosen_by == "measured"
    fam = get_family("triton_mm")
    (entry,) = db.entries()
    assert entry.template_hash == fam.imported_template_hash != fam.template_hash
    assert set(load(tmp_path / "stream" / DEVICE)[0]["template_hash"]) == {entry.template_hash}
