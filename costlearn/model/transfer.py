"""One model from several devices' rows: what ``costlearn transfer`` fits to
carry a model from one GPU to another.

Two choices make rows of different devices one regression problem (both
measured by ``python -m studies.transfer``: docs/results.md, "A new GPU:
carry a model across devices"):

- **Each row's features are its own device's**: the analytic set computed
  with the spec of the device that measured the row (waves on its SM count,
  occupancy on its shared memory, roofline times on its peak and
  bandwidth), plus the device descriptors of
  :mod:`costlearn.features.device`, so trees can split on the device where
  its behaviour differs (without them a transfer loses more on the
  destination).
- **The target is the time over the roofline time**,
  log2(time_us) - ``log2_roofline_time_us`` (the roofline of the padded
  tile grid [ROOF] on the row's device; design.md "Features"): an
  efficiency, which carries across devices where a time does not. The
  time is the prediction plus that column, so the served scorer is the
  forest plus one column with weight 1 (:class:`~costlearn.model.scorer.Scorer`).

The destination device's rows are few: they are weighted so that together
they count ``destination_share`` of the source rows' weight (at least 1
each).

[ROOF] S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful
visual performance model for multicore architectures", CACM 52(4), 2009.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.features import get_feature_set
from costlearn.features.device import DEVICE_FEATURES, device_features
from costlearn.model.base import shape_groups
from costlearn.model.forest import FlatForest
from costlearn.model.scorer import Scorer
from costlearn.model.xgb import XGBCostModel, XGBParams

__all__ = ["MultiDeviceXGBModel", "ROOFLINE_COLUMN", "TRANSFER_PARAMS", "MIN_DESTINATION_PROBLEMS", "zero_shot_reason"]

ROOFLINE_COLUMN = "log2_roofline_time_us"
"""The analytic column the target is measured from."""

TRANSFER_PARAMS = XGBParams(n_estimators=600, learning_rate=0.1, early_stopping_rounds=50)
"""Default hyper-parameters: the product's depth and sampling with a larger
step and fewer rounds (a transfer refits once per held-out fold)."""


MIN_DESTINATION_PROBLEMS = 16
"""Destination problems a transferred model must have seen for its
predictions not to be flagged as a zero-shot guess."""


def zero_shot_reason(info: dict) -> str | None:
    """The OOD reason every prediction of a transferred model carries while
    it has seen fewer than :data:`MIN_DESTINATION_PROBLEMS` destination
    problems (``info``: a sidecar's ``transfer`` entry); None otherwise."""
    if not isinstance(info, dict) or not info.get("zero_shot"):
        return None
    return (f"zero-shot transfer from {info.get('source_device')}: trained on {info.get('source_device')}'s rows and "
            f"{info.get('destination_problems', 0)} problem(s) measured on {info.get('destination_device')} "
            f"(fewer than {info.get('min_destination_problems', MIN_DESTINATION_PROBLEMS)})")


class MultiDeviceXGBModel(XGBCostModel):
    """XGBoost on the efficiency target over rows of several devices, served
    for one (see the module docstring).

    Parameters
    ----------
    feature_set : {"analytic"}
        The served features (the roofline column must be among them).
    params : XGBParams, optional
        Objective ``log_time`` only (the target is set by this class);
        default :data:`TRANSFER_PARAMS`.
    device_specs : dict of str to DeviceSpec, optional
        The spec of every other device whose rows ``fit`` is given, by
        ``device_slug``; rows without a ``device_slug`` column, or of the
        slug of ``fit``'s spec, are the destination's.
    destination_share : float
        Weight of all destination rows together relative to the other
        devices' rows (each destination row weighs at least 1); in (0, 1].

    Attributes
    ----------
    dtype_ : str
        The dtype of the training rows (the device descriptors' peak).
    rows_by_device_ : dict of str to int
        Training rows per device slug.
    """

    name = "xgboost_devices"

    def __init__(self, feature_set: str = "analytic", params=None, device_specs=None,
                 destination_share: float = 0.2):
        super().__init__(feature_set, params)
        self.device_specs = device_specs
        self.destination_share = destination_share

    def _params(self):
        return self.params or TRANSFER_PARAMS

    def _check_settings(self) -> None:
        if self._params().objective != "log_time":
            raise ValueError(f"{self.name}: objective {self._params().objective!r}; only 'log_time' (the target "
                             "is the time over the roofline time)")
        if not (isinstance(self.destination_share, (int, float)) and 0 < self.destination_share <= 1):
            raise ValueError(f"{self.name}: destination_share={self.destination_share!r}; must be in (0, 1]")

    def _check_roofline_column(self) -> None:
        if ROOFLINE_COLUMN not in self.feature_names_:
            raise ValueError(f"{self.name}: feature set {self.feature_set!r} has no {ROOFLINE_COLUMN} column; "
                             "use 'analytic'")

    def _device_matrix(self, rows: pd.DataFrame, spec) -> np.ndarray:
        """Served features and device descriptors of rows measured on ``spec``."""
        X = get_feature_set(self.feature_set).transform(rows, spec).to_numpy(np.float64)
        d = np.broadcast_to(device_features(spec, self.dtype_), (len(rows), len(_device_names())))
        return np.ascontiguousarray(np.hstack([X, d]), np.float32)

    def _features(self, rows: pd.DataFrame) -> np.ndarray:
        """Rows to run on this model's device: its features and descriptors,
        float32, shape (R, F + D)."""
        return self._device_matrix(rows, self.spec_)

    def _training_matrix(self, rows: pd.DataFrame) -> np.ndarray:
        """Each row's features on the device that measured it."""
        import pandas as pd
        slugs = rows["device_slug"].astype(str).to_numpy() if "device_slug" in rows else \
            np.full(len(rows), self.spec_.slug, object)
        specs = dict(self.device_specs or {})
        X = np.empty((len(rows), len(self.feature_names_) + len(_device_names())), np.float32)
        for slug in pd.unique(slugs):
            idx = np.flatnonzero(slugs == slug)
            if slug == self.spec_.slug:
                spec = self.spec_
            elif slug in specs:
                spec = specs[slug]
            else:
                raise ValueError(f"rows measured on {slug!r}, but device_specs names {sorted(specs)} and the "
                                 f"destination is {self.spec_.slug!r}; give its DeviceSpec")
            X[idx] = self._device_matrix(rows.iloc[idx], spec)
        return X

    def fit(self, rows: pd.DataFrame, spec) -> "MultiDeviceXGBModel":
        """Fit on valid rows of one dtype from the destination ``spec`` and
        the devices of ``device_specs``.

        Raises
        ------
        ValueError
            If rows lack columns, have bad times, mix dtypes, cover fewer
            than 2 problems, come from a device without a spec, or a setting
            is invalid.
        """
        import pandas as pd
        import xgboost as xgb
        from sklearn.model_selection import GroupShuffleSplit

        self._check_settings()
        self._fit_start(rows, spec)
        self._check_roofline_column()
        dtypes = rows["dtype"].astype(str).unique()
        if len(dtypes) != 1:
            raise ValueError(f"{self.name} fits one dtype at a time; rows hold {sorted(dtypes)}")
        self.dtype_ = str(dtypes[0])
        rows = rows.reset_index(drop=True)
        X = self._training_matrix(rows)
        roof = self.feature_names_.index(ROOFLINE_COLUMN)
        y = np.log2(rows["time_us"].to_numpy(np.float64)) - X[:, roof].astype(np.float64)
        dest = (rows["device_slug"].astype(str).to_numpy() == spec.slug) if "device_slug" in rows else \
            np.ones(len(rows), bool)
        w = np.ones(len(rows))
        if dest.any() and (~dest).any():
            w[dest] = max(1.0, self.destination_share * (~dest).sum() / dest.sum())
        self.rows_by_device_ = {str(k): int(v) for k, v in
                                pd.Series(rows["device_slug"] if "device_slug" in rows else
                                          [spec.slug] * len(rows)).astype(str).value_counts().items()}
        groups = shape_groups(rows) * 2 + dest      # a problem of each device is one group
        if len(np.unique(groups)) < 2:
            raise ValueError(f"need rows from at least 2 problems to fit, got {len(np.unique(groups))}")
        p = self._params()
        tr, va = next(GroupShuffleSplit(n_splits=1, test_size=p.validation_share, random_state=p.seed)
                      .split(X, groups=groups))
        names = list(self.feature_names_) + list(_device_names())
        dtr = xgb.DMatrix(X[tr], label=y[tr], weight=w[tr], feature_names=names)
        dva = xgb.DMatrix(X[va], label=y[va], weight=w[va], feature_names=names)
        bst = xgb.train(p.booster_params(), dtr, num_boost_round=p.n_estimators, evals=[(dva, "validation")],
                        early_stopping_rounds=p.early_stopping_rounds, verbose_eval=False)
        best = int(bst.best_iteration) + 1
        self.booster_ = xgb.train(p.booster_params(), xgb.DMatrix(X, label=y, weight=w, feature_names=names),
                                  num_boost_round=best, verbose_eval=False)
        self.best_iteration_ = best
        pred_va = bst.predict(dva, iteration_range=(0, best))
        self.validation_rmse_log2_ = float(np.sqrt(np.average((pred_va - y[va]) ** 2, weights=w[va])))
        self.fitted_ = True
        return self

    def predict_log2(self, X: np.ndarray) -> np.ndarray:
        """log2 predicted time, microseconds, from :meth:`_features`' matrix
        (float32, shape (R, F + D))."""
        self.check_fitted()
        roof = self.feature_names_.index(ROOFLINE_COLUMN)
        out = np.asarray(self.booster_.inplace_predict(X, validate_features=False), np.float64)
        return out + X[:, roof].astype(np.float64)

    def save(self, folder) -> dict:
        """:meth:`XGBCostModel.save` plus the dtype and rows per device."""
        state = super().save(folder)
        state.update(dtype=self.dtype_, rows_by_device=self.rows_by_device_,
                     destination_share=self.destination_share)
        return state

    @classmethod
    def load(cls, folder, state: dict, spec) -> "MultiDeviceXGBModel":
        """Rebuild from :meth:`save`'s files and state, serving ``spec``.

        Raises
        ------
        ValueError
            As :meth:`XGBCostModel.load`, or if the state lacks the dtype.
        """
        if not isinstance(state.get("dtype"), str):
            raise ValueError(f"{cls.name} state lacks its dtype")
        model = super().load(folder, state, spec)
        model.dtype_ = state["dtype"]
        model.rows_by_device_ = dict(state.get("rows_by_device") or {})
        model.destination_share = float(state.get("destination_share", 0.2))
        return model

    def scorer(self, feature_names, candidate_ids):
        """The forest with the device descriptors fixed at this model's
        device (:meth:`~costlearn.model.forest.FlatForest.specialize`), plus
        the roofline column with weight 1.

        Raises
        ------
        ValueError
            If ``feature_names`` are not the model's served columns.
        """
        self._check_columns(feature_names)
        f = len(self.feature_names_)
        fixed = {f + i: v for i, v in enumerate(device_features(self.spec_, self.dtype_))}
        forest = FlatForest.from_xgboost(self.booster_).specialize(fixed, f)
        return Scorer(f, forest, 1.0, column=self.feature_names_.index(ROOFLINE_COLUMN), column_weight=1.0)


def _device_names() -> tuple:
    return DEVICE_FEATURES
