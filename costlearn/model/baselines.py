"""Baseline cost models, each a first-class CostModel (design.md, "Metrics"),
trained, saved, loaded and served like the product:

- ``roofline``: the analytic model with occupancy and tail corrections
  (``log2_roofline_corrected_time_us`` of the analytic features);
- ``best_fixed``: the one order of configs best on average over the
  training problems.

A random ranking is an evaluation baseline, not a model
(:func:`costlearn.learn.evaluate.random_scores`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from costlearn.features import get_feature_set
from costlearn.features.base import rows_family
from costlearn.model.base import CostModel, check_rows
from costlearn.model.scorer import Scorer

__all__ = ["RooflineModel", "BestFixedModel", "UNSEEN_SLOWDOWN_LOG2"]

UNSEEN_SLOWDOWN_LOG2 = 1e3
"""Score of a config the best-fixed model never saw: after every seen one."""


class RooflineModel(CostModel):
    """Roofline time with occupancy and wave-tail corrections; see
    :class:`costlearn.features.analytic.AnalyticFeatures` for the formula.
    ``fit`` only records the device."""

    name = "roofline"
    feature_set = "analytic"
    COLUMN = "log2_roofline_corrected_time_us"

    def fit(self, rows: pd.DataFrame, spec) -> "RooflineModel":
        """Record the device (rows are not needed: the model has nothing to learn)."""
        self.spec_ = spec
        self.fitted_ = True
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted time, microseconds, float64, shape (len(rows),)."""
        self.check_fitted()
        check_rows(rows)
        return np.exp2(get_feature_set("analytic").transform(rows, self.spec_)[self.COLUMN].to_numpy(np.float64))

    def save(self, folder) -> dict:
        """Nothing to write: the state is empty."""
        self.check_fitted()
        return dict(files={})

    @classmethod
    def load(cls, folder, state: dict, spec) -> "RooflineModel":
        """The roofline model of ``spec`` (its state is empty)."""
        return cls().fit(None, spec)

    def scorer(self, feature_names, candidate_ids):
        """The roofline column, weight 1."""
        names = list(feature_names)
        if self.COLUMN not in names:
            raise ValueError(f"the roofline scorer needs the column {self.COLUMN!r}; use the analytic features")
        return Scorer(len(names), None, 1.0, names.index(self.COLUMN), 1.0)


class BestFixedModel(CostModel):
    """Ranks configs by their geometric-mean slowdown over the training
    problems (time / best time of that problem), the same order on every
    problem.

    Parameters
    ----------
    min_coverage : float
        A config must have been measured on at least this fraction of the
        training problems to be ranked on its own score; others rank after
        all covered configs.

    Attributes
    ----------
    scores_ : pandas.Series
        config_id -> mean log2 slowdown (+100 if not covered), ascending.
    best_config_id_ : str
    """

    name = "best_fixed"
    feature_set = "raw"
    predicts_time = False

    def __init__(self, min_coverage: float = 0.3):
        self.min_coverage = min_coverage

    def fit(self, rows: pd.DataFrame, spec) -> "BestFixedModel":
        """Score each config by its mean log2 slowdown over the training problems.

        Raises
        ------
        ValueError
            If rows lack columns or have times that are not finite and positive.
        """
        check_rows(rows, need_time=True)
        key = ["m", "n", "k", "dtype", "layout"] + (["epilogue"] if "epilogue" in rows.columns else [])
        best = rows.groupby(key)["time_us"].transform("min")
        slow = np.log2(rows["time_us"].to_numpy(np.float64) / best.to_numpy(np.float64))
        g = pd.DataFrame({"config_id": rows["config_id"].to_numpy(), "slow": slow})
        agg = g.groupby("config_id")["slow"].agg(["mean", "size"])
        n_shapes = rows[key].drop_duplicates().shape[0]
        covered = agg["size"] >= self.min_coverage * n_shapes
        # Uncovered configs rank after every covered one.
        score = agg["mean"] + np.where(covered, 0.0, 100.0)
        self.scores_ = score.sort_values()
        self.best_config_id_ = str(self.scores_.index[0])
        self.spec_ = spec
        self.feature_names_ = tuple(get_feature_set(self.feature_set).feature_names(rows_family(rows)))
        self.fitted_ = True
        return self

    def _offsets(self, config_ids) -> np.ndarray:
        s = self.scores_.reindex(np.asarray(config_ids, dtype=object)).to_numpy(np.float64)
        return np.where(np.isfinite(s), s, UNSEEN_SLOWDOWN_LOG2)

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Relative time 2**(mean log2 slowdown); unseen configs rank last.
        A ranking score, not microseconds."""
        self.check_fitted()
        check_rows(rows)
        return np.exp2(self._offsets(rows["config_id"].to_numpy()))

    def save(self, folder) -> dict:
        """The scores go into the state (no file)."""
        self.check_fitted()
        return dict(settings=dict(min_coverage=self.min_coverage),
                    scores={str(k): float(v) for k, v in self.scores_.items()},
                    best_config_id=self.best_config_id_, feature_names=list(self.feature_names_), files={})

    @classmethod
    def load(cls, folder, state: dict, spec) -> "BestFixedModel":
        """Rebuild from :meth:`save`'s state.

        Raises
        ------
        ValueError
            If the scores are missing or not finite.
        """
        model = cls(**state.get("settings", {}))
        scores = pd.Series(state["scores"], dtype=np.float64).sort_values()
        if scores.empty or not np.isfinite(scores.to_numpy()).all():
            raise ValueError("best_fixed state has no finite scores")
        model.scores_, model.best_config_id_ = scores, str(state["best_config_id"])
        model.spec_, model.feature_names_ = spec, tuple(state["feature_names"])
        model.fitted_ = True
        return model

    def scorer(self, feature_names, candidate_ids):
        """One offset per candidate: its score (unseen: last)."""
        self.check_fitted()
        return Scorer(len(feature_names), None, 1.0, -1, 0.0, self._offsets(list(candidate_ids)))
