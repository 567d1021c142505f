"""Tuning database: keyed lookups, measured entries win, stale configs miss,
corrupt files are set aside, many processes write at once."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import warnings

import pytest

from costlearn import __version__
from costlearn.codegen import TEMPLATE_HASH
from costlearn.device import preset
from costlearn.space import TileConfig
from costlearn.tuning_db import TuningDB, TuningEntry

from conftest import ROOT, needs_opencl

CFG = TileConfig(16, 32, 8, 2, 4)


def entry(how="predicted", t=10.0, config=CFG, m=64, n=64, k=64, **kw):
    base = dict(m=m, n=n, k=k, dtype="float32", device="dev", template_hash=TEMPLATE_HASH,
                costlearn_version=__version__, config=config, how=how, time_us=t, times_us={config.config_id: t},
                source="test")
    base.update(kw)
    return TuningEntry(**base)


def test_round_trip_and_key(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    assert db.get(64, 64, 64, "float32", "dev", TEMPLATE_HASH) is None
    assert db.put(entry())
    got = db.get(64, 64, 64, "float32", "dev", TEMPLATE_HASH)
    assert got.config == CFG and got.how == "predicted" and got.time_us == 10.0
    assert got.times_us == {CFG.config_id: 10.0}
    assert db.get(64, 64, 65, "float32", "dev", TEMPLATE_HASH) is None            # shape
    assert db.get(64, 64, 64, "float32", "other", TEMPLATE_HASH) is None          # device
    assert db.get(64, 64, 64, "float32", "dev", "0" * 12) is None                 # template
    assert db.get(64, 64, 64, "float32", "dev", TEMPLATE_HASH, costlearn_version="0.0.0") is None


def test_measured_entry_is_never_replaced_by_a_predicted_one(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.put(entry("predicted", 10.0))
    assert db.put(entry("measured", 12.0))                  # measured replaces predicted
    assert not db.put(entry("predicted", 5.0))              # ... but not the other way round
    got = db.get(64, 64, 64, "float32", "dev", TEMPLATE_HASH)
    assert got.how == "measured" and got.time_us == 12.0


def test_a_config_no_longer_feasible_is_a_miss_never_launched(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    big = TileConfig(128, 128, 32, 8, 8)                    # block tile far larger than 2x2x2
    db.put(entry(config=big, m=2, n=2, k=2))
    assert db.get(2, 2, 2, "float32", "dev", TEMPLATE_HASH) is not None
    assert db.get(2, 2, 2, "float32", "dev", TEMPLATE_HASH, spec=preset("h200")) is None


def test_bad_entries_are_refused(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    with pytest.raises(ValueError, match="how='guessed'"):
        db.put(entry(how="guessed"))
    with pytest.raises(ValueError, match="time_us=nan"):
        db.put(entry(t=float("nan")))
    with pytest.raises(ValueError, match="M=0"):
        db.put(entry(m=0))
    with pytest.raises(TypeError, match="path=5"):
        TuningDB(5)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_file_is_reported_and_set_aside_not_used(tmp_path, damage):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    for i in range(300):
        db.put(entry(m=i + 1, source="x" * 200))
    db.close()
    raw = path.read_bytes()
    path.write_bytes(b"this is not a database" * 100 if damage == "garbage" else raw[: len(raw) // 2])
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"t.sqlite{suffix}").unlink(missing_ok=True)
    with pytest.warns(RuntimeWarning, match="corrupt.*set aside"):
        db2 = TuningDB(path)
        db2.get(5, 64, 64, "float32", "dev", TEMPLATE_HASH)
    assert len(db2.set_aside) == 1 and db2.set_aside[0].exists()
    assert db2.set_aside[0].read_bytes()[:16] == (b"this is not a database" * 100)[:16] or damage == "truncated"
    assert db2.get(5, 64, 64, "float32", "dev", TEMPLATE_HASH) is None       # fresh database
    assert db2.put(entry()) and db2.get(64, 64, 64, "float32", "dev", TEMPLATE_HASH) is not None


_WRITER = """
import sys
from costlearn.tuning_db import TuningDB, TuningEntry
from costlearn.space import TileConfig
from costlearn.codegen import TEMPLATE_HASH
from costlearn import __version__
db = TuningDB(sys.argv[1])
w = int(sys.argv[2])
for i in range(40):
    db.put(TuningEntry(w * 1000 + i + 1, 8, 8, "float32", "dev", TEMPLATE_HASH, __version__,
                       TileConfig(16, 32, 8, 2, 4), "predicted", 1.0 + i, {}, "w"))
    db.get(w * 1000 + 1, 8, 8, "float32", "dev", TEMPLATE_HASH)
"""


def test_many_processes_write_at_once(tmp_path):
    path = tmp_path / "t.sqlite"
    TuningDB(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = TuningDB(path).entries()
    assert len(got) == 160
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_predict_best_records_and_reuses(model_dir, tmp_path):
    from costlearn.predict import Predictor
    pred = Predictor(model_dir)
    db = TuningDB(tmp_path / "t.sqlite")
    p = pred.predict_best(300, 200, 100, tuning_db=db)
    assert p.chosen_by == "predicted" and not p.from_tuning_db
    hit = db.get(300, 200, 100, "float32", pred.spec.slug, TEMPLATE_HASH)
    assert hit.config == p.config and hit.how == "predicted"
    # A measured entry (here written by hand) wins over the model from then on.
    other = p.top_k[2][0]
    db.put(entry("measured", 7.0, config=other, m=300, n=200, k=100, device=pred.spec.slug))
    q = pred.predict_best(300, 200, 100, tuning_db=db)
    assert q.config == other and q.chosen_by == "measured" and q.from_tuning_db and q.time_us == 7.0


@needs_opencl
@pytest.mark.opencl
def test_measure_top_k_measures_on_the_device_and_records(model_dir, tmp_path):
    from costlearn.backends import get_backend
    from costlearn.predict import Predictor
    pred = Predictor(model_dir)
    backend = get_backend("opencl")
    if backend.spec.slug != pred.spec.slug:
        pytest.skip("the committed model is for another OpenCL device")
    db = TuningDB(tmp_path / "t.sqlite")
    p = pred.predict_best(48, 64, 96, measure_top_k=3, backend=backend, tuning_db=db)
    top3 = [c.config_id for c, _ in pred.predict_best(48, 64, 96).top_k[:3]]
    assert p.chosen_by == "measured" and not p.from_tuning_db
    assert 1 <= len(p.measured_us) <= 3 and {cid for cid, _ in p.measured_us} <= set(top3)
    assert p.config.config_id == p.measured_us[0][0] and p.time_us == p.measured_us[0][1] > 0
    again = pred.predict_best(48, 64, 96, measure_top_k=3, backend=backend, tuning_db=db)
    assert again.from_tuning_db and again.config == p.config and again.time_us == p.time_us


def test_a_folder_or_unwritable_path_is_an_error_not_corruption(tmp_path):
    """Regression: an OperationalError (cannot open) must not rename the path aside."""
    folder = tmp_path / "db"
    folder.mkdir()
    with pytest.raises(OSError, match="cannot use the tuning database"):
        TuningDB(folder)
    assert folder.is_dir() and not list(tmp_path.glob("db.corrupt-*"))
