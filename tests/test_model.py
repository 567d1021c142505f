import json
import shutil

import numpy as np
import pandas as pd
import pytest

from costlearn.model import MODELS, NotFittedError, get_model
from costlearn.model import artifact
from costlearn.model.base import check_rows
from costlearn.model.xgb import XGBCostModel, XGBParams

FAST = XGBParams(n_estimators=60, max_depth=4, early_stopping_rounds=10)


@pytest.fixture(scope="module")
def small_rows(dataset_rows):
    shapes = dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:40]
    return dataset_rows.merge(shapes, on=["m", "n", "k"]).reset_index(drop=True)


def _make(name):
    return XGBCostModel(params=FAST) if name == "xgboost" else get_model(name)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_contract_predict_before_fit_raises(name):
    with pytest.raises(NotFittedError, match="fit"):
        _make(name).predict(pd.DataFrame({c: [1] for c in ("m", "n", "k")}))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_contract_fit_returns_self_and_predicts_one_finite_value_per_row(name, small_rows, dataset_spec):
    mdl = _make(name)
    assert mdl.fit(small_rows, dataset_spec) is mdl
    assert any(a.endswith("_") and not a.startswith("_") for a in vars(mdl))
    p = mdl.predict(small_rows.iloc[:17])
    assert p.shape == (17,) and p.dtype == np.float64 and np.isfinite(p).all() and (p > 0).all()


def test_unknown_model_lists_known():
    with pytest.raises(ValueError, match="xgboost"):
        get_model("transformer")


def test_same_seed_same_model(small_rows, dataset_spec):
    a = XGBCostModel(params=FAST).fit(small_rows, dataset_spec).predict(small_rows)
    b = XGBCostModel(params=FAST).fit(small_rows, dataset_spec).predict(small_rows)
    np.testing.assert_array_equal(a, b)


def test_save_load_round_trips_to_identical_predictions(small_rows, dataset_spec, tmp_path):
    mdl = XGBCostModel(params=FAST).fit(small_rows, dataset_spec)
    from costlearn.envelope import fit_envelope
    artifact.save(mdl, tmp_path, dtype="float32", candidates=artifact.candidate_table(small_rows),
                  envelope=fit_envelope(small_rows[["m", "n", "k"]].to_numpy()), metrics={}, training={},
                  baselines={})
    art = artifact.load(tmp_path)
    np.testing.assert_array_equal(art.model.predict(small_rows), mdl.predict(small_rows))
    assert art.spec == dataset_spec


def test_loading_an_artifact_with_other_features_says_what_differs(model_dir, tmp_path):
    dst = tmp_path / "m"
    shutil.copytree(model_dir, dst)
    side = json.loads((dst / "model.json").read_text())
    side["feature_names"] = [f for f in side["feature_names"] if f != "waves"] + ["warp_specialisation"]
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact.ArtifactError) as e:
        artifact.load(dst)
    assert "waves" in str(e.value) and "warp_specialisation" in str(e.value)


def test_missing_artifact_is_a_clear_error(tmp_path):
    with pytest.raises(artifact.ArtifactError, match="no model artifact"):
        artifact.load(tmp_path)


def test_fit_refuses_bad_times(small_rows, dataset_spec):
    bad = small_rows.copy()
    bad.loc[3, "time_us"] = 0.0
    with pytest.raises(ValueError, match="finite and positive"):
        XGBCostModel(params=FAST).fit(bad, dataset_spec)
    with pytest.raises(ValueError, match="block_k"):
        check_rows(small_rows.drop(columns=["block_k"]))


@pytest.mark.parametrize("breakage", ["drop_candidates", "drop_envelope", "bad_config", "bad_device",
                                      "garbage_booster", "not_json"])
def test_broken_artifacts_are_artifact_errors_naming_the_file(model_dir, tmp_path, breakage):
    dst = tmp_path / "m"
    shutil.copytree(model_dir, dst)
    side = json.loads((dst / "model.json").read_text())
    if breakage == "drop_candidates":
        del side["candidates"]
    elif breakage == "drop_envelope":
        side["envelope"] = {"min": {}}
    elif breakage == "bad_config":
        side["candidates"][0]["config_id"] = "garbage"
    elif breakage == "bad_device":
        del side["device"]["name"]
    (dst / "model.json").write_text(json.dumps(side))
    if breakage == "garbage_booster":
        (dst / "model.ubj").write_bytes(b"\x00garbage")
    if breakage == "not_json":
        (dst / "model.json").write_text('{"truncated": ')
    with pytest.raises(artifact.ArtifactError) as e:
        artifact.load(dst)
    assert "model." in str(e.value) and "Stack trace" not in str(e.value)


def test_train_refuses_a_device_description_of_another_device(dataset_dir, tmp_path):
    from costlearn.device import preset
    from costlearn.train import train
    with pytest.raises(ValueError, match="measured on device"):
        train(dataset_dir, tmp_path, spec=preset("h200"), holdout=False)


@pytest.mark.parametrize("objective", ["log_slowdown", "rank_pairwise"])
def test_ranking_objectives_fit_and_rank(objective, small_rows, dataset_spec):
    from costlearn.metrics import evaluate_rows, summarize
    mdl = XGBCostModel(params=XGBParams(n_estimators=60, max_depth=4, early_stopping_rounds=10,
                                        objective=objective)).fit(small_rows, dataset_spec)
    s = summarize(evaluate_rows(small_rows, mdl.predict(small_rows)))
    assert s["kendall_tau"] > 0.3          # it learned an order (in-sample)


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(ValueError, match="rank_pairwise"):
        XGBParams(objective="lambdamart")
