"""CostModel seam: scikit-learn's estimator contract over dataset rows.

``__init__`` stores settings only; ``fit(rows)`` validates, learns from the
rows' ``time_us`` and returns self; learned attributes end in ``_``;
``predict(rows)`` before ``fit`` raises :class:`NotFittedError`; predictions
are times in microseconds, shape (len(rows),), float64.
"""
from __future__ import annotations

import abc
import importlib

import numpy as np
import pandas as pd

from ..registry import lookup

__all__ = ["CostModel", "NotFittedError", "MODELS", "get_model", "REQUIRED_COLUMNS", "check_rows"]

REQUIRED_COLUMNS = ("m", "n", "k", "dtype", "block_m", "block_n", "block_k", "thread_m", "thread_n",
                    "loop_order", "smem_pad", "raster", "config_id")
"""Columns every model needs in the rows it is given."""


class NotFittedError(RuntimeError):
    """A model was used before ``fit``."""


def check_rows(rows, need_time: bool = False) -> pd.DataFrame:
    """Validate rows given to a model.

    Raises
    ------
    TypeError
        If ``rows`` is not a DataFrame.
    ValueError
        If a required column is missing, there are no rows, or (with
        ``need_time``) a time is not finite and positive.
    """
    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"rows must be a pandas DataFrame, got {type(rows).__name__}")
    need = list(REQUIRED_COLUMNS) + (["time_us"] if need_time else [])
    missing = [c for c in need if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lack columns {missing}")
    if need_time:
        if rows.empty:
            raise ValueError("cannot fit on zero rows")
        t = rows["time_us"].to_numpy(np.float64)
        bad = ~(np.isfinite(t) & (t > 0))
        if bad.any():
            raise ValueError(f"{int(bad.sum())} rows have a time_us that is not finite and positive "
                             f"(first: {t[bad][0]!r}); filter with costlearn.dataset.valid_rows")
    return rows


class CostModel(abc.ABC):
    """Predicts kernel time (microseconds) of (shape, config) rows on one
    device."""

    name = ""

    @abc.abstractmethod
    def fit(self, rows: pd.DataFrame, spec) -> "CostModel":
        """Must learn from ``rows`` (valid rows with ``time_us``) measured on
        ``spec`` and return self."""

    @abc.abstractmethod
    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Must return predicted ``time_us``, float64, shape (len(rows),);
        raise NotFittedError before fit."""

    def _check_fitted(self):
        if not getattr(self, "fitted_", False):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(rows, spec) first")


MODELS = {
    "xgboost": ("costlearn.model.xgb", "XGBCostModel"),
    "roofline": ("costlearn.model.baselines", "RooflineModel"),
    "best_fixed": ("costlearn.model.baselines", "BestFixedModel"),
    "random": ("costlearn.model.baselines", "RandomModel"),
}


def get_model(name: str, **settings) -> CostModel:
    """Construct a cost model by name.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known ones).
    """
    mod, cls = lookup(MODELS, name, "model")
    return getattr(importlib.import_module(mod), cls)(**settings)
