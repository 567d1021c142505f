"""The ``gemm`` family's config: one tile configuration of costlearn's own
GEMM template (design.md, "The gemm family")."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from costlearn.core.checks import check_int

__all__ = ["GemmConfig", "LOOP_ORDERS", "RASTERS", "VALUES"]

LOOP_ORDERS = ("outer", "dot")
"""Per-thread loop nests: ``"outer"`` is the outer-product form (reduction
step outermost, a TM and a TN fragment loaded to registers, TM*TN FMAs);
``"dot"`` is the dot-product form (each accumulator's reduction innermost,
operands read straight from shared memory)."""

RASTERS = ("row", "col")
"""Order in which the linear block index walks the output's block grid:
``"row"`` (consecutive blocks along N) or ``"col"`` (along M)."""

VALUES = {
    "block_m": (1, 2, 4, 8, 16, 32, 64, 128),
    "block_n": (8, 16, 32, 64, 128, 256),
    "block_k": (4, 8, 16, 32, 64),
    "thread_m": (1, 2, 4, 8),
    "thread_n": (1, 2, 4, 8),
    "loop_order": LOOP_ORDERS,
    "smem_pad": (0, 1),
    "raster": RASTERS,
}
"""Values each tile parameter ranges over before feasibility rules."""

_ID = re.compile(r"m([1-9][0-9]*)n([1-9][0-9]*)k([1-9][0-9]*)_t([1-9][0-9]*)x([1-9][0-9]*)_([a-z]+)"
                 r"_p(0|[1-9][0-9]*)_([a-z]+)", flags=re.ASCII)


@dataclass(frozen=True, order=True)
class GemmConfig:
    """One tile configuration of the GEMM template.

    Parameters
    ----------
    block_m, block_n : int
        Block tile [BM, BN]: the output sub-matrix one thread block
        (work-group) computes, in elements.
    block_k : int
        Reduction step KS: the A panel [BM, KS] and B panel [KS, BN] staged
        in shared (local) memory per iteration, in elements.
    thread_m, thread_n : int
        Thread tile [TM, TN]: accumulators each thread holds, in elements.
        The block has (BM/TM)*(BN/TN) threads.
    loop_order : {"outer", "dot"}
        Nesting of the per-thread loops (see :data:`LOOP_ORDERS`).
    smem_pad : int
        Elements of padding added to the inner dimension of each shared
        panel (the bank-conflict knob).
    raster : {"row", "col"}
        Block raster order (see :data:`RASTERS`).

    Raises
    ------
    TypeError
        If a size is not an integer.
    ValueError
        If a size is out of [1, 4096] (padding [0, 4096]), a choice is
        unknown, or the thread tile does not divide the block tile.
    """

    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    loop_order: str = "outer"
    smem_pad: int = 0
    raster: str = "row"

    family = "gemm"          # class attribute, not a field: the family this config belongs to

    def __post_init__(self) -> None:
        for f in ("block_m", "block_n", "block_k", "thread_m", "thread_n", "smem_pad"):
            object.__setattr__(self, f, check_int(f"GemmConfig.{f}", getattr(self, f),
                                                  0 if f == "smem_pad" else 1, 4096))
        if self.loop_order not in LOOP_ORDERS:
            raise ValueError(f"GemmConfig.loop_order={self.loop_order!r}; allowed: {LOOP_ORDERS}")
        if self.raster not in RASTERS:
            raise ValueError(f"GemmConfig.raster={self.raster!r}; allowed: {RASTERS}")
        if self.block_m % self.thread_m or self.block_n % self.thread_n:
            raise ValueError(
                f"thread tile {self.thread_m}x{self.thread_n} must divide block tile "
                f"{self.block_m}x{self.block_n}")

    @property
    def threads(self) -> int:
        """Threads per block, (BM/TM)*(BN/TN)."""
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    @property
    def config_id(self) -> str:
        """Stable, readable identifier, e.g. ``"m64n64k16_t4x4_outer_p1_row"``."""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}_t{self.thread_m}x{self.thread_n}"
                f"_{self.loop_order}_p{self.smem_pad}_{self.raster}")

    @classmethod
    def from_id(cls, config_id: str) -> "GemmConfig":
        """Parse a :attr:`config_id`.

        Raises
        ------
        ValueError
            If ``config_id`` is not of the form
            ``m<BM>n<BN>k<KS>_t<TM>x<TN>_<loop>_p<pad>_<raster>``.
        """
        m = _ID.fullmatch(str(config_id))
        if not m:
            raise ValueError(f"malformed gemm config_id {config_id!r}; expected e.g. "
                             "'m64n64k16_t4x4_outer_p1_row'")
        bm, bn, bk, tm, tn, lo, pad, ra = m.groups()
        return cls(int(bm), int(bn), int(bk), int(tm), int(tn), lo, int(pad), ra)

    def to_dict(self) -> dict:
        """The parameters as a plain dict (field name -> value)."""
        return dataclasses.asdict(self)
