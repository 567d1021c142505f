"""The held-out table's verdict on a model against the baselines printed beside it."""
from __future__ import annotations

from costlearn.learn.metrics import BaselineVerdict, no_better_than


def _sm(mean, geomean):
    return dict(top1_mean=mean, top1_geomean=geomean)


def test_a_model_no_better_than_a_baseline_names_the_best_such_baseline_and_both_figures():
    table = {"xgboost": _sm(1.077, 0.30), "roofline": _sm(0.9, 0.5), "random": _sm(0.5, 0.4)}
    assert no_better_than(table, "xgboost") == BaselineVerdict("top1_mean", "random", 1.077, 0.5)
    table["xgboost"] = _sm(0.2, 0.45)                               # better on the mean, not on the geomean
    assert no_better_than(table, "xgboost") == BaselineVerdict("top1_geomean", "random", 0.45, 0.4)
    table["xgboost"] = _sm(0.5, 0.1)                                # a tie is no better
    assert no_better_than(table, "xgboost").baseline == "random"
    table["xgboost"] = _sm(0.05, 0.04)
    assert no_better_than(table, "xgboost") is None
    assert no_better_than({}, "xgboost") is None and no_better_than({"xgboost": _sm(0.1, 0.1)}, "xgboost") is None
