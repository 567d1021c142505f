"""A second gradient-boosted cost model: scikit-learn's
HistGradientBoostingRegressor on log2 time, plugged into the CostModel seam
unchanged (the proof that the seam holds a model other than XGBoost).

After fitting, the estimator's trees are flattened
(:class:`~costlearn.model.forest.FlatForest`) and every prediction is made
from the flat forest, before and after a save/load round trip alike, so both
give the same bits and loading needs no scikit-learn. The trees are read from
the fitted estimator's ``_predictors`` (each a ``TreePredictor`` whose
``nodes`` record array holds ``feature_idx``, ``num_threshold``, ``left``,
``right``, ``is_leaf`` and ``value``), the only way
scikit-learn exposes them; the export is checked against
``HistGradientBoostingRegressor.predict`` and refused when it disagrees.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from costlearn.core.checks import check_int
from costlearn.model.base import BoostedTreesModel, check_rows
from costlearn.model.forest import FlatForest, ForestError
from costlearn.model.scorer import Scorer

__all__ = ["HGBParams", "HGBCostModel"]


@dataclass(frozen=True)
class HGBParams:
    """Hyper-parameters of :class:`HGBCostModel` (scikit-learn names).

    Parameters
    ----------
    max_iter : int
        Upper bound on boosting iterations; early stopping on a
        problem-grouped validation split picks the number used.
    learning_rate, max_leaf_nodes, max_depth, min_samples_leaf, l2_regularization, max_bins :
        As in ``sklearn.ensemble.HistGradientBoostingRegressor``.
    n_iter_no_change : int
        Early-stopping patience, iterations.
    validation_share : float
        Share of training problems held out (whole) for early stopping.
    n_jobs : int
        OpenMP threads scikit-learn uses in fit and predict (its own default
        is every core: on a core another process keeps busy, each of its
        many short parallel regions then waits for a descheduled thread).
    seed : int
    """

    max_iter: int = 2000
    learning_rate: float = 0.05
    max_leaf_nodes: int = 63
    max_depth: int | None = 8
    min_samples_leaf: int = 10
    l2_regularization: float = 1.0
    max_bins: int = 255
    n_iter_no_change: int = 100
    validation_share: float = 0.2
    n_jobs: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("HGBParams.n_jobs", self.n_jobs, 1)


SKLEARN_TESTED = ((1, 6), (1, 9))
"""scikit-learn versions (major, minor), first and last, whose private tree
attributes :func:`_sklearn_internals` was checked against."""


def _sklearn_internals(estimator) -> tuple[list, float]:
    """The one place scikit-learn's private attributes are read: a fitted
    HistGradientBoostingRegressor's trees (``_predictors``) and base score
    (``_baseline_prediction``).

    Raises
    ------
    ForestError
        If the installed scikit-learn lacks them, naming its version and the
        versions checked (:data:`SKLEARN_TESTED`).
    """
    import sklearn
    try:
        return list(estimator._predictors), float(np.ravel(estimator._baseline_prediction)[0])
    except AttributeError as e:
        lo, hi = SKLEARN_TESTED
        raise ForestError(f"scikit-learn {sklearn.__version__} keeps HistGradientBoosting's trees elsewhere ({e}); "
                          f"the hgb model reads versions {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}") from None


def _trees_of(predictors) -> list[dict]:
    """Trees (``_sklearn_internals``' first value) in :meth:`FlatForest.from_trees` form.
    scikit-learn goes left when ``x <= num_threshold`` (float64); for float32
    x that is ``x < nextafter(f, +inf)`` with f the largest float32 <=
    num_threshold, which the flat layout's ``x < threshold`` rule takes."""
    trees = []
    for per_iter in predictors:
        if len(per_iter) != 1:
            raise ForestError("only single-output HistGradientBoosting models can be flattened")
        nodes = per_iter[0].nodes
        if nodes["is_categorical"].any():
            raise ForestError("categorical splits cannot be flattened")
        leaf = nodes["is_leaf"].astype(bool)
        t = nodes["num_threshold"].astype(np.float64)
        f = t.astype(np.float32)
        f = np.where(f.astype(np.float64) > t, np.nextafter(f, np.float32(-np.inf)), f)
        trees.append(dict(first=np.where(leaf, -1, nodes["left"].astype(np.int64)),
                          second=np.where(leaf, -1, nodes["right"].astype(np.int64)),
                          feature=nodes["feature_idx"], threshold=np.nextafter(f, np.float32(np.inf)),
                          value=nodes["value"].astype(np.float32)))
    return trees


class HGBCostModel(BoostedTreesModel):
    """HistGradientBoostingRegressor of log2(time_us) on a feature set.

    Parameters
    ----------
    feature_set : {"analytic", "raw", "derived"}
    params : HGBParams, optional

    Attributes
    ----------
    forest_ : FlatForest
        The fitted trees; :meth:`predict` evaluates these.
    spec_ : DeviceSpec
    feature_names_ : tuple of str
    n_iter_ : int
        Boosting iterations chosen by early stopping.
    validation_rmse_log2_ : float
        RMSE of log2 time on the held-out validation problems.
    """

    name = "hgb"
    params_type = HGBParams

    def _estimator(self, max_iter: int, early: bool):
        from sklearn.ensemble import HistGradientBoostingRegressor
        p = self._params()
        return HistGradientBoostingRegressor(
            loss="squared_error", learning_rate=p.learning_rate, max_iter=max_iter,
            max_leaf_nodes=p.max_leaf_nodes, max_depth=p.max_depth, min_samples_leaf=p.min_samples_leaf,
            l2_regularization=p.l2_regularization, max_bins=p.max_bins, early_stopping=early,
            n_iter_no_change=p.n_iter_no_change, random_state=p.seed)

    def fit(self, rows: pd.DataFrame, spec) -> "HGBCostModel":
        """Fit on valid rows measured on ``spec``.

        Raises
        ------
        ValueError
            If rows lack columns, have non-positive or non-finite times, or
            cover fewer than 2 problems.
        ForestError
            If the fitted trees cannot be flattened exactly.
        """
        self._fit_start(rows, spec)
        p = self._params()
        rows, _, X, tr, va = self._split(rows)
        y = np.log2(rows["time_us"].to_numpy(np.float64))
        with threadpool_limits(limits=p.n_jobs, user_api="openmp"):
            probe = self._estimator(p.max_iter, True).fit(X[tr], y[tr], X_val=X[va], y_val=y[va])
            self.n_iter_ = int(probe.n_iter_)
            self.validation_rmse_log2_ = float(np.sqrt(np.mean((probe.predict(X[va]) - y[va]) ** 2)))
            est = self._estimator(self.n_iter_, False).fit(X, y)
            sk_margin = est.predict(X[:2000]) if len(X) else None
        predictors, base = _sklearn_internals(est)
        forest = FlatForest.from_trees(_trees_of(predictors), base, X.shape[1])
        err = np.abs(forest.margin_numpy(X[:2000]) - sk_margin).max() if len(X) else 0.0
        if not err <= 1e-4:
            raise ForestError(f"the flattened trees differ from scikit-learn's predictions by {err:.3g} (log2)")
        self.forest_ = forest
        self.fitted_ = True
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted time, microseconds, float64, shape (len(rows),)."""
        self.check_fitted()
        check_rows(rows)
        return np.exp2(self.forest_.margin_numpy(self._features(rows)))

    def save(self, folder) -> dict:
        """Write ``model.npz`` (the flat trees) and return the state."""
        self.check_fitted()
        buf = io.BytesIO()
        np.savez(buf, **self.forest_.arrays())
        files = self._write(folder, "model.npz", buf.getvalue())
        return self._state(files, n_iter=self.n_iter_, validation_rmse_log2=self.validation_rmse_log2_)

    @classmethod
    def load(cls, folder, state: dict, spec) -> "HGBCostModel":
        """Rebuild from :meth:`save`'s files and state (no scikit-learn needed).

        Raises
        ------
        ValueError
            If ``model.npz`` is missing, not this state's, or inconsistent.
        """
        path = cls._read(folder, state, "model.npz")
        with np.load(path, allow_pickle=False) as z:
            forest = FlatForest.from_arrays(z)
        model = cls._from_state(state, spec)
        if forest.n_features != len(model.feature_names_):
            raise ValueError(f"{path}: trees read {forest.n_features} features, the state names "
                             f"{len(model.feature_names_)}")
        model.forest_ = forest
        model.n_iter_ = state.get("n_iter")
        model.validation_rmse_log2_ = state.get("validation_rmse_log2")
        return model

    def scorer(self, feature_names, candidate_ids):
        """The fitted flat forest (its margin is log2 time)."""
        self._check_columns(feature_names)
        return Scorer(len(self.feature_names_), self.forest_, 1.0)
