"""The problem value: one matrix multiply C[M,N] = op(A)[M,K] @ op(B)[K,N],
checked once and passed forward (design.md, "Data flow")."""
from __future__ import annotations

import re
from dataclasses import dataclass

from costlearn.core.dtypes import DTYPES, get_dtype
from costlearn.core.checks import check_int, shown

__all__ = ["Problem", "LAYOUTS", "MAX_EXTENT", "layout_letter", "EPILOGUES", "EPILOGUE_FLOPS", "check_epilogue",
           "extent_of_text"]

LAYOUTS = ("NN", "NT", "TN", "TT")
"""Two letters, for A then B: ``N`` when that matrix is row-major (its last
stride is 1: A is [M][K], B is [K][N] in memory), ``T`` when it is
column-major (its first stride is 1). BLAS's transpose flags for row-major
storage."""

EPILOGUES = ("none", "bias", "bias_relu", "bias_gelu")
"""What a fused group computes after C = A @ B, per output element:
nothing; ``+ bias[n]`` (a length-N vector broadcast over rows); then ReLU,
max(x, 0); or GELU in its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
x^3))) (Hendrycks and Gimpel, "Gaussian Error Linear Units", 2016, eq. for
the approximation; PyTorch's ``gelu(approximate="tanh")``)."""

EPILOGUE_FLOPS = {"none": 0, "bias": 1, "bias_relu": 2, "bias_gelu": 10}
"""Floating-point operations per output element of each epilogue, counted as
the kernels write it (families/gemm/template.py): the bias add 1; ReLU a
max, 1 more; the tanh GELU 0.5*x*(1 + tanh(c*(x + 0.044715*x*x*x))) 8
multiplies and adds plus one tanh counted as 1 (a transcendental is one
special-function instruction on NVIDIA GPUs: CUDA C++ Programming Guide,
"Arithmetic Instructions", tanh.approx), 9 more than the bias: 10."""


def check_epilogue(epilogue) -> str:
    """``epilogue`` if it is one of :data:`EPILOGUES`.

    Raises
    ------
    ValueError
        Otherwise, naming the value and the allowed ones.
    """
    if not isinstance(epilogue, str) or epilogue not in EPILOGUES:
        raise ValueError(f"epilogue={epilogue!r}; allowed: {list(EPILOGUES)} (what the fused group computes "
                         "after A @ B)")
    return epilogue


def layout_letter(strides) -> str | None:
    """The layout letter of one matrix from its strides (the last two are
    the matrix's): ``N`` when the last stride is 1 (row-major; checked first,
    so a matrix with both strides 1, e.g. one row, is ``N``), ``T`` when the
    one before it is 1 (column-major), None otherwise (a strided view) or
    with fewer than two strides."""
    strides = tuple(strides)
    if len(strides) < 2:
        return None
    return "N" if strides[-1] == 1 else "T" if strides[-2] == 1 else None


_EPILOGUE_SET = frozenset(EPILOGUES)

MAX_EXTENT = 2**31 - 1
"""Largest M, N or K: kernels take extents as 32-bit ints."""


def extent_of_text(name: str, text: str) -> int:
    """An extent written as decimal digits (a sign allowed), as an int.

    A text of more significant digits than any extent has (over ten) is
    refused here, naming its length (``int`` refuses one of over 4,300
    digits in Python's own words, and a message would repeat them all);
    the rest of the range is :class:`Problem`'s to check.

    Parameters
    ----------
    name : str
        The extent's name in the message (``"M"``).
    text : str
        Decimal digits, optionally signed.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If ``text`` is not decimal digits, or has over ten significant ones.
    """
    text = str(text).strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"{name}={text[:20]!r}; must be an integer")
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > len(str(MAX_EXTENT)):
        raise ValueError(f"{name}={text[:12]}... ({len(digits)} digits); must be an int in [1, 2**31 - 1] "
                         "(kernel extents are 32-bit)")
    return int(text)


@dataclass(frozen=True, slots=True)
class Problem:
    """One matmul problem.

    Parameters
    ----------
    m, n, k : int
        Extents, each in [1, 2**31 - 1] (Python or numpy integers; bool and
        float refused).
    dtype : str
        Element type of A and B, a name in :data:`costlearn.core.dtypes.DTYPES`
        (``"float32"``, ``"tfloat32"``, ``"float16"``, ``"bfloat16"``).
    layout : str
        One of :data:`LAYOUTS`.
    epilogue : str
        What the fused group computes after A @ B, one of :data:`EPILOGUES`
        (``"none"``: C = A @ B; the others add a length-N bias, float32).

    Raises
    ------
    TypeError
        If an extent is not an integer.
    ValueError
        If an extent is out of range, or the dtype or layout unknown.

    Examples
    --------
    >>> Problem(1, 4096, 4096, "bfloat16", "NT").flops
    33554432
    """

    m: int
    n: int
    k: int
    dtype: str = "float32"
    layout: str = "NN"
    epilogue: str = "none"

    def __post_init__(self) -> None:
        m, n, k = self.m, self.n, self.k
        if type(m) is int and type(n) is int and type(k) is int and 0 < m <= MAX_EXTENT \
                and 0 < n <= MAX_EXTENT and 0 < k <= MAX_EXTENT and type(self.dtype) is str \
                and type(self.layout) is str and self.dtype in DTYPES and self.layout in LAYOUTS \
                and type(self.epilogue) is str and self.epilogue in _EPILOGUE_SET:
            return                                   # the common case, checked in one expression
        for name in ("dtype", "layout", "epilogue"):
            v = getattr(self, name)
            if isinstance(v, str) and type(v) is not str:   # a str subclass's own __eq__ and __hash__ must not decide
                object.__setattr__(self, name, str.__str__(v))
        for name, v in (("M", m), ("N", n), ("K", k)):
            try:
                object.__setattr__(self, name.lower(), check_int(name, v, 1, MAX_EXTENT))
            except ValueError:
                if check_int(name, v) < 1:
                    raise ValueError(f"{name}={shown(v)}; must be an int >= 1") from None
                raise ValueError(f"{name}={shown(v)}; must be < 2**31 (kernel extents are 32-bit)") from None
        get_dtype(self.dtype)
        if not isinstance(self.layout, str) or self.layout not in LAYOUTS:
            raise ValueError(f"layout={self.layout!r}; allowed: {list(LAYOUTS)} (A then B: N row-major, "
                             "T column-major)")
        check_epilogue(self.epilogue)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(M, N, K)."""
        return self.m, self.n, self.k

    @property
    def flops(self) -> int:
        """2*M*N*K floating-point operations (a fused multiply-add counts 2)."""
        return 2 * self.m * self.n * self.k

    @property
    def element_bytes(self) -> int:
        """Bytes per element of A and B (:data:`costlearn.core.dtypes.DTYPES`)."""
        return DTYPES[self.dtype].element_bytes

    @property
    def epilogue_flops(self) -> int:
        """Floating-point operations of the epilogue, M*N times
        :data:`EPILOGUE_FLOPS` of it."""
        return self.m * self.n * EPILOGUE_FLOPS[self.epilogue]

    def __str__(self) -> str:
        tail = "" if self.epilogue == "none" else f" +{self.epilogue}"
        return f"{self.m}x{self.n}x{self.k} {self.dtype} {self.layout}{tail}"
