"""FeatureSet seam (design.md, "Seams"): stateless; rows in, exactly
``feature_names(family)`` out, the same columns in the same order for every
config, float64, no NaN; computed from the family's tile description, so one
feature set serves every family.

Every feature is either *per config* (depends on the config, the dtype and
the device) or one of the 23 *shape* features of :data:`SHAPE_FEATURES`
(depends on the problem too). The split is what makes ranking fast: the
predictor computes the per-config columns once per candidate
(:class:`CandidateFeatures`) and only the shape columns per call, in C
(``costlearn_shape_features`` in ``costlearn/ranker/_native_score.c``, the same
expressions in the same order as :func:`costlearn.features.analytic.shape_arrays`)
or numpy.
"""
from __future__ import annotations

import abc

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.core.device import DeviceSpec
from costlearn.core.dtypes import get_dtype
from costlearn.families import DESCRIPTION_FIELDS, get_family
from costlearn.core.problem import EPILOGUE_FLOPS, check_epilogue
from costlearn.features.shape import libm_log2, occupancy, shape_arrays

__all__ = ["FeatureSet", "ConfigTable", "CandidateFeatures", "SHAPE_FEATURES", "rows_family", "LAYOUT_FEATURES",
           "layout_names", "layout_values", "EPILOGUE_FEATURES", "epilogue_names", "epilogue_values"]

SHAPE_FEATURES = (
    "log2_m", "log2_n", "log2_k", "log2_flops", "ai_problem_flop_per_byte",
    "log2_blocks", "waves", "last_wave_fill", "device_util_frac", "k_steps", "pipeline_fill_share",
    "padding_waste_frac", "log2_compute_time_us", "log2_memory_time_us", "log2_tiled_memory_time_us",
    "log2_roofline_time_us", "log2_roofline_corrected_time_us", "roofline_compute_bound",
    "epilogue_flops_per_element", "epilogue_flops_per_tile", "epilogue_bytes_per_tile", "epilogue_flop_share",
    "epilogue_byte_share",
)
"""The shape-dependent features, in the order ``costlearn_shape_features``
writes them (exactly 23); formulas in :func:`costlearn.features.analytic.shape_arrays`
(the last five, :data:`EPILOGUE_FEATURES`, depend on the problem's epilogue)."""

EPILOGUE_FEATURES = SHAPE_FEATURES[18:]
"""What a fused epilogue adds (formulas in :class:`costlearn.features.analytic.AnalyticFeatures`):
its flops per output element; per block tile, its flops (BM*BN*f) and the
bias bytes it reads (BN*s); and its share of the kernel's flops, f/(2K + f),
and of the kernel's DRAM bytes, the bias reads over the tiled traffic plus
them. All 0 for ``none``. Present for families that fuse several epilogues
(:func:`epilogue_names`)."""


def epilogue_names(family) -> tuple[str, ...]:
    """:data:`EPILOGUE_FEATURES` for a family that fuses several epilogues,
    else ()."""
    return EPILOGUE_FEATURES if len(family.epilogues) > 1 else ()


def epilogue_values(epilogue, element_bytes: float) -> tuple:
    """(flops per output element, bias bytes per output column) of
    ``epilogue``: :data:`costlearn.core.problem.EPILOGUE_FLOPS` and the element
    bytes where it has a bias (the bias is in the inputs' type; float32 for
    ``gemm``), else 0. ``epilogue`` may be a name or an array of names
    (float64 arrays are returned then).

    Raises
    ------
    ValueError
        If an epilogue is unknown.
    """
    if isinstance(epilogue, str):
        return float(EPILOGUE_FLOPS[check_epilogue(epilogue)]), (0.0 if epilogue == "none" else float(element_bytes))
    names = np.asarray(epilogue, object)
    uniq, codes = np.unique(names, return_inverse=True)
    flops = np.array([float(EPILOGUE_FLOPS[check_epilogue(str(e))]) for e in uniq])
    has_bias = np.array([e != "none" for e in uniq])
    return flops[codes], np.where(has_bias[codes], float(element_bytes), 0.0)


LAYOUT_FEATURES = ("a_column_major", "b_column_major")
"""1.0 where A (B) is column-major (layout letter ``T``), else 0.0; features
of the problem that are constant over its candidates, present for families
that run more than one layout (:func:`layout_names`)."""


def layout_names(family) -> tuple[str, ...]:
    """:data:`LAYOUT_FEATURES` for a family with several layouts, else ()
    (a one-layout family's columns do not change)."""
    return LAYOUT_FEATURES if len(family.layouts) > 1 else ()


def layout_values(layout: str) -> dict:
    """The :data:`LAYOUT_FEATURES` of ``layout`` (``"NT"`` -> a 0.0, b 1.0)."""
    return dict(a_column_major=float(layout[0] == "T"), b_column_major=float(layout[1] == "T"))


def rows_family(rows: pd.DataFrame):
    """The one kernel family of ``rows`` (column ``family``).

    Raises
    ------
    ValueError
        If the rows mix families, or name an unknown one.
    KeyError
        If there is no ``family`` column.
    """
    import pandas as pd
    fams = pd.unique(rows["family"]) if len(rows) else np.array(["gemm"])
    if len(fams) != 1:
        raise ValueError(f"rows of several kernel families {sorted(map(str, fams))}; features are computed "
                         "for one family at a time")
    return get_family(str(fams[0]))


class ConfigTable:
    """The tile descriptions of C configs of one family, for one dtype on one
    device, as arrays, with the per-config quantities the shape features need.

    Parameters
    ----------
    family : KernelFamily
    configs : sequence of C configs of ``family``
    dtype : str
    spec : DeviceSpec
    registers_per_thread : array-like of float, shape (C,), optional
        Compiled registers per thread (NaN: the family's estimate).

    Attributes
    ----------
    desc : dict of str to ndarray, shape (C,)
        Every :class:`~costlearn.families.TileDescription` field (int64 or
        float64).
    params : dict of str to ndarray of float64, shape (C,)
        The family's :meth:`~costlearn.families.KernelFamily.param_features`.
    derived : dict of str to ndarray, shape (C,)
        ``blocks_per_mp``, ``limiter`` (int64), ``occupancy_frac``,
        ``slots`` (blocks per MP x MPs, int64), ``tile_occ`` (min(1, 4 x
        occupancy)), ``fill_loads`` (panel loads before the first multiply,
        max(1, stages - 1)).
    element_bytes : float
    """

    def __init__(self, family, configs, dtype: str, spec: DeviceSpec, registers_per_thread=None):
        self.family, self.configs, self.dtype, self.spec = family, list(configs), dtype, spec
        regs = np.full(len(self.configs), np.nan) if registers_per_thread is None else \
            np.asarray(registers_per_thread, np.float64)
        descs = [family.describe(c, dtype, float(r)) for c, r in zip(self.configs, regs)]
        self.desc = {f: np.array([getattr(d, f) for d in descs],
                                 np.float64 if f in ("registers_per_thread", "smem_loads_per_fma") else np.int64)
                     for f in DESCRIPTION_FIELDS}
        self.params = family.param_features(self.configs)
        self.element_bytes = float(get_dtype(dtype).element_bytes)
        d = self.desc
        bpm, lim = occupancy(d["threads"], d["smem_bytes"], d["registers_per_thread"], spec)
        occ = bpm * d["threads"] / spec.max_threads_per_mp
        self.derived = dict(blocks_per_mp=bpm, limiter=lim, occupancy_frac=occ,
                            slots=bpm * spec.multiprocessors, tile_occ=np.minimum(1.0, 4.0 * occ),
                            fill_loads=np.maximum(1, d["pipeline_stages"] - 1).astype(np.float64))

    def __len__(self) -> int:
        return len(self.configs)

    def block(self) -> np.ndarray:
        """Block tile and reduction step (BM, BN, KS), int64, shape (3, C)."""
        return np.stack([self.desc["block_m"], self.desc["block_n"], self.desc["block_k"]])


class FeatureSet(abc.ABC):
    """A named, stateless feature set. Subclasses give :meth:`feature_names`
    and :meth:`config_columns`; the shape columns and :meth:`transform` are
    shared."""

    name: str = ""

    @abc.abstractmethod
    def feature_names(self, family) -> tuple[str, ...]:
        """Must return the columns for configs of ``family``, in order; those
        in :data:`SHAPE_FEATURES` are the shape columns."""

    @abc.abstractmethod
    def config_columns(self, table: ConfigTable) -> dict:
        """Must return every per-config column of ``feature_names(table.family)``
        as float64 arrays of shape (len(table),)."""

    def transform(self, rows: pd.DataFrame, spec: DeviceSpec) -> pd.DataFrame:
        """Compute the features of ``rows`` measured (or to run) on ``spec``.

        Parameters
        ----------
        rows : DataFrame, R rows
            Columns ``m, n, k, dtype, family, config_id`` (and ``layout`` for a
            family of several layouts) and optionally ``epilogue`` (missing:
            ``"none"``) and ``registers_per_thread`` (NaN or missing: the
            family's estimate).

        Returns
        -------
        DataFrame, shape (R, len(feature_names(family))), float64, no NaN

        Raises
        ------
        KeyError
            If a required column is missing.
        ValueError
            If the rows mix families, or a dtype or config id is invalid.
        """
        import pandas as pd
        fam = rows_family(rows)
        names = self.feature_names(fam)
        out = np.empty((len(rows), len(names)), np.float64)
        regs_all = rows["registers_per_thread"].to_numpy(np.float64) if "registers_per_thread" in rows \
            else np.full(len(rows), np.nan)
        for dtype, idx in rows.groupby(rows["dtype"].astype(object), sort=False).indices.items():
            sub = rows.iloc[idx]
            # One ConfigTable entry per distinct (config, registers) of this dtype.
            key = pd.MultiIndex.from_arrays([sub["config_id"].astype(object),
                                             np.nan_to_num(regs_all[idx], nan=-1.0)])
            codes, uniq = pd.factorize(key)
            configs = [fam.config_from_id(cid) for cid, _ in uniq]
            uregs = np.array([r if r >= 0 else np.nan for _, r in uniq], np.float64)
            table = ConfigTable(fam, configs, str(dtype), spec, uregs)
            cols = self.config_columns(table)
            shape_needed = [nm for nm in names if nm in SHAPE_FEATURES]
            if shape_needed:
                m, n, k = (sub[c].to_numpy(np.int64) for c in ("m", "n", "k"))
                epi = sub["epilogue"].astype(object).to_numpy() if "epilogue" in sub else "none"
                ef, eb = epilogue_values(epi, table.element_bytes)
                sh = shape_arrays(m, n, k, _gather(table, codes), spec, str(dtype), ef, eb)
            if layout_names(fam):
                lay = sub["layout"].astype(object).to_numpy()
                cols = dict(cols, a_column_major=np.array([str(x)[:1] == "T" for x in lay], np.float64),
                            b_column_major=np.array([str(x)[1:2] == "T" for x in lay], np.float64))
                lay_cols = set(LAYOUT_FEATURES)
            else:
                lay_cols = set()
            for j, nm in enumerate(names):
                v = sh[nm] if nm in SHAPE_FEATURES else cols[nm] if nm in lay_cols else cols[nm][codes]
                out[idx, j] = np.broadcast_to(v, (len(idx),))
        return pd.DataFrame(out, columns=list(names), index=rows.index)


def _gather(table: ConfigTable, codes: np.ndarray) -> dict:
    """The per-config quantities :func:`~costlearn.features.analytic.shape_arrays`
    needs, one entry per row (configs picked by ``codes``)."""
    d = table.derived
    return dict(block=table.block()[:, codes], element_bytes=table.element_bytes, slots=d["slots"][codes],
                tile_occ=d["tile_occ"][codes], fill_loads=d["fill_loads"][codes])


class CandidateFeatures:
    """Feature matrix of a fixed set of C candidate configs, one problem at a
    time: the predictor's hot path.

    The per-config columns are computed once, here; per call only the shape
    columns, by the ranker (C) or :meth:`numpy` (the reference and fallback).

    Parameters
    ----------
    feature_set : FeatureSet
    table : ConfigTable
        The candidates.

    Attributes
    ----------
    names : tuple of str
        The F columns.
    template : ndarray of float32, shape (C, F), read-only
        Per-config columns filled, shape columns 0 (layout columns those of
        the family's first layout).
    templates : dict of str to ndarray of float32, shape (C, F), read-only
        The template of each of the family's layouts (they differ in the
        :data:`LAYOUT_FEATURES` columns only).
    shape_columns : ndarray of int32, shape (18,)
        Column of X for each of :data:`SHAPE_FEATURES`, -1 where unused.
    block : ndarray of int64, shape (3, C)
        BM, BN, KS per candidate.
    slots : ndarray of int64, shape (C,)
        Resident blocks per multiprocessor x multiprocessors.
    tile_occ, fill_loads : ndarray of float64, shape (C,)
    element_bytes, peak_flop_per_us, bytes_per_us : float
        Scalars of the shape features (element bytes; the dtype's peak and
        the DRAM bandwidth in per-microsecond units).
    """

    def __init__(self, feature_set: FeatureSet, table: ConfigTable):
        self.feature_set, self.table = feature_set, table
        self.names = tuple(feature_set.feature_names(table.family))
        self.n_candidates = len(table)
        cols = feature_set.config_columns(table)
        X = np.zeros((self.n_candidates, len(self.names)), np.float32)
        for j, nm in enumerate(self.names):
            if nm not in SHAPE_FEATURES and nm not in LAYOUT_FEATURES:
                X[:, j] = cols[nm]
        pos = {nm: j for j, nm in enumerate(self.names)}
        self.templates = {}
        for layout in table.family.layouts:
            T = X.copy()
            if layout_names(table.family):
                for nm, v in layout_values(layout).items():
                    T[:, pos[nm]] = v
            T.flags.writeable = False
            self.templates[layout] = T
        self.template = self.templates[table.family.layouts[0]]
        self.shape_columns = np.array([pos.get(nm, -1) for nm in SHAPE_FEATURES], np.int32)
        self._shape_cols = [(j, nm) for j, nm in enumerate(self.names) if nm in SHAPE_FEATURES]
        d = table.derived
        self.block = np.ascontiguousarray(table.block(), np.int64)
        self.slots = np.ascontiguousarray(d["slots"], np.int64)
        self.tile_occ = np.ascontiguousarray(d["tile_occ"], np.float64)
        self.fill_loads = np.ascontiguousarray(d["fill_loads"], np.float64)
        self.element_bytes = table.element_bytes
        self.peak_flop_per_us = table.spec.peak_gflops_for(table.dtype) * 1e3
        self.bytes_per_us = table.spec.memory_bandwidth_gbps * 1e3

    def numpy(self, m: int, n: int, k: int, rows: np.ndarray | None = None, layout: str | None = None,
              epilogue: str = "none") -> np.ndarray:
        """Features of candidates ``rows`` (all by default) at extents (m, n, k),
        ``layout`` (default: the family's first) and ``epilogue``: the
        native ranker's bits on any CPU (its logarithms are the C library's,
        :func:`~costlearn.features.shape.libm_log2`).

        Parameters
        ----------
        m, n, k : int
            Validated extents (>= 1).
        rows : ndarray of int, shape (R,), optional
            Candidate indices, in the order wanted.
        layout : str, optional
            One of the family's layouts.
        epilogue : str
            One of :data:`costlearn.core.problem.EPILOGUES`.

        Returns
        -------
        ndarray of float32, shape (R, F), C-contiguous (a new array)
        """
        idx = np.arange(self.n_candidates) if rows is None else np.asarray(rows, np.int64)
        X = (self.template if layout is None else self.templates[layout])[idx].copy()
        if self._shape_cols:
            cfg = dict(block=self.block[:, idx], element_bytes=self.element_bytes, slots=self.slots[idx],
                       tile_occ=self.tile_occ[idx], fill_loads=self.fill_loads[idx])
            f = shape_arrays(np.int64(m), np.int64(n), np.int64(k), cfg, self.table.spec, self.table.dtype,
                             *epilogue_values(epilogue, self.element_bytes), log2=libm_log2)
            for j, nm in self._shape_cols:
                X[:, j] = f[nm]
        return X
