"""Analytic feature set: what a performance engineer computes by hand from a
problem, a config's tile description and the device's limits.

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
  and later): 32 banks of 4-byte words (the family's layout gives the
  degrees, :func:`costlearn.families.bank_conflict_degree`).
- [PIPE] Software pipelining of the panel loads (CUTLASS "multistage"
  mainloop; Triton's ``num_stages``): with S stages, S - 1 panels are loaded
  before the first multiply; with one stage (no overlap), one.
- [DESIGN] design.md, "Features".
"""
from __future__ import annotations

import numpy as np

from ..device import DeviceSpec
from .base import ConfigTable, FeatureSet

__all__ = ["AnalyticFeatures", "analytic_names", "occupancy", "shape_arrays", "analytic_arrays",
           "FEATURES_VERSION", "TILE_FEATURES", "COMMON_CONFIG_FEATURES"]

FEATURES_VERSION = 2
"""Bumped whenever a formula below changes meaning."""

TILE_FEATURES = ("log2_block_m", "log2_block_n", "log2_block_k", "log2_thread_m", "log2_thread_n")
"""Block tile, reduction step and thread tile, log2, from the tile description."""

COMMON_CONFIG_FEATURES = (
    "log2_threads", "smem_bytes", "registers_per_thread",
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
"""The columns after the family's own parameters (shape columns among them)."""


def analytic_names(family) -> tuple[str, ...]:
    """Columns of the analytic set for ``family``: log2 of M, N, K and the
    flops; :data:`TILE_FEATURES`; the family's parameter features not already
    among them (for ``gemm``: ``loop_outer``, ``raster_row``, ``smem_pad``);
    then :data:`COMMON_CONFIG_FEATURES`; then, for a family of several
    layouts, :data:`~costlearn.features.base.LAYOUT_FEATURES`."""
    from .base import layout_names
    own = tuple(f for f in family.param_feature_names if f not in TILE_FEATURES)
    return ("log2_m", "log2_n", "log2_k", "log2_flops") + TILE_FEATURES + own + COMMON_CONFIG_FEATURES \
        + layout_names(family)


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
        warps = -(-threads // spec.warp_size)
        by_regs = (spec.registers_per_mp // np.maximum(per_warp * warps, 1)).astype(np.int64)
    else:
        by_regs = np.full_like(threads, big)
    by_slots = np.full_like(threads, spec.max_blocks_per_mp)
    stack = np.stack([by_threads, by_smem, by_regs, by_slots])
    return np.maximum(stack.min(axis=0), 1), stack.argmin(axis=0)


class AnalyticFeatures(FeatureSet):
    """Analytic features of (problem, tile description, device).

    Formulas (R rows; sizes in elements, times in microseconds; s = element
    bytes of the dtype; the peak is the device's for the dtype):

    - ``ai_block_tile_flop_per_byte`` = 2*BM*BN*KS / (s*(BM*KS + KS*BN)) [ROOF].
    - ``ai_problem_flop_per_byte`` = 2*M*N*K / (s*(M*K + K*N + M*N)) [ROOF].
    - ``blocks_per_mp``, ``occupancy_frac`` = blocks_per_mp*threads /
      max_threads_per_mp, one-hot ``limiter_*`` [OCC].
    - ``waves`` = blocks / (blocks_per_mp * multiprocessors);
      ``last_wave_fill`` = waves - (ceil(waves) - 1), the occupied share of
      the last wave (the tail); ``device_util_frac`` = waves / ceil(waves),
      the average share of block slots busy over all waves [WAVE].
    - ``k_steps`` = ceil(K/KS); ``pipeline_fill_share`` = max(1, S - 1) /
      k_steps, the share of the reduction spent on the unoverlapped first
      panel loads, S = pipeline stages [PIPE, DESIGN].
    - ``padding_waste_frac`` = 1 - M*N*K / (ceil(M/BM)*BM * ceil(N/BN)*BN *
      ceil(K/KS)*KS), the tile overhang.
    - ``bank_conflict_*`` and ``smem_loads_per_fma`` from the tile
      description [BANK].
    - ``compute_time_us`` = padded flops / peak; ``memory_time_us`` =
      compulsory bytes s*(MK+KN+MN) / bandwidth; ``tiled_memory_time_us``:
      every block reads its panels from DRAM, s*(MK*ceil(N/BN) +
      KN*ceil(M/BM) + MN); ``roofline_time_us`` = max(compute, memory)
      [ROOF]; ``roofline_corrected_time_us`` = max(compute /
      (device_util_frac * min(1, 4*occupancy_frac)), tiled memory): the
      occupancy and tail corrections, assuming 25 % occupancy hides latency.
    """

    name = "analytic"

    def feature_names(self, family) -> tuple[str, ...]:
        return analytic_names(family)

    def config_columns(self, table: ConfigTable) -> dict:
        d, dv = table.desc, table.derived
        bm, bn, bk = d["block_m"], d["block_n"], d["block_k"]
        s = table.element_bytes
        lim = dv["limiter"]
        out = dict(
            log2_block_m=np.log2(bm), log2_block_n=np.log2(bn), log2_block_k=np.log2(bk),
            log2_thread_m=np.log2(d["thread_m"]), log2_thread_n=np.log2(d["thread_n"]),
            log2_threads=np.log2(d["threads"]), smem_bytes=d["smem_bytes"].astype(np.float64),
            registers_per_thread=d["registers_per_thread"],
            ai_block_tile_flop_per_byte=2.0 * bm * bn * bk / (s * (bm * bk + bk * bn)),
            blocks_per_mp=dv["blocks_per_mp"].astype(np.float64), occupancy_frac=dv["occupancy_frac"],
            limiter_threads=(lim == 0).astype(np.float64), limiter_smem=(lim == 1).astype(np.float64),
            limiter_registers=(lim == 2).astype(np.float64), limiter_blocks=(lim == 3).astype(np.float64),
            bank_conflict_a_read=d["bank_conflict_a_read"].astype(np.float64),
            bank_conflict_a_store=d["bank_conflict_a_store"].astype(np.float64),
            bank_conflict_b_read=d["bank_conflict_b_read"].astype(np.float64),
            smem_loads_per_fma=d["smem_loads_per_fma"])
        for name in table.family.param_feature_names:
            out.setdefault(name, table.params[name])
        return {k: np.asarray(v, np.float64) for k, v in out.items()}


def shape_arrays(m, n, k, cfg: dict, spec: DeviceSpec, dtype: str = "float32") -> dict:
    """The :data:`~costlearn.features.base.SHAPE_FEATURES` (formulas in
    :class:`AnalyticFeatures`), in the same operations and order as
    ``costlearn_shape_features`` in ``_native.c``.

    Parameters
    ----------
    m, n, k : int64 ndarray of shape (R,), or int64 scalars
        Extents; scalars broadcast over the R configs of ``cfg``.
    cfg : dict
        Per-config quantities, shape (R,) each (``block`` (3, R)):
        ``block``, ``element_bytes`` (float), ``slots``, ``tile_occ``,
        ``fill_loads`` (:class:`~costlearn.features.base.ConfigTable`).
    spec : DeviceSpec
    dtype : str
        Selects the peak (:meth:`DeviceSpec.peak_gflops_for`).

    Returns
    -------
    dict of float64 arrays of shape (R,) (or scalars for the features of the
    problem alone: ``log2_m`` ... ``log2_memory_time_us``)
    """
    s = cfg["element_bytes"]
    if np.ndim(m) == np.ndim(n) == np.ndim(k) == 0:
        ext = np.array([[m], [n], [k]], np.int64)
    else:
        ext = np.stack(np.broadcast_arrays(np.asarray(m, np.int64), np.asarray(n, np.int64),
                                           np.asarray(k, np.int64))).reshape(3, -1)
    grid = -(-ext // cfg["block"])                           # ceil(M/BM), ceil(N/BN), ceil(K/KS)
    grid_m, grid_n, k_steps = grid
    mf, nf, kf = ext.astype(np.float64)
    flops = 2.0 * mf * nf * kf
    a_b_c = s * (mf * kf + kf * nf + mf * nf)                 # compulsory bytes
    ai_prob = flops / a_b_c
    blocks = grid_m * grid_n
    waves = blocks / cfg["slots"]
    full = np.ceil(waves)
    last_fill = waves - (full - 1.0)
    util = waves / full
    tiles = grid * cfg["block"]
    padded = tiles[0].astype(np.float64) * tiles[1] * tiles[2]
    waste = 1.0 - mf * nf * kf / padded
    peak = spec.peak_gflops_for(dtype) * 1e3   # flop per microsecond
    bw = spec.memory_bandwidth_gbps * 1e3      # bytes per microsecond
    compute_us = 2.0 * padded / peak
    memory_us = a_b_c / bw
    gm, gn = grid[:2].astype(np.float64)
    tiled_us = s * (mf * kf * gn + kf * nf * gm + mf * nf) / bw
    roof = np.maximum(compute_us, memory_us)
    corrected = np.maximum(compute_us / (util * cfg["tile_occ"]), tiled_us)
    out = dict(
        log2_m=np.log2(mf), log2_n=np.log2(nf), log2_k=np.log2(kf), log2_flops=np.log2(flops),
        ai_problem_flop_per_byte=ai_prob,
        log2_blocks=np.log2(blocks), waves=waves, last_wave_fill=last_fill, device_util_frac=util,
        k_steps=k_steps.astype(np.float64), pipeline_fill_share=cfg["fill_loads"] / k_steps,
        padding_waste_frac=waste,
        log2_compute_time_us=np.log2(compute_us), log2_memory_time_us=np.log2(memory_us),
        log2_tiled_memory_time_us=np.log2(tiled_us), log2_roofline_time_us=np.log2(roof),
        log2_roofline_corrected_time_us=np.log2(corrected),
        roofline_compute_bound=(compute_us >= memory_us).astype(np.float64),
    )
    return out


def analytic_arrays(rows, spec: DeviceSpec) -> dict:
    """Every analytic feature of ``rows`` as a dict of float64 arrays of
    shape (len(rows),) (the roofline baseline and tests use it); the input
    and errors of :meth:`AnalyticFeatures.transform`."""
    df = AnalyticFeatures().transform(rows, spec)
    return {c: df[c].to_numpy() for c in df.columns}
