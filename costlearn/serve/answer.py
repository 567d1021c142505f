"""Answers: what a ranking means, in a :class:`Prediction`, for one model
under one floor; and the one cache of the answers given.

:class:`Answers` is the deciding piece of a
:class:`~costlearn.serve.predictor.Predictor` (which loads the model and
checks the arguments): from a ranking (:class:`~costlearn.ranker.RankResult`)
it makes the reasons (:class:`~costlearn.serve.ood.OODVerdict`), the choice
between the best tile config and the vendor
(:class:`~costlearn.serve.vendor_policy.VendorPolicy`) and the Prediction,
and keeps it for the repeated problem. Every part it reads is fixed when it
is made, so an answer is made under one floor whatever another thread sets
meanwhile: a new floor makes new Answers (an empty cache), and an answer the
old ones finish goes to the old cache.
"""
from __future__ import annotations

import math

from costlearn.core.problem import Problem
from costlearn.ranker.base import DECISION_OUTSIDE, DECISION_PLAIN, DECISION_TIME, DECISION_UNSURE
from costlearn.serve.prediction import Prediction

__all__ = ["Answers"]

_tuple_new = tuple.__new__
"""``_tuple_new(Prediction, fields)``: a Prediction from all its fields in
order, without a Python frame (Prediction's own ``__new__`` takes keywords)."""

_WORDED = DECISION_OUTSIDE | DECISION_UNSURE
"""The bits of a ranker's decision whose reasons
:meth:`~costlearn.serve.ood.OODVerdict.decided_reasons` puts in words."""


class Answers:
    """The Predictions of one model's rankings under one floor, and their
    cache.

    Parameters
    ----------
    predictor : costlearn.serve.predictor.Predictor
        Its model's candidates (``configs``, ``vendor_index``), names
        (``family``, ``dtype``, ``device``) and ``cascade``, read once here.
    ranker : costlearn.ranker.Ranker
    ood : costlearn.serve.ood.OODVerdict
    vendor_policy : costlearn.serve.vendor_policy.VendorPolicy
    margin_log2 : float
        The floor's margin, recorded in each Prediction.

    Attributes
    ----------
    results : dict
        The answers given, by ``(M, N, K, layout, top_k, epilogue)``; at
        :attr:`CACHE_SIZE` entries it starts again.
    cached : callable
        ``results.get`` (no Python frame: the hot path's lookup).
    """

    CACHE_SIZE = 1 << 16

    def __init__(self, predictor, ranker, ood, vendor_policy, margin_log2: float):
        self.configs, self.vendor_index = predictor.configs, predictor.vendor_index
        self.family, self.dtype, self.device = predictor.family, predictor.dtype, predictor.device
        self.model = predictor.source
        self.cascade = predictor.cascade
        self.ranker, self.ood, self.vendor_policy, self.margin_log2 = ranker, ood, vendor_policy, margin_log2
        self.ranked_more = int(self.vendor_index is not None)     # ranked beyond the top k: the vendor's place
        self.says_nothing = not ood.identity_reasons     # a plain decision then makes a Prediction of no reason
        self.results: dict = {}
        self.cached = self.results.get

    def fresh(self, m: int, n: int, k: int, layout: str, epilogue: str, top_k: int,
              problem: Problem | None = None) -> Prediction:
        """The Prediction of a problem not cached, from fields the caller
        checked as :meth:`costlearn.serve.predictor.Predictor.predict_shape`
        does (ints in range, a layout and epilogue of this model, ``top_k``
        >= 1; and its Problem where the caller has one), then cached."""
        res = self.ranker.rank_served(m, n, k, layout, epilogue, top_k + self.ranked_more, self.cascade)
        return self.finish(m, n, k, layout, epilogue, top_k, res, problem)

    def finish(self, m: int, n: int, k: int, layout: str, epilogue: str, top_k: int, res,
               problem: Problem | None = None) -> Prediction:
        """:meth:`answer` of the problem's ranking ``res`` (no
        ``running_on``), cached."""
        pred = self.answer(m, n, k, layout, epilogue, top_k, res, None, problem)
        results = self.results
        if len(results) >= self.CACHE_SIZE:
            results.clear()
        results[(m, n, k, layout, top_k, epilogue)] = pred
        return pred

    def _words(self, m: int, n: int, k: int, nearest: int, distance: float, model_near: float, bits: int,
               level: int) -> tuple:
        """The reasons of a problem the ranker decided (``bits``: its
        decision's), in words: outside the envelope (``nearest``,
        ``distance``: the nearest training shape's index and distance),
        unsure by the held-out evidence (``model_near``), and the candidate
        rule's ``level``."""
        ood = self.ood
        reasons = ood.decided_reasons(m, n, k, (nearest, distance), model_near, bits & DECISION_OUTSIDE,
                                      bits & DECISION_UNSURE) if bits & _WORDED else []
        if level:
            reasons.append(ood.level_symptom(m, n, k, level))
        return tuple(reasons)

    def answer(self, m: int, n: int, k: int, layout: str, epilogue: str, top_k: int, res, running_on,
                problem: Problem | None) -> Prediction:
        """The Prediction of the problem (m, n, k, layout, epilogue) from its
        ranking ``res`` (a :class:`~costlearn.ranker.RankResult` of the
        candidate rule, with the vendor model's estimate, and the floor's
        decision where the ranker made it): the reasons (:attr:`ood`), the
        vendor floor (:attr:`vendor_policy`), the top k; not cached.
        ``problem``: its Problem, or None (built here where the policy or a
        reason needs one)."""
        order, scores, decision = res.order, res.scores, res.decision
        ood = self.ood
        if decision is None:                    # the ranker left the decision to us
            if problem is None:
                problem = Problem(m, n, k, self.dtype, layout, epilogue)
            reasons, fallback, vendor_near = ood.problem_reasons(problem, (res.nearest, res.nearest_distance),
                                                                 (res.vendor_near, res.model_near))
            time_may = True
            # symptoms: flagged; they send the problem to the vendor only through the calibration
            if res.level:
                reasons.append(ood.level_symptom(m, n, k, res.level))
        else:                                   # the ranker decided in its call: only the words are made here
            bits = decision[0]
            reasons = list(self._words(m, n, k, res.nearest, res.nearest_distance, res.model_near, bits, res.level))
            time_may = bits & DECISION_TIME
        if decision is not None and bits & ~_WORDED == DECISION_PLAIN and running_on is None and self.says_nothing:
            # the ranking's best tile is the answer and nothing else is flagged: no policy, no other reason
            if self.vendor_index is None:
                return self._made(m, n, k, layout, epilogue, top_k, order, scores, tuple(reasons), "predicted",
                                  math.nan, None)
            return self._made(m, n, k, layout, epilogue, top_k, order, scores, tuple(reasons), "predicted",
                              2.0 ** (scores[0] - decision[1]), res.estimate)
        if time_may:
            reasons += ood.time_reasons(m, n, k, 2.0 ** scores[0])
        nearest = (res.nearest, res.nearest_distance)
        choice = self.vendor_policy.decide(problem, order, scores, fallback, vendor_near, res.estimate, nearest) \
            if decision is None else self.vendor_policy.decided(layout, order, scores, decision, res.estimate, nearest)
        if choice.doubt:
            reasons.append(choice.doubt)
        if running_on is not None or not self.says_nothing:
            reasons += ood.served_reasons(running_on)
        return self._made(m, n, k, layout, epilogue, top_k, choice.order, choice.scores, tuple(reasons),
                          choice.chosen_by, choice.ratio, choice.estimate)

    def _made(self, m: int, n: int, k: int, layout: str, epilogue: str, top_k: int, order: list, scores: list,
              reasons: tuple, chosen_by: str, ratio: float, est) -> Prediction:
        """The Prediction of the problem (m, n, k, layout, epilogue): the
        answer ``order``/``scores`` (candidates and log2 times, the answer
        first), its ``reasons``, how it was chosen, the tile/vendor ``ratio``
        and the vendor model's estimate ``est`` (None: none)."""
        configs = self.configs
        top = tuple([(configs[i], 2.0 ** s_) for i, s_ in zip(order[:top_k], scores[:top_k])])
        best = top[0]
        if est is None:
            band = ()
        else:
            mean, sd = est
            band = (2.0 ** mean, 2.0 ** (mean - 2 * sd), 2.0 ** (mean + 2 * sd))
        return _tuple_new(Prediction, (
            best[0], best[1], top, bool(reasons), reasons, m, n, k, self.dtype, layout, self.family, self.device,
            chosen_by, ratio, self.margin_log2, (), False, (), "", epilogue, band, "", self.model))

    def many(self, shapes: list, top_k: int, running_on, problems) -> list:
        """The Predictions of ``shapes`` (checked (m, n, k, layout, epilogue)
        tuples; their Problems, or None), cached where ``running_on`` is
        None; those not cached ranked in one call per layout."""
        out: list = [None] * len(shapes)
        todo: dict = {}                                 # problem key -> positions; a repeat is ranked once
        results = self.results if running_on is None else {}
        for i, (m, n, k, layout, epilogue) in enumerate(shapes):
            key = (m, n, k, layout, top_k, epilogue)
            hit = results.get(key)
            if hit is not None:
                out[i] = hit
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            first = [at[0] for at in todo.values()]
            ranked = self.ranker.rank_many_served([shapes[i] for i in first], top_k + self.ranked_more, self.cascade)
            for (key, at), i, res in zip(todo.items(), first, ranked):
                m, n, k, layout, epilogue = shapes[i]
                pred = self.answer(m, n, k, layout, epilogue, top_k, res, running_on,
                                   None if problems is None else problems[i])
                for j in at:
                    out[j] = pred
                if running_on is None:
                    if len(results) >= self.CACHE_SIZE:
                        results.clear()
                    results[key] = pred
        return out
