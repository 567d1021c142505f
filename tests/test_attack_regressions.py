"""Regressions for the defects a hostile review of issue 5 found: each test is
named after what broke."""
from __future__ import annotations

import sqlite3
import threading

import numpy as np
import pytest

from costlearn.families.gemm import TEMPLATE_HASH
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.predict import predict_best
from costlearn.problem import Problem
from costlearn.tuning_db import TuningDB, TuningDBError, TuningEntry

from conftest import ROOT


@pytest.mark.parametrize("kw", [dict(measure_top_k=None), dict(measure_top_k=0.0), dict(measure_top_k=False),
                                dict(measure_top_k=""), dict(backend="opencl"), dict(backend=42)])
def test_result_cache_does_not_let_bad_options_through(device_name, kw):
    predict_best(48, 64, 96, device=device_name)
    with pytest.raises(TypeError):
        predict_best(48, 64, 96, device=device_name, **kw)


def _rewrite_scorer(folder, mutate):
    """Replace the artifact's scorer.npz by a mutated copy and record its
    sha256 in the sidecar (as a training writing another scorer would)."""
    import hashlib
    import json
    with np.load(folder / "scorer.npz") as z:
        arrays = {k: z[k] for k in z.files}
    mutate(arrays)
    np.savez(folder / "scorer.npz", **arrays)
    side = json.loads((folder / "model.json").read_text())
    side["scorer"]["sha256"] = hashlib.sha256((folder / "scorer.npz").read_bytes()).hexdigest()
    (folder / "model.json").write_text(json.dumps(side))


@pytest.mark.parametrize("damage", ["keep_1", "child_out_of_range", "feature_out_of_range", "offsets_short"])
def test_an_inconsistent_scorer_is_refused_not_served(model_dir, tmp_path, damage):
    """What the flat-forest and cascade caches once let through (a loadable
    file with bad values) cannot reach the C ranker: the scorer in the
    artifact is validated when it loads."""
    import shutil
    from costlearn.model.artifact import ArtifactError, load
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)

    def mutate(a):
        if damage == "keep_1":
            a["cascade"] = np.array([[8, 1, 0.0]])
        elif damage == "child_out_of_range":
            nodes = a["forest_nodes"].copy()
            nodes["child"][nodes["flags"] == 1] = 65000
            a["forest_nodes"] = nodes
        elif damage == "feature_out_of_range":
            nodes = a["forest_nodes"].copy()
            nodes["feature"][:] = 200
            a["forest_nodes"] = nodes
        else:
            a["has_offsets"] = np.int64(1)
            a["offsets"] = np.zeros(3)
    _rewrite_scorer(dst, mutate)
    with pytest.raises(ArtifactError):
        load(dst)


def test_a_scorer_of_another_training_is_refused(model_dir, tmp_path):
    import shutil
    from costlearn.model.artifact import ArtifactError, load
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    with (dst / "scorer.npz").open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256"):
        load(dst)


def test_relative_models_dir_is_not_cached_across_chdir(device_name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    predict_best(48, 64, 96, device=device_name, models_dir="models")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()                  # another, empty store of the same relative name
    with pytest.raises(ValueError, match="no model"):
        predict_best(48, 64, 96, device=device_name, models_dir="models")


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
        assert _get(db, m) is None


def test_newer_schema_or_foreign_database_is_left_alone(tmp_path):
    newer = tmp_path / "newer.sqlite"
    TuningDB(newer, create=True).close()
    with sqlite3.connect(newer) as c:
        c.execute("PRAGMA user_version = 99")
    foreign = tmp_path / "app.sqlite"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE users (id INTEGER)")
    for path, says in ((newer, "newer than"), (foreign, "not a costlearn tuning database")):
        before = path.read_bytes()
        with pytest.raises(TuningDBError, match=says):
            TuningDB(path)
        assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


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


@pytest.mark.parametrize("name", ["select-tile", "bad name", "9lives", "class", "int", "../../escape", ""])
def test_dispatch_name_must_be_an_identifier(model_dir, tmp_path, name):
    from costlearn.cli import main
    rc = main(["dispatch", "--m", "1:64", "--n", "64:128", "--k", "64:128", "--samples", "50",
               "--out", str(tmp_path / "d"), "--name", name])
    assert rc == 2 and not (tmp_path / "d").exists()
