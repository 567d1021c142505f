"""The product's cost model: gradient-boosted trees (XGBoost) on log2 time."""
from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.model.base import BoostedTreesModel, check_rows
from costlearn.model.forest import FlatForest
from costlearn.model.scorer import Scorer

__all__ = ["XGBParams", "XGBCostModel", "OBJECTIVES"]


@dataclass(frozen=True)
class XGBParams:
    """Hyper-parameters of :class:`XGBCostModel` (XGBoost names).

    Parameters
    ----------
    n_estimators : int
        Upper bound on boosting rounds; early stopping on a shape-grouped
        validation split picks the number used.
    max_depth, learning_rate, subsample, colsample_bytree, min_child_weight,
    reg_lambda :
        As in ``xgboost.train``.
    early_stopping_rounds : int
    validation_share : float
        Share of training shapes held out (whole) for early stopping.
    n_jobs : int
        Threads used by XGBoost in fit and predict.
    seed : int
    objective : {"log_time", "log_slowdown", "rank_pairwise"}
        Training target; see :data:`OBJECTIVES`. Only ``log_time`` predicts
        microseconds.
    """

    n_estimators: int = 2000
    max_depth: int = 8
    learning_rate: float = 0.05
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    min_child_weight: float = 2.0
    reg_lambda: float = 1.0
    early_stopping_rounds: int = 100
    validation_share: float = 0.2
    n_jobs: int = 1
    seed: int = 0
    objective: str = "log_time"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"XGBParams.objective={self.objective!r}; allowed: {OBJECTIVES}")

    def booster_params(self) -> dict:
        """The parameters as ``xgboost.train`` takes them (objective and metric from :attr:`objective`)."""
        obj, metric = {"log_time": ("reg:squarederror", "rmse"),
                       "log_slowdown": ("reg:squarederror", "rmse"),
                       "rank_pairwise": ("rank:pairwise", "ndcg@5")}[self.objective]
        return dict(objective=obj, eval_metric=metric, max_depth=self.max_depth,
                    eta=self.learning_rate, subsample=self.subsample,
                    colsample_bytree=self.colsample_bytree, min_child_weight=self.min_child_weight,
                    reg_lambda=self.reg_lambda, nthread=self.n_jobs, seed=self.seed,
                    tree_method="hist")


OBJECTIVES = ("log_time", "log_slowdown", "rank_pairwise")
"""Training targets: ``log_time`` regresses log2(time_us) (predictions are
times); ``log_slowdown`` regresses log2(time / best time of the shape), the
per-shape normalised label of TVM's XGBoost cost model; ``rank_pairwise``
learns the order within each shape (XGBoost ``rank:pairwise``, the shape as
the query group, relevance 8 for the best config down to 0 at 2x slower).
Only ``log_time`` predicts microseconds; the other two predict a ranking score
(``predict`` then returns 2**score, relative)."""


def _labels(rows: pd.DataFrame, groups: np.ndarray, objective: str) -> np.ndarray:
    """Training labels for ``objective`` (see :data:`OBJECTIVES`)."""
    import pandas as pd
    y = np.log2(rows["time_us"].to_numpy(np.float64))
    if objective == "log_time":
        return y
    best = pd.Series(y).groupby(groups).transform("min").to_numpy()
    slow = y - best
    if objective == "log_slowdown":
        return slow
    return np.clip(np.round(8.0 - 8.0 * slow), 0, 8)    # relevance: 8 best .. 0 at 2x


class XGBCostModel(BoostedTreesModel):
    """XGBoost regressor of log2(time_us) on a feature set.

    Parameters
    ----------
    feature_set : {"analytic", "raw", "derived"}
    params : XGBParams, optional

    Attributes
    ----------
    booster_ : xgboost.Booster
    spec_ : DeviceSpec
    feature_names_ : tuple of str
    best_iteration_ : int
    validation_rmse_log2_ : float
        RMSE of log2 time on the held-out validation shapes.
    """

    name = "xgboost"
    params_type = XGBParams

    @property
    def predicts_time(self) -> bool:
        """Only the ``log_time`` objective predicts microseconds."""
        return self._params().objective == "log_time"

    def fit(self, rows: pd.DataFrame, spec) -> "XGBCostModel":
        """Fit on valid rows measured on ``spec``.

        Raises
        ------
        ValueError
            If rows lack columns, have non-positive or non-finite times, or
            cover fewer than 2 problems.
        """
        import xgboost as xgb

        self._fit_start(rows, spec)
        p = self._params()
        rows, groups, X, tr, va = self._split(rows, contiguous=True)   # query groups must be contiguous
        y = _labels(rows, groups, p.objective)
        names = list(self.feature_names_)
        qid = (lambda idx: groups[idx]) if p.objective == "rank_pairwise" else (lambda idx: None)
        dtr = xgb.DMatrix(X[tr], label=y[tr], qid=qid(tr), feature_names=names)
        dva = xgb.DMatrix(X[va], label=y[va], qid=qid(va), feature_names=names)
        bst = xgb.train(p.booster_params(), dtr, num_boost_round=p.n_estimators,
                        evals=[(dva, "validation")], early_stopping_rounds=p.early_stopping_rounds,
                        verbose_eval=False)
        best = int(bst.best_iteration) + 1
        # Refit on all shapes with the number of rounds validation chose.
        dall = xgb.DMatrix(X, label=y, qid=qid(np.arange(len(y))), feature_names=names)
        self.booster_ = xgb.train(p.booster_params(), dall, num_boost_round=best, verbose_eval=False)
        self.best_iteration_ = best
        pred_va = bst.predict(dva, iteration_range=(0, best))
        self.validation_rmse_log2_ = (float(np.sqrt(np.mean((pred_va - y[va]) ** 2)))
                                      if p.objective != "rank_pairwise" else float("nan"))
        self.fitted_ = True
        return self

    def predict_log2(self, X: np.ndarray) -> np.ndarray:
        """log2 predicted time (or ranking score, lower is better) from a
        feature matrix (float32, shape (R, F))."""
        self.check_fitted()
        out = np.asarray(self.booster_.inplace_predict(X, validate_features=False), np.float64)
        return -out if self._params().objective == "rank_pairwise" else out

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted time, microseconds (a relative score for the ranking
        objectives), float64, shape (len(rows),)."""
        self.check_fitted()
        check_rows(rows)
        return np.exp2(self.predict_log2(self._features(rows)))

    def save(self, folder) -> dict:
        """Write ``model.ubj`` (XGBoost's own binary format) and return the
        state: settings, feature names, rounds, validation RMSE, file digest."""
        self.check_fitted()
        files = self._write(folder, "model.ubj", bytes(self.booster_.save_raw("ubj")))
        return self._state(files, best_iteration=self.best_iteration_,
                           validation_rmse_log2=self.validation_rmse_log2_)

    @classmethod
    def load(cls, folder, state: dict, spec) -> "XGBCostModel":
        """Rebuild from :meth:`save`'s files and state.

        Raises
        ------
        ValueError
            If ``model.ubj`` is missing, not the file of this state, or not
            an XGBoost model.
        """
        import xgboost as xgb
        path = cls._read(folder, state, "model.ubj")
        booster = xgb.Booster()
        try:
            booster.load_model(str(path))
        except xgb.core.XGBoostError as e:
            first = str(e).replace("\x00", "").strip().splitlines()[0][:200] if str(e).strip() else "unknown"
            raise ValueError(f"unreadable XGBoost model {path}: {first}") from None
        model = cls._from_state(state, spec)
        model.booster_ = booster
        model.best_iteration_ = state.get("best_iteration")
        model.validation_rmse_log2_ = state.get("validation_rmse_log2")
        return model

    def scorer(self, feature_names, candidate_ids):
        """The booster's trees as a flat forest (sign -1 for ``rank_pairwise``:
        its margin is higher for faster configs).

        Raises
        ------
        ValueError
            If ``feature_names`` are not the model's, or the booster cannot
            be flattened.
        """
        self._check_columns(feature_names)
        sign = -1.0 if self._params().objective == "rank_pairwise" else 1.0
        return Scorer(len(self.feature_names_), FlatForest.from_xgboost(self.booster_), sign)
