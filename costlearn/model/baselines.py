"""Baseline cost models, each a first-class CostModel (design.md, "Metrics"):

- ``roofline``: the analytic model, with occupancy and tail corrections
  (``log2_roofline_corrected_time_us`` of the analytic features).
- ``best_fixed``: the one config best on average over the training shapes.
- ``random``: a seeded random ranking of the feasible configs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..features.analytic import analytic_arrays
from .base import CostModel, check_rows

__all__ = ["RooflineModel", "BestFixedModel", "RandomModel"]


class RooflineModel(CostModel):
    """Roofline time with occupancy and wave-tail corrections; see
    :class:`costlearn.features.analytic.AnalyticFeatures` for the formula.
    ``fit`` only records the device."""

    name = "roofline"

    def fit(self, rows: pd.DataFrame, spec) -> "RooflineModel":
        self.spec_ = spec
        self.fitted_ = True
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted time, microseconds, float64, shape (len(rows),)."""
        self._check_fitted()
        check_rows(rows)
        return np.exp2(analytic_arrays(rows, self.spec_)["log2_roofline_corrected_time_us"])


class BestFixedModel(CostModel):
    """Ranks configs by their geometric-mean slowdown over the training
    shapes (time / best time of that shape), the same order on every shape.

    Parameters
    ----------
    min_coverage : float
        A config must have been measured on at least this fraction of the
        training shapes to be ranked on its own score; others rank after all
        covered configs.
    """

    name = "best_fixed"

    def __init__(self, min_coverage: float = 0.3):
        self.min_coverage = min_coverage

    def fit(self, rows: pd.DataFrame, spec) -> "BestFixedModel":
        check_rows(rows, need_time=True)
        key = ["m", "n", "k", "dtype"]
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
        self.fitted_ = True
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Relative time 2**(mean log2 slowdown); unseen configs rank last.
        A ranking score, not microseconds."""
        self._check_fitted()
        check_rows(rows)
        s = self.scores_.reindex(rows["config_id"].to_numpy()).to_numpy(np.float64)
        return np.exp2(np.where(np.isfinite(s), s, 1e3))


class RandomModel(CostModel):
    """A random ranking (seeded; different per shape). A ranking score, not
    microseconds."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fit(self, rows: pd.DataFrame, spec) -> "RandomModel":
        self.fitted_ = True
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        self._check_fitted()
        check_rows(rows)
        out = np.empty(len(rows))
        for (m, n, k), idx in rows.groupby(["m", "n", "k"]).indices.items():
            rng = np.random.default_rng([self.seed, int(m), int(n), int(k)])
            out[idx] = rng.random(len(idx))
        return out
