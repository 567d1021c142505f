"""OOD envelope: threshold calibrated on held-out training shapes, reasons in
words with numbers, flag rates on the committed model."""
from __future__ import annotations

import numpy as np
import pytest

from costlearn.model.envelope import CALIBRATION_QUANTILE, Envelope, _heldout_nn, embed, fit_envelope
from costlearn.serve.predictor import Predictor
from costlearn.collect.sampler import ShapeBounds, sample_shapes


def test_embedding_distance_is_the_log_shape_and_aspect_distance():
    a, b = np.array([[3, 700, 20]]), np.array([[40, 9, 1000]])
    la, lb = np.log2(a[0]), np.log2(b[0])
    six = lambda x: np.r_[x, x[0] - x[1], x[1] - x[2], x[2] - x[0]]  # noqa: E731
    assert np.linalg.norm(embed(a) - embed(b)) == pytest.approx(np.linalg.norm(six(la) - six(lb)))


def test_threshold_is_the_heldout_quantile():
    rng = np.random.default_rng(0)
    shapes = np.round(2 ** rng.uniform(0, 10, (300, 3))).astype(int)
    env = fit_envelope(shapes, seed=3)
    nn = _heldout_nn(embed(np.unique(shapes, axis=0)), 5, 3)
    assert env["density_threshold_log2"] == pytest.approx(max(0.5, np.quantile(nn, CALIBRATION_QUANTILE)))
    assert env["calibration"]["heldout_nn_p99"] == pytest.approx(np.quantile(nn, 0.99))


def test_reasons_name_the_numbers():
    env = Envelope(fit_envelope([(a, b, c) for a in (1, 4, 16, 64) for b in (8, 32, 128) for c in (16, 64, 256)]))
    assert env.reasons(16, 32, 64) == []
    r = env.reasons(16, 32, 4096)
    assert any("K=4096 above the trained maximum 256" in x for x in r)
    assert any("doublings away" in x and "threshold" in x for x in r)


def test_an_old_envelope_asks_for_retraining():
    with pytest.raises(ValueError, match="retrain"):
        Envelope({"min": {}, "max": {}, "shapes": [[1, 1, 1]], "density_threshold_log2": 1.0})


def test_flag_rates_on_the_committed_model(model_dir):
    """At most 5 % of shapes drawn like the training shapes are flagged, and
    at least 95 % of shapes beyond the trained ranges are."""
    pred = Predictor(model_dir)
    env = pred.envelope
    train = {tuple(s) for s in env.shapes}
    rng = np.random.default_rng(8)
    drawn = [s for s in sample_shapes(1500, ShapeBounds.for_device(pred.spec.device_type == "cpu"), rng)
             if s not in train and pred.feasible(pred.problem(*s)).any()][:1000]
    assert sum(bool(env.reasons(*s)) for s in drawn) <= 0.05 * len(drawn)
    hi = env.envelope["max"]
    beyond = [(m, n, int(hi["K"] * 2 ** rng.uniform(0.5, 3))) for m, n, _ in drawn[:300]]
    assert sum(bool(env.reasons(*s)) for s in beyond) >= 0.95 * len(beyond)
