"""FeatureSet seam: stateless; rows in, a float64 DataFrame with exactly
``feature_names`` out, same columns and order for every config, no NaN."""
from __future__ import annotations

import hashlib

import pandas as pd

from ..device import DeviceSpec
from ..registry import lookup
from .analytic import FEATURE_NAMES, AnalyticFeatures
from .raw import RAW_FEATURE_NAMES, RawFeatures

__all__ = ["FEATURE_SETS", "get_feature_set", "AnalyticFeatures", "RawFeatures", "DerivedFeatures",
           "feature_version"]


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
