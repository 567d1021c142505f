"""Raw feature set: log2 of M, N, K and the family's own parameters as
numbers (:meth:`~costlearn.families.KernelFamily.param_features`), nothing
derived. The ablation baseline for the analytic set."""
from __future__ import annotations

from costlearn.features.base import ConfigTable, FeatureSet, epilogue_names, layout_names

__all__ = ["RawFeatures"]


class RawFeatures(FeatureSet):
    """log2 M, N, K, then the family's parameter features (for ``gemm``: log2
    of the block and thread tile, loop order and raster as 0/1, the padding
    as is), then the layout columns of a family of several layouts, then
    for a family that fuses several epilogues the epilogue's flops per
    output element (which epilogue it is, as a number)."""

    name = "raw"

    def feature_names(self, family) -> tuple[str, ...]:
        return ("log2_m", "log2_n", "log2_k") + tuple(family.param_feature_names) + layout_names(family) \
            + epilogue_names(family)[:1]

    def config_columns(self, table: ConfigTable) -> dict:
        return dict(table.params)
