"""The ``triton_mm`` family: Triton's blocked matmul, the kernel PyTorch
Inductor autotunes for ``torch.mm`` (``torch/_inductor/kernel/mm.py``, the
``mm_template``) and Triton's matmul tutorial, C[M,N] = op(A) @ op(B) with
float32 accumulation; and the vendor library as one more candidate.

Config: ``block_m, block_n, block_k, num_warps, num_stages, group_m``
(Triton's ``BLOCK_M/N/K`` constexprs, ``triton.Config(num_warps=...,
num_stages=...)``, and the grouped launch order ``GROUP_M``; Inductor always
uses 8). The id is readable and stable: ``"m64n128k32_w4_s3_g8"``.
:data:`VENDOR` (id ``"vendor"``) stands for "call the vendor library"
(cuBLAS through aten's ``extern_mm``): it is always feasible, and the model
learns its time from the problem's features and its ``vendor`` flag.

Feasibility rules (checked in this order; sources in brackets):

- ``threads_above_max``: 32 * num_warps <= ``spec.max_threads_per_block``.
- ``smem_above_max``: (BM*BK + BK*BN) * element bytes * copies +
  ``smem_reserved_per_block_bytes`` must fit the opt-in per-block
  limit and the per-MP capacity (CUDA C++ Programming Guide, shared memory,
  cc 8.0+). Triton's software pipeline keeps num_stages - 1 copies of both
  panels in shared memory, and num_stages copies where it uses Hopper's
  warp-group MMA (:meth:`TritonMMFamily.smem_bytes`, checked against
  Triton 3.6's own allocation); on the A100 logs this rule agrees with which configs
  Inductor recorded as failed for every (config, dtype) pair, where
  counting num_stages copies wrongly rejects pairs that ran (docs/guide.md,
  "Triton's matmul family").
- ``warp_tile_below_mma``: for tensor-core dtypes (float16, bfloat16,
  tfloat32) every warp must own at least one m16n8 output tile of an
  ``mma.sync`` instruction, BM*BN >= num_warps * 16 * 8 (PTX ISA, "Matrix
  shape" of ``mma.m16n8k16`` / ``mma.m16n8k8``); below it warps compute
  copies of one another's tiles.
- ``registers_above_max``: estimated registers per thread (fp32
  accumulators BM*BN/threads + :data:`REG_OVERHEAD`) <= 255.
"""
from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np

from costlearn.core.dtypes import get_dtype
from costlearn.core.problem import EPILOGUES
from costlearn.families.base import VENDOR_CONFIG_ID, KernelFamily, TileDescription
from costlearn.families.triton_mm.config import VALUES, VENDOR, TritonMMConfig, VendorCall
from costlearn.families.triton_mm.inductor import shrunk_variants

__all__ = ["TritonMMFamily", "TritonMMConfig", "VendorCall", "VENDOR", "VALUES", "REG_OVERHEAD",
           "TENSOR_CORE_DTYPES", "MMA_TILE"]

TENSOR_CORE_DTYPES = ("float16", "bfloat16", "tfloat32")
"""Dtypes ``tl.dot`` runs on tensor cores (float32 without TF32 runs on the
FMA units)."""

MMA_TILE = (16, 8)
"""Output tile (rows, columns) of one warp's ``mma.sync`` m16n8kX (PTX ISA)."""

REG_OVERHEAD = 40
"""Registers per thread besides the accumulators (pointers, offsets, masks,
loop state, operand fragments); an estimate for the ``registers_above_max``
rule and the occupancy features, not a compiled count."""

INDUCTOR_TEMPLATE_HASH = hashlib.sha256(b"triton_mm: torch/_inductor/kernel/mm.py mm_template; vendor = aten mm"
                                        ).hexdigest()[:12]
"""``template_hash`` of imported rows: PyTorch Inductor's mm template (and
aten's mm for the vendor candidate), the kernel of its AutoHeuristic logs."""

KERNEL_HASH = hashlib.sha256((Path(__file__).with_name("kernel.py")).read_bytes()).hexdigest()[:12]
"""``template_hash`` of rows costlearn measures: sha256 of its own Triton
kernel's source (:mod:`costlearn.families.triton_mm.kernel`), read as bytes,
so the family needs no Triton to know it."""


class TritonMMFamily(KernelFamily):
    """Triton's matmul and the vendor library; see the module docstring."""

    name = "triton_mm"
    config_type = (TritonMMConfig, VendorCall)
    dtypes = ("float16", "bfloat16", "float32", "tfloat32")
    layouts = ("NN", "NT", "TN", "TT")
    epilogues = EPILOGUES
    rules = ("threads_above_max", "smem_above_max", "warp_tile_below_mma", "registers_above_max")
    values = VALUES
    param_feature_names = ("log2_block_m", "log2_block_n", "log2_block_k", "log2_num_warps", "num_stages",
                           "log2_group_m", "vendor")
    template_hash = KERNEL_HASH
    imported_template_hash = INDUCTOR_TEMPLATE_HASH
    vendor_config_id = VENDOR_CONFIG_ID
    backends = ("triton",)

    def all_configs(self) -> list:
        keys = list(VALUES)
        return [TritonMMConfig(**dict(zip(keys, combo))) for combo in itertools.product(*(VALUES[k] for k in keys))
                ] + [VENDOR]

    def config_from_id(self, config_id: str):
        return VENDOR if config_id == VENDOR_CONFIG_ID else TritonMMConfig.from_id(config_id)

    @staticmethod
    def smem_bytes(config, dtype: str, compute_capability: str = "") -> int:
        """Shared memory of the pipelined panels, bytes: (BM*BK + BK*BN) *
        element bytes * copies, 0 for the vendor call (not ours to know).

        Copies: ``num_stages`` where Triton uses Hopper's warp-group MMA
        (compute capability 9.0 and newer, num_warps a multiple of 4, BM a
        multiple of 64), else max(1, num_stages - 1) (also when
        ``compute_capability`` is not given). That is how many buffers of
        both panels Triton 3.6's pipeliner allocates: compiling costlearn's
        kernel ahead of time for sm_90 (``scripts/triton_aot.py``), this
        equals Triton's shared-memory figure on most sampled bfloat16
        configs (docs/guide.md, "Triton's matmul, measured by costlearn");
        on sm_80 it is exact
        (``tests/collect/backends/test_triton_backend.py``), and on the A100 logs it agrees
        with which configs Inductor recorded as failed (module docstring).
        """
        if isinstance(config, VendorCall):
            return 0
        c = config
        try:
            hopper = int(str(compute_capability).split(".")[0]) >= 9
        except ValueError:
            hopper = False
        wgmma = hopper and c.num_warps % 4 == 0 and c.block_m % 64 == 0
        copies = c.num_stages if wgmma else max(1, c.num_stages - 1)
        return (c.block_m * c.block_k + c.block_k * c.block_n) * get_dtype(dtype).element_bytes * copies

    @staticmethod
    def registers_estimate(config) -> int:
        """fp32 accumulators per thread, BM*BN / (32*num_warps) (at least 1),
        + :data:`REG_OVERHEAD`."""
        if isinstance(config, VendorCall):
            return REG_OVERHEAD
        return max(1, config.block_m * config.block_n // config.threads) + REG_OVERHEAD

    def check_device(self, config, spec, dtype: str) -> str | None:
        if isinstance(config, VendorCall):
            return None
        if config.threads > spec.max_threads_per_block:
            return "threads_above_max"
        need = self.smem_bytes(config, dtype, spec.compute_capability) + spec.smem_reserved_per_block_bytes
        if need > spec.smem_per_block_optin_bytes + spec.smem_reserved_per_block_bytes \
                or need > spec.smem_per_mp_bytes:
            return "smem_above_max"
        if dtype in TENSOR_CORE_DTYPES \
                and config.block_m * config.block_n < config.num_warps * MMA_TILE[0] * MMA_TILE[1]:
            return "warp_tile_below_mma"
        if spec.max_registers_per_thread is not None \
                and self.registers_estimate(config) > spec.max_registers_per_thread:
            return "registers_above_max"
        return None

    def describe(self, config, dtype: str, registers_per_thread: float | None = None) -> TileDescription:
        """Tile description. The thread tile is the accumulator count per
        thread, BM*BN/threads (at least 1), split as a square-ish
        power-of-two pair; shared memory is swizzled by Triton, so the bank
        conflict degrees are 1; shared loads per FMA are those of an outer
        product of the thread tile. The vendor call gets the smallest block
        tile (16x16x16, so the problem rule never removes it), 4 warps, 1
        stage and no shared memory: a placeholder that keeps every feature
        defined; its ``vendor`` flag is what the model learns from."""
        regs = registers_per_thread
        if regs is None or not np.isfinite(regs):
            regs = float(self.registers_estimate(config))
        if isinstance(config, VendorCall):
            bm = bn = bk = 16
            threads, stages = 128, 1
        else:
            bm, bn, bk = config.block_m, config.block_n, config.block_k
            threads, stages = config.threads, config.num_stages
        acc = max(1, bm * bn // threads)
        tm = 1 << (acc.bit_length() // 2)         # 2**ceil(log2(acc) / 2) for acc a power of two
        tn = max(1, acc // tm)
        return TileDescription(
            block_m=bm, block_n=bn, block_k=bk, threads=threads, thread_m=tm, thread_n=tn,
            pipeline_stages=stages, element_bytes=get_dtype(dtype).element_bytes,
            smem_bytes=self.smem_bytes(config, dtype), registers_per_thread=float(regs),
            bank_conflict_a_read=1, bank_conflict_a_store=1, bank_conflict_b_read=1,
            smem_loads_per_fma=(tm + tn) / (tm * tn))

    def block_tile(self, config) -> tuple[int, int, int]:
        if isinstance(config, VendorCall):
            return 16, 16, 16
        return config.block_m, config.block_n, config.block_k

    def param_features(self, configs) -> dict:
        cs = list(configs)
        vendor = np.array([isinstance(c, VendorCall) for c in cs], bool)

        def col(f, default):
            return np.array([default if isinstance(c, VendorCall) else getattr(c, f) for c in cs], np.float64)
        return dict(log2_block_m=np.log2(col("block_m", 16)), log2_block_n=np.log2(col("block_n", 16)),
                    log2_block_k=np.log2(col("block_k", 16)), log2_num_warps=np.log2(col("num_warps", 4)),
                    num_stages=col("num_stages", 1), log2_group_m=np.log2(col("group_m", 1)),
                    vendor=vendor.astype(np.float64))

    def overhead_config(self):
        """The smallest program: 16x16x16, one warp, one stage."""
        return TritonMMConfig(16, 16, 16, 1, 1, 1)

    def torch_launcher(self, config, dtype: str, epilogue: str = "none"):
        """``launch(a, b, c, bias)`` for the triton backend: costlearn's
        Triton kernel (:func:`costlearn.families.triton_mm.kernel.launch`)
        with ``epilogue`` fused, or for the vendor call ``torch.mm(a, b,
        out=c)`` (``torch.addmm(bias, a, b, out=c)`` with a bias, then the
        activation in place: cuBLAS does not fuse ReLU or GELU behind this
        call, so the vendor candidate pays its extra pass, as a compiler
        calling it would), with TF32 allowed exactly when ``dtype`` is
        ``tfloat32``. Importing the kernel needs Triton (ImportError
        otherwise); nothing compiles until the first launch.

        Raises
        ------
        ValueError
            If ``epilogue`` is not one of :attr:`epilogues`.
        """
        self.check_epilogue(epilogue)
        if isinstance(config, VendorCall):
            import torch

            def vendor(a, b, c, bias=None):
                torch.backends.cuda.matmul.allow_tf32 = dtype == "tfloat32"
                if epilogue == "none":
                    torch.mm(a, b, out=c)
                    return
                torch.addmm(bias, a, b, out=c)
                if epilogue == "bias_relu":
                    torch.relu_(c)
                elif epilogue == "bias_gelu":
                    c.copy_(torch.nn.functional.gelu(c, approximate="tanh"))
            return vendor
        from costlearn.families.triton_mm.kernel import launch  # needs Triton: an optional dependency

        def kernel(a, b, c, bias=None):
            launch(config, a, b, c, dtype=dtype, bias=bias, epilogue=epilogue)
        return kernel

    def shrunk_variants(self, config) -> list:
        """Inductor's shrunk configs (:func:`costlearn.families.triton_mm.inductor.shrunk_variants`);
        none of the vendor call."""
        return [] if isinstance(config, VendorCall) else shrunk_variants(config)

    def min_tile_caps(self, spec) -> tuple[int, int, int]:
        """(16, 16, 16): ``tl.dot``'s smallest block, so every problem keeps
        the 16-wide configs."""
        return 16, 16, 16

    def _space_constants(self) -> tuple:
        return (REG_OVERHEAD, MMA_TILE, TENSOR_CORE_DTYPES)
