"""The statistics of a row's timing samples: their median's relative standard error and 95 % interval.

:func:`costlearn.collect.measure.measure_shape` stops a row's sampling on
:func:`median_rse` and calls two rows a tie where their
:func:`median_interval` overlap; the fleet's winner rule
(:mod:`costlearn.serve.fleet`) widens its intervals by :func:`t_quantile_95`.
"""
from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["median_rse", "t_quantile_95", "median_interval"]


def median_rse(samples) -> float:
    """Relative standard error of the median of ``samples``.

    SE(median) ~= sqrt(pi / 2) * s / sqrt(n), the asymptotic standard error
    of the sample median of a normal sample (Kendall and Stuart, *The
    Advanced Theory of Statistics*, vol. 1, sec. 10.10), with s the sample
    standard deviation (ddof 1), divided by the median. The plain standard
    deviation, not a robust one: at the 5 samples a row starts with, the MAD
    is often near 0 and would stop sampling too early, while an outlier (a
    preempted sample) only inflates s, which costs more samples, never a
    wrong stop.

    Parameters
    ----------
    samples : sequence of float, length n >= 1
        Per-launch times, any unit.

    Returns
    -------
    float
        SE / median; ``inf`` for fewer than 3 samples (too few to judge) or a
        median <= 0.
    """
    a = np.asarray(samples, dtype=np.float64)
    if a.size < 3:
        return math.inf
    med = float(np.median(a))
    if not med > 0:
        return math.inf
    return math.sqrt(math.pi / 2) * float(np.std(a, ddof=1)) / math.sqrt(a.size) / med


@functools.lru_cache(maxsize=64)
def t_quantile_95(n: int) -> float:
    """Two-sided 95 % quantile of Student's t with n - 1 degrees of freedom
    (the width factor of a small sample's interval: 2.78 at n = 5, 2.05 at
    n = 30); ``inf`` for n < 2."""
    if n < 2:
        return math.inf
    from scipy.stats import t
    return float(t.ppf(0.975, n - 1))


def median_interval(x: list) -> tuple[float, float]:
    """95 % interval of the median of samples ``x``: median ± t · SE, with t
    Student's quantile for n - 1 degrees of freedom (:func:`t_quantile_95`).

    Parameters
    ----------
    x : sequence of float
        Per-launch times, any unit.

    Returns
    -------
    (float, float)
        The interval's low and high ends (unbounded, ``-inf`` to ``inf``,
        for fewer than 3 samples: :func:`median_rse`).
    """
    med = float(np.median(x))
    half = t_quantile_95(len(x)) * median_rse(x) * med
    return med - half, med + half
