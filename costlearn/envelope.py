"""Training envelope: where a model has seen data, so a prediction outside it
is flagged out-of-distribution (OOD) with reasons in words.

Two checks on the shape (log2 space, where GEMM cost scales):

- **Range.** Each of log2 M, N, K must lie within the trained [min, max],
  widened by ``RANGE_MARGIN_LOG2`` (a quarter doubling, 19 %) on each side so
  that a shape at the collection's own bound (1024 when the largest drawn was
  1016) is not flagged.
- **Density.** The Euclidean distance from (log2 M, log2 N, log2 K) to the
  nearest training shape must not exceed a threshold calibrated on the
  training shapes themselves: the 95th percentile of each training shape's
  distance to its nearest other training shape, times 2 (at least 1.0, one
  doubling of one extent).

Identity checks (device, dtype, kernel template, costlearn version) are made
by the predictor against the artifact's sidecar.
"""
from __future__ import annotations

import numpy as np

__all__ = ["fit_envelope", "shape_reasons", "envelope_points", "RANGE_MARGIN_LOG2"]

RANGE_MARGIN_LOG2 = 0.25


def envelope_points(envelope: dict) -> np.ndarray:
    """log2 of the envelope's training shapes, float64, shape (S, 3)."""
    return _points(envelope["shapes"])


def _points(shapes) -> np.ndarray:
    a = np.asarray(shapes, dtype=np.float64).reshape(-1, 3)
    return np.log2(a)


def fit_envelope(shapes) -> dict:
    """Learn the envelope of training shapes.

    Parameters
    ----------
    shapes : array-like of int, shape (S, 3)
        Distinct training shapes (M, N, K), S >= 1.

    Returns
    -------
    dict
        JSON-ready: ``min``/``max`` extents per dimension, ``shapes`` (the
        training shapes), ``density_threshold_log2``.

    Raises
    ------
    ValueError
        If there are no shapes or an extent is < 1.
    """
    a = np.asarray(shapes, dtype=np.int64).reshape(-1, 3)
    if len(a) == 0:
        raise ValueError("cannot fit an envelope on zero shapes")
    if (a < 1).any():
        raise ValueError(f"shape extents must be >= 1, got min {a.min()}")
    a = np.unique(a, axis=0)
    p = _points(a)
    if len(p) > 1:
        d = np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))
        np.fill_diagonal(d, np.inf)
        nn = d.min(axis=1)
        thr = max(1.0, 2.0 * float(np.quantile(nn, 0.95)))
    else:
        thr = 1.0
    return dict(min=dict(M=int(a[:, 0].min()), N=int(a[:, 1].min()), K=int(a[:, 2].min())),
                max=dict(M=int(a[:, 0].max()), N=int(a[:, 1].max()), K=int(a[:, 2].max())),
                shapes=a.tolist(), density_threshold_log2=thr)


def shape_reasons(envelope: dict, m: int, n: int, k: int, points: np.ndarray | None = None) -> list[str]:
    """Reasons (in words, with numbers) why shape (m, n, k) is outside the
    envelope; empty when it is inside.

    Parameters
    ----------
    envelope : dict
        From :func:`fit_envelope`.
    m, n, k : int
    points : ndarray of float64, shape (S, 3), optional
        log2 of ``envelope["shapes"]``, precomputed by a caller that checks
        many shapes (the predictor); computed here otherwise.
    """
    reasons = []
    for name, v in (("M", m), ("N", n), ("K", k)):
        lo, hi = envelope["min"][name], envelope["max"][name]
        if v < lo * 2.0 ** -RANGE_MARGIN_LOG2:
            reasons.append(f"{name}={v} below the trained minimum {lo}")
        elif v > hi * 2.0 ** RANGE_MARGIN_LOG2:
            reasons.append(f"{name}={v} above the trained maximum {hi}")
    pts = _points(envelope["shapes"]) if points is None else points
    d = np.sqrt(((pts - _points([(m, n, k)])[0]) ** 2).sum(-1))
    nearest = int(d.argmin())
    dist = float(d[nearest])
    thr = float(envelope["density_threshold_log2"])
    if dist > thr:
        near = envelope["shapes"][nearest]
        reasons.append(f"nearest trained shape {tuple(near)} is {dist:.2f} doublings away "
                       f"(threshold {thr:.2f})")
    return reasons
