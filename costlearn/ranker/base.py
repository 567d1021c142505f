"""Ranker seam (design.md, "Seams"): ``rank(problem, mask)`` -> the candidates
in predicted order, their scores and the nearest training problem. One
implementation is chosen when a model loads; the others are tested against
it and must give the same bits."""
from __future__ import annotations

import abc
from typing import NamedTuple

import numpy as np

from ..util import check_int

__all__ = ["Ranker", "RankResult"]


class RankResult(NamedTuple):
    """A ranking of one problem's candidates (a named tuple: built once per
    ranking, in 0.3 us against 1.5 us for a frozen dataclass).

    Attributes
    ----------
    order : ndarray of int, shape (R,)
        Candidate indices, best (lowest score) first. With the cascade only
        its survivors are listed.
    scores : ndarray of float64, shape (R,)
        Their scores (log2 predicted time in microseconds for models that
        predict time), ascending.
    nearest : int
        Index of the nearest training problem in the envelope's list
        (-1 when the envelope is empty).
    nearest_distance : float
        Its distance in log-shape and aspect space, doublings.
    fits : bool
        False when no candidate's block tile fits the problem (then every
        candidate was ranked).
    """

    order: np.ndarray
    scores: np.ndarray
    nearest: int
    nearest_distance: float
    fits: bool


class Ranker(abc.ABC):
    """Ranks the candidates of one model artifact.

    Parameters
    ----------
    features : costlearn.features.CandidateFeatures
        The candidates' feature builder.
    scorer : costlearn.model.scorer.Scorer
    envelope : costlearn.envelope.Envelope
    floors : (int, int, int)
        The family's ``fit_floors(spec)`` (the problem rule).
    """

    name = ""

    def __init__(self, features, scorer, envelope, floors):
        if scorer.n_features != len(features.names):
            raise ValueError(f"the scorer reads {scorer.n_features} features, the candidates have "
                             f"{len(features.names)}")
        if scorer.offsets is not None and len(scorer.offsets) != features.n_candidates:
            raise ValueError(f"{len(scorer.offsets)} scorer offsets for {features.n_candidates} candidates")
        self.features, self.scorer, self.envelope = features, scorer, envelope
        self.floors = tuple(int(f) for f in floors)
        self.n_candidates = features.n_candidates

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
    def rank(self, problem, mask=None, *, top: int = 5, cascade: bool = True) -> RankResult:
        """Must rank the candidates for ``problem`` (a Problem).

        Parameters
        ----------
        problem : Problem
        mask : ndarray of bool, shape (C,), optional
            Candidates to rank; by default those whose block tile fits the
            problem (all when none fits, with ``fits=False``).
        top : int
            How many of the best the caller needs; the cascade keeps at least
            that many.
        cascade : bool
            Use the scorer's cascade (False: every tree on every candidate).
        """

    @staticmethod
    def _top(top) -> int:
        return min(check_int("top", top, 1), 2**31 - 1)
