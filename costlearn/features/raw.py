"""Raw feature set: log2 of the shape and tile parameters, nothing derived.
The ablation baseline for the analytic set."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..device import DeviceSpec

__all__ = ["RawFeatures", "RAW_FEATURE_NAMES"]

RAW_FEATURE_NAMES = ("log2_m", "log2_n", "log2_k", "log2_block_m", "log2_block_n", "log2_block_k",
                     "log2_thread_m", "log2_thread_n", "loop_outer", "raster_row", "smem_pad")
"""Output columns of :class:`RawFeatures`, in order."""


class RawFeatures:
    """log2 of M, N, K and of the tile parameters; loop order and raster as
    0/1; the padding as is. Stateless; same contract as
    :class:`~costlearn.features.analytic.AnalyticFeatures`."""

    name = "raw"
    feature_names = RAW_FEATURE_NAMES

    def transform(self, rows: pd.DataFrame, spec: DeviceSpec) -> pd.DataFrame:
        """Returns a float64 DataFrame with exactly :data:`RAW_FEATURE_NAMES`.

        Raises
        ------
        KeyError
            If a required column is missing.
        """
        out = {}
        for c in ("m", "n", "k", "block_m", "block_n", "block_k", "thread_m", "thread_n"):
            out[f"log2_{c}"] = np.log2(np.asarray(rows[c], np.float64))
        out["loop_outer"] = (np.asarray(rows["loop_order"]) == "outer").astype(np.float64)
        out["raster_row"] = (np.asarray(rows["raster"]) == "row").astype(np.float64)
        out["smem_pad"] = np.asarray(rows["smem_pad"], np.float64)
        return pd.DataFrame(out, index=rows.index)[list(RAW_FEATURE_NAMES)]
