"""The ``active`` strategy: its settings (:class:`ActiveSettings`) and its rounds (:class:`ActiveShapes`).

Each round (fit, score, choose) refits a small bootstrap ensemble of the
cost model on everything measured and proposes the candidate problems where
the ensemble's pick is least sure, spread apart (:func:`spread_top`); the
ensemble is passed in (:class:`costlearn.learn.active.EnsembleDisagreement`,
a layer above). See :mod:`costlearn.collect.strategy` for the strategies side
by side.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costlearn.collect.sampler import ShapeBounds, iter_shapes
from costlearn.collect.shape_streams import RandomShapes
from costlearn.core.checks import check_int, check_real

__all__ = ["ACTIVE_COSTS", "ActiveSettings", "ActiveShapes", "check_active", "spread_top"]


ACTIVE_COSTS = ("auto", "problem", "second")
"""What the ``active`` strategy chooses per (:class:`ActiveSettings`)."""


@dataclass(frozen=True)
class ActiveSettings:
    """Settings of the ``active`` strategy.

    Parameters
    ----------
    first_round : int
        Problems measured (by the ``random`` stream) before the first fit
        (at least 2: a member learns from 2 problems at least).
    round_share : float
        A later round measures this share of the problems measured so far
        (at least ``first_round``): rounds grow with the data, so the refits
        stay a small share of the budget.
    candidates : int
        Unmeasured problems scored per round.
    members : int
        Bootstrap members of the ensemble (:class:`~costlearn.learn.active.EnsembleDisagreement`).
    trees, max_depth : int
        Boosting rounds and depth of each member (a small, fast model).
    min_distance : float
        Two problems of one round differ by at least this in some log2
        extent (no round spends itself on one corner).
    n_jobs : int
        XGBoost threads of the refits.
    member_problems : int, optional
        Problems in each member's bootstrap sample (default: as many as
        there are): a cap keeps refits on a large source (a transfer's)
        fast.
    cost : {"auto", "problem", "second"}
        What a round's problems are chosen per. ``"problem"``: the highest
        scores (a budget of problems: ``max_problems``, a replayed log).
        ``"second"``: the highest scores per predicted second of measuring
        the problem (a budget of seconds on a device: without it, a round
        spends the budget on the few largest, least known problems). The
        seconds are ``problem_overhead_s`` plus, per config, the median
        compile of the rows measured and the protocol's launches at the
        ensemble's predicted time (:meth:`costlearn.collect.protocol.Protocol.launch_us`,
        at the median rounds of the rows measured). ``"auto"``: ``"problem"``
        where the collection has ``max_problems``, else ``"second"``.
    problem_overhead_s : float
        Seconds a problem costs beyond its compiles and launches (planning,
        buffers, writing its part; the default is what a small problem took
        on PoCL's CPU device: docs/results.md, "Which problems to measure:
        collection strategies").
    ensemble : callable (spec, ActiveSettings, seed) -> ensemble, optional
        Makes the model a round refits: an object with ``fit(rows)``
        (returning itself), ``score(candidates)`` (a Series of expected
        regret indexed by (m, n, k, layout)) and ``time_us(candidates)`` (a
        predicted time per row, microseconds), e.g.
        :class:`costlearn.learn.active.EnsembleDisagreement`, which the command
        line and ``transfer`` pass (a model lives above this layer). Needed
        by ``active``.
    """

    first_round: int = 16
    round_share: float = 0.25
    candidates: int = 256
    members: int = 4
    trees: int = 120
    max_depth: int = 6
    min_distance: float = 0.25
    n_jobs: int = 1
    member_problems: int | None = None
    cost: str = "auto"
    problem_overhead_s: float = 1.0
    ensemble: object = None

    def __post_init__(self) -> None:
        check_int("ActiveSettings.first_round", self.first_round, 2)
        check_int("ActiveSettings.candidates", self.candidates, 1)
        check_int("ActiveSettings.members", self.members, 2)
        check_int("ActiveSettings.trees", self.trees, 1)
        check_int("ActiveSettings.max_depth", self.max_depth, 1, 16)
        check_int("ActiveSettings.n_jobs", self.n_jobs, 1)
        if self.member_problems is not None:
            check_int("ActiveSettings.member_problems", self.member_problems, 1)
        if not 0 < self.round_share <= 1:
            raise ValueError(f"ActiveSettings.round_share={self.round_share!r}; must be in (0, 1]")
        if not self.min_distance >= 0:
            raise ValueError(f"ActiveSettings.min_distance={self.min_distance!r}; must be >= 0")
        if self.cost not in ACTIVE_COSTS:
            raise ValueError(f"ActiveSettings.cost={self.cost!r}; allowed: {list(ACTIVE_COSTS)}")
        check_real("ActiveSettings.problem_overhead_s", self.problem_overhead_s, 0)


class ActiveShapes:
    """The ``active`` strategy: rounds of (fit, score, choose).

    Each round reads the rows measured so far (``measured()``, the folder's
    and this collection's). Below ``settings.first_round`` measured problems
    it proposes the next shapes of the ``random`` stream; after, it fits an
    :class:`~costlearn.learn.active.EnsembleDisagreement`, scores ``settings.candidates`` unmeasured
    problems (the next draws of the random stream, or a seeded sample of the
    unproposed ``candidates``) and proposes the highest-scoring ones (per
    second of measuring them, with ``cost_s``), each at
    least ``settings.min_distance`` (log2) from the others of its round, as
    many as ``settings.round_share`` of the problems measured (at least
    ``first_round``). A candidate not chosen may be scored again in a later
    round.

    Parameters
    ----------
    bounds : ShapeBounds
    seed : int
    measured : callable returning DataFrame
        The valid rows measured so far of this collection's family and dtype
        (with ``time_us``), every layout: the ensemble learns from all of
        them.
    candidate_rows : callable (list of (int, int, int)) -> DataFrame
        The (problem, config) rows a collection would measure on those
        shapes (the columns :meth:`EnsembleDisagreement.score` reads).
    spec : DeviceSpec
    settings : ActiveSettings, optional
    candidates : list of (int, int, int), optional
        The only shapes to choose from.
    layout : str, optional
        This collection's layout: a shape counts as measured (and is not
        proposed) where ``measured()`` holds it in this layout (None: in any).
    cost_s : callable (DataFrame, DataFrame) -> Series, optional
        Given the candidate rows with the ensemble's ``time_us`` and the rows
        measured, the seconds of measuring each candidate problem (indexed by
        (m, n, k, layout)); the scores are divided by it (``cost="second"``).
        None: each problem costs one.
    """

    def __init__(self, bounds: ShapeBounds, seed: int, measured, candidate_rows, spec,
                 settings: ActiveSettings | None = None, candidates=None, layout: str | None = None, cost_s=None):
        self.bounds, self.seed, self.spec, self.layout = bounds, seed, spec, layout
        self.measured, self.candidate_rows, self.cost_s = measured, candidate_rows, cost_s
        self.settings = check_active(settings)
        self.candidates = None if candidates is None else sorted(set(map(tuple, candidates)))

    def __iter__(self):
        s = self.settings
        base = iter(RandomShapes(self.bounds, self.seed, self.candidates))
        proposed: set = set()
        for r in itertools.count():
            rows = self.measured()
            here = rows if self.layout is None else rows[rows["layout"] == self.layout]
            have = set(map(tuple, here[["m", "n", "k"]].drop_duplicates().astype(int).to_numpy().tolist()))
            n_have = len(rows.drop_duplicates([c for c in ("m", "n", "k", "layout") if c in rows.columns]))
            skip = have | proposed
            if n_have < s.first_round:
                batch = list(itertools.islice((x for x in base if x not in skip), s.first_round - n_have))
            else:
                pool = self._candidate_shapes(skip, r)
                if not pool:
                    return
                batch = self._choose(rows, pool, max(s.first_round, int(math.ceil(s.round_share * n_have))), r)
            if not batch:
                return
            for x in batch:
                proposed.add(x)
                yield x

    def _candidate_shapes(self, skip: set, round_index: int) -> list:
        s = self.settings
        if self.candidates is None:
            it = iter_shapes(self.bounds, np.random.default_rng([self.seed, 9, round_index]))
            return list(itertools.islice((x for x in it if x not in skip), s.candidates))
        left = [x for x in self.candidates if x not in skip]
        rng = np.random.default_rng([self.seed, 9, round_index])
        return [left[i] for i in sorted(rng.permutation(len(left))[:s.candidates])]

    def _choose(self, rows: pd.DataFrame, pool: list, n: int, round_index: int) -> list:
        s = self.settings
        cand = self.candidate_rows(pool)
        if cand.empty:
            return pool[:n]
        ensemble = s.ensemble(self.spec, s, self.seed + round_index).fit(rows)
        scores = ensemble.score(cand)
        if self.cost_s is not None:
            scores = scores / self.cost_s(cand.assign(time_us=ensemble.time_us(cand)), rows).reindex(scores.index)
        return [p[:3] for p in spread_top(scores, n, s.min_distance)]


def spread_top(scores: pd.Series, n: int, min_distance: float) -> list:
    """The ``n`` highest-scoring problems of ``scores`` (indexed by (m, n, k,
    layout)), greedily, skipping one within ``min_distance`` in every log2
    extent of one already chosen with its layout; ties in index order.

    Returns
    -------
    list of (int, int, int, str)
    """
    chosen, logs = [], []
    for problem in scores.sort_values(ascending=False, kind="stable").index:
        lg = np.log2(np.asarray(problem[:3], np.float64))
        if all(lay != problem[3] or np.abs(lg - o).max() >= min_distance for o, lay in logs):
            chosen.append((int(problem[0]), int(problem[1]), int(problem[2]), str(problem[3])))
            logs.append((lg, problem[3]))
            if len(chosen) == n:
                break
    return chosen


def check_active(settings) -> ActiveSettings:
    """``settings`` of the active strategy, with its ensemble.

    Raises
    ------
    ValueError
        If there are none, or they name no ``ensemble`` (the message says
        which to pass).
    """
    if settings is None or settings.ensemble is None:
        raise ValueError(f"strategy='active' needs active=ActiveSettings(ensemble=...) (got {settings!r}): the model "
                         "each round refits, e.g. costlearn.learn.active.EnsembleDisagreement (the command line "
                         "passes it)")
    return settings
