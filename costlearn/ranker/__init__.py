"""Rankers (design.md, "Seams"): one interface, ``rank(problem, mask)``, two
implementations giving the same bits, one chosen once when a model loads
(:func:`make_ranker`). The calibration of a scorer's cascade is
:mod:`costlearn.ranker.cascade`."""
from __future__ import annotations

import os

from costlearn.core.checks import shown
from costlearn.core.registry import Registry
from costlearn.ranker.base import Ranker, RankResult
from costlearn.ranker.native_library import library
from costlearn.ranker.native_structs import MAX_FEATURES

__all__ = ["RANKERS", "make_ranker", "Ranker", "RankResult"]

RANKERS = Registry("ranker", {"native": "costlearn.ranker.native:NativeRanker",
                              "numpy": "costlearn.ranker.numpy_ranker:NumpyRanker"})


def make_ranker(features, scorer, envelope, min_tile_caps, name: str | None = None, **rule) -> Ranker:
    """The ranker for one artifact, chosen once: ``name`` if given, else
    ``$COSTLEARN_RANKER``, else ``native`` where the C library builds (and the
    candidates have at most :data:`~costlearn.ranker.native_structs.MAX_FEATURES`
    features) and ``numpy`` otherwise. ``rule``: the keyword arguments of
    :class:`~costlearn.ranker.base.Ranker` (coverage, vendor, evidence,
    shortlist).

    Raises
    ------
    ValueError
        If ``name`` (or ``$COSTLEARN_RANKER``, named) is not a ranker.
    OSError
        If ``native`` is asked for explicitly and cannot be built.
    """
    if not name and os.environ.get("COSTLEARN_RANKER"):
        name = os.environ["COSTLEARN_RANKER"]
        if name not in RANKERS:
            raise ValueError(f"COSTLEARN_RANKER={shown(name)}; allowed: {list(RANKERS.names())} (unset: native "
                             "where the C library builds)")
    if name:
        return RANKERS.get(name)(features, scorer, envelope, min_tile_caps, **rule)
    chosen = "native" if library() is not None and len(features.names) <= MAX_FEATURES else "numpy"
    return RANKERS.get(chosen)(features, scorer, envelope, min_tile_caps, **rule)
