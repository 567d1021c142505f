"""Ranker seam (design.md, "Seams"): ``rank(problem, mask)`` -> the candidates
in predicted order, their scores and the nearest training problem. One
implementation is chosen when a model loads; the others are tested against
it and must give the same bits."""
from __future__ import annotations

import abc
import math
from typing import NamedTuple

import numpy as np

from costlearn.collect.space import tile_fits_problem
from costlearn.core.problem import Problem
from costlearn.core.checks import check_int

__all__ = ["Ranker", "RankResult", "LEVEL_COVERED", "LEVEL_FITTING", "LEVEL_ALL", "DECISION_OUTSIDE",
           "DECISION_UNSURE", "DECISION_DOUBT", "DECISION_TIME", "DECISION_FAR", "DECISION_PLAIN", "CHOSEN_BY"]

LEVEL_COVERED = 0
"""Candidate rule level: the tile configs that fit the problem and were
measured near it (or, without recorded coverage, those that fit), and the
vendor candidate."""
LEVEL_FITTING = 1
"""No fitting tile config was measured near the problem: every fitting one."""
LEVEL_ALL = 2
"""No candidate's block tile fits the problem: all of them."""

DECISION_OUTSIDE = 2
"""Bit of :attr:`RankResult.decision`: the problem is outside the training
envelope (:meth:`costlearn.model.envelope.Envelope.reasons` is not empty)."""
DECISION_UNSURE = 4
"""Bit: the held-out evidence near the problem flags it
(:meth:`costlearn.model.vendor_floor.VendorFloor.unsure_reason`)."""
DECISION_DOUBT = 8
"""Bit: the vendor model doubts the decision
(:meth:`costlearn.model.vendor_floor.VendorFloor.estimate_reason`)."""
DECISION_TIME = 256
"""Bit: the best predicted time may be faster than the device's peak or
memory bandwidth allows (:meth:`costlearn.serve.ood.OODVerdict.time_reasons`
says whether it is; the bit is set within a relative 2**-40 of either limit,
so where it is clear, neither holds)."""
DECISION_FAR = 512
"""Bit: the problem lies beyond the floor's transfer reach of every training
shape, and the transferred estimate decided
(:meth:`costlearn.model.vendor_floor.VendorFloor.transfer_reason` says how)."""
DECISION_PLAIN = 1 | 1 << 6
"""The whole decision of a problem with nothing to say: decided, no bit
flagged, the ranking's best tile config first (chosen ``predicted``, tile
0) or no vendor candidate."""
CHOSEN_BY = ("predicted", "vendor_floor", "ood_fallback")
"""``chosen_by`` of a decision, by its code (bits 4-5 of :attr:`RankResult.decision`)."""


class RankResult(NamedTuple):
    """A ranking of one problem's candidates (a named tuple: built once per
    ranking, and cheaper to build than a frozen dataclass).

    Attributes
    ----------
    order : list of int, length R
        Candidate indices, best (lowest score) first. With the cascade only
        its survivors are listed.
    scores : list of float, length R
        Their scores (log2 predicted time in microseconds for models that
        predict time), ascending. (Python lists: their reader is Python code
        building a Prediction; ``numpy.asarray`` makes arrays of them.)
    nearest : int
        Index of the nearest training problem in the envelope's list
        (-1 when the envelope is empty).
    nearest_distance : float
        Its distance in log-shape and aspect space, doublings.
    fits : bool
        False when no candidate's block tile fits the problem (then every
        candidate was ranked).
    level : int
        Which step of the candidate rule selected the candidates
        (:data:`LEVEL_COVERED`, :data:`LEVEL_FITTING`, :data:`LEVEL_ALL`);
        0 when the caller gave a mask.
    vendor_near, model_near : float
        Geometric-mean held-out top-1 regret (a fraction) of the vendor
        call and of the model's pick on the nearest held-out problems of the
        problem's layout (:meth:`costlearn.model.vendor_floor.VendorFloor.near`); NaN
        without evidence.
    shortlist : bool
        True when the shortlist table ranked the candidates
        (:mod:`costlearn.model.shortlist`).
    estimate : costlearn.model.vendor.VendorEstimate or None
        The vendor model's estimate for the problem, where the ranking was
        asked for it (``rank(..., estimate=True)``) and the ranker has a
        vendor model; else None.
    decision : (int, float) or None
        The floor's decision, where the ranking was asked for it
        (``rank(..., decide=True)``, no mask) and the ranker makes it (the
        native ranker with a floor): bits (:data:`DECISION_OUTSIDE`,
        :data:`DECISION_UNSURE`, :data:`DECISION_DOUBT`,
        :data:`DECISION_TIME`; the ``chosen_by``
        code, :data:`CHOSEN_BY`, in bits 4-5; the place of the best tile
        config in :attr:`order` plus one in bits 6-7, 0 where the vendor is
        the only candidate) and the vendor candidate's score (NaN without
        one): :meth:`costlearn.serve.vendor_policy.VendorPolicy.decided`
        reads it. Else None: the caller decides
        (:meth:`~costlearn.serve.vendor_policy.VendorPolicy.decide`).
    """

    order: list
    scores: list
    nearest: int
    nearest_distance: float
    fits: bool
    level: int = LEVEL_COVERED
    vendor_near: float = math.nan
    model_near: float = math.nan
    shortlist: bool = False
    estimate: tuple | None = None
    decision: tuple | None = None


class Ranker(abc.ABC):
    """Ranks the candidates of one model artifact.

    Parameters
    ----------
    features : costlearn.features.CandidateFeatures
        The candidates' feature builder.
    scorer : costlearn.model.scorer.Scorer
    envelope : costlearn.model.envelope.Envelope
    min_tile_caps : (int, int, int)
        The family's ``min_tile_caps(spec)``: the smallest block tile caps (the problem rule).
    coverage : costlearn.model.envelope.Coverage, optional
        Where each candidate was measured; with it the candidate rule
        (:meth:`candidate_rule`) keeps the tile configs measured near the
        problem. None: the fit rule alone.
    vendor : int, optional
        The vendor candidate's index, always ranked under coverage.
    evidence : costlearn.model.vendor_floor.VendorFloor, optional
        Its held-out evidence near each problem is reported
        (:attr:`RankResult.vendor_near`, :attr:`RankResult.model_near`), and
        the native ranker makes its decision (:attr:`RankResult.decision`).
    shortlist : costlearn.model.shortlist.Shortlist, optional
        The table that ranks a problem from a short list of candidates
        (``rank(..., shortlist=True)``).
    vendor_model : costlearn.model.vendor.VendorModel, optional
        With ``vendor``: the model whose estimate ``rank(..., estimate=True)``
        reports (:attr:`RankResult.estimate`), in the same call.
    time_limits : tuple of float, optional
        :attr:`costlearn.serve.ood.OODVerdict.time_limits`: with them, the
        native ranker's decision says where a predicted time may be faster
        than the device allows (:data:`DECISION_TIME`).
    """

    name = ""

    def __init__(self, features, scorer, envelope, min_tile_caps, *, coverage=None, vendor: int | None = None,
                 evidence=None, shortlist=None, vendor_model=None, time_limits=None):
        if scorer.n_features != len(features.names):
            raise ValueError(f"the scorer reads {scorer.n_features} features, the candidates have "
                             f"{len(features.names)}")
        if scorer.offsets is not None and len(scorer.offsets) != features.n_candidates:
            raise ValueError(f"{len(scorer.offsets)} scorer offsets for {features.n_candidates} candidates")
        self.features, self.scorer, self.envelope = features, scorer, envelope
        self.min_tile_caps = tuple(int(f) for f in min_tile_caps)
        self.n_candidates = features.n_candidates
        if vendor is not None and not 0 <= vendor < self.n_candidates:
            raise ValueError(f"vendor candidate {vendor} outside the {self.n_candidates} candidates")
        self.coverage = coverage if coverage is not None and coverage.recorded else None
        self.vendor = vendor
        self.floor = evidence
        self.evidence = evidence if evidence is not None and evidence.calibrated else None
        if shortlist is not None:
            shortlist.check(self)
        self.shortlist = shortlist
        self.vendor_model = vendor_model if vendor is not None else None
        self.time_limits = None if time_limits is None else tuple(float(v) for v in time_limits)

    def candidate_rule(self, problem) -> tuple[np.ndarray, int]:
        """The candidates ranked for ``problem`` when no mask is given, and
        the level of the rule that chose them: the twin of
        ``select_candidates`` in ``_native_rank.c``.

        With coverage: the tile configs whose block tile fits the problem
        (:func:`costlearn.collect.space.tile_fits_problem`) and that were measured
        near it (:meth:`costlearn.model.envelope.Coverage.mask`), level 0; where
        none is, every fitting tile config, level 1; where none fits, all,
        level 2; the vendor candidate always. Without coverage: those that
        fit (level 0), else all (level 2).

        Returns
        -------
        mask : ndarray of bool, shape (C,)
        level : int
        """
        bm, bn, bk = self.features.block
        fit = np.asarray(tile_fits_problem(bm, bn, bk, problem.m, problem.n, problem.k, self.min_tile_caps), bool)
        if self.coverage is None:
            return (fit, LEVEL_COVERED) if fit.any() else (np.ones(self.n_candidates, bool), LEVEL_ALL)
        tiles = fit.copy()
        if self.vendor is not None:
            tiles[self.vendor] = False
        near = tiles & self.coverage.mask(problem.m, problem.n, problem.k)
        if near.any():
            mask, level = near, LEVEL_COVERED
        elif tiles.any():
            mask, level = tiles, LEVEL_FITTING
        else:
            return np.ones(self.n_candidates, bool), LEVEL_ALL
        if self.vendor is not None:
            mask[self.vendor] = True
        return mask, level

    def evidence_arrays(self, layout: str) -> tuple:
        """(points, log1p vendor regrets, log1p model regrets, neighbours) of
        the held-out evidence a problem of ``layout`` looks at; empty arrays
        without evidence."""
        if self.evidence is None:
            return np.zeros((0, 3)), np.zeros(0), np.zeros(0), 1
        return (*self.evidence.evidence(layout), self.evidence.neighbors)

    def check_mask(self, mask) -> np.ndarray | None:
        """``mask`` as a C-contiguous bool array of shape (C,) (or None).

        Raises
        ------
        ValueError
            If it has another dtype or shape, or selects no candidate.
        """
        if mask is None:
            return None
        mask = np.ascontiguousarray(mask)
        if mask.dtype != bool or mask.shape != (self.n_candidates,):
            raise ValueError(f"mask: need a bool array of shape ({self.n_candidates},), got {mask.dtype} "
                             f"{mask.shape}")
        if not mask.any():
            raise ValueError("mask selects no candidate")
        return mask

    @abc.abstractmethod
    def rank(self, problem, mask=None, *, top: int = 5, cascade: bool = True, shortlist: bool = True,
             estimate: bool = False, decide: bool = False) -> RankResult:
        """Must rank the candidates for ``problem`` (a Problem).

        Parameters
        ----------
        problem : Problem
        mask : ndarray of bool, shape (C,), optional
            Candidates to rank; by default :meth:`candidate_rule`'s.
        top : int
            How many of the best the caller needs; the cascade keeps at least
            that many.
        cascade : bool
            Use the scorer's cascade (False: every tree on every candidate).
        shortlist : bool
            With ``cascade`` and no ``mask``, rank with the shortlist table
            where there is one and it answers (:mod:`costlearn.model.shortlist`);
            a ranking of a given mask always scores every candidate of it.
        estimate : bool
            Also the vendor model's estimate for the problem
            (:attr:`RankResult.estimate`; None without a vendor model).
        decide : bool
            Also the floor's decision (:attr:`RankResult.decision`), where
            this ranker makes it (the native one, given a floor, without a
            mask); None otherwise.
        """

    def rank_served(self, m: int, n: int, k: int, layout: str, epilogue: str, top: int,
                    cascade: bool = True) -> RankResult:
        """The ranking a prediction serves for the problem (m, n, k, layout,
        epilogue) of this ranker's dtype: :meth:`rank` with the candidate
        rule, the ``cascade`` (and with it the shortlist table), the vendor
        model's estimate and the floor's decision, from the problem's fields
        (the native ranker builds no Problem). The caller checked them:
        extents ints in [1, 2**31 - 1], a layout and epilogue the model
        serves, ``top`` an int >= 1 (larger than 2**31 - 1 means all).

        Returns
        -------
        RankResult
        """
        return self.rank(Problem(m, n, k, self.features.table.dtype, layout, epilogue), None, top=top,
                         cascade=cascade, estimate=True, decide=True)

    def rank_many(self, problems, *, top: int = 5, cascade: bool = True, shortlist: bool = True,
                  estimate: bool = False, decide: bool = False) -> list:
        """:meth:`rank` with the candidate rule for each of ``problems`` (a
        sequence of Problem), in order: a list of RankResult. The native
        ranker makes one C call per layout."""
        return [self.rank(q, None, top=top, cascade=cascade, shortlist=shortlist, estimate=estimate, decide=decide)
                for q in problems]

    def rank_many_served(self, shapes, top: int, cascade: bool = True) -> list:
        """:meth:`rank_served` of each of ``shapes`` ((m, n, k, layout,
        epilogue) tuples, checked by the caller), in order: a list of
        RankResult. The native ranker makes one C call per (layout,
        epilogue) among them."""
        return [self.rank_served(*s, top, cascade) for s in shapes]

    def vendor_estimate(self, problem):
        """The vendor model's estimate for ``problem``
        (:meth:`costlearn.model.vendor.VendorModel.estimate_problem`, in numpy),
        None without a vendor model: :attr:`RankResult.estimate` of the numpy
        ranker, the same bits as the native one's."""
        if self.vendor_model is None:
            return None
        return self.vendor_model.estimate_problem(problem.m, problem.n, problem.k, problem.layout, problem.epilogue)

    @staticmethod
    def _top(top) -> int:
        return min(check_int("top", top, 1), 2**31 - 1)

