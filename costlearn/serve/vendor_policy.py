"""The vendor policy: the decision between the best tile config and the
vendor library, as a prediction and the prune path serve it (design.md,
"What "good" means for a user": the floor).

:class:`VendorPolicy` applies a model's calibrated
:class:`~costlearn.model.vendor_floor.VendorFloor` and its vendor model
(:mod:`costlearn.model.vendor`) to a ranking: which of the best tile config
and the vendor candidate goes first (``chosen_by``), the predicted ratio of
the two, and the vendor model's estimate. Why a problem is a guess is
:mod:`costlearn.serve.ood`'s; the policy takes its verdict (``fallback``,
``vendor_near``) as given.
"""
from __future__ import annotations

import numpy as np

from costlearn.core.problem import Problem
from costlearn.ranker.base import CHOSEN_BY, DECISION_DOUBT, DECISION_FAR

__all__ = ["VendorPolicy", "VendorChoice"]


class VendorChoice:
    """A ranking after the vendor policy (:meth:`VendorPolicy.decide`).

    Attributes
    ----------
    order : list of int
        Candidate indices, the answer first.
    scores : list of float
        Their predicted log2 times.
    chosen_by : {"predicted", "vendor_floor", "ood_fallback"}
    ratio : float
        Predicted time of the best tile config over the vendor's (NaN
        without a vendor candidate or without a tile config).
    estimate : VendorEstimate or None
        The vendor model's estimate the decision used, where one was
        needed: beyond the floor's reach, the transferred one
        (:meth:`~costlearn.model.vendor_floor.VendorFloor.transferred`).
    doubt : str or None
        The vendor model's doubt about the decision, or why a problem far
        from the training shapes was decided as it was (an OOD reason).
    """

    __slots__ = ("order", "scores", "chosen_by", "ratio", "estimate", "doubt")

    def __init__(self, order, scores, chosen_by="predicted", ratio=float("nan"), estimate=None, doubt=None):
        self.order, self.scores, self.chosen_by = order, scores, chosen_by
        self.ratio, self.estimate, self.doubt = ratio, estimate, doubt


class VendorPolicy:
    """The tile-or-vendor decision of one model artifact.

    Parameters
    ----------
    artifact : costlearn.model.artifact.Artifact
    ranker : costlearn.ranker.Ranker
        The predictor's ranker (scores the vendor alone where a ranking left
        it out; its vendor model's estimate, :meth:`~costlearn.ranker.Ranker.vendor_estimate`).
    vendor_index : int or None
        The vendor candidate's index among the artifact's configs.
    floor : costlearn.model.vendor_floor.VendorFloor

    Attributes
    ----------
    vendor_index : int or None
    floor : VendorFloor
    """

    def __init__(self, artifact, ranker, vendor_index, floor):
        self.ranker, self.vendor_index, self.floor = ranker, vendor_index, floor
        self.n_candidates = len(artifact.configs)
        self.vendor_config_id = artifact.family.vendor_config_id

    def vendor_estimate(self, problem: Problem):
        """The vendor model's estimate for ``problem``
        (:class:`~costlearn.model.vendor.VendorEstimate`: log2 of the best tile
        config's time over the vendor's, and its members' deviation), None
        where the artifact has no vendor model (or no vendor candidate):
        the ranker's (:meth:`costlearn.ranker.Ranker.vendor_estimate`)."""
        return self.ranker.vendor_estimate(problem)

    def decide(self, problem: Problem, order: list, scores: list, fallback: bool, vendor_near: float,
               estimate, nearest: tuple = (-1, 0.0)) -> VendorChoice:
        """The ranking ``order``/``scores`` (candidate indices and log2
        times, fastest first) with the answer first: the best tile config,
        or the vendor where the problem is sent to it (``fallback``) or the
        floor keeps it (:meth:`~costlearn.model.vendor_floor.VendorFloor.keeps_vendor`).
        ``estimate``: the problem's :meth:`vendor_estimate` (None without a
        vendor model), as the ranking gave it (:attr:`costlearn.ranker.RankResult.estimate`);
        ``nearest``: the ranking's nearest training shape and its distance
        (:attr:`~costlearn.ranker.RankResult.nearest`, ``nearest_distance``).
        The twin of ``floor_decision`` in ``_native_rank.c``, whose decision
        :meth:`decided` reads."""
        vi = self.vendor_index
        if vi is None:
            return VendorChoice(order, scores)
        if vi in order:
            v_score = scores[order.index(vi)]
        else:
            only = np.zeros(self.n_candidates, bool)
            only[vi] = True
            v_score = float(self.ranker.rank(problem, only, top=1, cascade=False).scores[0])
        tile = 0 if order[0] != vi else (1 if len(order) > 1 else None)
        if tile is None:
            return VendorChoice(order, scores, "ood_fallback" if fallback else "vendor_floor")
        chosen_by = "predicted"
        if fallback:
            chosen_by = "ood_fallback"
        elif self.floor.keeps_vendor(scores[tile] - v_score, vendor_near, estimate, nearest[1], problem.layout):
            chosen_by = "vendor_floor"
        far = estimate is not None and self.floor.estimate is not None and self.floor.is_far(nearest[1])
        return self._choice(order, scores, tile, chosen_by, v_score, estimate, problem.layout, nearest, far,
                            not far and self.floor.estimate_reason(estimate) is not None)

    def decided(self, layout: str, order: list, scores: list, decision: tuple, estimate,
                nearest: tuple) -> VendorChoice:
        """:meth:`decide`'s answer, for a problem of ``layout``, from the
        decision the native ranker made in its call (:attr:`costlearn.ranker.RankResult.decision`: the bits,
        the vendor's score), for the same ranking ``order``/``scores``,
        ``estimate`` and ``nearest``; only the words (the vendor model's
        doubt, a far problem's transfer) are made here, where their bits are
        set."""
        vi = self.vendor_index
        if vi is None:
            return VendorChoice(order, scores)
        bits, v_score = decision
        chosen_by, tile = CHOSEN_BY[bits >> 4 & 3], (bits >> 6 & 3) - 1
        if tile < 0:
            return VendorChoice(order, scores, chosen_by)
        return self._choice(order, scores, tile, chosen_by, v_score, estimate, layout, nearest,
                            bool(bits & DECISION_FAR), bool(bits & DECISION_DOUBT))

    def _choice(self, order: list, scores: list, tile: int, chosen_by: str, v_score: float, estimate,
                layout: str, nearest: tuple, far: bool, doubt: bool) -> VendorChoice:
        """The VendorChoice of a decision: the ranking with the answer first
        (the best tile config, at ``tile`` in it, or the vendor, whose score
        is ``v_score``), the ratio of the two, the estimate the decision
        used (transferred where ``far``) and the words of ``far`` or
        ``doubt`` (a problem of ``layout``)."""
        vi = self.vendor_index
        ratio = 2.0 ** (scores[tile] - v_score)
        words = None
        if far:
            i, distance = nearest
            text = self.ranker.envelope.shape_text(i) if i >= 0 else "none"
            words = self.floor.transfer_reason(estimate, distance, layout, text, chosen_by != "predicted")
            estimate = self.floor.transferred(estimate, distance, layout)
        elif doubt:
            words = self.floor.estimate_reason(estimate)
        if chosen_by == "predicted":            # the best tile first, the rest in order
            if tile:
                order = [order[1], order[0]] + order[2:]
                scores = [scores[1], scores[0]] + scores[2:]
        elif order[0] != vi:                    # the vendor first, the rest in order
            j = order.index(vi) if vi in order else None
            if j is None:
                order, scores = [vi] + order, [v_score] + scores
            else:
                order = [vi] + order[:j] + order[j + 1:]
                scores = [v_score] + scores[:j] + scores[j + 1:]
        return VendorChoice(order, scores, chosen_by, ratio, estimate, words)

    def _distance(self, problem: Problem) -> float:
        """Doublings from ``problem`` to the nearest training shape (inf
        without one): :meth:`costlearn.model.envelope.Envelope.nearest_index`."""
        env = self.ranker.envelope
        return env.nearest_index(problem.m, problem.n, problem.k)[1] if len(env.shapes) else float("inf")

    def choose_among(self, problem: Problem, configs: list, times_us: np.ndarray, reasons: list, fallback: bool,
                     vendor_near: float) -> tuple[int, str, tuple]:
        """The prune path's decision among ``configs`` with predicted
        ``times_us``, given the problem's OOD verdict (``reasons``,
        ``fallback``, ``vendor_near``: :meth:`costlearn.serve.ood.OODVerdict.problem_reasons`).

        With the vendor candidate in ``configs``, a tile config is chosen
        only where the problem is not sent to the vendor and it is predicted
        faster than the vendor by the calibrated margin where the vendor is
        beatable; else the vendor. Without it, the config listed first is
        kept where the model is unsure (``reasons`` is not empty: the
        problem is out of distribution, whether or not it is sent to the
        vendor; or no config is predicted faster than the first by the
        margin) and the device can run it (its predicted time is finite).

        Returns what :meth:`costlearn.serve.predictor.Predictor.choose_among`
        returns (index into ``configs``, ``chosen_by``, reasons).
        """
        lt = np.log2(times_us)
        best = int(np.argmin(lt))
        vid = self.vendor_config_id
        ven = [i for i, c in enumerate(configs) if vid is not None and c.config_id == vid]
        if ven:
            v = ven[0]
            tiles = [i for i in range(len(configs)) if i != v]
            if not tiles:
                return v, "vendor_floor", tuple(reasons)
            t = min(tiles, key=lambda i: (lt[i], i))
            if fallback:
                return v, "ood_fallback", tuple(reasons)
            if self.floor.keeps_vendor(float(lt[t] - lt[v]), vendor_near, self.vendor_estimate(problem),
                                       self._distance(problem), problem.layout):
                return v, "vendor_floor", tuple(reasons)
            return t, "predicted", ()
        unsure = bool(reasons) or fallback or not lt[best] - lt[0] < -self.floor.margin_log2
        if best != 0 and np.isfinite(lt[0]) and unsure:     # out of distribution, or no clear winner
            return 0, "first_listed", tuple(reasons)
        return best, "predicted", tuple(reasons)
