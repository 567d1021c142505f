"""The fast predictor (issue 5): the C hot path gives the reference answers,
the cascade keeps the full model's choice, the caches never change an answer,
and bad input is refused even when an equal-looking answer is cached."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from costlearn.predict import Predictor, predict_best
from costlearn.sampler import ShapeBounds, sample_shapes

from conftest import ROOT


@pytest.fixture(scope="module")
def pred(model_dir):
    return Predictor(model_dir)


@pytest.fixture(scope="module")
def shapes():
    rng = np.random.default_rng(17)
    return [tuple(int(x) for x in np.round(2 ** rng.uniform(0, 12, 3))) for _ in range(300)]


def test_c_features_equal_the_numpy_features_bit_for_bit(pred, shapes):
    f = pred._features
    assert f._lib is not None, "the C hot path did not build here"
    for s in shapes:
        assert np.array_equal(f(*s), f.numpy_features(*s)), s


def test_flat_forest_margins_match_xgboost(pred, shapes):
    booster = pred.artifact.model.booster_
    for s in shapes[:60]:
        X = pred._features(*s)
        ref = booster.inplace_predict(X, validate_features=False)
        assert np.abs(pred._forest.predict_margin(X) - ref).max() < 1e-4


def test_one_c_call_ranks_like_numpy_and_finds_the_same_nearest_shape(pred, shapes):
    for s in shapes:
        mask = pred._feasible(*s)
        mask = mask if mask.any() else np.ones(len(mask), bool)
        for cascade in (True, False):
            idx, t, near = pred._ranked(*s, mask, 5, cascade)
            idx2, t2 = pred._ranked_numpy(*s, mask, pred.cascade_keep, cascade)
            assert np.array_equal(idx, idx2) and np.array_equal(t, t2), (s, cascade)
        want, dist = pred.envelope.nearest(*s)
        assert tuple(pred.envelope.shapes[near[0]]) == want and near[1] == pytest.approx(dist, abs=1e-9)


def test_cascade_keeps_the_full_models_choice_on_unseen_shapes(model_dir, pred):
    full = Predictor(model_dir, cascade=False)
    assert 0 < pred.cascade_trees < pred._forest.n_trees and pred.cascade_keep < len(pred._configs)
    drawn = sample_shapes(600, ShapeBounds.for_device(pred.spec.device_type == "cpu"), np.random.default_rng(99))
    train = {tuple(s) for s in pred.envelope.shapes}
    unseen = [s for s in drawn if s not in train][:400]
    agree = sum(pred.predict_best(*s).config == full.predict_best(*s).config for s in unseen)
    assert agree >= 0.99 * len(unseen)


def test_rank_is_the_full_model_in_order(pred):
    configs, t = pred.rank(300, 200, 100)
    assert list(t) == sorted(t) and len(configs) == int(pred._feasible(300, 200, 100).sum())
    assert pred.predict_best(300, 200, 100).config == configs[0]


def test_repeated_shape_is_served_from_the_cache(pred):
    a = pred.predict_best(123, 45, 67)
    assert pred.predict_best(123, 45, 67) is a


def test_bool_extent_is_refused_even_when_the_int_shape_is_cached(model_dir):
    """Regression: True == 1 and hash(True) == hash(1), so a cache keyed by the
    raw arguments would have answered predict_best(True, 8, 8)."""
    dev = model_dir.parent.name
    predict_best(1, 8, 8, device=dev)
    with pytest.raises(TypeError, match="M=True"):
        predict_best(True, 8, 8, device=dev)
    with pytest.raises(TypeError, match="top_k=True"):
        predict_best(1, 8, 8, device=dev, top_k=True)


@pytest.mark.parametrize("kw, exc, says", [
    (dict(measure_top_k=-1), ValueError, "measure_top_k=-1"),
    (dict(measure_top_k=1.5), TypeError, "measure_top_k=1.5"),
    (dict(measure_top_k=True), TypeError, "measure_top_k=True"),
    (dict(backend="opencl"), TypeError, "backend='opencl'"),
    (dict(tuning_db=3), TypeError, "tuning_db=3"),
])
def test_bad_options_say_what_is_allowed(model_dir, kw, exc, says):
    with pytest.raises(exc, match=says):
        predict_best(8, 8, 8, device=model_dir.parent.name, **kw)


def test_garbage_in_the_compiled_cache_is_rebuilt_not_used(model_dir, tmp_path):
    """A corrupt flat-forest or cascade cache file is rebuilt; the answers do not change."""
    env = dict(os.environ, COSTLEARN_CACHE=str(tmp_path), PYTHONPATH=str(ROOT))
    code = ("import sys, json; from costlearn.predict import Predictor; p = Predictor(sys.argv[1]); "
            "print(json.dumps([p.predict_best(*s).config.config_id for s in [(1,64,64),(300,200,100),(7,9,11)]]))")
    first = subprocess.run([sys.executable, "-c", code, str(model_dir)], env=env, capture_output=True, text=True,
                           check=True).stdout
    cached = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.startswith("forest-") for n in cached) and any(n.startswith("cascade-") for n in cached)
    for p in tmp_path.iterdir():
        if p.suffix in (".npz", ".json"):
            p.write_bytes(b"\x00garbage")
    again = subprocess.run([sys.executable, "-c", code, str(model_dir)], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert json.loads(again) == json.loads(first)


def test_without_a_c_compiler_answers_are_the_same(model_dir, tmp_path):
    """No compiler on PATH and an empty cache: one warning naming the problem,
    the numpy/xgboost path, the same configs as the C path."""
    code = ("import sys, json, warnings; warnings.simplefilter('always'); from costlearn.predict import Predictor; "
            "p = Predictor(sys.argv[1]); print(p.backend); "
            "print(json.dumps([p.predict_best(*s).config.config_id for s in [(1,64,64),(300,200,100),(7,9,11)]]))")
    ok = subprocess.run([sys.executable, "-c", code, str(model_dir)], capture_output=True, text=True, check=True,
                        env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.splitlines()
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "COSTLEARN_NO_C")}
    env.update(PYTHONPATH=str(ROOT), COSTLEARN_CACHE=str(tmp_path / "cache"), PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code, str(model_dir)], env=env, capture_output=True, text=True,
                         check=True)
    lines = out.stdout.splitlines()
    if lines[0] == "c":
        pytest.skip("the compiler Python was built with is an absolute path; it cannot be hidden here")
    assert ok[0] == "c" and lines[0] == "xgboost"
    assert "could not build its C hot path" in out.stderr and "no C compiler worked" in out.stderr
    assert json.loads(lines[1]) == json.loads(ok[1])
