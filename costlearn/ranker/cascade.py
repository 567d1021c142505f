"""The calibration of a scorer's cascade (a training step: :func:`costlearn.learn.train.train`
runs it, and a model artifact keeps its stages): the cheapest early cut of the trees over the
candidates that keeps the full scorer's choice on problems drawn like the model's own."""
from __future__ import annotations

import itertools
import math

import numpy as np

from costlearn.core.problem import Problem
from costlearn.collect.sampler import sample_shapes
from costlearn.collect.space import tile_fits_problem

__all__ = ["calibrate_cascade", "calibration_problems", "CascadeSearch", "CASCADE_TREES", "CASCADE_MIN_TREES",
           "CASCADE_KEEP", "CASCADE_MARGIN", "CASCADE_LATE_TREES", "CASCADE_LATE_KEEP", "CASCADE_LATE_MARGIN",
           "CASCADE_MISS_TOP1", "CASCADE_MISS_TOP5"]


CASCADE_TREES = (4, 8, 16, 32, 64)
"""Tree counts a cascade stage may end at."""
CASCADE_KEEP = (24, 16, 12, 8, 6)
"""Least survivors a cascade stage keeps."""
CASCADE_MARGIN = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4)
"""Score margins (log2 time) within which a stage keeps more survivors."""
CASCADE_LATE_TREES = (128, 256, 512, 1024)
"""Tree counts a third stage may end at, for scorers of many trees (the
product's ``triton_mm`` models have about 2,000): a late cut to the few
candidates whose top 5 must come out exact."""
CASCADE_LATE_KEEP = (8, 6)
"""Least survivors of a third stage."""
CASCADE_LATE_MARGIN = (0.0, 0.02, 0.05)
"""Margins of a third stage."""
CASCADE_MIN_TREES = 64
"""Scorers of fewer trees are served without a cascade: all their trees over
every candidate are a few thousand walks at most (tens of microseconds), and
the calibration's search (seconds) would cost more than it saves."""
CASCADE_MISS_TOP1 = 0.0
"""Share of calibration problems on which the cascade may lose the full
scorer's best candidate."""
CASCADE_MISS_TOP5 = 0.01
"""Share of calibration problems on which it may lose one of the full
scorer's 5 best."""


def calibration_problems(train_shapes, dtype: str, layout: str, bounds, *, n_train: int = 300,
                         n_drawn: int = 500, n_wide: int = 500, max_extent: int = 16384, seed: int = 0) -> list:
    """The problems a cascade is calibrated on, so that it holds wherever
    ``predict_best`` is asked: ``n_train`` training shapes, ``n_drawn``
    others drawn as the collection draws them (``bounds``, a
    :class:`~costlearn.collect.sampler.ShapeBounds`; another seed) and ``n_wide``
    log-uniform in [1, ``max_extent``] per extent (mostly out of
    distribution). No problem here is one ``python -m benchmarks.predict``
    draws (other seeds)."""
    rng = np.random.default_rng([seed, 71])
    train = np.asarray(train_shapes, np.int64).reshape(-1, 3)
    pick = [tuple(int(v) for v in s) for s in train[rng.permutation(len(train))[:n_train]]]
    known = set(map(tuple, train.tolist()))
    drawn = [s for s in sample_shapes(3 * n_drawn, bounds, np.random.default_rng([seed, 72])) if s not in known]
    wide = np.round(2.0 ** rng.uniform(0, np.log2(max_extent), size=(n_wide, 3))).astype(np.int64)
    shapes = pick + drawn[:n_drawn] + [tuple(int(v) for v in s) for s in wide]
    return [Problem(m, n, k, dtype, layout) for m, n, k in shapes]


def calibrate_cascade(scorer, features, min_tile_caps, problems, *, miss_top1: float = CASCADE_MISS_TOP1,
                      miss_top5: float = CASCADE_MISS_TOP5) -> tuple[tuple, dict]:
    """The cheapest cascade that keeps the full scorer's choice.

    For each problem the candidates whose block tile fits it (all when none
    does) are scored by every tree. A cascade of one or two stages (trees
    from :data:`CASCADE_TREES`, least survivors from :data:`CASCADE_KEEP`,
    margins from :data:`CASCADE_MARGIN`, run as the rankers run it), then
    optionally a third from :data:`CASCADE_LATE_TREES` (the cheapest
    accepted two-stage cascade extended), is
    accepted when the survivors miss the full scorer's best candidate on at
    most ``miss_top1`` of the problems and one of its 5 best on at most
    ``miss_top5``; of those, the one with the fewest tree walks over all
    problems wins. (``python -m benchmarks.predict`` checks the agreement on
    other problems.)

    Parameters
    ----------
    scorer : Scorer
    features : CandidateFeatures
    min_tile_caps : (int, int, int)
    problems : list of Problem
    miss_top1, miss_top5 : float
        Allowed shares of problems.

    Returns
    -------
    stages : tuple of (int, int, float)
        Empty when no cascade is accepted or the scorer has fewer than
        :data:`CASCADE_MIN_TREES` trees.
    info : dict
        ``problems``, ``cost`` (tree walks as a share of the full
        scorer's), ``miss_top1``, ``miss_top5`` (measured shares), ``grid``,
        ``allowed``.
    """
    total = scorer.n_trees
    info = dict(problems=len(problems), cost=1.0, miss_top1=0.0, miss_top5=0.0,
                grid=dict(trees=list(CASCADE_TREES), keep=list(CASCADE_KEEP), margin=list(CASCADE_MARGIN),
                          late_trees=list(CASCADE_LATE_TREES), late_keep=list(CASCADE_LATE_KEEP),
                          late_margin=list(CASCADE_LATE_MARGIN)),
                allowed=dict(miss_top1=miss_top1, miss_top5=miss_top5))
    if total < CASCADE_MIN_TREES:
        return (), info
    forest, bm = scorer.forest, features.block
    ends = sorted({t for t in CASCADE_TREES + CASCADE_LATE_TREES if t < total})
    cases = []
    for p in problems:
        fit = np.asarray(tile_fits_problem(bm[0], bm[1], bm[2], p.m, p.n, p.k, min_tile_caps), bool)
        cand = np.flatnonzero(fit) if fit.any() else np.arange(features.n_candidates)
        X = features.numpy(p.m, p.n, p.k, cand, p.layout, p.epilogue)
        cs = np.cumsum(forest.leaves_numpy(X).astype(np.float64), axis=1) + forest.base_score
        lin = scorer.linear_numpy(X, cand)
        score = scorer.sign * cs + (0.0 if lin is None else lin[:, None])     # (rows, trees): score after t+1 trees
        full = np.lexsort((np.arange(len(cand)), score[:, -1]))
        cases.append((score[:, [t - 1 for t in ends]], int(full[0]), full[:5].tolist()))
    search = CascadeSearch(cases, ends, total)
    walks_full = search.walks_full
    allow1, allow5 = int(miss_top1 * len(cases)), int(miss_top5 * len(cases))

    def evaluate(stages, budget):
        """(cost, miss shares), or None where a limit or ``budget`` (walks) is reached."""
        got = search.evaluate(stages, budget)
        if got is None or got[1] > allow1 or got[2] > allow5:
            return None
        walks, miss1, miss5 = got
        return walks / walks_full, miss1 / len(cases), miss5 / len(cases)

    best = ((), 1.0, 0.0, 0.0)
    trees = [t for t in CASCADE_TREES if t < total]
    for n in (1, 2):
        for ts in itertools.combinations(trees, n):
            for ks in itertools.combinations(CASCADE_KEEP, n):
                for ds in itertools.product(CASCADE_MARGIN, repeat=n):
                    got = evaluate(list(zip(ts, ks, ds)), best[1] * walks_full)
                    if got is not None:
                        best = (tuple(zip(ts, ks, ds)), *got)
    if best[0]:                                   # a third, late stage where the scorer is deep enough
        base = best[0]
        for t in (t for t in CASCADE_LATE_TREES if base[-1][0] < t < total):
            for k in (k for k in CASCADE_LATE_KEEP if k < base[-1][1]):
                for d in CASCADE_LATE_MARGIN:
                    got = evaluate(list(base) + [(t, k, d)], best[1] * walks_full)
                    if got is not None:
                        best = (tuple(base) + ((t, k, d),), *got)
    info.update(cost=best[1], miss_top1=best[2], miss_top5=best[3])
    return best[0], info


class CascadeSearch:
    """The calibration problems of :func:`calibrate_cascade`, ready to run any
    cascade over all of them at once.

    A stage (t, keep, margin) run as the rankers run it keeps, of the live
    candidates, those whose score after t trees is at most the keep-th
    smallest plus the margin (the first ones in (score, row) order up to the
    last within it); a stage with at most ``keep`` live candidates is
    skipped. The survivors are a set that the scores alone decide, so each
    stage is a threshold over one (problems x candidates) array instead of a
    sort per problem, and only the scores at the tree counts a stage may end
    at are kept (a deep scorer's whole score matrices, rows x trees per
    problem, are gigabytes).

    Parameters
    ----------
    cases : list of (ndarray of float64, shape (rows, len(ends)), int, list of int)
        Per problem: its candidates' scores after ``ends[j]`` trees (column
        j), the full scorer's best candidate (a row number) and its best 5.
    ends : list of int
        Tree counts a stage may end at, ascending.
    total : int
        The scorer's trees.

    Attributes
    ----------
    walks_full : float
        Tree walks of the full scorer over every problem's candidates.
    """

    def __init__(self, cases, ends, total: int):
        self.total, self._col = int(total), {int(t): j for j, t in enumerate(ends)}
        n = len(cases)
        self._rows = np.array([len(sc) for sc, _, _ in cases], np.int64)
        width = int(self._rows.max()) if n else 0
        self.walks_full = float(self.total * self._rows.sum())
        self._scores = np.full((len(ends), n, width), np.inf)       # padded with +inf: never live, sorted last
        for i, (sc, _, _) in enumerate(cases):
            self._scores[:, i, :len(sc)] = np.asarray(sc, np.float64).T
        # per end: each problem's rows by (score, row), the order a stage keeps them in
        self._order = np.argsort(self._scores, axis=2, kind="stable")
        self._sorted = np.take_along_axis(self._scores, self._order, axis=2)
        self._place = np.argsort(self._order, axis=2, kind="stable")    # each row's place in that order
        self._best = np.array([b for _, b, _ in cases], np.int64)
        self._top = np.full((n, 5), -1, np.int64)                     # -1: a problem of fewer than 5 rows
        for i, (_, _, top) in enumerate(cases):
            self._top[i, :len(top)] = top
        self._at = np.arange(n)[:, None]
        self._after_first = (None, None)          # (the first stage, the state after it) of the last cascade run
        self._reordered: dict = {}

    def evaluate(self, stages, budget: float = math.inf) -> tuple[int, int, int] | None:
        """Run the cascade ``stages`` ((t, keep, margin) each, t among
        ``ends``) over every problem.

        Parameters
        ----------
        stages : sequence of (int, int, float)
        budget : float
            Tree walks at which to stop: None as soon as the walks are sure
            to reach it (every tree still to come is walked over at least
            the fewer of a problem's live candidates and the least ``keep``
            still to come).

        Returns
        -------
        (walks, miss1, miss5) or None
            Tree walks over all problems (each stage's trees over its live
            candidates, the remaining trees over the survivors), and the
            problems whose survivors lack the full scorer's best, or one of
            its 5 best; None where the walks reach ``budget``.

        Raises
        ------
        KeyError
            If a stage's t is not one of the ``ends`` given.
        """
        state = (self._rows, np.zeros(len(self._rows), np.int64), 0, None, None, None)
        for i, stage in enumerate(stages):
            if self._least_walks(state, stages[i:]) >= budget:
                return None
            if i == 0:                            # consecutive cascades share their first stage: run it once
                if self._after_first[0] != stage:
                    self._after_first = (stage, self._stage(state, *stage))
                state = self._after_first[1]
            else:
                state = self._stage(state, *stage)
        walks = self._least_walks(state, ())      # no stage to come: the walks themselves
        if walks >= budget:
            return None
        _, _, _, live, mask, first = state
        if live is None:
            return walks, 0, 0
        width = live.shape[1]

        def kept(rows):                           # rows (problems x r; -1: none) still live, by their place in live
            place = self._place[first][self._at, np.maximum(rows, 0)]
            return (place < width) & mask[self._at, np.minimum(place, width - 1)] | (rows < 0)
        miss1 = int((~kept(self._best[:, None])[:, 0]).sum())
        miss5 = int((~kept(self._top).all(axis=1)).sum())
        return walks, miss1, miss5

    def _least_walks(self, state: tuple, stages) -> int:
        """The fewest tree walks the cascade can end with from ``state``
        with ``stages`` to come: each tree still to come walked over the
        fewer of a problem's live candidates and the least ``keep`` to come
        (a stage keeps at least that many); with none to come, the walks."""
        count, done, walks = state[:3]
        least = min((keep for _, keep, _ in stages), default=None)
        return walks + int(((self.total - done) * (count if least is None else np.minimum(count, least))).sum())

    def _stage(self, state: tuple, t: int, keep: int, margin: float) -> tuple:
        """The state (count, done, walks, live, mask, first) after the stage
        (t, keep, margin), from the state before it (not changed): live
        candidates per problem, trees they have, walks so far, and (None
        until a stage has cut) the rows a first cut kept, in the order of
        its end ``first``, with a mask of those still live."""
        count, done, walks, live, mask, first = state
        act = count > keep
        if not act.any():
            return state
        walks += int(((t - done) * count)[act].sum())
        done = np.where(act, t, done)
        j = self._col[t]
        if live is None:                          # the first cut: thresholds on each problem's sorted rows
            ranked = self._sorted[j]
            limit = ranked[:, keep - 1] + margin
            count = np.where(act, np.count_nonzero(ranked <= limit[:, None], axis=1), count)
            live = self._order[j][:, :int(count.max())]
            return count, done, walks, live, np.arange(live.shape[1]) < count[:, None], j
        scores = self._in_order(first, j)[:, :live.shape[1]]  # the live rows' scores at t
        values = np.where(mask, scores, np.inf)
        values.partition(keep - 1, axis=1)
        # a problem of at most keep live rows (the stage skips it) has its largest live score or +inf there,
        # so it keeps them all
        mask = mask & (scores <= values[:, keep - 1:keep] + margin)
        return np.count_nonzero(mask, axis=1), done, walks, live, mask, first

    def _in_order(self, first: int, j: int) -> np.ndarray:
        """The scores at end ``j`` with each problem's rows in the order of
        end ``first`` (problems x rows), made once per pair."""
        got = self._reordered.get((first, j))
        if got is None:
            got = self._reordered[(first, j)] = np.take_along_axis(self._scores[j], self._order[first], axis=1)
        return got
