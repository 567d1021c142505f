"""Inputs and verification: a workspace's random inputs and buffer sets, and the check of a kernel's output.

A backend's workspace (:meth:`costlearn.collect.backends.base.Backend.workspace`)
fills its inputs with :func:`make_inputs`, rotates among
:func:`rotation_sets` buffer sets so that a launch does not find its inputs
in cache, and checks a kernel's first output (:func:`check_result`) against
the float64 reference (with :func:`apply_epilogue` for a fused epilogue)
within :func:`tolerance`: "Correctness first" and "Caches" of
:mod:`costlearn.collect.measure`'s protocol.
"""
from __future__ import annotations

import math

import numpy as np

from costlearn.collect.protocol import DISTRIBUTIONS
from costlearn.core.dtypes import get_dtype
from costlearn.core.problem import check_epilogue

__all__ = ["make_inputs", "tolerance", "apply_epilogue", "check_result", "rotation_sets"]


def make_inputs(m: int, n: int, k: int, distribution: str = "normal", density: float = 1.0,
                rng: np.random.Generator | None = None, dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """Random inputs A [m, k] and B [k, n], C-contiguous, in the host dtype
    of ``dtype`` (:data:`costlearn.core.dtypes.DTYPES`: float32 for ``float32``
    and ``tfloat32``, float16 for ``float16``).

    Never all zeros: with ``distribution="sparse"`` at least one element of
    each matrix is non-zero.

    Raises
    ------
    ValueError
        If ``distribution`` is unknown, ``density`` outside (0, 1], or the
        dtype has no numpy host type (bfloat16: its backend makes inputs).
    """
    host = get_dtype(dtype).host_dtype
    if host is None:
        raise ValueError(f"dtype={dtype!r} has no numpy host type; its backend generates the inputs")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution={distribution!r}; allowed: {DISTRIBUTIONS}")
    if not 0 < density <= 1:
        raise ValueError(f"density={density!r}; must be in (0, 1]")
    rng = rng or np.random.default_rng(0)
    out = []
    for shape in ((m, k), (k, n)):
        if distribution == "uniform":
            x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        else:
            x = rng.standard_normal(size=shape, dtype=np.float32)
        if distribution == "sparse" and density < 1:
            mask = rng.random(size=shape) < density
            mask.flat[rng.integers(mask.size)] = True
            x = np.where(mask, x, np.float32(0))
        if not np.any(x):  # guard the (measure-zero) all-zero draw
            x.flat[0] = np.float32(1)
        out.append(np.ascontiguousarray(x.astype(host, copy=False)))
    return out[0], out[1]


def tolerance(a, b, dtype: str = "float32", xp=np, bias=None):
    """Per-element error bound for C = A @ B accumulated in ``dtype``, and
    for an epilogue's output when ``bias`` is given.

    Bound: ``|C - C_ref| <= 16 * sqrt(K) * eps * (|A| @ |B|) + tiny``, the
    probabilistic forward error bound of a length-K dot product,
    lambda * sqrt(K) * u (N. J. Higham and T. Mary, "A new approach to
    probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5),
    2019), with lambda = 16 (u = eps/2, so a factor 32 over u). It scales with
    K and the dtype's epsilon, and is tight enough that an error of one unit
    in one element of a K = 4096 product is caught.

    With a bias the sum's magnitude ``|A| @ |B| + |bias|`` replaces
    ``|A| @ |B|``, times 1.2 (the steepest slope of the activations of
    :data:`costlearn.core.problem.EPILOGUES`: ReLU 1, the tanh GELU 1.13), plus
    the activation's own float32 rounding, 2**-20 (8 ulp) of that
    magnitude plus 2**-20 absolute.

    Parameters
    ----------
    a, b : array, shapes (M, K) and (K, N)
    dtype : str
        Name in :data:`costlearn.core.dtypes.DTYPES`; its epsilon (of the
        multiply: 2**-10 for TF32) scales the bound.
    xp : module
        ``numpy``, or ``cupy`` to compute on the GPU.
    bias : array, shape (N,), optional
        The epilogue's bias; None without an epilogue.

    Returns
    -------
    array of float64, shape (M, N), of the module ``xp``
    """
    eps = get_dtype(dtype).eps
    k = a.shape[1]
    scale = xp.abs(a).astype(xp.float64) @ xp.abs(b).astype(xp.float64)
    if bias is None:
        return 16.0 * math.sqrt(k) * eps * scale + 1e-30
    scale += xp.abs(bias).astype(xp.float64)
    return 1.2 * 16.0 * math.sqrt(k) * eps * scale + 2.0 ** -20 * (scale + 1.0)


def apply_epilogue(v, bias, epilogue: str, xp=np):
    """The float64 reference of an epilogue: ``v + bias`` (broadcast over
    rows), then the activation of ``epilogue``
    (:data:`costlearn.core.problem.EPILOGUES`; the tanh GELU of Hendrycks and
    Gimpel, 2016); ``v`` itself for ``"none"``.

    Parameters
    ----------
    v : array of float64, shape (M, N)
        A @ B.
    bias : array, shape (N,), or None for ``"none"``
    epilogue : str
    xp : module
        ``numpy`` or ``cupy``.

    Returns
    -------
    array of float64, shape (M, N)

    Raises
    ------
    ValueError
        If ``epilogue`` is unknown, or needs a bias and none is given.
    """
    check_epilogue(epilogue)
    if epilogue == "none":
        return v
    if bias is None:
        raise ValueError(f"epilogue={epilogue!r} needs a bias (a length-N vector)")
    v = v + xp.asarray(bias).astype(xp.float64)
    if epilogue == "bias_relu":
        return xp.maximum(v, 0.0)
    if epilogue == "bias_gelu":
        return 0.5 * v * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    return v


def check_result(c, ref, tol, xp=np) -> tuple[bool, float]:
    """Compare a kernel's output with the reference.

    Parameters
    ----------
    c : array, shape (M, N)
        The kernel's output (any float dtype).
    ref, tol : array of float64, shape (M, N)
        Reference and per-element tolerance (:func:`tolerance`).
    xp : module
        ``numpy``, or ``cupy`` for arrays on the GPU.

    Returns
    -------
    ok : bool
        True when every element is finite and within ``tol``. A NaN left
        from the poisoned output (an element never written) fails.
    max_abs_err : float
        Largest absolute error (``inf`` where an element is not finite).
    """
    c = xp.asarray(c, dtype=xp.float64).reshape(ref.shape)
    if not bool(xp.all(xp.isfinite(c))):
        return False, math.inf
    err = xp.abs(c - ref)
    return bool(xp.all(err <= tol)), float(err.max()) if err.size else 0.0


def rotation_sets(bytes_per_set: int, cache_bytes: int, max_total_bytes: int = 1 << 30) -> int:
    """Number of input buffer sets to rotate among so that a launch does not
    find its inputs in the last-level cache: enough sets to cover twice the
    cache, at least 1, at most :data:`MAX_ROTATION_SETS` and at most
    ``max_total_bytes`` in all. Below about 2 x cache / 256 bytes per set
    (200 KB on a 50 MB L2: shapes up to about 128^3) the cap leaves part of
    the inputs warm; such kernels are short and mostly launch-bound."""
    want = math.ceil(2 * cache_bytes / max(bytes_per_set, 1)) + 1
    cap = max(1, max_total_bytes // max(bytes_per_set, 1))
    return int(max(1, min(want, MAX_ROTATION_SETS, cap)))


MAX_ROTATION_SETS = 256
