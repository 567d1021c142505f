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

from costlearn.core.device import DeviceSpec
from costlearn.features.base import ConfigTable, FeatureSet, epilogue_names, layout_names
from costlearn.features.shape import occupancy, shape_arrays

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
    layouts, :data:`~costlearn.features.base.LAYOUT_FEATURES`; then, for a
    family that fuses several epilogues,
    :data:`~costlearn.features.base.EPILOGUE_FEATURES`."""
    own = tuple(f for f in family.param_feature_names if f not in TILE_FEATURES)
    return ("log2_m", "log2_n", "log2_k", "log2_flops") + TILE_FEATURES + own + COMMON_CONFIG_FEATURES \
        + layout_names(family) + epilogue_names(family)


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
    - Epilogue (f = flops per output element of the epilogue,
      :data:`costlearn.core.problem.EPILOGUE_FLOPS`; b = bias bytes per output
      column, s with a bias, else 0) [DESIGN]: ``epilogue_flops_per_element``
      = f; ``epilogue_flops_per_tile`` = BM*BN*f; ``epilogue_bytes_per_tile``
      = BN*b, the bias slice a block reads; ``epilogue_flop_share`` = f /
      (2K + f), its share of the flops per output element;
      ``epilogue_byte_share`` = blocks*BN*b / (tiled bytes + blocks*BN*b),
      its share of the DRAM traffic of the tiled model above. The epilogue
      runs once per output element after the K loop, so it weighs most when
      K is small and the kernel memory-bound.
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


def analytic_arrays(rows, spec: DeviceSpec) -> dict:
    """Every analytic feature of ``rows`` as a dict of float64 arrays of
    shape (len(rows),) (the roofline baseline and tests use it); the input
    and errors of :meth:`AnalyticFeatures.transform`."""
    df = AnalyticFeatures().transform(rows, spec)
    return {c: df[c].to_numpy() for c in df.columns}
