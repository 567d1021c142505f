"""Artifacts of the layout before kernel families (``models/<device>/<dtype>/``,
schema 2) get a clear message, and ``costlearn migrate-models`` converts them
keeping the booster byte for byte."""
from __future__ import annotations

import json
import shutil

import pytest

from costlearn.model import artifact, artifact_layout
from costlearn.core.files import sha256_file


def _old_layout(model_dir, root):
    """A schema-2 artifact as costlearn 0.1 wrote it, made from the committed one."""
    side = json.loads((model_dir / "model.json").read_text())
    old = root / model_dir.parents[1].name / "float32"
    old.mkdir(parents=True)
    shutil.copy(model_dir / "model.ubj", old / "model.ubj")
    state = side["model_state"]
    bf = side["baselines"]["best_fixed"]
    old_side = dict(artifact_schema=2, model="xgboost", feature_set=side["feature_set"],
                    feature_names=side["feature_names"], feature_version=side["feature_version"],
                    params=state["settings"]["params"], best_iteration=state["best_iteration"],
                    validation_rmse_log2=state["validation_rmse_log2"], device=side["device"],
                    device_slug=side["device_slug"], dtype="float32", template_hash=side["template_hash"],
                    costlearn_version=side["costlearn_version"], candidates=side["candidates"],
                    envelope=side["envelope"], metrics=side["metrics"], training=side["training"],
                    baselines=dict(best_fixed=dict(scores=bf["scores"], best_config_id=bf["best_config_id"])),
                    model_sha256=sha256_file(old / "model.ubj"))
    (old / "model.json").write_text(json.dumps(old_side))
    return old


def test_an_old_layout_artifact_names_the_migration_command(model_dir, tmp_path):
    from costlearn.serve.predict import predict_best
    old = _old_layout(model_dir, tmp_path / "models")
    with pytest.raises(artifact_layout.ArtifactError, match="costlearn migrate-models"):
        artifact.load(old)
    with pytest.raises(ValueError, match="migrate-models"):
        predict_best(8, 8, 8, models_dir=tmp_path / "models")


def test_migrate_models_keeps_the_booster_and_the_answers(model_dir, tmp_path, capsys):
    from costlearn.cli import main
    from costlearn.serve.predictor import Predictor
    root = tmp_path / "models"
    old = _old_layout(model_dir, root)
    booster = sha256_file(old / "model.ubj")
    assert main(["migrate-models", str(root)]) == 0
    assert "-> " in capsys.readouterr().out and not old.exists()
    new = root / model_dir.parents[1].name / "gemm" / "float32"
    assert sha256_file(artifact_layout.files_folder(new) / "model.ubj") == booster
    a, b = Predictor(new), Predictor(model_dir)
    for s in [(1, 1024, 1024), (300, 200, 100), (9000, 5, 12000)]:
        assert a.predict_best(*s).config == b.predict_best(*s).config
    assert main(["migrate-models", str(root)]) == 0
    assert "no artifact in the layout before" in capsys.readouterr().out


def test_migrate_models_refuses_a_missing_root(tmp_path):
    """Regression: a mistyped root printed 'nothing to migrate' and exited 0."""
    from costlearn.cli import main
    from costlearn.learn.migrate import migrate_models
    with pytest.raises(ValueError, match="is not a folder of models"):
        migrate_models(tmp_path / "no-such")
    assert main(["migrate-models", str(tmp_path / "no-such")]) != 0


def test_migrate_models_refuses_a_sidecar_missing_keys_and_keeps_it(model_dir, tmp_path):
    """Regression: a schema-2 sidecar without its envelope raised KeyError
    half-way through."""
    from costlearn.learn.migrate import migrate_models
    old = _old_layout(model_dir, tmp_path / "models")
    side = json.loads((old / "model.json").read_text())
    del side["envelope"]
    (old / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match=r"lacks keys \['envelope'\]"):
        migrate_models(tmp_path / "models")
    assert (old / "model.ubj").is_file()


def test_migrate_models_refuses_other_features(model_dir, tmp_path):
    """Regression: an artifact trained on another feature list was converted
    and then scored the wrong columns."""
    from costlearn.learn.migrate import migrate_models
    old = _old_layout(model_dir, tmp_path / "models")
    side = json.loads((old / "model.json").read_text())
    side["feature_names"] = side["feature_names"][::-1]
    (old / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match="not this code's"):
        migrate_models(tmp_path / "models")


def test_migrate_models_never_replaces_a_model_in_the_new_layout(model_dir, tmp_path):
    """Regression: an old artifact beside a new one of the same device and
    dtype overwrote the new one."""
    from costlearn.learn.migrate import migrate_models
    root = tmp_path / "models"
    old = _old_layout(model_dir, root)
    new = root / model_dir.parents[1].name / "gemm" / "float32"
    shutil.copytree(model_dir, new)
    before = {p.name: sha256_file(p) for p in new.iterdir()}
    with pytest.raises(artifact_layout.ArtifactError, match="already holds a model"):
        migrate_models(root)
    assert {p.name: sha256_file(p) for p in new.iterdir()} == before and old.is_dir()


def test_a_stores_device_folder_given_as_the_store_names_the_store_not_a_migration(model_dir, tmp_path, capsys):
    """Regression: ``--models`` naming one device's folder of a store (one level too deep) was taken for the layout
    before kernel families, and the error advised ``costlearn migrate-models``, which then failed on the model. It now
    names the store and the device folder; ``--models`` naming the store's parent names the store below it."""
    from costlearn.cli import main
    from costlearn.serve.predict import predict_best
    store = tmp_path / "out" / "models"
    device = model_dir.parents[1].name
    shutil.copytree(model_dir.parents[1], store / device)
    assert artifact_layout.old_layout_folders(store / device) == []
    assert main(["predict", "1", "64", "64", "--models", str(store / device)]) == 2
    err = capsys.readouterr().err
    assert "migrate-models" not in err and f"--models {store} --model {device}" in err
    with pytest.raises(ValueError, match=f"models_dir='{store}', device='{device}'"):
        predict_best(1, 64, 64, models_dir=store / device)
    assert main(["predict", "1", "64", "64", "--models", str(tmp_path / "out")]) == 2
    assert f"'{store}' holds models: --models names that folder" in capsys.readouterr().err
    assert main(["predict", "1", "64", "64", "--models", str(store)]) == 0
    capsys.readouterr()
    assert main(["info", "--models", str(store / device)]) == 0                 # info says the same
    assert f"--models {store} --model {device}" in capsys.readouterr().out


def test_every_folder_off_a_store_names_the_store_even_relative_or_damaged(model_dir, tmp_path, capsys, monkeypatch):
    """Regression (an attack on the hint above): `--models .` gave a circular hint ("the store '.': --models .
    --model "), a damaged sidecar seen from a device folder still got the migrate advice, and a model's own folder
    or its family's (the path `predict` prints as `model:`) got no hint."""
    from costlearn.cli import main
    store = tmp_path / "my store"
    device = model_dir.parents[1].name
    shutil.copytree(model_dir.parents[1], store / device)
    want = f"--models '{store}' --model {device})"
    for given in (store / device / "gemm" / "float32", store / device / "gemm", store / device):
        assert main(["predict", "1", "64", "64", "--models", str(given)]) == 2
        assert want in capsys.readouterr().err, given
    monkeypatch.chdir(store / device)
    assert main(["predict", "1", "64", "64", "--models", "."]) == 2
    assert want in capsys.readouterr().err
    (store / device / "gemm" / "float32" / "model.json").write_text("{damaged")
    assert main(["predict", "1", "64", "64", "--models", "."]) == 2
    err = capsys.readouterr().err
    assert "migrate-models" not in err and want in err
