"""The ``gemm`` family: costlearn's own tiled GEMM template (CUDA and OpenCL
from one source), C[M,N] = A[M,K] @ B[K,N], row-major, float32.

Feasibility rules (design.md, "The gemm family"; checked in this order):

- ``threads_not_whole_warps``: threads per block must be a positive
  multiple of ``spec.warp_size``.
- ``threads_above_max``: threads <= ``spec.max_threads_per_block``.
- ``accumulators_above_max``: TM*TN <= :data:`MAX_ACCUMULATORS`.
- ``smem_above_max``: panel bytes + ``smem_reserved_per_block_bytes`` must
  fit in the opt-in per-block limit and in the per-MP capacity (CUDA C++
  Programming Guide, shared memory, cc 8.0+).
- ``registers_above_max``: estimated registers per thread <=
  ``spec.max_registers_per_thread`` (skipped where None).
- ``registers_per_block_above_mp``: warp-granular register allocation of one
  block must fit ``spec.registers_per_mp``.
"""
from __future__ import annotations

import itertools

import numpy as np

from costlearn.core.dtypes import get_dtype
from costlearn.core.problem import EPILOGUES
from costlearn.families.base import KernelFamily, TileDescription, bank_conflict_degree
from costlearn.families.gemm.config import LOOP_ORDERS, RASTERS, VALUES, GemmConfig
from costlearn.families.gemm.registers import nvcc_registers
from costlearn.families.gemm.template import TEMPLATE_HASH, kernel_name, render

__all__ = ["GemmFamily", "GemmConfig", "VALUES", "LOOP_ORDERS", "RASTERS", "MAX_ACCUMULATORS", "REG_OVERHEAD",
           "render", "kernel_name", "TEMPLATE_HASH"]

MAX_ACCUMULATORS = 64
"""Accumulators per thread above which a kernel spills on every GPU we know
(TM*TN accumulators + TM + TN fragments must fit in 255 registers with the
addressing registers; CUTLASS SIMT kernels stop at 8x8)."""

REG_OVERHEAD = 32
"""Registers a thread needs besides accumulators and fragments (indices,
pointers, loop counters), a conservative figure read off ``nvcc -Xptxas -v``
for this template."""


def _warp_degrees(bm, bn, bk, tm, tn, pad, threads):
    """Bank-conflict degrees of the first warp's A-panel read, A-panel store
    and B-panel read at the first reduction index, for the layout the
    template uses (``As[BM][KS+pad]``, ``Bs[KS][BN+pad]``)."""
    w = np.arange(min(int(threads), 32))
    tcols = bn // tn
    tr, tc = w // tcols, w % tcols
    a_read = (tr * tm) * (bk + pad)                     # As[(tr*TM+i)*(BK+PAD)+kk] at i=kk=0
    a_store = (w // bk) * (bk + pad) + (w % bk)         # A-panel store, element e = tid
    b_read = tc                                         # Bs[kk*(BN+PAD)+tc] at kk=j=0
    return bank_conflict_degree(a_read), bank_conflict_degree(a_store), bank_conflict_degree(b_read)


class GemmFamily(KernelFamily):
    """costlearn's own tiled GEMM template; see the module docstring."""

    name = "gemm"
    config_type = GemmConfig
    dtypes = ("float32",)
    layouts = ("NN",)
    epilogues = EPILOGUES
    rules = ("threads_not_whole_warps", "threads_above_max", "accumulators_above_max", "smem_above_max",
             "registers_above_max", "registers_per_block_above_mp")
    values = VALUES
    param_feature_names = ("log2_block_m", "log2_block_n", "log2_block_k", "log2_thread_m", "log2_thread_n",
                           "loop_outer", "raster_row", "smem_pad")
    template_hash = TEMPLATE_HASH
    backends = ("cuda", "opencl")

    def __init__(self):
        self._described: dict = {}

    def all_configs(self) -> list:
        out = []
        keys = list(VALUES)
        for combo in itertools.product(*(VALUES[k] for k in keys)):
            d = dict(zip(keys, combo))
            if d["block_m"] % d["thread_m"] or d["block_n"] % d["thread_n"]:
                continue
            out.append(GemmConfig(**d))
        return out

    def config_from_id(self, config_id: str) -> GemmConfig:
        return GemmConfig.from_id(config_id)

    @staticmethod
    def smem_bytes(config: GemmConfig, dtype: str = "float32") -> int:
        """Shared (local) memory one block allocates, bytes:
        (BM*(KS+pad) + KS*(BN+pad)) * element bytes (A stored [BM][KS+pad],
        B [KS][BN+pad], see :mod:`.template`)."""
        c = config
        return (c.block_m * (c.block_k + c.smem_pad) + c.block_k * (c.block_n + c.smem_pad)) \
            * get_dtype(dtype).element_bytes

    @staticmethod
    def registers_estimate(config: GemmConfig) -> int:
        """Registers per thread before compilation: TM*TN accumulators + TM +
        TN fragment registers + :data:`REG_OVERHEAD`."""
        return config.thread_m * config.thread_n + config.thread_m + config.thread_n + REG_OVERHEAD

    def check_device(self, config: GemmConfig, spec, dtype: str = "float32") -> str | None:
        t = config.threads
        if t % spec.warp_size:
            return "threads_not_whole_warps"
        if t > spec.max_threads_per_block:
            return "threads_above_max"
        if config.thread_m * config.thread_n > MAX_ACCUMULATORS:
            return "accumulators_above_max"
        need = self.smem_bytes(config, dtype) + spec.smem_reserved_per_block_bytes
        if need > spec.smem_per_block_optin_bytes + spec.smem_reserved_per_block_bytes \
                or need > spec.smem_per_mp_bytes:
            return "smem_above_max"
        if spec.max_registers_per_thread is not None:
            regs = self.registers_estimate(config)
            if regs > spec.max_registers_per_thread:
                return "registers_above_max"
            if spec.registers_per_mp is not None:
                per_warp = -(-regs * spec.warp_size // spec.register_alloc_unit) * spec.register_alloc_unit
                if per_warp * (t // spec.warp_size) > spec.registers_per_mp:
                    return "registers_per_block_above_mp"
        return None

    def describe(self, config: GemmConfig, dtype: str = "float32",
                 registers_per_thread: float | None = None) -> TileDescription:
        c = config
        regs = registers_per_thread
        if regs is None or not np.isfinite(regs):
            regs = float(self.registers_estimate(c))
        key = (c, dtype)
        deg = self._described.get(key)
        if deg is None:
            deg = self._described[key] = _warp_degrees(c.block_m, c.block_n, c.block_k, c.thread_m, c.thread_n,
                                                       c.smem_pad, c.threads)
        return TileDescription(
            block_m=c.block_m, block_n=c.block_n, block_k=c.block_k, threads=c.threads,
            thread_m=c.thread_m, thread_n=c.thread_n, pipeline_stages=1,
            element_bytes=get_dtype(dtype).element_bytes, smem_bytes=self.smem_bytes(c, dtype),
            registers_per_thread=float(regs), bank_conflict_a_read=deg[0], bank_conflict_a_store=deg[1],
            bank_conflict_b_read=deg[2],
            smem_loads_per_fma=(c.thread_m + c.thread_n) / (c.thread_m * c.thread_n)
            if c.loop_order == "outer" else 2.0)

    def block_tile(self, config: GemmConfig) -> tuple[int, int, int]:
        return config.block_m, config.block_n, config.block_k

    def param_features(self, configs) -> dict:
        cs = list(configs)

        def col(f):
            return np.array([getattr(c, f) for c in cs], np.float64)
        return dict(
            log2_block_m=np.log2(col("block_m")), log2_block_n=np.log2(col("block_n")),
            log2_block_k=np.log2(col("block_k")), log2_thread_m=np.log2(col("thread_m")),
            log2_thread_n=np.log2(col("thread_n")),
            loop_outer=np.array([c.loop_order == "outer" for c in cs], np.float64),
            raster_row=np.array([c.raster == "row" for c in cs], np.float64),
            smem_pad=col("smem_pad"))

    def min_tile_caps(self, spec) -> tuple[int, int, int]:
        """BM <= next_pow2(M); BN <= max(next_pow2(N), smallest BN, warp size),
        because a batch-1 block (BM = 1) needs BN/TN >= one warp of threads
        and a narrower cap would leave shapes such as (1, 16, 1024) on a GPU
        with no feasible tile; KS <= max(next_pow2(K), smallest KS)."""
        return min(VALUES["block_m"]), max(min(VALUES["block_n"]), int(spec.warp_size)), min(VALUES["block_k"])

    # -- code generation and launch geometry (backends use these) ------------

    def render(self, config: GemmConfig, dialect: str, dtype: str = "float32", epilogue: str = "none") -> str:
        """Kernel source (:func:`costlearn.families.gemm.template.render`)."""
        return render(config, dialect, dtype, epilogue=epilogue)

    kernel_name = staticmethod(kernel_name)

    @staticmethod
    def blocks(config: GemmConfig, m: int, n: int) -> int:
        """Blocks on the 1-D launch grid: ceil(M/BM) * ceil(N/BN)."""
        return -(-m // config.block_m) * -(-n // config.block_n)

    @staticmethod
    def _arch(spec) -> str | None:
        """nvcc's ``-arch`` for a CUDA device (``sm_90``), None for others."""
        if spec.api != "cuda" or not spec.compute_capability:
            return None
        return "sm_" + spec.compute_capability.replace(".", "")

    def registers_tool(self, spec) -> str | None:
        """``nvcc -arch=sm_XY -Xptxas -v`` for a CUDA device, else None."""
        arch = self._arch(spec)
        return None if arch is None else f"nvcc -arch={arch} -Xptxas -v"

    def compiled_registers(self, configs, spec) -> dict:
        """Registers per thread from nvcc for ``spec``'s compute capability
        (:func:`costlearn.families.gemm.registers.nvcc_registers`).

        Raises
        ------
        ValueError
            If ``spec`` is not a CUDA device (no compute capability).
        costlearn.families.gemm.registers.NvccUnavailable
            If nvcc is not installed (a :class:`~costlearn.families.CompilerUnavailable`).
        """
        arch = self._arch(spec)
        if arch is None:
            raise ValueError(f"device {spec.name!r} (api {spec.api!r}): nvcc registers are for CUDA devices")
        return nvcc_registers(configs, arch)

    def _space_constants(self) -> tuple:
        return (MAX_ACCUMULATORS, REG_OVERHEAD)
