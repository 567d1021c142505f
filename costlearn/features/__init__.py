"""FeatureSet seam: stateless; rows in, a float64 DataFrame with exactly
``feature_names`` out, same columns and order for every config, no NaN."""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from .. import native
from ..device import DeviceSpec
from ..registry import lookup
from .analytic import (CONFIG_FEATURES, FEATURE_NAMES, SHAPE_FEATURES, AnalyticFeatures, config_arrays,
                       shape_arrays)
from .raw import RAW_FEATURE_NAMES, RawFeatures

__all__ = ["FEATURE_SETS", "get_feature_set", "AnalyticFeatures", "RawFeatures", "DerivedFeatures",
           "feature_version", "CandidateFeatures"]


class DerivedFeatures:
    """The analytic set without the raw tile parameters (only derived
    quantities and the shape): the ablation arm that shows what the
    formulas carry on their own."""

    name = "derived"
    feature_names = tuple(f for f in FEATURE_NAMES
                          if f not in RAW_FEATURE_NAMES or f in ("log2_m", "log2_n", "log2_k"))

    def transform(self, rows: pd.DataFrame, spec: DeviceSpec) -> pd.DataFrame:
        return AnalyticFeatures().transform(rows, spec)[list(self.feature_names)]


FEATURE_SETS = {"analytic": AnalyticFeatures, "raw": RawFeatures, "derived": DerivedFeatures}


def get_feature_set(name: str):
    """Instantiate a feature set by name.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known ones).
    """
    return lookup(FEATURE_SETS, name, "feature set")()


def feature_version(name: str) -> str:
    """Version of a feature set: ``FEATURES_VERSION`` (bumped by hand when a
    formula changes) and a hash of its column list. Stored in model
    artifacts; loading refuses an artifact whose version differs."""
    from .analytic import FEATURES_VERSION
    fs = get_feature_set(name)
    return f"{FEATURES_VERSION}-{hashlib.sha256(repr(fs.feature_names).encode()).hexdigest()[:8]}"


class CandidateFeatures:
    """Feature matrix of a fixed set of candidate configs, one shape at a
    time: the predictor's hot path.

    For the analytic and derived sets the per-config columns
    (:data:`~costlearn.features.analytic.CONFIG_FEATURES`) are computed once
    here, by the ``config_arrays`` that :meth:`AnalyticFeatures.transform`
    uses, and only the shape-dependent ones per call: by
    ``costlearn_shape_features`` in ``costlearn/_native.c`` (the same
    expressions in the same order as ``shape_arrays``; a test holds them
    equal), or by ``shape_arrays`` itself where the C library is
    unavailable. Other feature sets go through their ``transform``.

    Parameters
    ----------
    feature_set : str
        Name in :data:`FEATURE_SETS`.
    candidates : DataFrame
        The tile parameters of C configs (columns as in dataset rows).
    spec : DeviceSpec
    dtype : str

    Raises
    ------
    ValueError
        If the feature set or dtype is unknown.
    """

    def __init__(self, feature_set: str, candidates: pd.DataFrame, spec: DeviceSpec, dtype: str):
        self._fs = get_feature_set(feature_set)
        self.names = tuple(self._fs.feature_names)
        self._spec = spec
        self._cands = candidates.reset_index(drop=True).assign(dtype=dtype)
        self.n_candidates = len(self._cands)
        self._fast = self._fs.name in ("analytic", "derived")
        if self._fast:
            self._cfg = config_arrays(self._cands, spec, np.full(self.n_candidates, dtype))
            self._template = np.zeros((self.n_candidates, len(self.names)), np.float32)
            for j, name in enumerate(self.names):
                if name in CONFIG_FEATURES:
                    self._template[:, j] = self._cfg[name]
            self._shape_cols = [(j, name) for j, name in enumerate(self.names) if name not in CONFIG_FEATURES]
            self._lib = native.library()
            pos = {name: j for j, name in enumerate(self.names)}
            self._c_cols = np.array([pos.get(name, -1) for name in SHAPE_FEATURES], np.int32)
            cfg = self._cfg
            self._c_block = np.ascontiguousarray(cfg["_block"], np.int64)
            self._c_slots = np.ascontiguousarray(cfg["_slots"], np.int64)
            self._c_occ = np.ascontiguousarray(cfg["_tile_occ"], np.float64)
            # element bytes, peak flop per µs, bytes per µs (as in shape_arrays)
            self._c_scalars = (float(np.asarray(cfg["_s"]).reshape(-1)[0]), spec.peak_gflops * 1e3,
                               spec.memory_bandwidth_gbps * 1e3)
            self._c_args = (self._c_block.ctypes.data, self._c_slots.ctypes.data, self._c_occ.ctypes.data,
                            *self._c_scalars, self.n_candidates, self._c_cols.ctypes.data)

    def numpy_features(self, m: int, n: int, k: int) -> np.ndarray:
        """:meth:`__call__` by numpy (``shape_arrays``): the reference the C
        path is tested against, and the fallback."""
        X = self._template.copy()
        f = shape_arrays(m, n, k, self._cfg, self._spec)
        for j, name in self._shape_cols:
            X[:, j] = f[name]
        return X

    def __call__(self, m: int, n: int, k: int) -> np.ndarray:
        """Features of every candidate at shape (m, n, k).

        Parameters
        ----------
        m, n, k : int
            Validated extents (>= 1).

        Returns
        -------
        ndarray of float32, shape (C, F), C-contiguous (a new array)
        """
        if not self._fast:
            rows = self._cands.assign(m=m, n=n, k=k)
            return np.ascontiguousarray(self._fs.transform(rows, self._spec).to_numpy(np.float32))
        if self._lib is None:
            return self.numpy_features(m, n, k)
        X = self._template.copy()
        self._lib.costlearn_shape_features(m, n, k, *self._c_args, X.ctypes.data, X.shape[1])
        return X
