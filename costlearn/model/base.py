"""CostModel seam (design.md, "Seams"): scikit-learn's estimator contract plus
TVM's verbs.

- ``__init__`` stores settings only; ``fit(rows, spec)`` validates, learns
  from the rows' ``time_us`` and returns self; learned attributes end in
  ``_``; ``predict(rows)`` before ``fit`` raises :class:`NotFittedError`;
  predictions are float64 of shape (len(rows),), microseconds where
  :attr:`CostModel.predicts_time`, a relative score otherwise.
- ``save(folder)`` writes the model's own files (atomically) and returns a
  JSON-ready state; ``load(folder, state, spec)`` rebuilds a model that
  predicts exactly what the saved one did.
- ``scorer(feature_names, candidate_ids)`` exports the
  :class:`~costlearn.model.scorer.Scorer` the ranker runs without the
  training library.

Every model in :data:`MODELS` is trained, saved, loaded and served through
these verbs only (``tests/model/test_model.py`` runs one contract over the
registry).
"""
from __future__ import annotations

import abc
import dataclasses
import inspect
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.features import get_feature_set
from costlearn.features.base import rows_family
from costlearn.core.registry import Registry
from costlearn.core.files import atomic_write, sha256_file
from costlearn.core.errors import CostlearnError

__all__ = ["CostModel", "BoostedTreesModel", "NotFittedError", "MODELS", "BASELINES", "get_model",
           "REQUIRED_COLUMNS", "check_rows", "shape_groups"]

REQUIRED_COLUMNS = ("m", "n", "k", "dtype", "layout", "family", "config_id")
"""Columns every model needs in the rows it is given."""


class NotFittedError(CostlearnError, RuntimeError):
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
    import pandas as pd
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
                             f"(first: {t[bad][0]!r}); filter with costlearn.collect.dataset.valid_rows")
    return rows


def shape_groups(rows: pd.DataFrame) -> np.ndarray:
    """Integer id of each row's problem (M, N, K, dtype, layout), shape
    (len(rows),), for problem-grouped splits (a problem never straddles
    train and validation)."""
    cols = [c for c in ("m", "n", "k", "dtype", "layout") if c in rows.columns]
    return rows.groupby(cols, sort=True).ngroup().to_numpy()


class CostModel(abc.ABC):
    """Predicts the time (microseconds) or a ranking score of (problem,
    config) rows on one device.

    Attributes
    ----------
    name : str
        Registry name.
    feature_set : str
        The feature set its scorer reads (:data:`costlearn.features.FEATURE_SETS`).
    predicts_time : bool
        Whether :meth:`predict` returns microseconds (else a relative score).
    """

    name = ""
    feature_set = "analytic"
    predicts_time = True

    @abc.abstractmethod
    def fit(self, rows: pd.DataFrame, spec) -> "CostModel":
        """Must learn from ``rows`` (valid rows with ``time_us``) measured on
        ``spec`` and return self."""

    @abc.abstractmethod
    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Must return float64 of shape (len(rows),), lower is faster; raise
        NotFittedError before fit."""

    @abc.abstractmethod
    def save(self, folder) -> dict:
        """Must write the fitted model's own files into ``folder`` (with
        :meth:`_write`) and return a JSON-ready state for :meth:`load`."""

    @classmethod
    @abc.abstractmethod
    def load(cls, folder, state: dict, spec) -> "CostModel":
        """Must rebuild the fitted model from ``folder`` and ``state``
        (raising ValueError when they do not fit together)."""

    @abc.abstractmethod
    def scorer(self, feature_names, candidate_ids):
        """Must return the :class:`~costlearn.model.scorer.Scorer` that ranks
        candidates ``candidate_ids`` (in order) from rows of
        ``feature_names``, as :meth:`predict` ranks them."""

    def check_fitted(self) -> None:
        """Raise NotFittedError unless :meth:`fit` (or :meth:`load`) has run."""
        if not getattr(self, "fitted_", False):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(rows, spec) first")

    @staticmethod
    def _write(folder, name: str, data) -> dict:
        """Write one file of the model atomically; returns ``{name: sha256}``
        for the state (``data`` as for :func:`costlearn.core.files.atomic_write`)."""
        path = atomic_write(Path(folder) / name, data)
        return {name: sha256_file(path)}

    @staticmethod
    def _read(folder, state: dict, name: str) -> Path:
        """The path of a file :meth:`_write` wrote, checked against the sha256
        in ``state["files"]``.

        Raises
        ------
        ValueError
            If the file is missing or its bytes differ.
        """
        path = Path(folder) / name
        want = state.get("files", {}).get(name)
        if not path.is_file():
            raise ValueError(f"{path} is missing")
        if want is None or sha256_file(path) != want:
            raise ValueError(f"{path} does not belong to this model (sha256 differs from the sidecar): a "
                             "training may be writing this folder; retry, or retrain")
        return path


class BoostedTreesModel(CostModel):
    """What the gradient-boosted models share: settings (a feature set and a
    frozen params object of :attr:`params_type`), their feature matrix, and
    the state their ``save`` writes and ``load`` reads.

    Parameters
    ----------
    feature_set : {"analytic", "raw", "derived"}
    params : params_type, optional
        Hyper-parameters (the class's defaults when None).
    """

    params_type: type = object

    def __init__(self, feature_set: str = "analytic", params=None):
        self.feature_set = feature_set
        self.params = params

    def _params(self):
        return self.params or self.params_type()

    def _fit_start(self, rows: pd.DataFrame, spec) -> None:
        """Validate rows and record the device and the feature columns."""
        check_rows(rows, need_time=True)
        self.spec_ = spec
        self.feature_names_ = tuple(get_feature_set(self.feature_set).feature_names(rows_family(rows)))

    def _features(self, rows: pd.DataFrame) -> np.ndarray:
        """The rows' feature matrix, float32, shape (R, F), C-contiguous."""
        return np.ascontiguousarray(get_feature_set(self.feature_set).transform(rows, self.spec_).to_numpy(np.float32))

    def _split(self, rows: pd.DataFrame, *, contiguous: bool = False):
        """The rows (ordered by problem when ``contiguous``: query groups for
        ranking objectives), their problem groups, feature matrix, and a
        problem-grouped train/validation split of the params'
        ``validation_share`` and ``seed`` (sorted row indices).

        Raises
        ------
        ValueError
            If the rows cover fewer than 2 problems.
        """
        from sklearn.model_selection import GroupShuffleSplit
        p = self._params()
        groups = shape_groups(rows)
        n = len(np.unique(groups))
        if n < 2:
            raise ValueError(f"need rows from at least 2 problems to fit, got {n}")
        if contiguous:
            order = np.argsort(groups, kind="stable")
            rows, groups = rows.iloc[order], groups[order]
        X = self._features(rows)
        split = GroupShuffleSplit(n_splits=1, test_size=p.validation_share, random_state=p.seed)
        tr, va = next(split.split(X, groups=groups))
        return rows, groups, X, np.sort(tr), np.sort(va)

    def _state(self, files: dict, **fitted) -> dict:
        """The JSON-ready state: settings, feature names, fitted scalars, files."""
        return dict(settings=dict(feature_set=self.feature_set, params=dataclasses.asdict(self._params())),
                    feature_names=list(self.feature_names_), files=files, **fitted)

    @classmethod
    def _from_state(cls, state: dict, spec) -> "BoostedTreesModel":
        """A fitted-looking model with the state's settings and feature names
        (the subclass adds what it learned)."""
        settings = state["settings"]
        model = cls(feature_set=settings["feature_set"], params=cls.params_type(**settings["params"]))
        model.spec_, model.feature_names_ = spec, tuple(state["feature_names"])
        model.fitted_ = True
        return model

    def _check_columns(self, feature_names) -> None:
        self.check_fitted()
        if tuple(feature_names) != tuple(self.feature_names_):
            raise ValueError("the scorer must read the model's own feature columns")


MODELS = Registry("cost model", {
    "xgboost": "costlearn.model.xgb:XGBCostModel",
    "xgboost_devices": "costlearn.model.transfer:MultiDeviceXGBModel",
    "hgb": "costlearn.model.hgb:HGBCostModel",
    "roofline": "costlearn.model.baselines:RooflineModel",
    "best_fixed": "costlearn.model.baselines:BestFixedModel",
}, hints={"xgboost": "pip install xgboost", "xgboost_devices": "pip install xgboost"})
"""Registered cost models. ``xgboost`` is the product; ``hgb`` a second
gradient-boosted model (scikit-learn's HistGradientBoostingRegressor);
``xgboost_devices`` the model ``costlearn transfer`` fits on several devices'
rows (:mod:`costlearn.model.transfer`); ``roofline`` and ``best_fixed`` the
baselines."""


BASELINES = ("roofline", "best_fixed")
"""The registered models every training and evaluation compares the model
against, in report order (with a random ranking,
:func:`costlearn.learn.metrics.random_scores`)."""


def get_model(name: str, **settings) -> CostModel:
    """Construct a cost model by name.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known ones), or a
        setting is not one that model takes (the message lists those it
        takes, e.g. ``feature_set`` for the gradient-boosted models only).
    costlearn.core.registry.Unavailable
        If its library is missing (with an install hint).
    """
    cls = MODELS.get(name)
    takes = [p for p in inspect.signature(cls).parameters if p != "self"]
    unknown = sorted(set(settings) - set(takes))
    if unknown:
        raise ValueError(f"model {name!r} takes no setting {', '.join(map(repr, unknown))} (CLI: "
                         f"{', '.join('--' + u.replace('_', '-') for u in unknown)}); "
                         + (f"its settings: {takes}" if takes else "it has no settings"))
    return cls(**settings)
