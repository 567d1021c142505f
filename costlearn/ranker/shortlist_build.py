"""Building the shortlist table (:mod:`costlearn.model.shortlist`) from a
ranker as served: its candidate rule, scorer and cascade, at every grid
point (``costlearn_shortlist_build`` in ``_native_shortlist.c``, or
:func:`build_lists_numpy`, its twin)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from costlearn.core.problem import Problem
from costlearn.model.shortlist import STEP_LOG2, TILES, TREES, Shortlist, grid_axes, grid_shapes, partial_scores_numpy
from costlearn.ranker.base import LEVEL_ALL

__all__ = ["build_shortlist", "build_lists_numpy"]


def build_lists_numpy(ranker, layout: str, shapes: np.ndarray, tiles: int, trees: int):
    """The twin of ``costlearn_shortlist_build`` in ``_native_shortlist.c`` (slow; tests
    compare the two): per grid point, where the candidate rule selects at
    level 0 or 1 (some candidate fits), the ``tiles`` best tile configs by the cascaded scorer, then the
    vendor candidate, with their residuals.

    Returns
    -------
    index : ndarray of int16, shape (P, width)
    resid : ndarray of float32, shape (P, width)
    """
    vendor = ranker.vendor
    width = tiles + (vendor is not None)
    index = np.full((len(shapes), width), -1, np.int16)
    resid = np.zeros((len(shapes), width), np.float32)
    dtype = ranker.features.table.dtype
    for p, (m, n, k) in enumerate(np.asarray(shapes).tolist()):
        q = Problem(m, n, k, dtype, layout)
        res = ranker.rank(q, None, top=width, cascade=True, shortlist=False)
        if res.level == LEVEL_ALL or not len(res.order):
            continue
        listed, full = [], []
        for c, s in zip(res.order, res.scores):
            if c != vendor and len(listed) < tiles:
                listed.append(c)
                full.append(s)
        if vendor is not None:
            hit = [s for c, s in zip(res.order, res.scores) if c == vendor]
            if not hit:
                only = np.zeros(ranker.n_candidates, bool)
                only[vendor] = True
                hit = [float(ranker.rank(q, only, top=1, cascade=False).scores[0])]
            listed.append(vendor)
            full.append(hit[0])
        part = partial_scores_numpy(ranker, q, np.array(listed, np.int64), trees)
        index[p, :len(listed)] = listed
        resid[p, :len(listed)] = (np.array(full) - part).astype(np.float32)
    return index, resid


def build_shortlist(ranker, layouts, max_extents, *, step: float = STEP_LOG2, tiles: int = TILES,
                    trees: int = TREES, threads: int | None = None) -> Shortlist:
    """Build the table for ``ranker`` (its candidate rule, scorer and
    cascade as served) over ``layouts``, with a grid covering [1,
    ``max_extents``] (:func:`grid_axes`).

    The C ranker builds it on ``threads`` threads (default: the CPUs this
    process may use), the numpy ranker on one (slow: for tests).

    Raises
    ------
    ValueError
        If ``trees`` is not below the scorer's tree count, or an argument is
        out of range (:func:`grid_axes`).
    """
    n_trees = ranker.scorer.n_trees
    if not 1 <= trees < n_trees:
        raise ValueError(f"shortlist trees={trees}; must be in [1, {n_trees}) for a scorer of {n_trees} trees")
    n = grid_axes(max_extents, step)
    shapes = grid_shapes(n, step)
    width = tiles + (ranker.vendor is not None)
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, int(threads))
    tables = {}
    for lay in layouts:
        chunks = np.array_split(np.arange(len(shapes)), workers * 4)
        with ThreadPoolExecutor(workers) as pool:          # the C call releases the GIL
            parts = list(pool.map(lambda ix: ranker.shortlist_lists(lay, shapes[ix], tiles, trees),
                                  [c for c in chunks if len(c)]))
        tables[lay] = (np.concatenate([p[0] for p in parts]).reshape(-1, width),
                       np.concatenate([p[1] for p in parts]).reshape(-1, width))
    return Shortlist(float(step), int(trees), int(tiles), width, n, ranker.n_candidates, tables)
