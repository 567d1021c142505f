"""The compiled scorer a cost model exports for the ranker (design.md, "Seams":
CostModel ... "an export of a compiled scorer the ranker can run without the
training library").

One form serves every registered model. For candidate c with feature row x:

    score = sign * (base + sum of the forest's leaves at x) + weight * x[column] + offsets[c]

(each term only where present), lower is faster; for models that predict
time the score is log2 of the predicted time in microseconds. A gradient-
boosted model exports its trees; the roofline model one feature column; the
best-fixed model one offset per candidate.

The cascade: stages (t1, k1, d1), (t2, k2, d2), ... with t increasing and
k decreasing; the first t1 trees score every candidate and the k1 best go
on, with every other candidate whose score is within d1 of the k1-th (a
near tie is not decided by a partial sum); those get the trees up to t2,
and so on; the last survivors get the rest of the trees. It is chosen when the artifact is saved
(:func:`costlearn.ranker.cascade.calibrate_cascade`), so that it keeps the full
scorer's choice on the calibration problems.
"""
from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass

import numpy as np

from costlearn.model.forest import FlatForest
from costlearn.core.errors import CostlearnError
from costlearn.core.files import read_file
from costlearn.core.npz import npz_arrays, npz_bytes

__all__ = ["Scorer", "ScorerError", "SCORER_FORMAT", "MAX_KEEP"]

SCORER_FORMAT = 1

MAX_KEEP = 65536
"""Most survivors a cascade stage may name (the C ranker counts in int32)."""


class ScorerError(CostlearnError, ValueError):
    """A scorer file is unreadable or inconsistent with its model."""


@dataclass(frozen=True)
class Scorer:
    """What the ranker evaluates.

    Attributes
    ----------
    n_features : int
        Width of the feature rows it reads.
    forest : FlatForest or None
    sign : float
        +1 when the forest's margin is log2 time, -1 when it is a score where
        higher is faster (pairwise ranking).
    column : int
        Feature column added with ``column_weight`` (-1: none).
    column_weight : float
    offsets : ndarray of float64, shape (C,), or None
        Per-candidate term, aligned with the artifact's candidates.
    cascade : tuple of (int, int, float)
        The stages (trees so far, survivors, margin in score units), empty: off.
    """

    n_features: int
    forest: FlatForest | None = None
    sign: float = 1.0
    column: int = -1
    column_weight: float = 0.0
    offsets: np.ndarray | None = None
    cascade: tuple = ()

    def __post_init__(self):
        if not 0 < self.n_features <= 256:
            raise ScorerError(f"scorer n_features={self.n_features}; must be in [1, 256]")
        if not math.isfinite(self.column_weight):
            raise ScorerError(f"scorer column weight {self.column_weight!r}; must be finite")
        if self.offsets is not None:
            off = np.asarray(self.offsets)
            if off.ndim != 1 or not np.issubdtype(off.dtype, np.number) or not np.isfinite(off).all():
                bad = "" if off.ndim != 1 or not np.issubdtype(off.dtype, np.number) else \
                    f", {int((~np.isfinite(off)).sum())} not finite"
                raise ScorerError(f"scorer offsets must be a 1-D array of finite numbers, got shape {off.shape} "
                                  f"dtype {off.dtype}{bad}")
        if self.forest is not None and self.forest.n_features != self.n_features:
            raise ScorerError(f"forest reads {self.forest.n_features} features, scorer {self.n_features}")
        if not -1 <= self.column < self.n_features:
            raise ScorerError(f"scorer column {self.column} outside the {self.n_features} features")
        if self.sign not in (1.0, -1.0):
            raise ScorerError(f"scorer sign {self.sign}; must be +1 or -1")
        trees = self.forest.n_trees if self.forest is not None else 0
        stages = tuple((int(t), int(k), float(d)) for t, k, d in self.cascade)
        object.__setattr__(self, "cascade", stages)
        ts, ks, ds = [t for t, _, _ in stages], [k for _, k, _ in stages], [d for _, _, d in stages]
        if stages and not (0 < ts[0] and ts[-1] < trees and ts == sorted(set(ts)) and 5 <= ks[-1]
                           and ks[0] <= MAX_KEEP and ks == sorted(set(ks), reverse=True) and len(stages) <= 4
                           and all(np.isfinite(d) and d >= 0 for d in ds)):
            raise ScorerError(f"cascade {list(stages)} invalid for {trees} trees (need at most 4 stages, trees "
                              f"increasing in (0, {trees}), survivors decreasing in [5, {MAX_KEEP}], margins "
                              "finite and >= 0)")

    @property
    def n_trees(self) -> int:
        """Trees of the forest (0 without one)."""
        return 0 if self.forest is None else self.forest.n_trees

    def with_cascade(self, stages) -> "Scorer":
        """This scorer with another cascade (a sequence of (trees, keep, margin))."""
        return Scorer(self.n_features, self.forest, self.sign, self.column, self.column_weight, self.offsets,
                      tuple(stages))

    def linear_numpy(self, X: np.ndarray, cand: np.ndarray) -> np.ndarray | None:
        """The column and offset terms of rows ``X`` of candidates ``cand``,
        float64, shape (R,), or None when the scorer has neither."""
        out = None
        if self.column >= 0:
            out = self.column_weight * X[:, self.column].astype(np.float64)
        if self.offsets is not None:
            off = self.offsets[cand]
            out = off if out is None else out + off
        return out

    def full_numpy(self, X: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """Scores of every row with every tree (no cascade), float64, shape
        (R,): the reference of both rankers."""
        s = np.zeros(len(X), np.float64)
        if self.forest is not None:
            s = self.sign * (self.forest.partial_sum_numpy(X) + self.forest.base_score)
        lin = self.linear_numpy(X, cand)
        return s if lin is None else s + lin

    # -- persistence -----------------------------------------------------

    def to_bytes(self) -> bytes:
        """The scorer as an ``.npz`` file's bytes."""
        arrays = dict(format=np.int64(SCORER_FORMAT), n_features=np.int64(self.n_features),
                      sign=np.float64(self.sign), column=np.int64(self.column),
                      column_weight=np.float64(self.column_weight),
                      cascade=np.array(self.cascade, np.float64).reshape(-1, 3),
                      has_forest=np.int64(self.forest is not None), has_offsets=np.int64(self.offsets is not None))
        if self.forest is not None:
            arrays.update(self.forest.arrays())
        if self.offsets is not None:
            arrays["offsets"] = np.asarray(self.offsets, np.float64)
        return npz_bytes(arrays)

    @classmethod
    def from_file(cls, path, n_candidates: int, data: bytearray | None = None, checked: bool = False) -> "Scorer":
        """Load a scorer written by :meth:`to_bytes` from ``path``, or from
        ``data``, the file's bytes, where the caller has read (and checked)
        them; ``checked``: these bytes' forest passed
        :meth:`~costlearn.model.forest.FlatForest.validate` before (skip it).

        Raises
        ------
        ScorerError
            If the file is unreadable, of another format, or inconsistent
            (including offsets not of length ``n_candidates``).
        """
        try:
            z = npz_arrays(read_file(path) if data is None else data)
            if int(z["format"]) != SCORER_FORMAT:
                raise ScorerError(f"{path}: scorer format {int(z['format'])}, this code reads {SCORER_FORMAT}")
            forest = FlatForest.from_arrays(z, checked) if int(z["has_forest"]) else None
            offsets = np.array(z["offsets"], np.float64) if int(z["has_offsets"]) else None
            stages = tuple((int(t), int(k), float(d)) for t, k, d in np.asarray(z["cascade"]).reshape(-1, 3))
            sc = cls(int(z["n_features"]), forest, float(z["sign"]), int(z["column"]),
                     float(z["column_weight"]), offsets, stages)
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as e:
            if isinstance(e, ScorerError):
                raise
            raise ScorerError(f"unreadable scorer {path}: {type(e).__name__}: {e}") from None
        if offsets is not None and len(offsets) != n_candidates:
            raise ScorerError(f"{path}: {len(offsets)} offsets for {n_candidates} candidates")
        return sc

