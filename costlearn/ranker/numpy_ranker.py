"""The numpy ranker: the reference the native ranker is tested against, and
the fallback where no C compiler works. Same steps, same arithmetic in the
same order, same bits (see ``costlearn_rank`` in ``_native_rank.c``) on any CPU: every
logarithm and exponential is the C library's, as the native ranker's
(:func:`costlearn.features.shape.libm_log2`, :func:`math.expm1`), never
numpy's, whose SIMD paths round differently with AVX-512."""
from __future__ import annotations

import math

import numpy as np

from costlearn.model.envelope import embed_query, nearest_evidence
from costlearn.ranker.base import LEVEL_ALL, Ranker, RankResult
from costlearn.ranker.shortlist_build import build_lists_numpy

__all__ = ["NumpyRanker"]


class NumpyRanker(Ranker):
    """:class:`~costlearn.ranker.base.Ranker` in numpy (much slower than
    the native one)."""

    name = "numpy"

    def shortlist_lists(self, layout: str, shapes, tiles: int, trees: int):
        """:func:`~costlearn.ranker.shortlist_build.build_lists_numpy` (the twin of
        the native ranker's)."""
        return build_lists_numpy(self, layout, shapes, tiles, trees)

    def rank(self, problem, mask=None, *, top: int = 5, cascade: bool = True, shortlist: bool = True,
             estimate: bool = False, decide: bool = False) -> RankResult:
        top = self._top(top)
        est = self.vendor_estimate(problem) if estimate else None
        mask = self.check_mask(mask)
        level, ruled = 0, mask is None
        if ruled:
            mask, level = self.candidate_rule(problem)
        fits = level < 2
        m, n, k = problem.m, problem.n, problem.k
        near, dist = self.envelope.nearest_index(m, n, k) if len(self.envelope.shapes) else (-1, float("inf"))
        vnear, mnear = nearest_evidence(*self.evidence_arrays(problem.layout), embed_query(m, n, k)) \
            if self.evidence is not None else (math.nan, math.nan)
        vnear, mnear = math.expm1(vnear), math.expm1(mnear)      # libm's, as the native ranker's
        cand = np.flatnonzero(mask)
        if cascade and shortlist and ruled and self.shortlist is not None and level != LEVEL_ALL and len(cand) \
                and problem.epilogue == "none":               # the table is built for epilogue-free problems
            got = self.shortlist.rank_numpy(self, problem, cand, top)
            if got is not None:
                return RankResult(got[0].tolist(), got[1].tolist(), int(near), float(dist), fits, level, vnear, mnear,
                                  True, est)
        X = self.features.numpy(m, n, k, cand, problem.layout, problem.epilogue)
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
        return RankResult(cand[live].tolist(), score.tolist(), int(near), float(dist), fits, level, vnear, mnear,
                          False, est)
