"""The product's cost model: gradient-boosted trees (XGBoost) on log2 time."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..features import get_feature_set
from .base import CostModel, check_rows

__all__ = ["XGBParams", "XGBCostModel"]


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

    def booster_params(self) -> dict:
        return dict(objective="reg:squarederror", eval_metric="rmse", max_depth=self.max_depth,
                    eta=self.learning_rate, subsample=self.subsample,
                    colsample_bytree=self.colsample_bytree, min_child_weight=self.min_child_weight,
                    reg_lambda=self.reg_lambda, nthread=self.n_jobs, seed=self.seed,
                    tree_method="hist")


def shape_groups(rows: pd.DataFrame) -> np.ndarray:
    """Integer id of each row's shape (M, N, K, dtype), shape (len(rows),),
    for shape-grouped splits (a shape never straddles train and validation)."""
    return rows.groupby(["m", "n", "k", "dtype"], sort=True).ngroup().to_numpy()


class XGBCostModel(CostModel):
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

    def __init__(self, feature_set: str = "analytic", params: XGBParams | None = None):
        self.feature_set = feature_set
        self.params = params

    def _features(self, rows: pd.DataFrame) -> np.ndarray:
        fs = get_feature_set(self.feature_set)
        return fs.transform(rows, self.spec_).to_numpy(np.float32)

    def fit(self, rows: pd.DataFrame, spec) -> "XGBCostModel":
        """Fit on valid rows measured on ``spec``.

        Raises
        ------
        ValueError
            If rows lack columns, have non-positive or non-finite times, or
            cover fewer than 2 shapes.
        """
        import xgboost as xgb
        from sklearn.model_selection import GroupShuffleSplit

        check_rows(rows, need_time=True)
        p = self.params or XGBParams()
        self.spec_ = spec
        self.feature_names_ = tuple(get_feature_set(self.feature_set).feature_names)
        X = self._features(rows)
        y = np.log2(rows["time_us"].to_numpy(np.float64))
        groups = shape_groups(rows)
        if len(np.unique(groups)) < 2:
            raise ValueError(f"need rows from at least 2 shapes to fit, got {len(np.unique(groups))}")
        split = GroupShuffleSplit(n_splits=1, test_size=p.validation_share, random_state=p.seed)
        tr, va = next(split.split(X, y, groups))
        dtr = xgb.DMatrix(X[tr], label=y[tr], feature_names=list(self.feature_names_))
        dva = xgb.DMatrix(X[va], label=y[va], feature_names=list(self.feature_names_))
        bst = xgb.train(p.booster_params(), dtr, num_boost_round=p.n_estimators,
                        evals=[(dva, "validation")], early_stopping_rounds=p.early_stopping_rounds,
                        verbose_eval=False)
        best = int(bst.best_iteration) + 1
        # Refit on all shapes with the number of rounds validation chose.
        dall = xgb.DMatrix(X, label=y, feature_names=list(self.feature_names_))
        self.booster_ = xgb.train(p.booster_params(), dall, num_boost_round=best, verbose_eval=False)
        self.best_iteration_ = best
        pred_va = bst.predict(dva, iteration_range=(0, best))
        self.validation_rmse_log2_ = float(np.sqrt(np.mean((pred_va - y[va]) ** 2)))
        self.fitted_ = True
        return self

    def predict_log2(self, X: np.ndarray) -> np.ndarray:
        """log2 predicted time from a feature matrix (float32, shape (R, F))."""
        self._check_fitted()
        return np.asarray(self.booster_.inplace_predict(X, validate_features=False), np.float64)

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted time, microseconds, float64, shape (len(rows),)."""
        self._check_fitted()
        check_rows(rows)
        return np.exp2(self.predict_log2(self._features(rows)))
