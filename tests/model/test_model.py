"""The CostModel seam: one contract over the registry (fit, predict, save/load to
identical predictions, a scorer that ranks as predict does, served by
predict_best through an artifact), then the artifact and XGBoost specifics."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from costlearn.model import MODELS, NotFittedError, get_model
from costlearn.model import artifact, artifact_layout
from costlearn.model.base import check_rows
from costlearn.model.hgb import HGBParams
from costlearn.model.xgb import XGBCostModel, XGBParams

FAST = XGBParams(n_estimators=60, max_depth=4, early_stopping_rounds=10)
FAST_SETTINGS = {"xgboost": dict(params=FAST), "xgboost_devices": dict(params=FAST),
                 "hgb": dict(params=HGBParams(max_iter=40, n_iter_no_change=5))}


@pytest.fixture(scope="module")
def small_rows(dataset_rows):
    shapes = dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:40]
    return dataset_rows.merge(shapes, on=["m", "n", "k"]).reset_index(drop=True)


def _make(name):
    return get_model(name, **FAST_SETTINGS.get(name, {}))


@pytest.mark.parametrize("name", MODELS.names())
def test_contract_predict_before_fit_raises(name):
    with pytest.raises(NotFittedError, match="fit"):
        _make(name).predict(pd.DataFrame({c: [1] for c in ("m", "n", "k")}))


@pytest.mark.parametrize("name", MODELS.names())
def test_contract_fit_returns_self_and_predicts_one_finite_value_per_row(name, small_rows, dataset_spec):
    mdl = _make(name)
    assert mdl.fit(small_rows, dataset_spec) is mdl
    assert any(a.endswith("_") and not a.startswith("_") for a in vars(mdl))
    p = mdl.predict(small_rows.iloc[:17])
    assert p.shape == (17,) and p.dtype == np.float64 and np.isfinite(p).all() and (p > 0).all()


@pytest.mark.parametrize("name", MODELS.names())
def test_contract_save_load_round_trip_gives_identical_predictions(name, small_rows, dataset_spec, tmp_path):
    mdl = _make(name).fit(small_rows, dataset_spec)
    state = json.loads(json.dumps(mdl.save(tmp_path)))          # the state is plain JSON
    again = type(mdl).load(tmp_path, state, dataset_spec)
    np.testing.assert_array_equal(again.predict(small_rows), mdl.predict(small_rows))


@pytest.mark.parametrize("name", MODELS.names())
def test_contract_every_model_is_trained_saved_loaded_and_served_by_predict_best(name, dataset_dir, tmp_path):
    """train -> artifact -> Predictor -> predict_best, with no change to the
    predictor; the served choice equals the argmin of the model's own predict."""
    from costlearn.collect.dataset import load
    from costlearn.serve.predict import Predictor, clear_cache, predict_best
    from costlearn.learn.train import train
    df, _ = load(dataset_dir)
    shapes = df[["m", "n", "k"]].drop_duplicates().iloc[:60]
    sub = tmp_path / "data" / dataset_dir.name
    sub.mkdir(parents=True)
    shutil.copy(dataset_dir / "device.json", sub / "device.json")
    from costlearn.collect.dataset import write_part
    write_part(df.merge(shapes, on=["m", "n", "k"]), sub)
    res = train(sub, tmp_path / "models", model=name, settings=FAST_SETTINGS.get(name, {}), holdout=False)
    pred = Predictor(res.path.parent)
    mdl = pred.artifact.model()
    assert mdl.name == name
    for m, n, k in [(300, 200, 100), (1, 512, 512), (48, 64, 96)]:
        problem = pred.problem(m, n, k)
        mask = pred.feasible(problem)
        rows = pd.DataFrame(dict(m=m, n=n, k=k, dtype="float32", layout="NN", family="gemm",
                                 config_id=[c.config_id for c in pred.configs],
                                 registers_per_thread=pred.artifact.candidates["registers_per_thread"]))[mask]
        want = pred.configs[np.flatnonzero(mask)[int(np.argmin(mdl.predict(rows)))]]
        clear_cache()
        got = predict_best(m, n, k, device=dataset_dir.name, models_dir=tmp_path / "models")
        assert got.config == want, (name, (m, n, k))


def test_unknown_model_lists_known():
    with pytest.raises(ValueError, match="xgboost"):
        get_model("transformer")


def test_same_seed_same_model(small_rows, dataset_spec):
    a = XGBCostModel(params=FAST).fit(small_rows, dataset_spec).predict(small_rows)
    b = XGBCostModel(params=FAST).fit(small_rows, dataset_spec).predict(small_rows)
    np.testing.assert_array_equal(a, b)


def test_second_gbdt_export_equals_scikit_learns_predictions(small_rows, dataset_spec):
    """The flattened HistGradientBoosting trees give scikit-learn's answers
    (the export refuses to save otherwise)."""
    mdl = get_model("hgb", **FAST_SETTINGS["hgb"]).fit(small_rows, dataset_spec)
    assert mdl.forest_.n_trees == mdl.n_iter_ >= 1
    log2 = np.log2(mdl.predict(small_rows))
    assert np.isfinite(log2).all() and log2.std() > 0


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_hgb_fits_on_its_n_jobs_openmp_threads_not_every_core(n_jobs, small_rows, dataset_spec, monkeypatch):
    """scikit-learn's HistGradientBoosting fit and predict run on ``n_jobs``
    OpenMP threads (default 1), whatever the process allows: on every core it
    took 108-125 s instead of 1.4 s here while another process kept one of two
    cores busy (short parallel regions waiting on a descheduled thread)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_info, threadpool_limits
    seen = []

    def openmp_threads():
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp")

    fit, predict = HistGradientBoostingRegressor.fit, HistGradientBoostingRegressor.predict
    monkeypatch.setattr(HistGradientBoostingRegressor, "fit", lambda self, *a, **kw: (openmp_threads(),
                                                                                     fit(self, *a, **kw))[1])
    monkeypatch.setattr(HistGradientBoostingRegressor, "predict", lambda self, X: (openmp_threads(),
                                                                                   predict(self, X))[1])
    params = HGBParams(max_iter=3, n_iter_no_change=2, n_jobs=n_jobs)
    with threadpool_limits(limits=3, user_api="openmp"):       # what the process allows (more than n_jobs)
        get_model("hgb", params=params).fit(small_rows.iloc[:300], dataset_spec)
    assert len(seen) >= 4 and set(seen) == {n_jobs}


def test_hgb_params_refuse_a_thread_count_below_one():
    with pytest.raises(ValueError, match="n_jobs"):
        HGBParams(n_jobs=0)


def test_loading_an_artifact_with_other_features_says_what_differs(model_dir, tmp_path):
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    side = json.loads((dst / "model.json").read_text())
    side["feature_names"] = [f for f in side["feature_names"] if f != "waves"] + ["warp_specialisation"]
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError) as e:
        artifact.load(dst)
    assert "waves" in str(e.value) and "warp_specialisation" in str(e.value)


def test_missing_artifact_is_a_clear_error(tmp_path):
    with pytest.raises(artifact_layout.ArtifactError, match="no model artifact"):
        artifact.load(tmp_path)


def test_fit_refuses_bad_times(small_rows, dataset_spec):
    bad = small_rows.copy()
    bad.loc[3, "time_us"] = 0.0
    with pytest.raises(ValueError, match="finite and positive"):
        XGBCostModel(params=FAST).fit(bad, dataset_spec)
    with pytest.raises(ValueError, match="config_id"):
        check_rows(small_rows.drop(columns=["config_id"]))


@pytest.mark.parametrize("breakage", ["drop_candidates", "drop_envelope", "bad_config", "bad_device",
                                      "garbage_booster", "not_json", "garbage_scorer", "bad_family"])
def test_broken_artifacts_are_artifact_errors_naming_the_file(model_dir, tmp_path, breakage):
    dst = tmp_path / "dev" / "gemm" / "float32"
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
    elif breakage == "bad_family":
        side["family"] = "sparse_conv"
    (dst / "model.json").write_text(json.dumps(side))
    if breakage == "garbage_booster":
        (dst / "model.ubj").write_bytes(b"\x00garbage")
    if breakage == "garbage_scorer":
        (dst / "scorer.npz").write_bytes(b"\x00garbage")
    if breakage == "not_json":
        (dst / "model.json").write_text('{"truncated": ')
    with pytest.raises(artifact_layout.ArtifactError) as e:
        artifact.load(dst).model()
    assert ("model." in str(e.value) or "scorer" in str(e.value)) and "Stack trace" not in str(e.value)


def test_train_refuses_a_device_description_of_another_device(dataset_dir, tmp_path):
    from costlearn.core.device import preset
    from costlearn.learn.train import train
    with pytest.raises(ValueError, match="measured on device"):
        train(dataset_dir, tmp_path, spec=preset("h200"), holdout=False)


@pytest.mark.parametrize("objective", ["log_slowdown", "rank_pairwise"])
def test_ranking_objectives_fit_and_rank(objective, small_rows, dataset_spec):
    from costlearn.learn.metrics import evaluate_rows, summarize
    mdl = XGBCostModel(params=XGBParams(n_estimators=60, max_depth=4, early_stopping_rounds=10,
                                        objective=objective)).fit(small_rows, dataset_spec)
    s = summarize(evaluate_rows(small_rows, mdl.predict(small_rows)))
    assert s["kendall_tau"] > 0.3          # it learned an order (in-sample)
    scorer = mdl.scorer(mdl.feature_names_, [])
    assert scorer.sign == (-1.0 if objective == "rank_pairwise" else 1.0)


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(ValueError, match="rank_pairwise"):
        XGBParams(objective="lambdamart")


def test_committed_booster_is_served_byte_identical_and_its_scorer_matches_it(model_dir):
    """The committed model's model.ubj is the file the sidecar names, and the
    exported scorer's margins equal XGBoost's to float32 rounding."""
    from costlearn.core.files import sha256_file
    art = artifact.load(model_dir)
    side = art.sidecar
    assert side["model_state"]["files"]["model.ubj"] == sha256_file(model_dir / "model.ubj")
    booster = art.model().booster_
    f = art.candidate_features()
    for m, n, k in [(1, 64, 64), (300, 200, 100), (1000, 1000, 1000)]:
        X = f.numpy(m, n, k)
        ref = booster.inplace_predict(X, validate_features=False)
        assert np.abs(art.scorer.forest.margin_numpy(X) - ref).max() < 1e-4
