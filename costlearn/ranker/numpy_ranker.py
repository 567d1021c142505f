"""The numpy ranker: the reference the native ranker is tested against, and
the fallback where no C compiler works. Same steps, same arithmetic in the
same order, same bits (see ``costlearn_rank`` in ``_native.c``)."""
from __future__ import annotations

import numpy as np

from ..space import tile_fits_problem
from .base import Ranker, RankResult

__all__ = ["NumpyRanker"]


class NumpyRanker(Ranker):
    """:class:`~costlearn.ranker.base.Ranker` in numpy (about 20x slower
    than the native one)."""

    name = "numpy"

    def __init__(self, features, scorer, envelope, floors):
        super().__init__(features, scorer, envelope, floors)
        self._block = features.block

    def fit_mask(self, problem) -> np.ndarray:
        """Candidates whose block tile fits ``problem`` (the problem rule),
        bool of shape (C,)."""
        bm, bn, bk = self._block
        return np.asarray(tile_fits_problem(bm, bn, bk, problem.m, problem.n, problem.k, self.floors), bool)

    def rank(self, problem, mask=None, *, top: int = 5, cascade: bool = True) -> RankResult:
        top = self._top(top)
        mask = self.check_mask(mask)
        fits = True
        if mask is None:
            mask = self.fit_mask(problem)
            fits = bool(mask.any())
            if not fits:
                mask = np.ones(self.n_candidates, bool)
        m, n, k = problem.m, problem.n, problem.k
        near, dist = self.envelope.nearest_index(m, n, k) if len(self.envelope.shapes) else (-1, float("inf"))
        cand = np.flatnonzero(mask)
        X = self.features.numpy(m, n, k, cand, problem.layout)
        sc = self.scorer
        forest = sc.forest
        lin = sc.linear_numpy(X, cand)
        extra = max(0, min(top, self.n_candidates) - 5)
        stages = sc.cascade if cascade and forest is not None else ()
        live = np.arange(len(cand))                        # rows of X, in their current order
        acc = np.zeros(len(cand), np.float64)
        done = 0
        for st in range(len(stages) + 1):
            last, keep, margin = (stages[st][0], stages[st][1] + extra, stages[st][2]) if st < len(stages) \
                else (sc.n_trees, len(live), 0.0)
            if st < len(stages) and (len(live) <= keep or last <= done or last >= sc.n_trees):
                continue                                   # nothing to prune at this stage
            if forest is not None and last > done:
                part = forest.partial_sum_numpy(np.ascontiguousarray(X[live]), done, last)
                acc[live] = part + forest.base_score if done == 0 else acc[live] + part
                done = last
            score = sc.sign * acc[live] if forest is not None else np.zeros(len(live))
            if lin is not None:
                score = score + lin[live]
            order = np.lexsort((live, score))              # by score, ties by row (as in C)
            live, score = live[order], score[order]
            if keep < len(live):                           # the keep best, and the rest within the margin
                cut = int(np.searchsorted(score, score[keep - 1] + margin, side="right"))
                live, score = live[:cut], score[:cut]
        return RankResult(cand[live].astype(np.int32), score, int(near), float(dist), fits)
