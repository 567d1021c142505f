"""The shortlist table: a ranking in microseconds for a deep scorer.

A scorer of thousands of deep trees (the ``triton_mm`` models trained on
Inductor's logs: docs/results.md, "Speed") cannot score its candidates in
tens of microseconds, with or without a cascade: every candidate that
reaches the last stage walks every tree, and the forest (megabytes of nodes)
does not stay in a core's caches between a compiler's calls. The table moves
that work to training time.

For each layout, on a grid over log2 M, log2 N, log2 K (step
:data:`STEP_LOG2` doublings from 1), it lists at every grid point the
:data:`TILES` best tile configs by the full (cascaded) scorer and the vendor
candidate, each with its *residual*: full score minus the score of the first
:data:`TREES` trees. A query looks at the 8 corners of its cell: the
candidates listed at any of them that the candidate rule selects for the
query are scored with the first :data:`TREES` trees at the query, plus the
residual of the nearest corner that lists them (a control variate: the
early trees carry what changes fast with the shape, such as waves and
tails; the residual what the deep trees add, which changes slowly). The
rest of the candidates are not scored.

The table answers where some candidate fits the query (the candidate rule
at level 0 or 1) and the query lies inside the grid; elsewhere (and with
fewer listed candidates than needed) the cascade ranks, as without a table. So its answers are the
full model's up to the residual's change across half a doubling:
``python -m benchmarks.predict`` measures the agreement with the full model's
argmin and the held-out regret of both. Scores are estimates of the full
scorer's (the top-k's times likewise).

The query is ``rank_table`` in ``_native_shortlist.c`` (C) and :meth:`Shortlist.rank_numpy`
(its twin, the same bits); the lists are built by ``costlearn_shortlist_build``
(C) or :func:`costlearn.ranker.shortlist_build.build_lists_numpy` (its twin),
in :mod:`costlearn.ranker.shortlist_build`.
"""
from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass

import numpy as np

from costlearn.core.errors import CostlearnError
from costlearn.core.files import read_file
from costlearn.core.npz import npz_arrays, npz_bytes

__all__ = ["Shortlist", "ShortlistError", "grid_axes", "grid_shapes", "partial_scores_numpy",
           "worth_a_table", "SHORTLIST_FILE", "STEP_LOG2", "TILES", "TREES", "MIN_TREES"]

SHORTLIST_FILE = "shortlist.npz"
SHORTLIST_FORMAT = 1

STEP_LOG2 = 0.5
"""Grid step, doublings of each extent: a finer grid loses less
model-predicted time against the full scorer's argmin, at a larger table
(what each step lost: docs/results.md, "Speed", the shortlist table)."""
TILES = 8
"""Tile configs listed per grid point (the vendor candidate besides)."""
TREES = 64
"""Trees scored at the query (fewer lose model-predicted time: docs/results.md,
"Speed")."""
MIN_TREES = 4 * TREES
"""Scorers of fewer trees are ranked by the cascade alone: the table would
save little, cost its build and change the argmin of more problems
(docs/results.md, "Speed")."""


class ShortlistError(CostlearnError, ValueError):
    """A shortlist file is unreadable or does not fit its model."""


def worth_a_table(scorer) -> bool:
    """True when ``scorer`` (a :class:`~costlearn.model.scorer.Scorer`) has a
    forest of at least :data:`MIN_TREES` trees."""
    return scorer.forest is not None and scorer.n_trees >= MIN_TREES


def grid_axes(max_extents, step: float = STEP_LOG2) -> tuple[int, int, int]:
    """Grid points per axis covering [1, max extent] of M, N, K: the last
    cell holds the largest extent.

    Raises
    ------
    ValueError
        If an extent is below 1 or the step is not positive.
    """
    if not step > 0:
        raise ValueError(f"shortlist grid step {step!r}; must be > 0")
    out = []
    for v in max_extents:
        if not v >= 1:
            raise ValueError(f"max extent {v!r}; must be >= 1")
        out.append(int(math.floor(math.log2(v) / step)) + 2)
    return tuple(out)


def grid_shapes(n, step: float = STEP_LOG2) -> np.ndarray:
    """The problems at the grid points, row-major over (M, N, K) points:
    ``round(2 ** (i * step))`` per extent, int64, shape (prod(n), 3)."""
    axes = [np.round(2.0 ** (np.arange(k) * step)).astype(np.int64) for k in n]
    a, b, c = np.meshgrid(*axes, indexing="ij")
    return np.ascontiguousarray(np.stack([a.ravel(), b.ravel(), c.ravel()], axis=1))


@dataclass(frozen=True)
class Shortlist:
    """A shortlist table (see the module).

    Attributes
    ----------
    step : float
        Grid step, doublings.
    trees : int
        Trees scored at the query.
    tiles : int
        Tile configs listed per grid point.
    width : int
        Entries per grid point: ``tiles``, plus one for the vendor candidate.
    n : (int, int, int)
        Grid points per axis.
    n_candidates : int
    tables : dict of str to (ndarray of int16, ndarray of float32)
        Per layout, candidates and residuals, shape (prod(n), width); -1 ends
        a shorter list.
    """

    step: float
    trees: int
    tiles: int
    width: int
    n: tuple
    n_candidates: int
    tables: dict

    def __post_init__(self):
        points = int(np.prod(self.n)) if len(self.n) == 3 else -1
        if not (self.step > 0 and self.trees >= 1 and self.tiles >= 1 and self.width in (self.tiles, self.tiles + 1)
                and points >= 8 and min(self.n) >= 2 and 1 <= self.n_candidates <= 32767):
            raise ShortlistError(f"shortlist step={self.step}, trees={self.trees}, tiles={self.tiles}, "
                                 f"width={self.width}, n={self.n}, candidates={self.n_candidates}: need a step > 0, "
                                 "trees and tiles >= 1, width = tiles (+1 with a vendor), >= 2 points per axis and "
                                 "at most 32,767 candidates")
        for lay, (idx, res) in self.tables.items():
            if idx.dtype != np.int16 or res.dtype != np.float32 or idx.shape != (points, self.width) \
                    or res.shape != idx.shape:
                raise ShortlistError(f"shortlist table of layout {lay}: {idx.dtype} {idx.shape} / {res.dtype} "
                                     f"{res.shape}; need int16 and float32 of shape ({points}, {self.width})")
            if ((idx < -1) | (idx >= self.n_candidates)).any() or not np.isfinite(res).all():
                raise ShortlistError(f"shortlist table of layout {lay} names a candidate outside [-1, "
                                     f"{self.n_candidates}) or holds a residual that is not finite")

    def fits(self, n_candidates: int, n_trees: int, layouts) -> None:
        """Raise ShortlistError unless this table is for ``n_candidates``
        candidates, fewer trees than the scorer's ``n_trees`` and layouts
        among ``layouts``."""
        if self.n_candidates != n_candidates or not self.trees < n_trees or not set(self.tables) <= set(layouts):
            raise ShortlistError(f"a table for {self.n_candidates} candidates, {self.trees} trees, layouts "
                                 f"{sorted(self.tables)}; the model has {n_candidates} candidates, {n_trees} "
                                 f"trees, layouts {sorted(layouts)}")

    def check(self, ranker) -> None:
        """:meth:`fits` ``ranker``'s candidates, scorer and layouts, and a
        width that counts its vendor candidate; ShortlistError otherwise."""
        if ranker.scorer.forest is None:
            raise ShortlistError("a shortlist table needs a scorer with trees")
        self.fits(ranker.n_candidates, ranker.scorer.n_trees, ranker.features.templates)
        if self.width != self.tiles + (ranker.vendor is not None):
            raise ShortlistError(f"shortlist of width {self.width} for {self.tiles} tiles; the model "
                                 f"{'has' if ranker.vendor is not None else 'has no'} vendor candidate")

    def rank_numpy(self, ranker, problem, cand: np.ndarray, top: int):
        """The twin of ``rank_table`` in ``_native_shortlist.c``: ``cand`` (the
        candidates the rule selected at level 0 or 1, ascending) ranked from
        the table, or None where it does not answer.

        Returns
        -------
        (ndarray of int32, ndarray of float64) or None
            Candidates best first and their scores.
        """
        tab = self.tables.get(problem.layout)
        if tab is None:
            return None
        idx, res = tab
        f = [math.log2(v) / self.step for v in (problem.m, problem.n, problem.k)]   # libm's, as in C
        i0 = [math.floor(v) for v in f]
        if any(i < 0 or i + 1 >= n for i, n in zip(i0, self.n)):
            return None
        selected = set(cand.tolist())
        seen: dict = {}
        for corner in range(8):
            a, b, c = i0[0] + (corner >> 2 & 1), i0[1] + (corner >> 1 & 1), i0[2] + (corner & 1)
            da, db, dc = f[0] - a, f[1] - b, f[2] - c
            d2 = da * da + db * db + dc * dc
            point = (a * self.n[1] + b) * self.n[2] + c
            for e in range(self.width):
                c_ = int(idx[point, e])
                if c_ < 0:
                    break
                if c_ not in selected:
                    continue
                if c_ not in seen or d2 < seen[c_][0]:
                    seen[c_] = (d2, float(res[point, e]))
        if len(seen) < min(top, len(cand)):
            return None
        rows = np.array(sorted(seen), np.int64)
        score = partial_scores_numpy(ranker, problem, rows, self.trees) + np.array([seen[c][1] for c in rows.tolist()])
        order = np.lexsort((np.arange(len(rows)), score))
        return rows[order].astype(np.int32), score[order]

    # -- persistence -----------------------------------------------------

    def to_bytes(self) -> bytes:
        """The table as an ``.npz`` file's bytes."""
        arrays = dict(format=np.int64(SHORTLIST_FORMAT), step=np.float64(self.step), trees=np.int64(self.trees),
                      tiles=np.int64(self.tiles), width=np.int64(self.width), n=np.array(self.n, np.int64),
                      n_candidates=np.int64(self.n_candidates), layouts=np.array(sorted(self.tables)))
        for lay, (idx, res) in self.tables.items():
            arrays[f"index_{lay}"], arrays[f"resid_{lay}"] = idx, res
        return npz_bytes(arrays)

    @classmethod
    def from_file(cls, path, data: bytearray | None = None) -> "Shortlist":
        """Load a table written by :meth:`to_bytes` from ``path``, or from
        ``data``, the file's bytes, where the caller has read (and checked)
        them.

        Raises
        ------
        ShortlistError
            If the file is unreadable, of another format or inconsistent.
        """
        try:
            z = npz_arrays(read_file(path) if data is None else data)
            if int(z["format"]) != SHORTLIST_FORMAT:
                raise ShortlistError(f"{path}: shortlist format {int(z['format'])}, this code reads "
                                     f"{SHORTLIST_FORMAT}")
            tables = {str(lay): (np.ascontiguousarray(z[f"index_{lay}"]), np.ascontiguousarray(z[f"resid_{lay}"]))
                      for lay in z["layouts"].tolist()}
            return cls(float(z["step"]), int(z["trees"]), int(z["tiles"]), int(z["width"]),
                       tuple(int(v) for v in z["n"]), int(z["n_candidates"]), tables)
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as e:
            if isinstance(e, ShortlistError):
                raise ShortlistError(f"{path}: {e}") from None
            raise ShortlistError(f"unreadable shortlist {path}: {type(e).__name__}: {e}") from None


def partial_scores_numpy(ranker, problem, rows: np.ndarray, trees: int) -> np.ndarray:
    """Scores of candidates ``rows`` at ``problem`` with the scorer's first
    ``trees`` trees: sign * (sum + base) + the linear terms; float64, shape
    (R,). The twin of ``partial_scores`` in ``_native_score.c``."""
    sc = ranker.scorer
    X = np.ascontiguousarray(ranker.features.numpy(problem.m, problem.n, problem.k, rows, problem.layout,
                                                   problem.epilogue))
    if sc.forest is not None and trees > 0:
        acc = sc.sign * (sc.forest.partial_sum_numpy(X, 0, trees) + sc.forest.base_score)
    else:
        acc = np.full(len(rows), sc.sign * sc.forest.base_score if sc.forest is not None else 0.0)
    lin = sc.linear_numpy(X, rows)
    return acc if lin is None else acc + lin
