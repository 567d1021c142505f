"""Configs of the ``triton_mm`` family: :class:`TritonMMConfig` (one Triton
matmul launch) and :class:`VendorCall` (the vendor library as a candidate)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from costlearn.core.checks import check_int
from costlearn.families.base import VENDOR_CONFIG_ID

__all__ = ["TritonMMConfig", "VendorCall", "VENDOR", "VALUES"]

VALUES = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (16, 32, 64, 128, 256),
    "block_k": (16, 32, 64, 128, 256),
    "num_warps": (1, 2, 4, 8, 16),
    "num_stages": (1, 2, 3, 4, 5, 6, 7),
    "group_m": (1, 4, 8, 16),
}
"""Values each parameter ranges over before the rules: every block size,
warp and stage count of Inductor's mm config lists (``mm_configs`` in
``torch/_inductor/kernel/mm_common.py``, A100 and H100 lists) and of
Triton's matmul tutorial; ``tl.dot`` needs every block dimension >= 16."""

_ID = re.compile(r"m([1-9][0-9]*)n([1-9][0-9]*)k([1-9][0-9]*)_w([1-9][0-9]*)_s([1-9][0-9]*)_g([1-9][0-9]*)",
                 flags=re.ASCII)


@dataclass(frozen=True, order=True)
class TritonMMConfig:
    """One config of Triton's matmul.

    Parameters
    ----------
    block_m, block_n : int
        Block tile [BLOCK_M, BLOCK_N] one program computes, elements
        (powers of two >= 16).
    block_k : int
        Reduction step BLOCK_K, elements (a power of two >= 16).
    num_warps : int
        Warps per program (a power of two in [1, 32]).
    num_stages : int
        Software-pipeline stages of the K loop, in [1, 16].
    group_m : int
        Rows of blocks launched together for L2 reuse (``GROUP_M``), >= 1.

    Raises
    ------
    TypeError
        If a value is not an integer.
    ValueError
        If a block size is not a power of two in [16, 4096], num_warps not a
        power of two in [1, 32], num_stages out of [1, 16] or group_m out of
        [1, 1024].
    """

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8

    family = "triton_mm"     # class attribute: the family this config belongs to

    def __post_init__(self) -> None:
        for f in ("block_m", "block_n", "block_k"):
            v = check_int(f"TritonMMConfig.{f}", getattr(self, f), 16, 4096)
            if v & (v - 1):
                raise ValueError(f"TritonMMConfig.{f}={v}; must be a power of two in [16, 4096]")
            object.__setattr__(self, f, v)
        w = check_int("TritonMMConfig.num_warps", self.num_warps, 1, 32)
        if w & (w - 1):
            raise ValueError(f"TritonMMConfig.num_warps={w}; must be a power of two in [1, 32]")
        object.__setattr__(self, "num_warps", w)
        object.__setattr__(self, "num_stages", check_int("TritonMMConfig.num_stages", self.num_stages, 1, 16))
        object.__setattr__(self, "group_m", check_int("TritonMMConfig.group_m", self.group_m, 1, 1024))

    @property
    def threads(self) -> int:
        """Threads per program, 32 * num_warps."""
        return 32 * self.num_warps

    @property
    def config_id(self) -> str:
        """Stable, readable id, e.g. ``"m64n128k32_w4_s3_g8"``."""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}_w{self.num_warps}_s{self.num_stages}"
                f"_g{self.group_m}")

    @classmethod
    def from_id(cls, config_id: str) -> "TritonMMConfig":
        """Parse a :attr:`config_id`.

        Raises
        ------
        ValueError
            If ``config_id`` is not ``m<BM>n<BN>k<BK>_w<warps>_s<stages>_g<group>``.
        """
        m = _ID.fullmatch(str(config_id))
        if not m:
            raise ValueError(f"malformed triton_mm config_id {config_id!r}; expected e.g. 'm64n128k32_w4_s3_g8' "
                             "or 'vendor'")
        return cls(*(int(g) for g in m.groups()))

    def to_dict(self) -> dict:
        """The parameters as a plain dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class VendorCall:
    """The candidate "call the vendor library" (cuBLAS through aten's
    ``extern_mm`` in Inductor's logs): no tile parameters of its own."""

    family = "triton_mm"

    @property
    def config_id(self) -> str:
        """Always :data:`costlearn.families.VENDOR_CONFIG_ID` (``"vendor"``)."""
        return VENDOR_CONFIG_ID

    def to_dict(self) -> dict:
        """No parameters: ``{}``."""
        return {}


VENDOR = VendorCall()
"""The one vendor candidate."""
