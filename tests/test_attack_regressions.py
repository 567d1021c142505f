"""Regressions for the defects a hostile review of issue 5 found: each test is
named after what broke."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

import numpy as np
import pytest

from costlearn.codegen import TEMPLATE_HASH
from costlearn.predict import Predictor, predict_best
from costlearn.space import TileConfig
from costlearn.tuning_db import TuningDB, TuningDBError, TuningEntry

from conftest import ROOT

_PREDICT = ("import sys, json; from costlearn.predict import Predictor; p = Predictor(sys.argv[1]); "
            "print(p.backend); print(json.dumps([p.predict_best(*s).config.config_id "
            "for s in [(1,64,64),(300,200,500),(7,9,11),(48,64,96)]]))")


def _run(model_dir, cache, **env):
    e = dict(os.environ, PYTHONPATH=str(ROOT), COSTLEARN_CACHE=str(cache), **env)
    e.pop("COSTLEARN_NO_C", None)
    return subprocess.run([sys.executable, "-c", _PREDICT, str(model_dir)], env=e, capture_output=True, text=True)


def test_damaged_compiled_library_is_rebuilt_not_loaded(model_dir, tmp_path):
    """A truncated .so in the cache crashed the process (SIGBUS) on load."""
    first = _run(model_dir, tmp_path)
    assert first.returncode == 0, first.stderr
    (so,) = tmp_path.glob("native-*.so")
    so.write_bytes(so.read_bytes()[:4000])
    again = _run(model_dir, tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout and again.stdout.startswith("c")


def test_compiler_that_writes_nothing_is_not_cached(model_dir, tmp_path):
    """CC=true 'succeeded' with an empty file, cached for good."""
    out = _run(model_dir, tmp_path, CC="true")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("c")               # the next compiler (sysconfig CC or cc) built it
    (so,) = tmp_path.glob("native-*.so")
    assert so.stat().st_size > 1000


def test_huge_top_k_does_not_wrap_in_c(model_dir):
    """top_k >= 2**31 wrapped to a negative int32 and picked a wrong config."""
    pred = Predictor(model_dir)
    want = pred.predict_best(300, 200, 500)
    got = pred.predict_best(300, 200, 500, top_k=2**40)
    assert got.config == want.config and len(got.top_k) == int(pred._feasible(300, 200, 500).sum())


@pytest.mark.parametrize("kw", [dict(measure_top_k=None), dict(measure_top_k=0.0), dict(measure_top_k=False),
                                dict(measure_top_k=""), dict(backend="opencl"), dict(backend=42)])
def test_result_cache_does_not_let_bad_options_through(model_dir, kw):
    dev = model_dir.parent.name
    predict_best(48, 64, 96, device=dev)
    with pytest.raises(TypeError):
        predict_best(48, 64, 96, device=dev, **kw)


def test_wrong_cascade_file_is_recalibrated(model_dir, tmp_path):
    """A loadable cascade file with keep=1 made predict_best list one config
    and pick a wrong one."""
    first = _run(model_dir, tmp_path)
    (cas,) = tmp_path.glob("cascade-*.json")
    for bad in ('{"trees": 1, "keep": 1}', '{"trees": 1e400, "keep": 1}', "[1, 2]"):
        cas.write_text(bad)
        again = _run(model_dir, tmp_path)
        assert again.returncode == 0 and again.stdout == first.stdout, (bad, again.stderr)


def test_damaged_flat_forest_cache_is_rebuilt(model_dir, tmp_path):
    """Leaves changed where the load-time probe never reaches gave silently
    wrong answers; a wrong n_features failed on every run."""
    first = _run(model_dir, tmp_path)
    (npz,) = tmp_path.glob("forest-*.npz")
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    for name, value in (("leaf_value", np.zeros_like(arrays["leaf_value"])), ("n_features", np.int64(10**6))):
        np.savez(npz.with_suffix(""), **dict(arrays, **{name: value}))
        again = _run(model_dir, tmp_path)
        assert again.returncode == 0 and again.stdout == first.stdout, (name, again.stderr)


def test_c_path_and_fallback_agree_outside_the_envelope(model_dir):
    """The cascade (calibrated inside the envelope) changed OOD answers vs the
    full model the fallback uses."""
    pred, full = Predictor(model_dir), Predictor(model_dir, cascade=False)
    rng = np.random.default_rng(3)
    shapes = [tuple(int(x) for x in np.round(2 ** rng.uniform(8, 13, 3))) for _ in range(150)]
    ood = [s for s in shapes if pred.predict_best(*s).ood]
    assert len(ood) > 50
    assert all(pred.predict_best(*s).config == full.predict_best(*s).config for s in ood)


def test_rank_refuses_a_mask_of_the_wrong_shape(model_dir):
    """mask=[True] made the C path read past the end of the array."""
    pred = Predictor(model_dir)
    with pytest.raises(ValueError, match="bool array of shape"):
        pred.rank(300, 200, 100, mask=[True])
    big = np.ones(2 * len(pred._configs), bool)
    assert len(pred.rank(300, 200, 100, mask=big[::2])[0]) == len(pred._configs)


def test_relative_models_dir_is_not_cached_across_chdir(model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    dev = model_dir.parent.name
    predict_best(48, 64, 96, device=dev, models_dir="models")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="no model"):
        predict_best(48, 64, 96, device=dev, models_dir="models")


def _entry(**kw):
    base = dict(m=64, n=64, k=64, dtype="float32", device="dev", template_hash=TEMPLATE_HASH,
                costlearn_version="0.1.0", config=TileConfig(16, 32, 8, 2, 4), how="predicted", time_us=10.0)
    base.update(kw)
    return TuningEntry(**base)


def test_bad_entry_does_not_set_a_healthy_database_aside(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.put(_entry())
    for bad in (dict(device=None), dict(source=None), dict(config="m16"), dict(times_us=[1, 2])):
        with pytest.raises((TypeError, ValueError)):
            db.put(_entry(**bad))
    assert not db.set_aside and db.get(64, 64, 64, "float32", "dev", TEMPLATE_HASH, costlearn_version="0.1.0")


def test_damaged_rows_are_misses_not_answers(tmp_path):
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    db.put(_entry(m=1))
    db.put(_entry(m=2))
    with sqlite3.connect(path) as c:
        c.execute("UPDATE tuned SET time_us = -5 WHERE m = 1")
        c.execute("UPDATE tuned SET times_json = '[1, 2]' WHERE m = 2")
    for m in (1, 2):
        assert db.get(m, 64, 64, "float32", "dev", TEMPLATE_HASH, costlearn_version="0.1.0") is None


def test_newer_schema_or_foreign_database_is_left_alone(tmp_path):
    newer = tmp_path / "newer.sqlite"
    TuningDB(newer).close()
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
    db = TuningDB(path)
    db.put(_entry(m=1))                                 # this thread's connection is open
    done = threading.Event()

    def other():
        db._set_aside("test", None)                     # what a corruption error in another thread does
        done.set()

    with pytest.warns(RuntimeWarning):
        threading.Thread(target=other).start()
        done.wait(10)
    assert db.put(_entry(m=888))
    assert db.get(888, 64, 64, "float32", "dev", TEMPLATE_HASH, costlearn_version="0.1.0") is not None
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT COUNT(*) FROM tuned WHERE m = 888").fetchone()[0] == 1


@pytest.mark.parametrize("name", ["select-tile", "bad name", "9lives", "class", "int", "../../escape", ""])
def test_dispatch_name_must_be_an_identifier(model_dir, tmp_path, name):
    from costlearn.cli import main
    rc = main(["dispatch", "--m", "1:64", "--n", "64:128", "--k", "64:128", "--samples", "50",
               "--out", str(tmp_path / "d"), "--name", name])
    assert rc == 2 and not (tmp_path / "d").exists()
