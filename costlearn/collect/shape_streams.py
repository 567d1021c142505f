"""The ``random`` and ``prior`` strategies' shape streams: :class:`RandomShapes`, :class:`PriorShapes`.

Each is an iterable of (M, N, K), deterministic for its seed, drawn freely
within the collection's bounds or, given ``candidates``, among those only
(the problems a replay holds or the user offers): see
:mod:`costlearn.collect.strategy`. The ``active`` strategy's rounds
(:class:`costlearn.collect.active_shapes.ActiveShapes`) start from
:class:`RandomShapes`.
"""
from __future__ import annotations


import numpy as np

from costlearn.collect.real_shapes import real_model_shape
from costlearn.collect.sampler import ShapeBounds, distinct_shapes, iter_shapes
from costlearn.core.errors import warn
from costlearn.core.problem import Problem

__all__ = ["RandomShapes", "PriorShapes", "nearest_unused"]


PRIOR_COVERAGE_SHARE = 0.25
"""Share of a ``prior`` stream's shapes drawn log-uniformly instead (the
model still needs to know the space between real models' shapes)."""
USER_NEIGHBOUR_SHARE = 0.5
"""Share of a ``prior`` stream's draws, once the user's shapes are all
proposed, taken as a user shape with another token count (its M, or its K
for a weight gradient, times a power of two in 1/16 ... 16)."""


def _extents(shape) -> tuple:
    """(M, N, K) of a stream's item: a shape, or a :class:`Problem` given with its epilogue."""
    return shape.shape if isinstance(shape, Problem) else tuple(shape)


def _fits(shape, bounds: ShapeBounds) -> bool:
    shape = _extents(shape)
    m, n, k = shape
    return (all(bounds.min_extent <= x <= bounds.max_extent for x in shape) and 2.0 * m * n * k <= bounds.max_flops)


def nearest_unused(shape, candidates: np.ndarray, used: np.ndarray) -> int | None:
    """Index of the candidate nearest to ``shape`` in log2 extents (the sum of
    squared differences of log2 M, N, K) among those not ``used``; None when
    every candidate is used.

    Parameters
    ----------
    shape : (int, int, int)
    candidates : ndarray of float64, shape (n, 3)
        log2 of the candidates' M, N, K.
    used : ndarray of bool, shape (n,)
    """
    if used.all():
        return None
    d = ((candidates - np.log2(np.asarray(shape, np.float64))) ** 2).sum(axis=1)
    d[used] = np.inf
    return int(np.argmin(d))


class RandomShapes:
    """The ``random`` strategy: :func:`~costlearn.collect.sampler.iter_shapes`
    (seeded by ``[seed, 2]``, the stream collections have always drawn), or
    the ``candidates`` in a seeded random order.

    Parameters
    ----------
    bounds : ShapeBounds
    seed : int
    candidates : list of (int, int, int), optional
    """

    def __init__(self, bounds: ShapeBounds, seed: int, candidates=None):
        self.bounds, self.seed = bounds, seed
        self.candidates = None if candidates is None else sorted(set(map(tuple, candidates)))

    def __iter__(self):
        rng = np.random.default_rng([self.seed, 2])
        if self.candidates is None:
            return iter_shapes(self.bounds, rng)
        return (self.candidates[i] for i in rng.permutation(len(self.candidates)))


class PriorShapes:
    """The ``prior`` strategy: real models' shapes.

    Yields first the user's shapes (in their order; a :class:`Problem` among
    them is yielded as it is, keeping its epilogue), then an endless stream
    mixing three sources: with probability :data:`PRIOR_COVERAGE_SHARE` a
    log-uniform shape (:func:`~costlearn.collect.sampler.iter_shapes`); else,
    where the user gave shapes, with probability
    :data:`USER_NEIGHBOUR_SHARE` one of them at another token count; else a
    real model's linear layer
    (:func:`~costlearn.collect.real_shapes.real_model_shape`, from the tables
    of :mod:`costlearn.collect.real_shapes`). Shapes outside ``bounds`` are
    redrawn, repeats skipped. With ``candidates``, each draw is replaced by
    the nearest candidate not yet proposed (:func:`nearest_unused`), and the
    stream ends when every candidate is proposed.

    Parameters
    ----------
    bounds : ShapeBounds
    seed : int
    user_shapes : list of (int, int, int) or Problem, optional
        The shapes of the user's own models (``collect --shapes FILE``), or
        the problems compilers asked (``collect --shapes-from-db``: each a
        Problem, measured with its epilogue; with ``candidates``, the
        nearest candidate shape with that epilogue).
    candidates : list of (int, int, int), optional

    Raises
    ------
    ValueError
        (When iterated) if no new shape within ``bounds`` can be drawn.
    """

    def __init__(self, bounds: ShapeBounds, seed: int, user_shapes=(), candidates=None):
        self.bounds, self.seed = bounds, seed
        given = [s if isinstance(s, Problem) else tuple(int(x) for x in s) for s in (user_shapes or ())]
        self.candidates = None if candidates is None else sorted(set(map(tuple, candidates)))
        self.given = given
        self.user_shapes = given if self.candidates is not None else [s for s in given if _fits(s, bounds)]
        if len(self.user_shapes) < len(given):
            out = [s for s in given if s not in self.user_shapes]
            warn(f"costlearn: {len(out)} of the {len(given)} shapes given lie outside the collection's bounds "
                 f"(M, N, K <= {bounds.max_extent}, 2MNK <= {bounds.max_flops:.3g}) and are not measured "
                 f"(first: {'x'.join(map(str, _extents(out[0])))}; raise --max-extent or --max-flops to measure "
                 "them); their other token counts inside the bounds are still drawn")

    def draws(self):
        """The endless prior stream before bounds, repeats and candidates."""
        rng = np.random.default_rng([self.seed, 6])
        coverage = iter_shapes(ShapeBounds(self.bounds.min_extent, self.bounds.max_extent, self.bounds.max_flops),
                               np.random.default_rng([self.seed, 7]))
        yield from self.user_shapes
        while True:
            u = rng.random()
            if u < PRIOR_COVERAGE_SHARE:
                yield next(coverage)
            elif self.given and rng.random() < USER_NEIGHBOUR_SHARE:
                m, n, k = _extents(self.given[int(rng.integers(len(self.given)))])
                scale = 2.0 ** int(rng.integers(-4, 5))
                if k > max(m, n) and rng.random() < 0.5:           # a weight gradient: tokens are K
                    yield m, n, max(1, int(round(k * scale)))
                else:
                    yield max(1, int(round(m * scale))), n, k
            else:
                yield real_model_shape(rng)

    def __iter__(self):
        if self.candidates is None:
            yield from distinct_shapes(self.draws(), lambda s: _fits(s, self.bounds),
                                       f"real-model shape within {self.bounds}")
            return
        logs = np.log2(np.asarray(self.candidates, np.float64))
        used = np.zeros(len(self.candidates), bool)
        for s in self.draws():
            i = nearest_unused(_extents(s), logs, used)
            if i is None:
                return
            used[i] = True
            yield Problem(*self.candidates[i], s.dtype, s.layout, s.epilogue) if isinstance(s, Problem) \
                else self.candidates[i]
