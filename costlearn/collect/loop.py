"""Collection: measure random shapes x candidate configs under a time
budget into a Parquet dataset; one loop for a local run and a fleet.

:func:`run_collection` plans the problems (:mod:`costlearn.collect.plan`),
hands them as tasks to an executor (:class:`~costlearn.collect.executor.Executor`),
writes one atomic part per problem, shows the progress and fills the summary
(:class:`~costlearn.collect.summary.CollectResult`). :func:`collect` runs it
with a :class:`~costlearn.collect.local.LocalExecutor` (a backend in this
process), :func:`costlearn.collect.fleet.collect_fleet` with Ray workers. A
collection is deterministic for its seed, so a restarted one walks the same
problems and skips every (problem, config) already in the dataset.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import uuid

import numpy as np
import pandas as pd

from costlearn.collect.active_shapes import ActiveSettings, check_active
from costlearn.collect.backends.base import Backend
from costlearn.collect.dataset import noise_floor, write_part
from costlearn.collect.executor import Executor
from costlearn.collect.local import LocalExecutor
from costlearn.collect.plan import (
    Run,
    Task,
    EPILOGUE_COMPILE_SHARE,
    LOCK_FILE,
    POOLS_FILE,
    candidate_pool,
    check_epilogues,
    measurement_key,
    open_collection,
    plan_problems,
    problems_limit,
    record_pool,
    shape_configs,
    strategy_shapes,
    write_device_json,
)
from costlearn.collect.protocol import Protocol
from costlearn.collect.sampler import STRATEGIES, ShapeBounds
from costlearn.collect.summary import CollectionInterrupted, CollectResult
from costlearn.core.problem import EPILOGUES, Problem
from costlearn.core.checks import check_int, check_real
from costlearn.core.locks import FolderLock, sigint_deferred
from costlearn.families import get_family

__all__ = ["EPILOGUE_COMPILE_SHARE", "EPILOGUES", "POOLS_FILE", "CollectResult", "CollectionInterrupted", "collect",
           "candidate_pool", "shape_configs", "record_pool", "write_device_json", "measurement_key",
           "open_collection", "plan_problems", "check_epilogues", "Task", "Run", "run_collection", "STRATEGIES",
           "ActiveSettings"]
# CollectResult and CollectionInterrupted are defined in costlearn.collect.summary; they are importable from here
# too, where users of collect (what it returns, what Ctrl-C raises) have always imported them.


class Stopwatch:
    """Accumulates wall time per phase (compile, measure, write), seconds."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        """Context manager adding the wall seconds of its block to
        ``seconds[name]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def run_collection(executor: Executor, out_dir, *, budget_s: float, family: str, dtype: str, layout: str,
                   pool_size: int, configs_per_shape: int, bounds, protocol, seed: int, max_problems, shapes, pool,
                   progress: bool, epilogues, result=CollectResult, strategy: str = "random",
                   active: ActiveSettings | None = None) -> CollectResult:
    """The collection loop, for any :class:`~costlearn.collect.executor.Executor`
    (the arguments are :func:`collect`'s; ``result``, the summary's class):
    plans the problems (:func:`~costlearn.collect.plan.plan_problems`, their
    configs by :func:`~costlearn.collect.plan.shape_configs` less the keys the
    folder holds), hands them to ``executor`` (:func:`_tasks`) until the
    budget, ``max_problems`` or the plan runs out, writes one part per problem
    finished; returns the summary. The shapes come from ``strategy``
    (:func:`~costlearn.collect.strategy.shape_stream`), among the problems the
    backend holds where it replays a recording
    (:meth:`~costlearn.collect.executor.Executor.recorded`).

    Raises
    ------
    ValueError, TypeError
        As :func:`collect`.
    costlearn.core.locks.FolderBusy
        If another collection is writing ``out_dir`` (one collector per
        folder: two at once would measure every config twice).
    costlearn.collect.summary.CollectionInterrupted
        On Ctrl-C (every problem finished before it is on disk).
    """
    budget_s = check_real("budget_s", budget_s, 0, strict=True)
    pool_size = check_int("pool_size", pool_size, 1)
    configs_per_shape = check_int("configs_per_shape", configs_per_shape, 1)
    fam, epilogues, active, shapes, max_problems = _checked_plan(executor, family, dtype, layout, epilogues,
                                                                 strategy, active, shapes, max_problems)
    t_start = time.monotonic()
    protocol = protocol or Protocol()
    spec = executor.spec
    if bounds is None:
        bounds = ShapeBounds.for_device(spec.device_type == "cpu")
    lock = FolderLock(out_dir, "a collection", LOCK_FILE)         # one collector per folder
    try:
        recorded = _recorded(executor, fam, dtype, layout, epilogues)
        if recorded is not None and pool is None:
            pool = [fam.config_from_id(c) for c in sorted(set().union(*recorded.values()))]
        out_dir, done, pool, other_pools, existing = open_collection(out_dir, spec, fam, dtype, seed, pool,
                                                                     pool_size)
        res = result(other_pools=other_pools, budget_s=budget_s, target_rse=protocol.target_rse)
        template = executor.template_hash(fam)
        exact = shapes is not None and strategy == "random"         # given shapes, measured as given
        in_play = list(epilogues[:1]) if not exact else list(epilogues)
        written: list = []
        stream, candidates = (shapes, None) if exact else strategy_shapes(
            strategy, bounds, seed, shapes=shapes, recorded=recorded, existing=existing, written=written, family=fam,
            dtype=dtype, layout=layout, pool=pool, spec=spec, configs_per_shape=configs_per_shape,
            epilogue=in_play[0], active=active, protocol=protocol)
        problems = plan_problems(stream, dtype, layout, epilogues, seed, drawn=not exact, in_play=in_play)
        sw = Stopwatch()
        total = sum(1 if isinstance(s, Problem) else len(epilogues) for s in shapes) if exact else min(
            math.inf if max_problems is None else max_problems, math.inf if candidates is None else len(candidates))
        total = None if not math.isfinite(total) else int(total)
        run = Run(fam, dtype, layout, pool, epilogues, protocol, seed, uuid.uuid4().hex[:12], budget_s, t_start, total,
                  res, sw)
        executor.open(run)
    except BaseException:
        lock.release()
        raise
    spreads = []

    def key(problem, config_id):
        return measurement_key(spec.slug, fam, problem, config_id, protocol, template)

    def write(problem, rows):
        with sw.phase("write"), sigint_deferred():          # a part on disk is in the Ctrl-C summary
            res.parts.append(write_part(rows, out_dir))
            written.extend(rows)
            for r in rows:
                done.add(key(problem, r["config_id"]))
                if r["status"] == "ok":
                    res.rows_valid += 1
                    spreads.append((r["time_us_p80"] - r["time_us_p20"]) / r["time_us"])
            res.rows_written += len(rows)
            res.problems_done += 1

    bar = executor.progress_bar() if progress else None
    try:
        _drive(executor, _tasks(problems, executor, run, spec, key, done, in_play, max_problems, recorded,
                                configs_per_shape), write)
    except KeyboardInterrupt:
        raise CollectionInterrupted(res, out_dir) from None
    finally:
        if bar is not None:
            bar.close()
        executor.close()
        lock.release()
        res.seconds = dict(executor.seconds(sw.seconds), total=time.monotonic() - t_start)
    res.stopped = executor.stopped
    res.epilogues_left_out = list(epilogues[len(in_play):])
    _summarise(res, written, spreads)
    return res


def _tasks(problems, executor, run: Run, spec, key, done: set, in_play: list, max_problems, recorded,
           configs_per_shape: int):
    """The tasks of :func:`run_collection`: for each problem of the plan
    (``problems``) with something left to measure, the configs chosen for it
    (:func:`~costlearn.collect.plan.shape_configs`, among those ``recorded``
    where the executor replays a recording) whose ``key`` is not ``done``;
    the others count in ``run.result.skipped``. Yields None for a problem
    drawn once the budget or ``max_problems`` has run out; brings in the next
    of ``run.epilogues`` (appended to ``in_play``, read by the next draw)
    while compiling its pool fits the budget left
    (:data:`~costlearn.collect.plan.EPILOGUE_COMPILE_SHARE`): by the pools
    compiled so far, and then by the executor's estimate for that epilogue
    (:meth:`~costlearn.collect.executor.Executor.epilogue_compile_s`)."""
    res, epilogues, handed = run.result, run.epilogues, 0
    for problem in problems:
        left = run.budget_s - (time.monotonic() - run.t_start)
        if left < 0:
            yield None
            continue
        pool_s, share = executor.pool_compile_s, EPILOGUE_COMPILE_SHARE * left
        if len(in_play) < len(epilogues) and pool_s and pool_s <= share \
                and executor.epilogue_compile_s(epilogues[len(in_play)]) <= share:
            in_play.append(epilogues[len(in_play)])     # read by the next draw
        if max_problems is not None and handed >= max_problems:
            yield None
            continue
        ids = None if recorded is None else recorded.get((*problem.shape, problem.epilogue), frozenset())
        chosen, sub_rng = shape_configs(run.pool, spec, problem, run.seed, configs_per_shape, ids)
        todo = [c for c in chosen if key(problem, c.config_id) not in done]
        res.skipped += len(chosen) - len(todo)
        if todo:
            handed += 1
            yield Task(problem, todo, int(sub_rng.integers(len(todo))))


def _drive(executor, tasks, write) -> None:
    """Hand ``tasks`` to ``executor`` while it is free, wait for the finished
    ones and ``write`` their rows, until it has nothing in flight and no task
    is left (a None from ``tasks``: the budget or the plan ran out) or it
    stopped (:attr:`~costlearn.collect.executor.Executor.stopped`)."""
    while not executor.stopped:
        while executor.free():
            task = next(tasks, None)
            if task is None:
                break
            executor.submit(task)
        if not executor.busy():
            break
        finished = executor.wait()
        for task, rows, _ in finished:
            write(task.problem, rows)
        executor.show(sum(measured for *_, measured in finished))


def _checked_plan(executor, family: str, dtype: str, layout: str, epilogues, strategy: str, active, shapes,
                  max_problems) -> tuple:
    """:func:`run_collection`'s checks of what to collect: ``(family, epilogues,
    active settings, shapes, max_problems)``, the family's object, the
    epilogues checked, an ``active`` cost of ``"auto"`` made a budget of
    problems (with ``max_problems``) or of seconds, the shapes as (M, N, K)
    tuples, ``max_problems`` checked (None: no limit).

    Raises
    ------
    ValueError
        As :func:`run_collection`.
    """
    if max_problems is not None:
        max_problems = check_int("max_problems", max_problems, 0)
    fam = get_family(family)
    fam.check_dtype(dtype, layout)
    epilogues = check_epilogues(epilogues)
    for e in epilogues:
        fam.check_epilogue(e)
    executor.check_family(fam)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: {list(STRATEGIES)}")
    if strategy == "active" and check_active(active).cost == "auto":    # a budget of problems or of seconds
        active = dataclasses.replace(active, cost="problem" if max_problems is not None else "second")
    if shapes is not None:
        shapes = [_given(s, dtype, layout, epilogues, strategy) for s in shapes]
    return fam, epilogues, active, shapes, max_problems


def _given(shape, dtype: str, layout: str, epilogues: tuple, strategy: str):
    """A given shape as (M, N, K), checked as a problem's extents; a :class:`Problem` kept as it is, where it is of
    the collection's ``dtype`` and ``layout``, one of its ``epilogues``, and not for ``active``.

    Raises
    ------
    ValueError, TypeError
        As :class:`Problem`, or a Problem another collection measures.
    """
    if not isinstance(shape, Problem):
        return Problem(*shape, dtype, layout).shape
    if strategy == "active":
        raise ValueError(f"shape {shape}: the active strategy chooses among shapes (M, N, K), not problems")
    if (shape.dtype, shape.layout) != (dtype, layout) or shape.epilogue not in epilogues:
        raise ValueError(f"shape {shape}: this collection measures {dtype} {layout} with epilogues {list(epilogues)}")
    return shape


def _recorded(executor, fam, dtype: str, layout: str, epilogues) -> dict | None:
    """What a recording executor (the replay backend) holds for this family,
    dtype, layout and ``epilogues``: ``{(m, n, k, epilogue): config ids}``,
    or None where the executor measures.

    Raises
    ------
    ValueError
        If the recording holds no such problem.
    """
    recorded = executor.recorded(fam.name, dtype, layout)
    if recorded is None:
        return None
    recorded = {key: ids for key, ids in recorded.items() if key[3] in epilogues}
    if not recorded:
        raise ValueError(f"the {executor.spec.slug} recording holds no {fam.name}/{dtype} {layout} problem with "
                         f"epilogue {list(epilogues)}")
    return recorded


def _summarise(res, written: list, spreads: list) -> None:
    """Fill ``res``'s measures of the rows ``written``: the median spread
    (p80 - p20 over the median, ``spreads``), the share of valid rows that
    reached the protocol's target, and the noise floor."""
    res.spread_frac = float(np.median(spreads)) if spreads else math.nan
    ok = [r for r in written if r["status"] == "ok"]
    if ok:
        res.at_target = sum(r["stop_reason"] in ("target", "fixed") for r in ok) / len(ok)
    if written:
        res.noise_floor = noise_floor(pd.DataFrame(written))


def collect(backend: Backend, out_dir, *, budget_s: float = 180.0, family: str = "gemm", dtype: str = "float32",
            layout: str = "NN", pool_size: int = 64, configs_per_shape: int = 48,
            bounds: ShapeBounds | None = None, protocol: Protocol | None = None, seed: int = 0,
            max_problems: int | None = None, shapes: list | None = None, pool: list | None = None,
            progress: bool = True, epilogues=("none",), max_shapes: int | None = None, strategy: str = "random",
            active: ActiveSettings | None = None) -> CollectResult:
    """Measure shapes x pool configs of a kernel family on ``backend`` into
    ``out_dir``, the shapes chosen by ``strategy``.

    Parameters
    ----------
    backend : Backend
        Device to measure on.
    out_dir : path
        Dataset folder (``data/<device slug>/`` by convention); created if
        missing. One Parquet part is written per shape.
    budget_s : float
        Wall-clock budget, seconds; no new shape is started after it.
    family : str
        Kernel family (:data:`costlearn.families.FAMILIES`) the backend runs.
    dtype, layout : str
        Of every problem measured (ones the family supports).
    pool_size : int
        Size of the candidate pool (compiled once, reused on every shape).
    configs_per_shape : int
        Pool configs measured per shape (a random subset of those feasible
        for the shape); all of them if larger.
    bounds : ShapeBounds, optional
        Shape bounds; :meth:`ShapeBounds.for_device` by default.
    protocol : Protocol, optional
        Measurement settings; ``Protocol()`` by default.
    seed : int
        Seed of the pool, the shapes and the config subsets.
    max_problems : int, optional
        Stop after this many problems (a shape with one epilogue) measured by
        this call (``max_shapes``: its old name, deprecated).
    shapes : list of (int, int, int) or Problem, optional
        Measure these shapes (in order) instead of random ones; with
        ``strategy="prior"``, the user's shapes the prior starts from; with
        ``"active"``, the only shapes it chooses among. A :class:`Problem`
        (of ``dtype`` and ``layout``, not for ``"active"``) is measured with
        its own epilogue, which must be one of ``epilogues``: the problems
        compilers asked (:func:`costlearn.serve.asked.asked_problems`).
    pool : list of configs of ``family``, optional
        Candidate pool to use instead of drawing one (``pool_size`` is then
        ignored); an evaluation passes a model's candidate set.
    progress : bool
        Show the progress on stderr: a bar on a terminal, else a line at
        least every :data:`costlearn.core.progress.EVERY_S` seconds
        (:func:`costlearn.core.progress.progress_bar`).
    epilogues : sequence of str
        Epilogues (:data:`costlearn.core.problem.EPILOGUES`) the kernels fuse:
        each random shape is measured with one of them drawn for it, each
        given shape with every one (:func:`plan_problems`); the pool is
        compiled once per epilogue, when a shape first needs it. Random
        shapes start with the first epilogue and bring in the next while its
        compile fits the budget left (:data:`EPILOGUE_COMPILE_SHARE`), so a
        short budget measures instead of compiling.
    strategy : {"random", "prior", "active"}
        Which shapes to measure (:mod:`costlearn.collect.strategy`): log-uniform
        (the default), real models' (and ``shapes``'), or rounds that measure
        where a refitted ensemble is least sure of its pick. A ``backend``
        replaying a recording (:meth:`~costlearn.collect.backends.base.Backend.recorded`)
        is asked only for its problems and configs, by every strategy.
    active : ActiveSettings, optional
        Settings of ``strategy="active"``, which needs one with an
        ``ensemble`` (:func:`costlearn.learn.active.active_settings` gives the
        command line's).

    Returns
    -------
    CollectResult

    Raises
    ------
    ValueError
        If a setting is out of range, a given shape is invalid, or the
        family, dtype or layout is one the backend cannot run.
    TypeError
        If a setting or a given shape's extent has the wrong type.
    """
    return run_collection(LocalExecutor(backend), out_dir, budget_s=budget_s, family=family, dtype=dtype,
                          layout=layout, pool_size=pool_size, configs_per_shape=configs_per_shape, bounds=bounds,
                          protocol=protocol, seed=seed, max_problems=problems_limit(max_problems, max_shapes),
                          shapes=shapes, pool=pool, progress=progress, epilogues=epilogues, strategy=strategy,
                          active=active)
