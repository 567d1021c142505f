"""Feature sets (design.md, "Seams"): stateless, computed from the tile
description, so each serves every kernel family; see
:class:`~costlearn.features.base.FeatureSet`."""
from __future__ import annotations

import hashlib

from costlearn.core.registry import Registry
from costlearn.features.analytic import FEATURES_VERSION, AnalyticFeatures, analytic_names
from costlearn.features.base import SHAPE_FEATURES, CandidateFeatures, ConfigTable, FeatureSet
from costlearn.features.raw import RawFeatures

__all__ = ["FEATURE_SETS", "get_feature_set", "feature_version", "FeatureSet", "AnalyticFeatures", "RawFeatures",
           "DerivedFeatures", "CandidateFeatures", "ConfigTable", "SHAPE_FEATURES"]


class DerivedFeatures(FeatureSet):
    """The analytic set without the family's raw parameters (only derived
    quantities and log2 M, N, K): the ablation arm that shows what the
    formulas carry on their own."""

    name = "derived"

    def feature_names(self, family) -> tuple[str, ...]:
        raw = set(family.param_feature_names)
        return tuple(f for f in analytic_names(family) if f not in raw)

    def config_columns(self, table: ConfigTable) -> dict:
        return AnalyticFeatures().config_columns(table)


FEATURE_SETS = Registry("feature set", {"analytic": AnalyticFeatures, "raw": RawFeatures,
                                        "derived": DerivedFeatures})


def get_feature_set(name) -> FeatureSet:
    """Instantiate a feature set by name.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known ones).
    """
    return FEATURE_SETS.get(name)()


def feature_version(name: str, family) -> str:
    """Version of a feature set for a family: :data:`FEATURES_VERSION`
    (bumped by hand when a formula changes) and a hash of its column list.
    Stored in model artifacts; loading refuses an artifact whose version
    differs."""
    names = get_feature_set(name).feature_names(family)
    return f"{FEATURES_VERSION}-{hashlib.sha256(repr(names).encode()).hexdigest()[:8]}"
