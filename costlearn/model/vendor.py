"""The vendor model: per problem, how the best tile config's time compares
with the vendor library's, and how sure that estimate is.

The cost model predicts each config's time, but the difference of two of its
predictions, a tile config's and the vendor's, carries the errors of both
and, on shapes unlike the training rows, little information about which is
faster (docs/results.md, "Triton's matmul on real A100 measurements"). This
model answers the decision's own question directly: it regresses
``y = log2(best measured tile time / vendor time)`` of each
training problem on features of the problem alone (:data:`FEATURES`), with
:data:`MEMBERS` gradient-boosted members fitted on bootstrap samples of the
problems. Their mean is the estimate; their spread, larger on shapes unlike
the training problems, is its uncertainty (Lakshminarayanan et al., "Simple
and scalable predictive uncertainty estimation using deep ensembles", NeurIPS
2017, with bootstrap members as in Breiman's bagging).

What the decision with the estimate gives on held-out problems, against
cuBLAS alone and the model's plain argmin (the H100 random log, and the A100
float16 logs left out or scored from the random log alone), is in
docs/results.md, "Triton's matmul on real A100 measurements".

The members are evaluated as one :class:`~costlearn.model.forest.FlatForest`
whose tree ranges are the members (``bounds``): here in numpy, and inside the
native ranker's call (``vendor_estimate`` in ``_native_score.c``), the same bits.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.families import VENDOR_CONFIG_ID
from costlearn.core.problem import EPILOGUE_FLOPS, LAYOUTS
from costlearn.model.forest import NODE_DTYPE, FlatForest, ForestError

__all__ = ["VendorModel", "VendorEstimate", "FEATURES", "MEMBERS", "MAX_MEMBERS", "problem_row", "problem_features",
           "problem_features_rows", "problem_features_table", "problem_table", "MIN_PROBLEMS"]

POW2_CAP = 8
"""Trailing zero bits of an extent counted up to this (a multiple of 256 and of
512 align alike for every tile this project knows)."""

FEATURES = ("log2_m", "log2_n", "log2_k", "log2_flops", "log2_mn_over_k", "log2_m_over_n",
            "pow2_m", "pow2_n", "pow2_k", "epilogue_flops_per_element") + tuple(f"layout_{lay}" for lay in LAYOUTS)
"""The problem's features: log2 extents, size and aspects, the exponent of the
largest power of two dividing each extent (capped at :data:`POW2_CAP`: the
alignment the vendor library's kernels favour), the epilogue's flops per
output element (:data:`costlearn.core.problem.EPILOGUE_FLOPS`), the layout one-hot."""

MEMBERS = 5
"""Bootstrap members: their spread is the estimate's uncertainty."""

MAX_MEMBERS = 32
"""Most members a vendor model file may hold (the native ranker's estimate
sums at most this many; a file with more is damaged)."""

MEMBER_PARAMS = dict(n_estimators=75, max_depth=4, learning_rate=0.2, subsample=0.8, colsample_bytree=0.8,
                     min_child_weight=2.0, tree_method="hist", n_jobs=1)
"""XGBoost settings of one member: shallow, a few hundred problems suffice.
Fewer trees at a higher rate decide as well as twice as many at half the
rate, at half the trees a query walks (the A100 and H100 logs' decisions
re-made with members of each setting: docs/results.md, "Triton's matmul on
real A100 measurements")."""

BASE_LIMIT = 64.0
"""Largest base score (log2 of a time ratio) a member may carry: a file with
more is damaged (a ratio of 2**64 is no measurement)."""

MIN_PROBLEMS = 10
"""Fewest problems with both a tile and a vendor measurement the model is
fitted on (fewer: no vendor model; the floor decides without it)."""


class VendorEstimate(NamedTuple):
    """The vendor model's answer for one problem.

    Attributes
    ----------
    mean_log2 : float
        Estimated log2(best tile config's time / vendor's time): below 0, a
        tile config beats the vendor library.
    sd_log2 : float
        The members' standard deviation of it (log2), >= 0.
    """

    mean_log2: float
    sd_log2: float


def problem_row(m: int, n: int, k: int, layout: str, epilogue: str = "none") -> list:
    """:data:`FEATURES` of one problem (validated extents and names), a list
    of F floats (float64; a forest reads them rounded to float32). The
    logarithms are the C library's (:func:`math.log2`), so every ranker sees
    the same row."""
    lm, ln, lk = math.log2(m), math.log2(n), math.log2(k)
    return [lm, ln, lk, lm + ln + lk + 1.0, lm + ln - lk, lm - ln,
            float(min(POW2_CAP, (m & -m).bit_length() - 1)), float(min(POW2_CAP, (n & -n).bit_length() - 1)),
            float(min(POW2_CAP, (k & -k).bit_length() - 1)), float(EPILOGUE_FLOPS[epilogue]),
            *[float(layout == lay) for lay in LAYOUTS]]


def problem_features(m: int, n: int, k: int, layout: str, epilogue: str = "none") -> np.ndarray:
    """:func:`problem_row` as float32, shape (1, F), C-contiguous."""
    return np.array([problem_row(m, n, k, layout, epilogue)], np.float32)


def problem_features_rows(problems) -> np.ndarray:
    """:func:`problem_row` of each of ``problems`` (a sequence of
    :class:`~costlearn.core.problem.Problem`), float32, shape (P, F)."""
    return np.array([problem_row(q.m, q.n, q.k, q.layout, q.epilogue) for q in problems], np.float32) \
        if len(problems) else np.zeros((0, len(FEATURES)), np.float32)


def problem_features_table(problems: pd.DataFrame) -> np.ndarray:
    """:data:`FEATURES` of many problems (columns ``m, n, k, layout``,
    ``epilogue`` where present), float32, shape (P, F): :func:`problem_row`
    row by row."""
    if not len(problems):
        return np.zeros((0, len(FEATURES)), np.float32)
    epi = problems["epilogue"].astype(str) if "epilogue" in problems else ["none"] * len(problems)
    return np.array([problem_row(int(m), int(n), int(k), str(lay), e) for (m, n, k, lay), e in
                     zip(problems[["m", "n", "k", "layout"]].itertuples(index=False), epi)], np.float32)


def problem_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem of ``rows`` measured with the vendor and at least
    one tile config: ``m, n, k, layout, epilogue`` and ``y``, log2(best
    measured tile time / vendor time) (median over repeats of a config first).

    Parameters
    ----------
    rows : DataFrame
        Valid rows of one (family, dtype): ``m, n, k, layout, epilogue,
        config_id, time_us``.

    Returns
    -------
    DataFrame
        Sorted by the problem columns; empty (with those columns) when no
        problem has both.
    """
    import pandas as pd
    cols = ["m", "n", "k", "layout", "epilogue"]
    if "epilogue" not in rows:
        rows = rows.assign(epilogue="none")
    if rows.empty:
        return pd.DataFrame(columns=cols + ["y"])
    med = rows.groupby(cols + ["config_id"], observed=True, sort=False)["time_us"].median().reset_index()
    med["vendor"] = med["config_id"].astype(str) == VENDOR_CONFIG_ID
    t = med.groupby(cols + ["vendor"], observed=True)["time_us"].min().unstack("vendor")
    if True not in t.columns or False not in t.columns:
        return pd.DataFrame(columns=cols + ["y"])
    t = t.dropna()
    out = t.index.to_frame(index=False)
    out["y"] = np.log2(t[False].to_numpy(np.float64) / t[True].to_numpy(np.float64))
    out["layout"], out["epilogue"] = out["layout"].astype(str), out["epilogue"].astype(str)
    return out.sort_values(cols, kind="stable").reset_index(drop=True)


class VendorModel:
    """The fitted members, as one flat forest.

    Parameters
    ----------
    forest : FlatForest
        Every member's trees in order, base score 0.
    bounds : ndarray of int32, shape (MEMBERS + 1,)
        Member i's trees are ``[bounds[i], bounds[i + 1])``.
    bases : ndarray of float64, shape (MEMBERS,)
        Each member's base score.

    Raises
    ------
    ValueError
        If the bounds do not partition the forest's trees into 2 to
        :data:`MAX_MEMBERS` members, or its width is not :data:`FEATURES`'.
    """

    def __init__(self, forest: FlatForest, bounds, bases):
        self.forest = forest
        self.bounds = np.ascontiguousarray(bounds, np.int32)
        self.bases = np.ascontiguousarray(bases, np.float64)
        if self.bases.ndim != 1 or not np.isfinite(self.bases).all() or (np.abs(self.bases) > BASE_LIMIT).any():
            raise ValueError(f"vendor model: base scores {self.bases.tolist()!r:.200} must be one finite log2 "
                             f"ratio per member, within +-{BASE_LIMIT:g}")
        self._bases = self.bases.tolist()
        n = len(forest.roots)
        if not (self.bounds.ndim == 1 and MAX_MEMBERS + 1 >= len(self.bounds) == len(self.bases) + 1 >= 3
                and self.bounds[0] == 0 and self.bounds[-1] == n
                and (np.diff(self.bounds) > 0).all()):
            raise ValueError(f"vendor model: bounds {self.bounds.tolist()!r:.200} do not split {n} trees into "
                             f"{len(self.bases)} members (2 to {MAX_MEMBERS})")
        if forest.n_features != len(FEATURES):
            raise ValueError(f"vendor model: {forest.n_features} features; this code's are {len(FEATURES)} "
                             f"({', '.join(FEATURES)}); retrain")

    @classmethod
    def fit(cls, problems: pd.DataFrame, members: int = MEMBERS, seed: int = 0) -> "VendorModel":
        """Fit on :func:`problem_table` rows.

        Raises
        ------
        ValueError
            If fewer than :data:`MIN_PROBLEMS` problems are given or
            ``members`` < 2.
        """
        import xgboost as xgb
        if len(problems) < MIN_PROBLEMS or members < 2:
            raise ValueError(f"a vendor model needs {MIN_PROBLEMS} problems and 2 members; got {len(problems)} "
                             f"and {members}")
        X = problem_features_table(problems)
        y = problems["y"].to_numpy(np.float64)
        rng = np.random.default_rng([seed, 35])
        forests = []
        for i in range(members):
            at = rng.integers(0, len(X), len(X))
            booster = xgb.XGBRegressor(random_state=seed * 1000 + i, **MEMBER_PARAMS).fit(X[at], y[at]).get_booster()
            forests.append(FlatForest.from_xgboost(booster))
        return cls.concat(forests)

    @classmethod
    def concat(cls, forests) -> "VendorModel":
        """One model of member forests (each keeps its base score apart)."""
        nodes, roots, depths, bounds, offset = [], [], [], [0], 0
        for f in forests:
            nodes.append(f.nodes)
            roots.append(f.roots + offset)
            depths.append(f.depths)
            offset += len(f.nodes)
            bounds.append(bounds[-1] + len(f.roots))
        forest = FlatForest(np.concatenate(nodes) if nodes else np.zeros(0, NODE_DTYPE),
                            np.concatenate(roots), np.concatenate(depths), 0.0, len(FEATURES))
        return cls(forest, bounds, [f.base_score for f in forests])

    def estimate(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation over the members (log2 of best tile /
        vendor), each float64 of shape (R,).

        Parameters
        ----------
        X : ndarray of float32, shape (R, F)
            :func:`problem_features` rows.
        """
        s = self.forest.range_sums_numpy(X, self.bounds)
        got = [self._moments(col) for col in s.T.tolist()]
        return np.array([g[0] for g in got], np.float64), np.array([g[1] for g in got], np.float64)

    def estimate_problem(self, m: int, n: int, k: int, layout: str, epilogue: str = "none") -> VendorEstimate:
        """:meth:`estimate` of one problem (M, N, K >= 1, a layout and
        epilogue name): the numpy ranker's path; the native ranker computes
        the same bits in C."""
        col = self.forest.range_sums_numpy(np.array([problem_row(m, n, k, layout, epilogue)], np.float32),
                                           self.bounds)[:, 0].tolist()
        return VendorEstimate(*self._moments(col))

    def _moments(self, sums: list) -> tuple[float, float]:
        """Mean and standard deviation over the members of one problem's
        leaf sums (each plus its member's base score), in Python floats: the
        same bits on the batch and the per-query path."""
        vals = [v + b for v, b in zip(sums, self._bases)]
        mean = math.fsum(vals) / len(vals)
        return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))

    def arrays(self) -> dict:
        """For ``numpy.savez`` (keys ``forest_*``, ``bounds``, ``bases``)."""
        return dict(self.forest.arrays(), bounds=self.bounds, bases=self.bases)

    @classmethod
    def from_arrays(cls, z) -> "VendorModel":
        """Inverse of :meth:`arrays`.

        Raises
        ------
        ValueError
            If a key is missing or the arrays are inconsistent.
        """
        try:
            return cls(FlatForest.from_arrays(z), np.asarray(z["bounds"]), np.asarray(z["bases"]))
        except (KeyError, ForestError) as e:
            raise ValueError(f"vendor model: {e}") from None

