"""The analytic formulas every feature set and the rankers share: the
occupancy model [OCC] and the shape-dependent features
(:data:`~costlearn.features.base.SHAPE_FEATURES`), whose C twin is
``costlearn_shape_features`` in ``costlearn/ranker/_native_score.c``. The formulas'
sources are in :class:`costlearn.features.analytic.AnalyticFeatures`.
"""
from __future__ import annotations

import math

import numpy as np

from costlearn.core.device import DeviceSpec

__all__ = ["occupancy", "shape_arrays", "libm_log2"]

_LIBM_LOG2 = np.frompyfunc(math.log2, 1, 1)


def libm_log2(x):
    """log2 of each element through the C library's ``log2`` (Python's
    :func:`math.log2` calls it), the function the native ranker calls.

    numpy's own ``np.log2`` dispatches on the CPU: with AVX-512 it takes
    SIMD paths that round some results differently in the last bit (seen
    on an AMD EPYC with numpy 2.4.6; not with
    ``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``). Where the
    numpy ranker must give the native ranker's bits, it calls this instead.

    Parameters
    ----------
    x : float or ndarray of float64, any shape
        Positive values.

    Returns
    -------
    float64 scalar or ndarray of float64, the shape of ``x``
    """
    out = _LIBM_LOG2(np.asarray(x, np.float64))
    return np.asarray(out, np.float64) if isinstance(out, np.ndarray) else np.float64(out)


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


def shape_arrays(m, n, k, cfg: dict, spec: DeviceSpec, dtype: str = "float32", epilogue_flops=0.0,
                 bias_bytes=0.0, log2=np.log2) -> dict:
    """The :data:`~costlearn.features.base.SHAPE_FEATURES` (formulas in
    :class:`AnalyticFeatures`), in the same operations and order as
    ``costlearn_shape_features`` in ``_native_score.c``.

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
    epilogue_flops, bias_bytes : float or float64 ndarray of shape (R,)
        The problem's epilogue: flops per output element
        (:data:`costlearn.core.problem.EPILOGUE_FLOPS`) and bias bytes per output
        column (the element bytes with a bias, else 0)
        (:func:`costlearn.features.base.epilogue_values`).
    log2 : callable
        The base-2 logarithm: ``np.log2`` (fast, for training rows), or
        :func:`libm_log2` where the result must be the native ranker's bits
        on any CPU.

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
    ef, eb = epilogue_flops, bias_bytes
    tiled_bytes = s * (mf * kf * gn + kf * nf * gm + mf * nf)
    bias_total = blocks.astype(np.float64) * cfg["block"][1].astype(np.float64) * eb
    out = dict(
        log2_m=log2(mf), log2_n=log2(nf), log2_k=log2(kf), log2_flops=log2(flops),
        ai_problem_flop_per_byte=ai_prob,
        log2_blocks=log2(blocks), waves=waves, last_wave_fill=last_fill, device_util_frac=util,
        k_steps=k_steps.astype(np.float64), pipeline_fill_share=cfg["fill_loads"] / k_steps,
        padding_waste_frac=waste,
        log2_compute_time_us=log2(compute_us), log2_memory_time_us=log2(memory_us),
        log2_tiled_memory_time_us=log2(tiled_us), log2_roofline_time_us=log2(roof),
        log2_roofline_corrected_time_us=log2(corrected),
        roofline_compute_bound=(compute_us >= memory_us).astype(np.float64),
        epilogue_flops_per_element=ef + 0.0 * mf,
        epilogue_flops_per_tile=(cfg["block"][0] * cfg["block"][1]).astype(np.float64) * ef,
        epilogue_bytes_per_tile=cfg["block"][1].astype(np.float64) * eb,
        epilogue_flop_share=ef / (2.0 * kf + ef),
        epilogue_byte_share=bias_total / (tiled_bytes + bias_total),
    )
    return out
