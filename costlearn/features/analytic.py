"""Analytic feature set: what a performance engineer computes by hand from a
shape, a tile config and the device's limits.

Every function here is vectorised over rows (numpy arrays of equal length)
and pure. Sources of the formulas:

- [ROOF] S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful
  visual performance model for multicore architectures", CACM 52(4), 2009.
- [OCC] NVIDIA CUDA C++ Best Practices Guide, "Occupancy", and the CUDA
  Occupancy Calculator: resident blocks per SM = min over threads, shared
  memory, registers and the block-slot limit; registers allocated per warp in
  units of 256.
- [WAVE] NVIDIA Deep Learning Performance Guide, "Matrix Multiplication
  Background", "Wave quantization": waves = blocks / (SMs x blocks per SM),
  efficiency of the last wave = waves / ceil(waves).
- [BANK] CUDA C++ Programming Guide, "Shared Memory" (compute capability 5.x
  and later): 32 banks of 4-byte words; requests to distinct words in one
  bank by threads of one warp are serialised.
- [DESIGN] design.md, "Features".
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..device import DeviceSpec
from ..space import DTYPES, REG_OVERHEAD

__all__ = ["AnalyticFeatures", "FEATURE_NAMES", "occupancy", "bank_conflict_degree"]

FEATURES_VERSION = 2
"""Bumped whenever a formula below changes meaning."""

FEATURE_NAMES = (
    "log2_m", "log2_n", "log2_k", "log2_flops",
    "log2_block_m", "log2_block_n", "log2_block_k", "log2_thread_m", "log2_thread_n",
    "loop_outer", "raster_row", "smem_pad", "log2_threads", "smem_bytes", "registers_per_thread",
    "ai_block_tile_flop_per_byte", "ai_problem_flop_per_byte",
    "blocks_per_mp", "occupancy_frac", "limiter_threads", "limiter_smem", "limiter_registers",
    "limiter_blocks",
    "log2_blocks", "waves", "last_wave_fill", "device_util_frac",
    "k_steps", "pipeline_fill_share", "padding_waste_frac",
    "bank_conflict_a_read", "bank_conflict_a_store", "bank_conflict_b_read",
    "smem_loads_per_fma",
    "log2_compute_time_us", "log2_memory_time_us", "log2_tiled_memory_time_us",
    "log2_roofline_time_us", "log2_roofline_corrected_time_us", "roofline_compute_bound",
)
"""Output columns of :class:`AnalyticFeatures`, in order."""

_BANKS = 32


def _ceil_div(a, b):
    return -(-a // b)


def occupancy(threads, smem_bytes, registers, spec: DeviceSpec):
    """Resident blocks per multiprocessor and the limiting resource [OCC].

    Parameters
    ----------
    threads : ndarray of int64, shape (R,)
        Threads per block.
    smem_bytes : ndarray of int64, shape (R,)
        Shared memory per block, bytes (the per-block reservation is added).
    registers : ndarray of float64, shape (R,)
        Registers per thread (ignored where the device has no register file
        limit, ``spec.registers_per_mp is None``).
    spec : DeviceSpec

    Returns
    -------
    blocks_per_mp : ndarray of int64, shape (R,)
        At least 1 (a feasible config always fits once).
    limiter : ndarray of int64, shape (R,)
        0 threads, 1 shared memory, 2 registers, 3 block slots.
    """
    threads = np.asarray(threads, np.int64)
    by_threads = spec.max_threads_per_mp // threads
    by_smem = spec.smem_per_mp_bytes // (np.asarray(smem_bytes, np.int64) + spec.smem_reserved_per_block_bytes)
    big = np.iinfo(np.int64).max // 4
    if spec.registers_per_mp is not None:
        regs = np.asarray(registers, np.float64)
        unit = spec.register_alloc_unit
        per_warp = np.ceil(regs * spec.warp_size / unit) * unit
        warps = _ceil_div(threads, spec.warp_size)
        by_regs = (spec.registers_per_mp // np.maximum(per_warp * warps, 1)).astype(np.int64)
    else:
        by_regs = np.full_like(threads, big)
    by_slots = np.full_like(threads, spec.max_blocks_per_mp)
    stack = np.stack([by_threads, by_smem, by_regs, by_slots])
    return np.maximum(stack.min(axis=0), 1), stack.argmin(axis=0)


def bank_conflict_degree(addresses: np.ndarray) -> int:
    """Serialisation degree of one warp's shared-memory request [BANK].

    Parameters
    ----------
    addresses : ndarray of int64, shape (W,)
        Word (4-byte) addresses requested by the W <= 32 threads of a warp.

    Returns
    -------
    int
        Largest number of distinct words any bank must serve (1 = conflict
        free; identical words are a broadcast and count once).
    """
    words = np.unique(np.asarray(addresses, np.int64))
    return int(np.bincount(words % _BANKS, minlength=_BANKS).max())


def _warp_degrees(bm, bn, bk, tm, tn, pad, threads):
    """Bank-conflict degrees of the first warp's A-panel read, A-panel store
    and B-panel read, for the layout in ``costlearn.codegen``."""
    w = np.arange(min(int(threads), _BANKS))
    tcols = bn // tn
    tr, tc = w // tcols, w % tcols
    a_read = (tr * tm) * (bk + pad)                     # As[(tr*TM+i)*(BK+PAD)+kk] at i=kk=0
    e = w                                               # A-panel store, element e = tid
    a_store = (e // bk) * (bk + pad) + (e % bk)
    b_read = tc                                         # Bs[kk*(BN+PAD)+tc] at kk=j=0
    return bank_conflict_degree(a_read), bank_conflict_degree(a_store), bank_conflict_degree(b_read)


class AnalyticFeatures:
    """Analytic features of (shape, config, device, compiled-kernel facts).

    Stateless. :meth:`transform` takes rows with columns ``m, n, k, dtype``,
    the tile parameters (``block_m, block_n, block_k, thread_m, thread_n,
    loop_order, smem_pad, raster``) and optionally ``registers_per_thread``
    (NaN or missing: the pre-compile estimate of
    :func:`costlearn.space.registers_estimate`), and returns exactly
    :data:`FEATURE_NAMES`, float64, no NaN.

    Formulas (R rows; sizes in elements, times in microseconds):

    - ``ai_block_tile_flop_per_byte`` = 2*BM*BN*KS / (s*(BM*KS + KS*BN)),
      s = element bytes [ROOF].
    - ``ai_problem_flop_per_byte`` = 2*M*N*K / (s*(M*K + K*N + M*N)) [ROOF].
    - ``blocks_per_mp``, ``occupancy_frac`` = blocks_per_mp*threads /
      max_threads_per_mp, one-hot ``limiter_*`` [OCC].
    - ``waves`` = blocks / (blocks_per_mp * multiprocessors);
      ``last_wave_fill`` = waves - (ceil(waves) - 1), the occupied share of
      the last wave (the tail); ``device_util_frac`` = waves / ceil(waves),
      the average share of block slots busy over all waves [WAVE].
    - ``k_steps`` = ceil(K/KS); ``pipeline_fill_share`` = 1/k_steps, the share
      of the reduction spent on the first, unoverlapped panel load [DESIGN].
    - ``padding_waste_frac`` = 1 - M*N*K / (ceil(M/BM)*BM * ceil(N/BN)*BN *
      ceil(K/KS)*KS), the tile overhang.
    - ``bank_conflict_*`` for the first warp at the first reduction index
      [BANK].
    - ``smem_loads_per_fma``: (TM+TN)/(TM*TN) for the outer-product loop,
      2 for the dot-product loop.
    - ``compute_time_us`` = padded flops / peak; ``memory_time_us`` =
      compulsory bytes s*(MK+KN+MN) / bandwidth; ``tiled_memory_time_us``:
      every block reads its panels from DRAM, s*(MK*ceil(N/BN) +
      KN*ceil(M/BM) + MN); ``roofline_time_us`` = max(compute, memory)
      [ROOF]; ``roofline_corrected_time_us`` = max(compute /
      (device_util_frac * min(1, 4*occupancy_frac)), tiled memory): the
      occupancy and tail corrections, assuming 25 % occupancy hides latency.
    """

    name = "analytic"
    feature_names = FEATURE_NAMES

    def transform(self, rows: pd.DataFrame, spec: DeviceSpec) -> pd.DataFrame:
        """Compute the features of ``rows`` on ``spec``.

        Returns
        -------
        DataFrame, shape (len(rows), len(FEATURE_NAMES)), float64

        Raises
        ------
        KeyError
            If a required column is missing.
        """
        f = analytic_arrays(rows, spec)
        return pd.DataFrame({k: f[k] for k in FEATURE_NAMES}, index=rows.index)


def analytic_arrays(rows, spec: DeviceSpec) -> dict:
    """The computation behind :class:`AnalyticFeatures`, returning a dict of
    float64 arrays (also used by the roofline baseline)."""
    g = {c: np.asarray(rows[c]) for c in ("m", "n", "k")}
    dtypes = np.asarray(rows["dtype"]) if "dtype" in rows else np.full(len(g["m"]), "float32")
    cfg = config_arrays(rows, spec, dtypes)
    m, n, k = (g[c].astype(np.int64) for c in ("m", "n", "k"))
    out = {name: cfg[name] for name in CONFIG_FEATURES}
    out.update(shape_arrays(m, n, k, cfg, spec))
    return {name: np.broadcast_to(np.asarray(out[name], np.float64), (len(m),)) for name in FEATURE_NAMES}


CONFIG_FEATURES = (
    "log2_block_m", "log2_block_n", "log2_block_k", "log2_thread_m", "log2_thread_n",
    "loop_outer", "raster_row", "smem_pad", "log2_threads", "smem_bytes", "registers_per_thread",
    "ai_block_tile_flop_per_byte", "blocks_per_mp", "occupancy_frac", "limiter_threads", "limiter_smem",
    "limiter_registers", "limiter_blocks", "bank_conflict_a_read", "bank_conflict_a_store",
    "bank_conflict_b_read", "smem_loads_per_fma",
)
"""Features that depend on the config and the device only, not on the shape
(the predictor computes them once per candidate)."""

SHAPE_FEATURES = (
    "log2_m", "log2_n", "log2_k", "log2_flops", "ai_problem_flop_per_byte",
    "log2_blocks", "waves", "last_wave_fill", "device_util_frac", "k_steps", "pipeline_fill_share",
    "padding_waste_frac", "log2_compute_time_us", "log2_memory_time_us", "log2_tiled_memory_time_us",
    "log2_roofline_time_us", "log2_roofline_corrected_time_us", "roofline_compute_bound",
)
"""The other features, computed by :func:`shape_arrays`, in the order of
``costlearn_shape_features`` in ``costlearn/_native.c`` (which writes exactly
18)."""
assert len(SHAPE_FEATURES) == 18 and set(SHAPE_FEATURES) | set(CONFIG_FEATURES) == set(FEATURE_NAMES)


def config_arrays(rows, spec: DeviceSpec, dtypes) -> dict:
    """Per-config part of :func:`analytic_arrays`: the
    :data:`CONFIG_FEATURES` and the per-config quantities the shape part
    needs, as arrays of shape (R,).

    Parameters
    ----------
    rows : DataFrame or dict of arrays
        The tile parameters (``block_m`` ... ``raster``) and optionally
        ``registers_per_thread``; R rows.
    spec : DeviceSpec
    dtypes : array of str, shape (R,)

    Raises
    ------
    ValueError
        If a dtype is unknown.
    """
    g = {c: np.asarray(rows[c]).astype(np.int64) for c in
         ("block_m", "block_n", "block_k", "thread_m", "thread_n", "smem_pad")}
    bm, bn, bk, tm, tn, pad = (g[c] for c in
                               ("block_m", "block_n", "block_k", "thread_m", "thread_n", "smem_pad"))
    loop_outer = (np.asarray(rows["loop_order"]) == "outer").astype(np.float64)
    raster_row = (np.asarray(rows["raster"]) == "row").astype(np.float64)
    dtypes = np.asarray(dtypes)
    unknown = sorted(set(map(str, dtypes)) - set(DTYPES))
    if unknown:
        raise ValueError(f"dtype {unknown[0]!r} in rows; allowed: {sorted(DTYPES)}")
    s = np.array([DTYPES[d] for d in dtypes], np.float64) if len(set(dtypes)) > 1 else \
        np.float64(DTYPES[str(dtypes[0])] if len(dtypes) else 4)
    threads = (bm // tm) * (bn // tn)
    smem = (bm * (bk + pad) + bk * (bn + pad)) * np.asarray(s).astype(np.int64)
    est = (tm * tn + tm + tn + REG_OVERHEAD).astype(np.float64)  # space.registers_estimate
    if "registers_per_thread" in rows:
        regs = np.asarray(rows["registers_per_thread"], np.float64)
        regs = np.where(np.isfinite(regs), regs, est)
    else:
        regs = est
    ai_tile = 2.0 * bm * bn * bk / (s * (bm * bk + bk * bn))
    bpm, lim = occupancy(threads, smem, regs, spec)
    occ = bpm * threads / spec.max_threads_per_mp
    deg = {}
    keys = list(zip(bm.tolist(), bn.tolist(), bk.tolist(), tm.tolist(), tn.tolist(), pad.tolist()))
    for key in set(keys):
        b_m, b_n, b_k, t_m, t_n, p = key
        deg[key] = _warp_degrees(b_m, b_n, b_k, t_m, t_n, p, (b_m // t_m) * (b_n // t_n))
    degs = np.array([deg[key] for key in keys], np.float64).reshape(-1, 3)
    loads_per_fma = np.where(loop_outer > 0, (tm + tn) / (tm * tn), 2.0)
    out = dict(
        log2_block_m=np.log2(bm), log2_block_n=np.log2(bn), log2_block_k=np.log2(bk),
        log2_thread_m=np.log2(tm), log2_thread_n=np.log2(tn), loop_outer=loop_outer,
        raster_row=raster_row, smem_pad=pad.astype(np.float64), log2_threads=np.log2(threads),
        smem_bytes=smem.astype(np.float64), registers_per_thread=regs,
        ai_block_tile_flop_per_byte=ai_tile,
        blocks_per_mp=bpm.astype(np.float64), occupancy_frac=occ,
        limiter_threads=(lim == 0).astype(np.float64), limiter_smem=(lim == 1).astype(np.float64),
        limiter_registers=(lim == 2).astype(np.float64), limiter_blocks=(lim == 3).astype(np.float64),
        bank_conflict_a_read=degs[:, 0], bank_conflict_a_store=degs[:, 1], bank_conflict_b_read=degs[:, 2],
        smem_loads_per_fma=loads_per_fma,
    )
    out = {k: np.asarray(v, np.float64) for k, v in out.items()}
    # Per-config quantities of the shape part (not features themselves).
    out.update(_block=np.stack([bm, bn, bk]), _s=s, _slots=bpm * spec.multiprocessors,
               _tile_occ=np.minimum(1.0, 4.0 * occ))
    return out


def shape_arrays(m, n, k, cfg: dict, spec: DeviceSpec) -> dict:
    """Shape-dependent part of :func:`analytic_arrays`: the features of
    :data:`FEATURE_NAMES` not in :data:`CONFIG_FEATURES`.

    Parameters
    ----------
    m, n, k : int64 ndarray of shape (R,), or int64 scalars
        Extents; scalars broadcast over the R configs of ``cfg``.
    cfg : dict
        From :func:`config_arrays`.
    spec : DeviceSpec

    Returns
    -------
    dict of float64 arrays of shape (R,) (or scalars for the features of the
    shape alone: ``log2_m`` ... ``log2_memory_time_us``)
    """
    s = cfg["_s"]
    # The three extents stacked, shape (3, R) or (3, 1), against the block
    # tile (3, C): one numpy call per step for all three (this runs once per
    # predict_best call, where each call costs about a microsecond).
    if np.ndim(m) == np.ndim(n) == np.ndim(k) == 0:
        ext = np.array([[m], [n], [k]], np.int64)
    else:
        ext = np.stack(np.broadcast_arrays(np.asarray(m, np.int64), np.asarray(n, np.int64),
                                           np.asarray(k, np.int64))).reshape(3, -1)
    grid = -(-ext // cfg["_block"])                          # ceil(M/BM), ceil(N/BN), ceil(K/KS)
    grid_m, grid_n, k_steps = grid
    mf, nf, kf = ext.astype(np.float64)
    flops = 2.0 * mf * nf * kf
    a_b_c = s * (mf * kf + kf * nf + mf * nf)                 # compulsory bytes
    ai_prob = flops / a_b_c
    blocks = grid_m * grid_n
    waves = blocks / cfg["_slots"]
    full = np.ceil(waves)
    last_fill = waves - (full - 1.0)
    util = waves / full
    tiles = grid * cfg["_block"]
    padded = tiles[0].astype(np.float64) * tiles[1] * tiles[2]
    waste = 1.0 - mf * nf * kf / padded
    peak = spec.peak_gflops * 1e3            # flop per microsecond
    bw = spec.memory_bandwidth_gbps * 1e3    # bytes per microsecond
    compute_us = 2.0 * padded / peak
    memory_us = a_b_c / bw
    gm, gn = grid[:2].astype(np.float64)
    tiled_us = s * (mf * kf * gn + kf * nf * gm + mf * nf) / bw
    roof = np.maximum(compute_us, memory_us)
    corrected = np.maximum(compute_us / (util * cfg["_tile_occ"]), tiled_us)
    return dict(
        log2_m=np.log2(mf), log2_n=np.log2(nf), log2_k=np.log2(kf), log2_flops=np.log2(flops),
        ai_problem_flop_per_byte=ai_prob,
        log2_blocks=np.log2(blocks), waves=waves, last_wave_fill=last_fill, device_util_frac=util,
        k_steps=k_steps.astype(np.float64), pipeline_fill_share=1.0 / k_steps, padding_waste_frac=waste,
        log2_compute_time_us=np.log2(compute_us), log2_memory_time_us=np.log2(memory_us),
        log2_tiled_memory_time_us=np.log2(tiled_us), log2_roofline_time_us=np.log2(roof),
        log2_roofline_corrected_time_us=np.log2(corrected),
        roofline_compute_bound=(compute_us >= memory_us).astype(np.float64),
    )
