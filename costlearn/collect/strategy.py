"""Strategies: which problems a collection measures next.

A collection's cost is device time, and which problems get measured decides
what the model knows (design.md, "Choose what to measure"). Three strategies
draw the shapes of :func:`costlearn.collect.loop.run_collection`:

``random``
    Log-uniform extents with batch-1 and skinny shapes mixed in
    (:func:`costlearn.collect.sampler.iter_shapes`); the default.
``prior``
    Shapes the way real models have them
    (:class:`~costlearn.collect.shape_streams.PriorShapes`): the linear
    layers of transformers and convnets, forward and backward, at the token
    counts of batch 1 to 16k, plus the user's own shapes and their token-count
    neighbours, mixed with a share of log-uniform coverage.
``active``
    Rounds (:class:`~costlearn.collect.active_shapes.ActiveShapes`): measure a round, refit a small bootstrap
    ensemble of the cost model on everything measured, and measure next the
    candidate problems where the ensemble's pick is least sure: the expected
    regret of the ensemble's argmin under its own members
    (:class:`costlearn.learn.active.EnsembleDisagreement`), the decision-focused form of ensemble
    disagreement (query by committee: Seung, Opper & Sompolinsky, COLT 1992;
    bootstrap committees: Breiman, Machine Learning 24, 1996).

Where the backend can measure only some problems (a replay of a recorded
log, :class:`costlearn.collect.backends.replay.ReplayBackend`), or the user
gives the problems to choose from, every strategy chooses among those
``candidates`` only, so a strategy is scored on real GPU logs without a GPU:
``random`` in a seeded order, ``prior`` as the candidate nearest to each
prior draw, ``active`` by its score.

Every stream is deterministic for its seed and the rows already measured, so
a resumed collection proposes what an uninterrupted one would have, less
what is on disk.

This module turns a strategy's name into its stream (:func:`shape_stream`)
or its choice among a measured pool (:func:`choose_problems`); the streams
are :mod:`costlearn.collect.shape_streams`' (``random``, ``prior``, from the
tables of :mod:`costlearn.collect.real_shapes`) and
:mod:`costlearn.collect.active_shapes`' (``active``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from costlearn.collect.active_shapes import ActiveSettings, ActiveShapes, check_active, spread_top
from costlearn.collect.sampler import STRATEGIES, ShapeBounds
from costlearn.collect.shape_streams import PriorShapes, RandomShapes, nearest_unused
from costlearn.core.checks import check_int

__all__ = ["STRATEGIES", "ActiveSettings", "shape_stream", "choose_problems"]
# ActiveSettings is defined in costlearn.collect.active_shapes; it is importable from here too, where users of
# collect(strategy="active", active=...) have always imported it.


def choose_problems(pool: pd.DataFrame, k: int, strategy: str, *, seed: int = 0, spec=None, known=None,
                    settings: ActiveSettings | None = None, say=None) -> list:
    """``k`` problems of a measured pool (a destination log a transfer learns
    from), chosen by ``strategy``.

    ``random``: a seeded random ``k``. ``prior``: the pool problem nearest to
    each draw of :class:`~costlearn.collect.shape_streams.PriorShapes` (any layout). ``active``: rounds of
    ``ceil(k * settings.round_share)`` problems: fit an
    :class:`~costlearn.learn.active.EnsembleDisagreement` on ``known`` (rows of what is known
    already, e.g. a source device's) and the pool rows of the problems
    chosen so far, score a seeded sample of ``settings.candidates`` unchosen
    pool problems on the configs measured there, take the top
    (:func:`~costlearn.collect.active_shapes.spread_top`).
    Without ``known`` rows, the first ``min(settings.first_round, k // 2)``
    problems are random.

    Parameters
    ----------
    pool : DataFrame
        Valid rows (``m, n, k, layout, dtype, family, config_id, time_us``).
    k : int
    strategy : str
    seed : int
    spec : DeviceSpec
        The pool's device (``active``).
    known : DataFrame, optional
    settings : ActiveSettings
        ``active``: its ``ensemble`` is needed.
    say : callable, optional
        Called with a line per round.

    Returns
    -------
    list of (int, int, int, str)
        (M, N, K, layout), in the order chosen; all of the pool's problems
        when it has at most ``k``.

    Raises
    ------
    ValueError
        If ``k`` < 1, ``strategy`` is unknown, or ``active`` has no ``spec``
        or no ``settings`` with an ``ensemble`` (:func:`~costlearn.collect.active_shapes.check_active`).
    """
    k = check_int("k", k, 1)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: {list(STRATEGIES)}")
    problem = ["m", "n", "k", "layout"]
    problems = [(int(m), int(n), int(kk), str(lay)) for m, n, kk, lay in
                pool[problem].drop_duplicates().sort_values(problem).itertuples(index=False, name=None)]
    if len(problems) <= k:
        return problems
    rng = np.random.default_rng([seed, 10])
    if strategy == "random":
        return [problems[i] for i in rng.permutation(len(problems))[:k]]
    if strategy == "prior":
        logs = np.log2(np.asarray([p[:3] for p in problems], np.float64))
        used = np.zeros(len(problems), bool)
        out = []
        for s in PriorShapes(ShapeBounds(1, 2**31 - 1, math.inf), seed).draws():
            i = nearest_unused(s, logs, used)
            used[i] = True
            out.append(problems[i])
            if len(out) == k:
                return out
    s = check_active(settings)
    if spec is None:
        raise ValueError("the active strategy needs spec= (the pool's device)")
    known = known if known is not None and len(known) else None
    chosen: list = []
    if known is None:
        chosen = [problems[i] for i in rng.permutation(len(problems))[:min(s.first_round, k // 2)]]
    keyed = pool.set_index(problem).sort_index()
    cand_cols = ["m", "n", "k", "dtype", "layout", "family", "config_id"] + (
        ["epilogue"] if "epilogue" in pool else [])
    r = 0
    while len(chosen) < k:
        taken = set(chosen)
        left = [p for p in problems if p not in taken]
        sample = [left[i] for i in sorted(np.random.default_rng([seed, 11, r]).permutation(len(left))[:s.candidates])]
        mine = keyed.loc[chosen].reset_index() if chosen else None
        rows = pd.concat([f for f in (known, mine) if f is not None], ignore_index=True)
        ens = s.ensemble(spec, s, seed + r).fit(rows)
        cand = keyed.loc[sample].reset_index()[cand_cols].drop_duplicates(["m", "n", "k", "layout", "config_id"])
        scores = ens.score(cand)
        want = min(k - len(chosen), max(1, int(math.ceil(k * s.round_share))))
        picked = spread_top(scores, want, s.min_distance)
        if say is not None:
            say(f"active round {r + 1}: {len(chosen)} chosen, {len(sample)} scored, took {len(picked)} "
                f"(expected regret {scores.max():.3f}-{scores.min():.3f} log2)")
        chosen += picked
        r += 1
    return chosen


def shape_stream(strategy: str, bounds: ShapeBounds, seed: int, *, candidates=None, user_shapes=(),
                 measured=None, candidate_rows=None, spec=None, settings: ActiveSettings | None = None,
                 layout: str | None = None, cost_s=None):
    """The shapes a collection measures, in order, by ``strategy``
    (:data:`STRATEGIES`; see :class:`~costlearn.collect.shape_streams.RandomShapes`,
    :class:`~costlearn.collect.shape_streams.PriorShapes` and
    :class:`~costlearn.collect.active_shapes.ActiveShapes`).

    Parameters
    ----------
    strategy : str
    bounds : ShapeBounds
    seed : int
    candidates : list of (int, int, int), optional
        The only shapes the backend can measure, or the user offers.
    user_shapes : list of (int, int, int) or Problem
        ``prior``: the user's own shapes, or problems with their epilogue
        (the ones compilers asked: :func:`costlearn.serve.asked.asked_problems`).
    measured, candidate_rows, spec, settings, layout, cost_s :
        ``active``: see :class:`~costlearn.collect.active_shapes.ActiveShapes`.

    Returns
    -------
    iterable of (int, int, int)

    Raises
    ------
    ValueError
        If ``strategy`` is unknown (the message lists :data:`STRATEGIES`),
        ``user_shapes`` are given to another strategy than ``prior``, or
        ``active`` lacks ``measured``, ``candidate_rows`` or ``spec``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: {list(STRATEGIES)}")
    if user_shapes and strategy != "prior":
        raise ValueError(f"user shapes are the prior's (strategy='prior'), not the {strategy!r} strategy's")
    if strategy == "random":
        return RandomShapes(bounds, seed, candidates)
    if strategy == "prior":
        return PriorShapes(bounds, seed, user_shapes, candidates)
    if measured is None or candidate_rows is None or spec is None:
        raise ValueError("the active strategy needs measured=, candidate_rows= and spec=")
    return ActiveShapes(bounds, seed, measured, candidate_rows, spec, check_active(settings), candidates, layout,
                        cost_s)
