"""Sampler: which shapes and which configs to measure.

Shapes are drawn log-uniformly per extent within user bounds, with batch-1
(M = 1) and skinny shapes mixed in on purpose, since those are where the best
tile differs most from a square GEMM's. Configs come from a fixed candidate
pool drawn once per collection from the feasible space, stratified by block
tile so that every block-tile class (including BM = 1 for batch 1) is present.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from costlearn.families import family_of
from costlearn.core.checks import check_int

__all__ = ["ShapeBounds", "sample_shapes", "iter_shapes", "distinct_shapes", "select_pool", "shape_class",
           "SHAPE_CLASSES", "STRATEGIES"]

SHAPE_CLASSES = ("batch1", "skinny", "small", "square", "large_k", "general")

STRATEGIES = ("random", "prior", "active")
"""The strategies ``collect --strategy`` takes (:mod:`costlearn.collect.strategy`);
``random`` is the default."""


@dataclass(frozen=True)
class ShapeBounds:
    """Bounds of the shapes a collection draws.

    Parameters
    ----------
    min_extent, max_extent : int
        Each of M, N, K lies in [min_extent, max_extent], except that
        batch-1 shapes have M = 1 and skinny shapes draw M or N from
        [1, 16], whatever ``min_extent`` is.
    max_flops : float
        Upper bound on 2*M*N*K, so one kernel's time stays affordable on the
        device.
    batch1_share, skinny_share : float
        Fractions of shapes drawn with M = 1, and with one of M, N at most 16.
    """

    min_extent: int = 1
    max_extent: int = 1024
    max_flops: float = 2.0 ** 26
    batch1_share: float = 0.15
    skinny_share: float = 0.15

    def __post_init__(self) -> None:
        lo = check_int("ShapeBounds.min_extent", self.min_extent, 1, 2**31 - 1)
        hi = check_int("ShapeBounds.max_extent", self.max_extent, 1, 2**31 - 1)
        if lo > hi:
            raise ValueError(f"shape bounds [{lo}, {hi}]; need min_extent <= max_extent")
        object.__setattr__(self, "min_extent", lo)
        object.__setattr__(self, "max_extent", hi)
        if not self.max_flops >= 2:
            raise ValueError(f"max_flops={self.max_flops!r}; must be >= 2")
        if not (0 <= self.batch1_share <= 1 and 0 <= self.skinny_share <= 1
                and self.batch1_share + self.skinny_share <= 1):
            raise ValueError(f"batch1_share={self.batch1_share!r}, skinny_share={self.skinny_share!r}; "
                             "each in [0, 1] and summing to at most 1")

    @classmethod
    def for_device(cls, is_cpu: bool) -> "ShapeBounds":
        """Default bounds: up to 1024 and 2**26 flop on a CPU OpenCL device
        (a few ms per kernel there), up to 8192 and no flop cap on a GPU."""
        if is_cpu:
            return cls(1, 1024, 2.0 ** 26)
        return cls(1, 8192, 2.0 * 8192 ** 3)


def _log_uniform(rng, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 0.499)))))


def iter_shapes(bounds: ShapeBounds, rng: np.random.Generator):
    """Endless stream of distinct shapes (M, N, K), drawn as
    :func:`sample_shapes` describes.

    Raises
    ------
    ValueError
        If no new shape can be drawn within the bounds (after many tries).
    """
    lo, hi = bounds.min_extent, bounds.max_extent

    def draws():
        while True:
            u = rng.random()
            m, nn, k = (_log_uniform(rng, lo, hi) for _ in range(3))
            if u < bounds.batch1_share:
                m = 1
            elif u < bounds.batch1_share + bounds.skinny_share:
                small = _log_uniform(rng, 1, min(16, hi))
                if rng.random() < 0.5:
                    m = small
                else:
                    nn = max(small, lo)
            yield m, nn, k
    return distinct_shapes(draws(), lambda s: 2.0 * s[0] * s[1] * s[2] <= bounds.max_flops, f"shape within {bounds}")


def distinct_shapes(draws, keep, what: str):
    """The shapes of the stream ``draws`` that ``keep`` accepts, each once.

    Parameters
    ----------
    draws : iterable of (int, int, int)
    keep : callable ((int, int, int)) -> bool
    what : str
        Named by the error (``"shape within ShapeBounds(...)"``).

    Raises
    ------
    ValueError
        After 100,000 draws in a row that are repeats or not kept.
    """
    seen, misses = set(), 0
    for s in draws:
        if s in seen or not keep(s):
            misses += 1
            if misses > 100_000:
                raise ValueError(f"cannot draw another distinct {what}")
            continue
        misses = 0
        seen.add(s)
        yield s


def sample_shapes(n: int, bounds: ShapeBounds, rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Draw ``n`` distinct shapes (M, N, K).

    Each extent is log-uniform in the bounds; a ``batch1_share`` of shapes
    has M = 1, a ``skinny_share`` has M or N drawn from [1, 16]. Shapes over
    ``bounds.max_flops`` are redrawn.

    Returns
    -------
    list of (int, int, int)

    Raises
    ------
    ValueError
        If ``n`` distinct shapes do not exist within the bounds.
    """
    return list(itertools.islice(iter_shapes(bounds, rng), n))


def select_pool(configs, size: int, rng: np.random.Generator) -> list:
    """Choose a candidate pool of ``size`` configs, stratified by block tile
    height BM (the family's tile description) so that every height present
    in ``configs`` gets an equal share (BM = 1 tiles for batch-1 shapes
    included).

    Parameters
    ----------
    configs : sequence of one family's configs
    size : int
    rng : numpy.random.Generator

    Returns
    -------
    list of configs, sorted by config_id (all of ``configs`` if it has at
    most ``size`` entries).

    Raises
    ------
    ValueError
        If ``size`` < 1 or ``configs`` is empty.
    """
    configs = list(configs)
    if size < 1:
        raise ValueError(f"pool size={size}; must be >= 1")
    if not configs:
        raise ValueError("no feasible configs to choose a pool from")
    if len(configs) <= size:
        return sorted(configs, key=lambda c: c.config_id)
    fam = family_of(configs[0])
    strata: dict[int, list] = {}
    for c in configs:
        strata.setdefault(fam.block_tile(c)[0], []).append(c)
    keys = sorted(strata)
    for key in keys:
        rng.shuffle(strata[key])
    pool: list = []
    i = 0
    while len(pool) < size:
        key = keys[i % len(keys)]
        j = i // len(keys)
        if j < len(strata[key]):
            pool.append(strata[key][j])
        i += 1
    return sorted(pool, key=lambda c: c.config_id)


def shape_class(m: int, n: int, k: int) -> str:
    """Coarse class of a shape, for reporting regret by class.

    ``batch1`` (M = 1), ``skinny`` (M or N <= 16), ``small`` (2MNK < 2**21),
    ``large_k`` (K >= 4*max(M, N)), ``square`` (max/min of M, N, K <= 2),
    else ``general``; the first that applies.
    """
    if m == 1:
        return "batch1"
    if min(m, n) <= 16:
        return "skinny"
    if 2 * m * n * k < 2 ** 21:
        return "small"
    if k >= 4 * max(m, n):
        return "large_k"
    if max(m, n, k) <= 2 * min(m, n, k):
        return "square"
    return "general"
