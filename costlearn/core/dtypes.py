"""Element types as data: what a dtype means for a matmul's cost and its
correctness check, in one table (design.md, "Seams": dtypes are data, not
code paths).

Sources: IEEE 754-2008 (binary32, binary16); Intel "BFLOAT16 - Hardware
Numerics Definition" (2018) for bfloat16 (8 exponent, 7 fraction bits);
NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), "TF32" for
tfloat32: float32 storage, multiplies rounded to 10 fraction bits, float32
accumulation.
"""
from __future__ import annotations

from dataclasses import dataclass

from costlearn.core.registry import Registry

__all__ = ["DType", "DTYPES", "get_dtype", "dtype_names", "TORCH_DTYPES"]


@dataclass(frozen=True)
class DType:
    """One element type of A and B.

    Attributes
    ----------
    name : str
        ``"float32"``, ``"tfloat32"``, ``"float16"``, ``"bfloat16"``.
    element_bytes : int
        Bytes per stored element of A and B (TF32 is stored as float32).
    accumulate : str
        Type of the accumulator and of C (``"float32"`` for all four).
    fraction_bits : int
        Fraction (mantissa) bits of the multiply: the unit roundoff of the
        products is 2**-(fraction_bits + 1); the correctness tolerance scales
        with it.
    peak : str
        Which of :class:`costlearn.core.device.DeviceSpec`'s peaks applies
        (``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``).
    host_dtype : str or None
        numpy dtype the host generates inputs in (None: numpy has none, e.g.
        bfloat16; such inputs are made by the backend's own library).
    """

    name: str
    element_bytes: int
    accumulate: str
    fraction_bits: int
    peak: str
    host_dtype: str | None

    @property
    def eps(self) -> float:
        """Machine epsilon of the multiply, 2**-fraction_bits."""
        return 2.0 ** -self.fraction_bits


DTYPES = Registry("dtype", {
    "float32": DType("float32", 4, "float32", 23, "fp32", "float32"),
    "tfloat32": DType("tfloat32", 4, "float32", 10, "tf32", "float32"),
    "float16": DType("float16", 2, "float32", 10, "fp16", "float16"),
    "bfloat16": DType("bfloat16", 2, "float32", 7, "bf16", None),
})
"""Every dtype costlearn knows; which a kernel family supports is the
family's :attr:`~costlearn.families.KernelFamily.dtypes`."""


TORCH_DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32"}
"""``str(torch dtype)`` -> costlearn dtype (float32 becomes ``tfloat32`` only
where the source says TF32 was allowed)."""


def dtype_names() -> tuple[str, ...]:
    """Names of :data:`DTYPES`, in table order."""
    return tuple(DTYPES)


def get_dtype(name) -> DType:
    """The :class:`DType` called ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not in :data:`DTYPES` (the message lists them).
    """
    if name not in DTYPES:
        raise ValueError(f"dtype={name!r}; allowed: {list(DTYPES)}")
    return DTYPES.get(name)
