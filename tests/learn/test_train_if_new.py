"""Retraining when new problems arrive: `costlearn train --if-new-rows N` trains a model only where N problems
(M, N, K, dtype, layout, epilogue) it was not trained on have arrived (costlearn.learn.retrain.new_problems), leaves
a current model's files as they were, and a running process then serves the retrained model."""
from __future__ import annotations

import json
import shutil

import pytest

import costlearn
from costlearn.cli import main
from costlearn.collect.dataset import write_part
from costlearn.learn.retrain import new_problems, recorded_hashes, trained_problems
from costlearn.learn.train import train
from costlearn.model import artifact
from costlearn.serve.predictor import PREDICTORS, Predictor, clear_cache, load_predictor

FIRST = 12
"""Shapes the first model is trained on."""


@pytest.fixture
def folders(tmp_path, dataset_dir, dataset_rows):
    """(dataset folder holding FIRST shapes with epilogue none, model store root, the committed rows to add from)."""
    rows = dataset_rows[dataset_rows["epilogue"].eq("none")]
    shapes = rows[["m", "n", "k"]].drop_duplicates()
    data = tmp_path / "data" / dataset_dir.name
    data.mkdir(parents=True)
    shutil.copy(dataset_dir / "device.json", data / "device.json")
    write_part(_rows_of(rows, shapes.iloc[:FIRST]).to_dict("records"), data)
    clear_cache()
    yield data, tmp_path / "models", rows, shapes
    clear_cache()


def _rows_of(rows, shapes, per_problem: int = 8):
    return rows.merge(shapes, on=["m", "n", "k"]).groupby(["m", "n", "k", "epilogue"]).head(per_problem)


def _files(folder) -> dict:
    """Every file under ``folder``: its bytes and modification time, ns."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_new_problems_counts_problems_a_model_was_not_trained_on_a_new_epilogue_included(folders):
    data, models, rows, shapes = folders
    none_yet = new_problems(data, models, family="gemm", dtype="float32")
    assert (none_yet.problems, none_yet.new, none_yet.has_model) == (FIRST, FIRST, False)
    assert none_yet.due(10**6)                                    # no model yet: train
    res = train(data, models, model="roofline", holdout=False)
    side = json.loads(res.path.read_text())
    assert side["training"]["problems"]["count"] == FIRST and len(recorded_hashes(side)) == FIRST
    current = new_problems(data, models, family="gemm", dtype="float32")
    assert (current.folder, current.problems, current.new, current.has_model) == (res.path.parent, FIRST, 0, True)
    assert not current.due(1) and current.due(0)
    bias = _rows_of(rows, shapes.iloc[:2]).assign(epilogue="bias")          # trained shapes, a new epilogue
    write_part(list(bias.to_dict("records")) + list(_rows_of(rows, shapes.iloc[FIRST:FIRST + 2]).to_dict("records")),
               data)
    later = new_problems(data, models, family="gemm", dtype="float32")
    assert (later.problems, later.new) == (FIRST + 4, 4) and later.due(4) and not later.due(5)


def test_a_sidecar_without_the_record_loads_and_counts_every_problem_as_new(model_dir, dataset_dir, dataset_rows):
    """The committed model was trained before sidecars recorded their problems."""
    side = artifact.load(model_dir).sidecar
    assert "problems" not in side["training"] and recorded_hashes(side) is None
    got = new_problems(dataset_dir, model_dir.parents[2], family="gemm", dtype="float32")
    assert got.has_model and got.new == got.problems == len(
        dataset_rows[["m", "n", "k", "layout", "epilogue"]].drop_duplicates())
    damaged = trained_problems(dataset_rows.head(50))
    assert recorded_hashes({"training": {"problems": damaged}}) is not None
    assert recorded_hashes({"training": {"problems": dict(damaged, count=damaged["count"] + 1)}}) is None
    assert recorded_hashes({"training": {"problems": dict(damaged, hashes="not base64!")}}) is None


def test_train_if_new_rows_leaves_a_current_model_untouched_and_a_running_process_serves_the_retrained_one(
        folders, capsys):
    data, models, rows, shapes = folders
    argv = ["train", "--data", str(data), "--models", str(models), "--learner", "roofline", "--if-new-rows", "3"]
    assert main(argv) == 0                                        # no model yet: trained
    folder = models / data.name / "gemm" / "float32"
    assert f"-> {folder}" in capsys.readouterr().out
    device, shape = data.name, tuple(int(v) for v in shapes.iloc[FIRST + 5])
    first = costlearn.predict_best(*shape, device=device, models_dir=str(models))   # this process loads the model
    loaded = load_predictor(device, "gemm", "float32", str(models))
    before = _files(folder)

    write_part(_rows_of(rows, shapes.iloc[FIRST:FIRST + 2]).to_dict("records"), data)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"{folder} is current: 2 new problems since it was trained, fewer than "
                                "--if-new-problems 3 (--if-new-rows counts problems too: a problem counts once "
                                "however many configs were measured on it); not retrained"]
    assert _files(folder) == before                               # not one byte or timestamp changed
    PREDICTORS.next_watch_s = 0.0
    assert load_predictor(device, "gemm", "float32", str(models)) is loaded

    write_part(_rows_of(rows, shapes.iloc[FIRST + 2:FIRST + 3]).to_dict("records"), data)
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert f"{folder}: 3 new problems since it was trained (--if-new-problems 3); retraining" in cap.err
    assert "(replaced the model that was there)" in cap.out
    assert _files(folder) != before
    PREDICTORS.next_watch_s = 0.0                                 # the staleness rule's period passed
    served = load_predictor(device, "gemm", "float32", str(models))
    assert served is not loaded and served.artifact.sidecar["training"]["problems"]["count"] == FIRST + 3
    again = costlearn.predict_best(*shape, device=device, models_dir=str(models))
    assert again == Predictor(folder).predict_shape(*shape, "NN")
    assert first == loaded.predict_shape(*shape, "NN")
    assert main(argv) == 0
    assert "is current: 0 new problems" in capsys.readouterr().out


@pytest.mark.slow
def test_train_if_new_rows_retrains_a_damaged_model_whatever_its_sidecar_records(folders, capsys):
    """A model that does not load (its sidecar's digest differs, its payload folder is gone) is no model: its
    sidecar's training.problems still lists every problem, yet it is retrained, never called current."""
    data, models, rows, shapes = folders
    argv = ["train", "--data", str(data), "--models", str(models), "--learner", "roofline", "--if-new-problems", "3"]
    assert main(argv) == 0
    folder = models / data.name / "gemm" / "float32"
    side = json.loads((folder / "model.json").read_text())
    for damage in ("digest", "payload"):
        if damage == "digest":
            (folder / "model.json").write_text(json.dumps(dict(side, sidecar_sha256="0" * 64)))
        else:
            shutil.rmtree(folder / artifact.load(folder).sidecar["payload"])
        with pytest.raises(artifact.ArtifactError):
            artifact.load(folder)
        got = new_problems(data, models, family="gemm", dtype="float32")
        assert (got.has_model, got.new, got.due(10**6)) == (False, FIRST, True) and got.damaged
        capsys.readouterr()
        assert main(argv) == 0
        cap = capsys.readouterr()
        assert "is current" not in cap.out and f"{folder}: the model there does not load (" in cap.err
        side = artifact.load(folder).sidecar                      # retrained: it loads again
        assert side["training"]["problems"]["count"] == FIRST


def test_plain_train_replaces_a_fifo_sidecar_instead_of_waiting_for_a_writer(folders):
    """Regression: a FIFO named model.json made `costlearn train` (without --if-new-problems) hang in the save,
    which read the old sidecar to keep its payload; it is no model, and the new one replaces it."""
    import os
    import signal
    data, models, _, _ = folders
    folder = models / data.name / "gemm" / "float32"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "model.json")
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("train waited on the FIFO"))
    signal.alarm(60)
    try:
        assert main(["train", "--data", str(data), "--models", str(models), "--learner", "roofline"]) == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert (folder / "model.json").is_file() and artifact.load(folder).sidecar["training"]["problems"]["count"] == FIRST
