"""A running process serves the model a retrain put in its place: the staleness rule of the loaded models
(costlearn.model.store.LoadedModels.watch), run by predict_best, predict_many and load_predictor."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import costlearn
from costlearn.model.store import LoadedModels
from costlearn.serve.predictor import PREDICTORS, Predictor, clear_cache, load_predictor

_RESAVE = """
import dataclasses, sys
import costlearn.model.artifact as A, costlearn.model.artifact_save as S
from costlearn.model.forest import FlatForest
folder, shift = sys.argv[1], float(sys.argv[2])
art = A.load(folder)
side, sc = art.sidecar, art.scorer
f = sc.forest
scorer = dataclasses.replace(sc, forest=FlatForest(f.nodes, f.roots, f.depths, f.base_score + shift, f.n_features))
S.save(art.model(), folder, family=side["family"], dtype=side["dtype"], layouts=side["layouts"], spec=art.spec,
       candidates=art.candidates, scorer=scorer, envelope=side["envelope"], metrics=side["metrics"],
       training=dict(side["training"], generation=str(shift)), baselines=side["baselines"],
       extra={k: side[k] for k in ("floor", "coverage", "template_hash") if k in side}, shortlist=art.shortlist,
       vendor_model=art.vendor_model, epilogues=art.epilogues)
"""


def _resave(folder, shift: float) -> None:
    """Save the model in ``folder`` again from another process, as ``costlearn train`` does, its forest's base
    score moved by ``shift`` (every predicted time then scales by 2**shift: another model's answers)."""
    subprocess.run([sys.executable, "-c", _RESAVE, str(folder), str(shift)], check=True, capture_output=True,
                   timeout=300)


@pytest.fixture
def store(model_dir, tmp_path):
    """A model store holding a copy of the committed model, saved once as a retrain saves it."""
    folder = tmp_path / "store" / model_dir.parent.parent.name / "gemm" / "float32"
    shutil.copytree(model_dir, folder)
    _resave(folder, 0.0)
    clear_cache()
    yield folder
    clear_cache()


def _shapes(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [tuple(int(v) for v in np.exp(rng.uniform(0, np.log(8192), 3)).astype(int).clip(1)) for _ in range(n)]


@pytest.mark.slow
def test_a_model_replaced_by_a_retrain_is_served_by_the_running_process_and_no_answer_mixes_two(store, tmp_path):
    """Eight threads ask predict_best while another process
    replaces the model: every answer is the old model's or the new one's, whole, and the new one answers within
    the staleness rule's period (plus a load) of the replace. Before the rule, a running process answered from the
    old model for good."""
    device, models = store.parent.parent.name, str(store.parent.parent.parent)
    shapes = _shapes(60, 5)
    new_folder = tmp_path / "new" / device / "gemm" / "float32"
    shutil.copytree(store, new_folder)
    _resave(new_folder, 1.0)
    old, new = Predictor(store), Predictor(new_folder)
    want_old = [old.predict_shape(*s, "NN") for s in shapes]
    want_new = [new.predict_shape(*s, "NN") for s in shapes]
    assert all(a != b for a, b in zip(want_old, want_new))
    seen, stop = [], threading.Event()
    predict_best = costlearn.predict_best

    def ask(offset: int) -> None:
        i = offset
        while not stop.is_set():
            j = i % len(shapes)
            began = time.monotonic()
            got = predict_best(*shapes[j], device=device, models_dir=models)
            seen.append((began, "old" if got == want_old[j] else "new" if got == want_new[j] else "mixed"))
            i += 1
    threads = [threading.Thread(target=ask, args=(k * 7,)) for k in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    _resave(store, 1.0)
    replaced = time.monotonic()
    time.sleep(LoadedModels.WATCH_EVERY_S + 3.0)
    stop.set()
    for t in threads:
        t.join()
    kinds = [k for _, k in seen]
    assert "mixed" not in kinds and kinds.count("old") > 0
    first_new = min(t for t, k in seen if k == "new")
    assert first_new - replaced <= LoadedModels.WATCH_EVERY_S + 2.0
    assert all(k == "new" for t, k in seen if t > first_new + 0.5)    # and the old model never answers again


def test_predict_many_and_load_predictor_notice_a_replaced_model(store):
    device, models = store.parent.parent.name, str(store.parent.parent.parent)
    shapes = _shapes(5, 6)
    before = costlearn.predict_many(shapes, device=device, models_dir=models)
    pred = load_predictor(device, "gemm", "float32", models)
    _resave(store, 1.0)
    PREDICTORS.next_watch_s = 0.0                         # the period passed
    assert load_predictor(device, "gemm", "float32", models) is not pred
    after = costlearn.predict_many(shapes, device=device, models_dir=models)
    assert [a.time_us * 2 for a in before] == pytest.approx([b.time_us for b in after])
    # each answer names its model (a fresh-clone user had to hash model.json to tell which one answered)
    new = load_predictor(device, "gemm", "float32", models)
    assert {a.model for a in before} == {pred.source} and {b.model for b in after} == {new.source}
    assert pred.source != new.source and new.source.startswith(f"{device}/gemm/float32 model ")
    PREDICTORS.next_watch_s = 0.0
    assert costlearn.predict_many(shapes, device=device, models_dir=models) == after     # nothing changed: kept


def test_a_removed_model_is_dropped_and_then_reported_missing(store):
    device, models = store.parent.parent.name, str(store.parent.parent.parent)
    costlearn.predict_best(64, 64, 64, device=device, models_dir=models)
    shutil.rmtree(store)
    PREDICTORS.watch()                                  # what the next call after the period runs
    with pytest.raises(ValueError, match="no model for device"):
        costlearn.predict_best(64, 64, 64, device=device, models_dir=models)


def test_the_watch_looks_no_more_often_than_its_period(store, monkeypatch):
    """A repeated call is a lookup: the sidecars are looked at (a stat each) once per period, not per call."""
    import costlearn.model.store as store_module
    device, models = store.parent.parent.name, str(store.parent.parent.parent)
    costlearn.predict_best(64, 64, 64, device=device, models_dir=models)
    looks = []
    real = store_module._sidecar_identity
    monkeypatch.setattr(store_module, "_sidecar_identity", lambda folder: (looks.append(folder), real(folder))[1])
    PREDICTORS.next_watch_s = time.monotonic() + 60.0
    for _ in range(1000):
        costlearn.predict_best(64, 64, 64, device=device, models_dir=models)
    assert looks == []
    PREDICTORS.watch()
    assert len(looks) == 1


def test_a_sidecar_rewritten_in_place_with_its_size_and_mtime_is_noticed(store):
    """Regression (an attack): an archive of another model extracted over this one rewrote the sidecar in place,
    keeping its inode, size and modification time, and the running process served the old model for good; the
    status-change time, which no user sets, is part of what the rule compares."""
    import os
    import costlearn.model.store as store_module
    side = store / "model.json"
    before = store_module._sidecar_identity(store)
    st = os.stat(side)
    time.sleep(0.01)
    side.write_bytes(side.read_bytes())
    os.utime(side, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(side).st_ino == st.st_ino and os.stat(side).st_mtime_ns == st.st_mtime_ns
    assert store_module._sidecar_identity(store) != before
