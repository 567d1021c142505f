"""A collection's plan, shared by the local loop and the fleet: the
candidate pool (drawn once, recorded in the folder), the problems in order
(each shape with its epilogue), the configs measured on each, and the keys a
resumed collection skips.

Everything here depends only on its arguments (the seed, the device, the
folder), so a local and a fleet collection of one seed walk the same
problems and resume each other.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.dataset import load, measured_keys, valid_rows
from costlearn.collect.protocol import Protocol
from costlearn.collect.sampler import select_pool
from costlearn.collect.strategy import shape_stream
from costlearn.collect.space import check_config, enumerate_space
from costlearn.core.problem import EPILOGUES, Problem, check_epilogue
from costlearn.core.files import atomic_write
from costlearn.core.errors import warn

__all__ = ["LOCK_FILE", "POOLS_FILE", "EPILOGUE_COMPILE_SHARE", "problems_limit", "record_pool", "candidate_pool",
           "shape_configs", "strategy_shapes", "measuring_seconds", "plan_problems", "check_epilogues",
           "measurement_key", "open_collection", "write_device_json", "Task", "Run"]

LOCK_FILE = ".collect.lock"
"""Beside a dataset's parts: the lock a collection holds while it writes the
folder (:class:`costlearn.core.locks.FolderLock`; one collector per folder)."""

POOLS_FILE = "pools.json"
"""Beside a dataset's parts: the candidate pools collections drew, by family
and dtype (:func:`record_pool`)."""


def record_pool(folder, family: str, dtype: str, seed: int, configs) -> list:
    """Record the candidate pool of a collection in ``<folder>/pools.json``
    and return the pools recorded before for the same family and dtype that
    differ from it (empty when the folder holds this pool only).

    A pool is (seed, size, sha256 of its sorted config ids); two differing
    pools in one dataset are a mixed dataset (more configs on some shapes
    than on others), which is allowed but reported.
    """
    path = Path(folder) / POOLS_FILE
    ids = sorted(c.config_id for c in configs)
    entry = dict(family=family, dtype=dtype, seed=int(seed), size=len(ids),
                 sha256=hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16])
    try:
        pools = json.loads(path.read_text()) if path.is_file() else []
        if not isinstance(pools, list):
            pools = []
    except (OSError, ValueError):
        pools = []                       # an unreadable record is rewritten; the parts are untouched
    same = [p for p in pools if isinstance(p, dict) and p.get("family") == family and p.get("dtype") == dtype]
    others = [p for p in same if p.get("sha256") != entry["sha256"]]
    if entry not in pools:
        atomic_write(path, json.dumps(pools + [entry], indent=1))
    return others


def candidate_pool(spec, family: str, dtype: str, size: int, seed: int):
    """The collection's candidate pool: ``size`` configs of ``family`` drawn
    (stratified by block tile height) from the feasible space of ``spec``;
    see :func:`costlearn.collect.sampler.select_pool`. Deterministic for (spec,
    family, dtype, size, seed), so a resumed collection and its evaluation
    use the same pool.

    Returns
    -------
    list of configs, sorted by config_id

    Raises
    ------
    ValueError
        If ``size`` < 1, the family or dtype is unknown, or ``spec`` has no
        feasible config.
    """
    space = enumerate_space(spec, family=family, dtype=dtype)
    return select_pool(space.configs, size, np.random.default_rng([seed, 1]))


def shape_configs(pool: list, spec, problem: Problem, seed: int, configs_per_shape: int, recorded=None):
    """The pool configs measured on ``problem``: a seeded random subset of
    ``configs_per_shape`` of those feasible for it on ``spec`` (all of them
    when fewer), in pool order; and the problem's generator, which then picks
    the config timed twice. Depends only on its arguments, so every
    collector of one plan (a fleet's workers included) measures the same
    configs on a problem.

    Parameters
    ----------
    recorded : collection of str, optional
        Where the backend replays a recording
        (:meth:`costlearn.collect.backends.base.Backend.recorded`): the
        config ids recorded on ``problem``, which replace the feasibility
        rules (the recording is what ran on the device).

    Returns
    -------
    (list of configs, numpy.random.Generator)
    """
    m, n, k = problem.shape
    if recorded is not None:
        feasible = [c for c in pool if c.config_id in recorded]
    else:
        feasible = [c for c in pool if check_config(c, spec, problem=problem) is None]
    rng = np.random.default_rng([seed, 3, m, n, k])
    order = rng.permutation(len(feasible))[:configs_per_shape]
    return [feasible[i] for i in sorted(order)], rng


def strategy_shapes(strategy: str, bounds, seed: int, *, shapes, recorded, existing, written: list, family,
                    dtype: str, layout: str, pool: list, spec, configs_per_shape: int, epilogue: str, active=None,
                    protocol: Protocol | None = None):
    """The shapes a collection by ``strategy`` measures
    (:func:`costlearn.collect.strategy.shape_stream`), and the candidates it
    chooses among (None: any shape within ``bounds``).

    Parameters
    ----------
    strategy : str
    bounds : ShapeBounds
    seed : int
    shapes : list of (int, int, int) or None
        The user's: the prior's starting shapes (``prior``), else the only
        candidates.
    recorded : dict or None
        :meth:`costlearn.collect.backends.base.Backend.recorded` of the
        backend: its problems are the only candidates.
    existing : DataFrame or None
        The rows the folder held (:func:`open_collection`).
    written : list of dict
        The rows this collection writes, appended as it goes (``active``
        refits on them).
    family : KernelFamily
    dtype, layout : str
    pool : list of configs
    spec : DeviceSpec
    configs_per_shape : int
    epilogue : str
        The epilogue ``active`` scores candidates with.
    active : ActiveSettings, optional
        With ``cost`` "problem" or "second" ("auto" counts as "second").
    protocol : Protocol, optional
        The collection's (``active`` per second: what a candidate costs).

    Returns
    -------
    (iterable of (int, int, int), list of (int, int, int) or None)
    """
    candidates = None
    if recorded is not None:
        candidates = sorted({key[:3] for key in recorded})
        if shapes is not None and strategy != "prior":
            candidates = [x for x in candidates if x in set(shapes)]
    elif shapes is not None and strategy != "prior":
        candidates = list(shapes)
    mine = None if existing is None else valid_rows(existing)
    if mine is not None:
        mine = mine[mine["family"].eq(family.name) & mine["dtype"].eq(dtype)]

    def measured() -> pd.DataFrame:
        """The valid rows of this family and dtype (every layout): the folder's and this call's."""
        new_rows = [r for r in written if r["status"] == "ok"]
        frames = [f for f in (mine, pd.DataFrame(new_rows) if new_rows else None) if f is not None]
        return (pd.concat(frames, ignore_index=True) if frames else
                pd.DataFrame(columns=["m", "n", "k", "layout", "time_us"]))

    def candidate_rows(cand_shapes) -> pd.DataFrame:
        """The (problem, config) rows this collection would measure on ``cand_shapes``."""
        recs = []
        for m, n, k in cand_shapes:
            problem = Problem(m, n, k, dtype, layout, epilogue)
            ids = None if recorded is None else recorded.get((m, n, k, epilogue), frozenset())
            chosen, _ = shape_configs(pool, spec, problem, seed, configs_per_shape, ids)
            recs += [(m, n, k, c.config_id) for c in chosen]
        return pd.DataFrame(recs, columns=["m", "n", "k", "config_id"]).assign(
            dtype=dtype, layout=layout, epilogue=epilogue, family=family.name)

    per_second = strategy == "active" and active is not None and active.cost != "problem"
    cost_s = (functools.partial(measuring_seconds, protocol=protocol or Protocol(),
                                problem_overhead_s=active.problem_overhead_s) if per_second else None)
    stream = shape_stream(strategy, bounds, seed, candidates=candidates,
                          user_shapes=shapes if strategy == "prior" else (), measured=measured,
                          candidate_rows=candidate_rows, spec=spec, settings=active, layout=layout, cost_s=cost_s)
    return stream, candidates


def measuring_seconds(candidates: pd.DataFrame, measured: pd.DataFrame, *, protocol: Protocol,
                      problem_overhead_s: float) -> pd.Series:
    """Expected seconds of measuring each candidate problem: a problem's
    ``problem_overhead_s`` plus, per config, the median ``compile_s`` of the
    rows measured and the protocol's launches at the predicted time
    (:meth:`~costlearn.collect.protocol.Protocol.launch_us`), at the median
    ``n_samples`` of the rows measured (the rounds the protocol's adaptive
    sampling takes on this device; ``protocol.rounds`` where unknown).

    Parameters
    ----------
    candidates : DataFrame
        One row per (problem, config): ``m, n, k, layout, time_us``
        (predicted, microseconds).
    measured : DataFrame
        Rows measured on the device (``compile_s``, ``n_samples`` where
        recorded; a replayed log's compile times may be absent: 0).
    protocol : Protocol
    problem_overhead_s : float

    Returns
    -------
    Series of float64, seconds, indexed by (m, n, k, layout)

    Raises
    ------
    KeyError
        If ``candidates`` lack ``m, n, k, layout`` or ``time_us``.

    Notes
    -----
    The formula counts what :func:`costlearn.collect.measure.measure_shape`
    does per candidate (design.md, "Measurement protocol"); the compiles and
    rounds are this device's own, read from its rows.
    """
    def median(column: str, default: float) -> float:
        v = pd.to_numeric(measured[column], errors="coerce") if column in measured.columns else pd.Series([])
        v = v[np.isfinite(v)]
        return float(v.median()) if len(v) else default

    per_config_s = (median("compile_s", 0.0)
                    + protocol.launch_us(candidates["time_us"].to_numpy(), median("n_samples", protocol.rounds)) / 1e6)
    problem = ["m", "n", "k", "layout"]
    seconds = pd.Series(per_config_s, index=pd.MultiIndex.from_frame(
        candidates[problem].astype({"m": int, "n": int, "k": int, "layout": str}))).groupby(level=problem).sum()
    return seconds + problem_overhead_s


def plan_problems(shapes, dtype: str, layout: str, epilogues, seed: int, drawn: bool, in_play=None):
    """The problems a collection measures, in order: each shape of
    ``shapes`` with one epilogue of ``epilogues`` drawn for it (``drawn``,
    random shapes: seeded by the shape), or with every one of them in turn
    (given shapes: an evaluation compares the epilogues on the same shapes);
    a :class:`Problem` among them as it is.

    Parameters
    ----------
    shapes : iterable of (int, int, int) or Problem
    dtype, layout : str
    epilogues : sequence of str
    seed : int
    drawn : bool
    in_play : list of str, optional
        The epilogues random shapes may be measured with now (default: all
        of ``epilogues``), read at each draw, so a collection can add to it
        as its budget allows (:data:`EPILOGUE_COMPILE_SHARE`): a shape whose
        drawn epilogue is not in play gets one of those in play, drawn by
        the same seeded generator. A resumed collection draws the same for
        the same epilogues in play.

    Yields
    ------
    Problem

    Raises
    ------
    ValueError
        If ``epilogues`` is empty or names an unknown epilogue.
    """
    epilogues = check_epilogues(epilogues)
    for shape in shapes:
        if isinstance(shape, Problem):          # a problem given with its epilogue (checked by the caller)
            yield shape
            continue
        m, n, k = shape
        if drawn:
            pick = epilogues[0]
            if len(epilogues) > 1:
                rng = np.random.default_rng([seed, 5, m, n, k])
                pick = epilogues[int(rng.integers(len(epilogues)))]
                if in_play is not None and pick not in in_play:
                    pick = in_play[int(rng.integers(len(in_play)))]
            yield Problem(m, n, k, dtype, layout, pick)
        else:
            for e in epilogues:
                yield Problem(m, n, k, dtype, layout, e)


EPILOGUE_COMPILE_SHARE = 0.25
"""A collection of random shapes starts with its first epilogue's kernels and
brings in the next epilogue (whose pool compiles at its first shape) only
while compiling it, estimated as long as the slowest pool compiled so far
and as the executor's estimate for that epilogue
(:meth:`costlearn.collect.executor.Executor.epilogue_compile_s`), takes at
most this share of the budget left: where a pool's compile is a
large part of the budget (PoCL on a few cores), a short collection that
brought in every epilogue would spend its budget compiling rather than
measuring, so it measures one epilogue."""


def check_epilogues(epilogues) -> tuple:
    """``epilogues`` as a tuple of distinct names of
    :data:`costlearn.core.problem.EPILOGUES`, in the order given.

    Raises
    ------
    ValueError
        If it is empty or a name is unknown (the message lists the allowed).
    """
    if isinstance(epilogues, str):
        epilogues = [epilogues]
    out = tuple(dict.fromkeys(check_epilogue(e) for e in epilogues))
    if not out:
        raise ValueError(f"epilogues is empty; give at least one of {list(EPILOGUES)}")
    return out


def measurement_key(slug: str, family, problem: Problem, config_id: str, protocol: Protocol,
                    template_hash: str | None = None) -> tuple:
    """The :data:`costlearn.collect.dataset.KEY_COLUMNS` tuple of one measurement
    (``family`` a KernelFamily; ``template_hash`` the kernel template's,
    default the family's, a replay's the recording's): what a resumed
    collection skips."""
    return (slug, family.name, problem.dtype, problem.layout, problem.epilogue, *problem.shape, config_id,
            template_hash or family.template_hash, protocol.version, protocol.distribution, float(protocol.density))


def open_collection(out_dir, spec, family, dtype: str, seed: int, pool, pool_size: int):
    """Prepare ``out_dir`` for a collection on ``spec``: its ``device.json``
    (:func:`write_device_json`), the keys already measured there, the
    candidate pool (``pool``, else :func:`candidate_pool` of ``pool_size``)
    and the other pools recorded in the folder (:func:`record_pool`).

    Returns
    -------
    (Path, set of tuple, list of configs, list of dict, DataFrame or None)
        The last: the rows the folder held (None where it held none).

    Raises
    ------
    costlearn.collect.dataset.DatasetError
        If the folder exists but is not a dataset folder.
    """
    out_dir = Path(out_dir)
    write_device_json(spec, out_dir)
    existing, _ = load(out_dir) if out_dir.exists() else (None, None)
    done = measured_keys(existing) if existing is not None else set()
    pool = list(pool) if pool is not None else candidate_pool(spec, family.name, dtype, pool_size, seed)
    return out_dir, done, pool, record_pool(out_dir, family.name, dtype, seed, pool), existing


def write_device_json(spec, folder) -> Path:
    """Store the DeviceSpec beside the dataset (``device.json``) so training
    needs no device; an existing file is kept (the first description wins).
    Written atomically (:func:`costlearn.core.files.atomic_write`)."""
    path = Path(folder) / "device.json"
    if not path.exists():
        atomic_write(path, json.dumps(spec.to_dict(), indent=1, sort_keys=True))
    return path


@dataclass
class Task:
    """One problem of the plan handed to an executor
    (:class:`costlearn.collect.executor.Executor`): the pool configs to
    measure on it (pool order), the index of the one timed twice (the noise
    check), and the workers lost with it so far (a fleet's)."""

    problem: Problem
    configs: list
    repeat_index: int
    lost_on: list = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    """What an executor is told of the collection it measures for
    (:meth:`costlearn.collect.executor.Executor.open`): the family (a
    KernelFamily), dtype, layout, the candidate pool, the epilogues asked
    for, the protocol, the seed, this call's ``run_id``, its budget and start
    (``time.monotonic``), the problems planned where known (``total``, for a
    progress bar), the summary being filled (``result``, a
    :class:`~costlearn.collect.summary.CollectResult`) and the phases'
    :class:`~costlearn.collect.loop.Stopwatch`."""

    family: object
    dtype: str
    layout: str
    pool: list
    epilogues: tuple
    protocol: Protocol
    seed: int
    run_id: str
    budget_s: float
    t_start: float
    total: int | None
    result: object
    stopwatch: object


def problems_limit(max_problems, max_shapes):
    """The problem limit of a collection given as ``max_problems``, or as
    ``max_shapes`` (its old name: it always counted problems, a shape with
    one epilogue), with a DeprecationWarning.

    Raises
    ------
    ValueError
        If both are given.
    """
    if max_shapes is None:
        return max_problems
    if max_problems is not None:
        raise ValueError(f"max_problems={max_problems!r} and max_shapes={max_shapes!r}: give max_problems only "
                         "(max_shapes is its old name)")
    warn("costlearn: max_shapes is now max_problems (it counts problems: a shape with one epilogue)",
         DeprecationWarning)
    return max_shapes
