"""Collection: measure random shapes x candidate configs under a time
budget into a Parquet dataset; one loop for a local run and a fleet.

:func:`run_collection` plans the problems (:mod:`costlearn.collect.plan`),
hands them as tasks to an :class:`Executor`, writes one atomic part per
problem, shows the progress and fills the summary (:class:`CollectResult`).
:func:`collect` runs it with a :class:`LocalExecutor` (a backend in this
process), :func:`costlearn.collect.fleet.collect_fleet` with Ray workers. A
collection is deterministic for its seed, so a restarted one walks the same
problems and skips every (problem, config) already in the dataset.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from costlearn.collect.backends.base import Backend
from costlearn.collect.dataset import NOT_IMPORTED, SCHEMA_VERSION, load, noise_floor, valid_rows, write_part
from costlearn.collect.measure import DeviceLost, Protocol, Stopwatch, measure_shape
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
from costlearn.collect.sampler import ShapeBounds
from costlearn.collect.strategy import STRATEGIES, ActiveSettings, check_active
from costlearn.core.problem import EPILOGUES, Problem
from costlearn.core.checks import check_int, check_real
from costlearn.core.locks import FolderLock, sigint_deferred
from costlearn.core.progress import progress_bar
from costlearn.core.version import __version__
from costlearn.families import family_of, get_family

__all__ = ["EPILOGUE_COMPILE_SHARE", "EPILOGUES", "POOLS_FILE", "CollectResult", "CollectionInterrupted", "collect",
           "rows_for", "measure_rows", "candidate_pool", "shape_configs", "SESSION_ID", "record_pool",
           "write_device_json", "dataset_summary", "measurement_key", "open_collection", "plan_problems",
           "check_epilogues", "Task", "Run", "Executor", "LocalExecutor", "run_collection", "STRATEGIES",
           "ActiveSettings"]

@dataclass
class CollectResult:
    """Summary of one :func:`collect` call.

    Attributes
    ----------
    rows_written, rows_valid : int
        Rows written by this call, and how many of them have status ``ok``.
    problems_done : int
        Problems (a shape with one epilogue) measured by this call
        (``shapes_done``, its old name, still reads it).
    skipped : int
        (problem, config) pairs skipped because the dataset already had them.
    seconds : dict of str to float
        Wall time spent compiling, measuring and writing.
    spread_frac : float
        Median over valid rows of the relative spread (p80 - p20) / median
        of a row's samples; NaN if none.
    noise_floor : float
        Median relative difference between two independent timings of the
        same config in one session (one repeat per shape); NaN if none.
        See :func:`costlearn.collect.dataset.noise_floor`.
    parts : list of Path
    stopped : str
        Why collection stopped early (the device was lost), else "".
    other_pools : list of dict
        Candidate pools recorded in the folder for this family and dtype that
        differ from this call's (:func:`record_pool`): the dataset mixes them.
    target_rse, at_target : float
        The protocol's relative-standard-error target, and the share of this
        call's valid rows that reached it (the rest hit the cap).
    budget_s : float
        The call's budget, seconds; a shape started inside it is measured to
        the end, so ``seconds["total"]`` may exceed it (:attr:`over_budget_s`).
    epilogues_left_out : list of str
        Epilogues asked for that no random shape was measured with: compiling
        their pools did not fit the budget left (:data:`EPILOGUE_COMPILE_SHARE`).
    """

    rows_written: int = 0
    rows_valid: int = 0
    problems_done: int = 0
    skipped: int = 0
    seconds: dict = field(default_factory=dict)
    spread_frac: float = math.nan
    noise_floor: float = math.nan
    parts: list = field(default_factory=list)
    stopped: str = ""
    other_pools: list = field(default_factory=list)
    budget_s: float = math.inf
    target_rse: float = math.nan
    at_target: float = math.nan
    epilogues_left_out: list = field(default_factory=list)

    @property
    def shapes_done(self) -> int:
        """:attr:`problems_done` by its old name (it counts problems: a shape
        with one epilogue)."""
        return self.problems_done

    @property
    def over_budget_s(self) -> float:
        """Seconds past the budget (0 when within it): the last shape, with
        its compiles, started before the budget ran out and was finished."""
        return max(0.0, self.seconds.get("total", 0.0) - self.budget_s)


class CollectionInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`collect`; ``result`` says what was saved (every
    shape measured before it is on disk)."""

    def __init__(self, result: "CollectResult", folder):
        skipped = f" ({result.skipped} already measured were skipped)" if result.skipped else ""
        super().__init__(f"{result.rows_written} new rows over {result.problems_done} problems saved in {folder}"
                         f"{skipped}")
        self.result, self.folder = result, folder


SESSION_ID = uuid.uuid4().hex[:12]
"""This process's measurement session (``session_id`` of every row it
measures): timings of one session share its warm caches and machine state;
the across-session noise floor compares sessions
(:func:`costlearn.collect.noise.recheck`)."""
def rows_for(results: list[dict], kernels: dict, problem: Problem, protocol: Protocol, prov: dict,
             clocks: dict, overhead_us: float, run_id: str, rotation: int = 0) -> list[dict]:
    """Complete :func:`~costlearn.collect.measure.measure_shape` results into dataset
    rows with every column of :data:`costlearn.collect.dataset.COLUMNS`.

    Parameters
    ----------
    results : list of dict
        Rows from ``measure_shape`` (one per kernel).
    kernels : dict of str to CompiledKernel
        Compiled kernels by config_id (compiled facts: registers, compile_s).
    problem : Problem
    protocol : Protocol
    prov : dict
        The backend's provenance columns (a ``template_hash`` among them, a
        replay's, replaces the family's).
    clocks : dict
        ``sm_clock_mhz``, ``mem_clock_mhz``, ``temperature_c``, ``throttled``,
        ``throttle_reasons`` where known.
    overhead_us : float
        Launch overhead, microseconds.
    run_id : str
    rotation : int
        Input buffer sets the workspace rotated among.

    Returns
    -------
    list of dict
    """
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = []
    for r in results:
        kern = kernels[r["config_id"]]
        c = kern.config
        fam = family_of(c)
        d = fam.describe(c, problem.dtype)
        row = dict(r)
        row.update(m=problem.m, n=problem.n, k=problem.k, dtype=problem.dtype, layout=problem.layout,
                   epilogue=problem.epilogue,
                   family=fam.name, block_m=d.block_m, block_n=d.block_n, block_k=d.block_k,
                   thread_m=d.thread_m, thread_n=d.thread_n, threads=d.threads,
                   pipeline_stages=d.pipeline_stages, smem_bytes=d.smem_bytes,
                   registers_per_thread=(math.nan if kern.registers_per_thread is None
                                         else float(kern.registers_per_thread)),
                   template_hash=prov.get("template_hash", fam.template_hash),
                   overhead_us=overhead_us, compile_s=kern.compile_s,
                   sm_clock_mhz=clocks.get("sm_clock_mhz", math.nan),
                   mem_clock_mhz=clocks.get("mem_clock_mhz", math.nan),
                   temperature_c=clocks.get("temperature_c", math.nan),
                   throttled=bool(clocks.get("throttled", False)),
                   throttle_reasons=str(clocks.get("throttle_reasons", "")),
                   rotation_sets=rotation,
                   protocol_version=protocol.version, distribution=protocol.distribution,
                   density=protocol.density, rounds=protocol.rounds,
                   costlearn_version=__version__, schema_version=SCHEMA_VERSION, run_id=run_id,
                   session_id=SESSION_ID, timestamp=stamp, **NOT_IMPORTED,
                   **{"device_settings": "", **{c: v for c, v in prov.items() if c != "template_hash"}})
        out.append(row)
    return out


def measure_rows(backend: Backend, kernels: list, problem: Problem, protocol: Protocol, overhead_us: float,
                 prov: dict, run_id: str, seed: int = 0, repeat_index: int | None = 0,
                 until: str = "target") -> list[dict]:
    """Measure compiled kernels on one problem (:func:`costlearn.collect.measure.measure_shape`
    in a fresh workspace) and return complete dataset rows
    (:func:`rows_for`), with the device clocks read before and after.

    Parameters
    ----------
    backend : Backend
    kernels : list of CompiledKernel
    problem : Problem
    protocol : Protocol
    overhead_us : float
        The backend's launch overhead, microseconds.
    prov : dict
        ``backend.provenance()``.
    run_id : str
    seed : int
        Seed of the kernel order.
    repeat_index : int or None
        Which kernel is measured twice (the noise check); None: none.
    until : {"target", "separated"}
        The stopping rule (:func:`costlearn.collect.measure.measure_shape`).

    Returns
    -------
    list of dict, one row per kernel

    Raises
    ------
    costlearn.collect.measure.DeviceLost
        If the device fails in a way that persists (sticky error).
    """
    m, n, k = problem.shape
    clocks = backend.clocks()
    with backend.workspace(problem, protocol.distribution, protocol.density,
                           seed=protocol.seed + m * 7 + n * 13 + k * 17) as ws:
        results = measure_shape(ws, kernels, protocol, overhead_us, rng=np.random.default_rng([seed, 4, m, n, k]),
                                repeat_index=repeat_index, until=until)
        rotation = int(getattr(ws, "n_sets", 0))
    after = backend.clocks()
    if after.get("throttled"):
        clocks = dict(clocks, throttled=True, throttle_reasons=";".join(filter(None, (
            clocks.get("throttle_reasons", ""), after.get("throttle_reasons", "")))))
    return rows_for(results, {kern.config.config_id: kern for kern in kernels}, problem, protocol, prov,
                    clocks, overhead_us, run_id, rotation)


class Executor:
    """What measures the tasks of :func:`run_collection`: the one part in
    which a local run (:class:`LocalExecutor`) and a fleet run
    (:class:`costlearn.collect.fleet.FleetExecutor`) differ. The loop hands
    out tasks while :meth:`free`, waits for finished ones (:meth:`wait`) while
    :meth:`busy`, writes their rows, and stops when :attr:`stopped` says why
    (the device, or every worker, was lost). :attr:`spec` is the device
    measured; :attr:`pool_compile_s` the slowest compile of the pool for one
    epilogue yet, which brings in the next (:data:`EPILOGUE_COMPILE_SHARE`).
    """

    spec = None
    stopped = ""
    pool_compile_s = 0.0
    bar = None

    def check_family(self, family) -> None:
        """Raise ValueError if the device cannot run ``family`` (a KernelFamily)."""
        raise NotImplementedError

    def recorded(self, family: str, dtype: str, layout: str) -> dict | None:
        """The only problems the executor can measure and the configs on each
        (:meth:`costlearn.collect.backends.base.Backend.recorded`), or None
        for any feasible problem (the default)."""
        return None

    def template_hash(self, family) -> str:
        """The kernel template the rows of ``family`` (a KernelFamily) are
        measured with: the family's (the default), a replay's recording's."""
        return family.template_hash

    def open(self, run: Run) -> None:
        """Start measuring for ``run`` (before the first task)."""
        raise NotImplementedError

    def progress_bar(self):
        """Open (and keep in :attr:`bar`) this executor's progress bar."""
        raise NotImplementedError

    def free(self) -> bool:
        """Whether a task may be handed out (:meth:`submit`) now."""
        raise NotImplementedError

    def submit(self, task: Task) -> None:
        """Hand out one task."""
        raise NotImplementedError

    def busy(self) -> bool:
        """Whether a task is in flight."""
        raise NotImplementedError

    def wait(self) -> list:
        """Wait for tasks to finish; returns (Task, rows, measured) of each
        finished task (``measured`` False for rows recording a failure to
        measure, e.g. :func:`costlearn.collect.fleet.lost_rows`)."""
        raise NotImplementedError

    def show(self, measured: int) -> None:
        """Update :attr:`bar` after :meth:`wait` (``measured`` tasks measured)."""
        raise NotImplementedError

    def seconds(self, phases: dict) -> dict:
        """The summary's ``seconds`` (without ``total``), from the
        stopwatch's ``phases``."""
        return dict(phases)

    def close(self) -> None:
        """Release what :meth:`open` took (the collection ended or was interrupted)."""


def run_collection(executor: Executor, out_dir, *, budget_s: float, family: str, dtype: str, layout: str,
                   pool_size: int, configs_per_shape: int, bounds, protocol, seed: int, max_problems, shapes, pool,
                   progress: bool, epilogues, result=CollectResult, strategy: str = "random",
                   active: ActiveSettings | None = None) -> CollectResult:
    """The collection loop, for any :class:`Executor` (the arguments are
    :func:`collect`'s; ``result``, the summary's class): plans the problems
    (:func:`~costlearn.collect.plan.plan_problems`, their configs by
    :func:`~costlearn.collect.plan.shape_configs` less the keys the folder
    holds), hands them to ``executor`` until the budget, ``max_problems`` or the
    plan runs out, writes one part per problem finished; returns the summary.
    The shapes come from ``strategy`` (:func:`~costlearn.collect.strategy.shape_stream`),
    among the problems the backend holds where it replays a recording
    (:meth:`Executor.recorded`).

    Raises
    ------
    ValueError, TypeError
        As :func:`collect`.
    costlearn.core.locks.FolderBusy
        If another collection is writing ``out_dir`` (one collector per
        folder: two at once would measure every config twice).
    CollectionInterrupted
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
        total = len(shapes) * len(epilogues) if exact else min(
            math.inf if max_problems is None else max_problems, math.inf if candidates is None else len(candidates))
        total = None if not math.isfinite(total) else int(total)
        executor.open(Run(fam, dtype, layout, pool, epilogues, protocol, seed, uuid.uuid4().hex[:12], budget_s,
                          t_start, total, res, sw))
    except BaseException:
        lock.release()
        raise
    spreads = []
    handed = 0

    def next_task():
        """The plan's next problem with something left to measure, or None
        (the budget, ``max_problems`` or the plan ran out)."""
        nonlocal handed
        for problem in problems:
            left = budget_s - (time.monotonic() - t_start)
            if left < 0:
                return None
            pool_s = executor.pool_compile_s
            if len(in_play) < len(epilogues) and pool_s and pool_s <= EPILOGUE_COMPILE_SHARE * left:
                in_play.append(epilogues[len(in_play)])     # read by the next draw
            if max_problems is not None and handed >= max_problems:
                return None
            ids = None if recorded is None else recorded.get((*problem.shape, problem.epilogue), frozenset())
            chosen, sub_rng = shape_configs(pool, spec, problem, seed, configs_per_shape, ids)
            todo = [c for c in chosen if measurement_key(spec.slug, fam, problem, c.config_id, protocol,
                                                         template) not in done]
            res.skipped += len(chosen) - len(todo)
            if todo:
                handed += 1
                return Task(problem, todo, int(sub_rng.integers(len(todo))))
        return None

    def write(problem, rows):
        with sw.phase("write"), sigint_deferred():          # a part on disk is in the Ctrl-C summary
            res.parts.append(write_part(rows, out_dir))
            written.extend(rows)
            for r in rows:
                done.add(measurement_key(spec.slug, fam, problem, r["config_id"], protocol, template))
                if r["status"] == "ok":
                    res.rows_valid += 1
                    spreads.append((r["time_us_p80"] - r["time_us_p20"]) / r["time_us"])
            res.rows_written += len(rows)
            res.problems_done += 1

    bar = executor.progress_bar() if progress else None
    try:
        while not executor.stopped:
            while executor.free():
                task = next_task()
                if task is None:
                    break
                executor.submit(task)
            if not executor.busy():
                break
            finished = executor.wait()
            for task, rows, _ in finished:
                write(task.problem, rows)
            executor.show(sum(measured for *_, measured in finished))
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
        shapes = [Problem(*s, dtype, layout).shape for s in shapes]
    return fam, epilogues, active, shapes, max_problems


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


COMPILE_BATCH = 64
"""Configs a CPU collection compiles in one call when it compiles the rest
of its pool, a batch only where it is expected to end inside the budget (so
a pool of thousands does not compile past the budget before the first
problem is measured)."""


class LocalExecutor(Executor):
    """Measures on ``backend`` in this process, one task at a time: the
    pool is compiled once per epilogue, at the first task that needs it
    (in background threads while the device measures, where the backend
    overlaps compilation), then timed by :func:`measure_rows`. A lost device
    (:class:`~costlearn.collect.measure.DeviceLost`) stops the collection;
    everything measured before is on disk, and a rerun resumes in a fresh
    process."""

    def __init__(self, backend: Backend):
        self.backend, self.spec = backend, backend.spec
        self.stopped, self.pool_compile_s = "", 0.0
        self._task, self._compiled, self._futures, self._threads = None, {}, {}, None

    def check_family(self, family) -> None:
        if family.name not in self.backend.families:
            raise ValueError(f"the {self.backend.name!r} backend runs the families {list(self.backend.families)}, "
                             f"not {family.name!r}")

    def recorded(self, family: str, dtype: str, layout: str) -> dict | None:
        return self.backend.recorded(family, dtype, layout)

    def template_hash(self, family) -> str:
        return self.backend.provenance().get("template_hash", family.template_hash)

    def open(self, run: Run) -> None:
        self.run = run
        self.prov = self.backend.provenance()
        self.overhead_us = self.backend.launch_overhead_us()
        # Overlapping compilation with measurement helps on a GPU; on a CPU
        # device the compiler would compete with the kernels being timed.
        if getattr(self.backend, "overlap_compile", False):
            self._threads = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1))

    def progress_bar(self):
        # a bar on a terminal; in a log, a line at least every EVERY_S seconds
        self.bar = progress_bar(int(self.run.budget_s), f"collect {self.spec.slug}", "s",
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s{postfix}")
        return self.bar

    def free(self) -> bool:
        return self._task is None

    def submit(self, task: Task) -> None:
        self._task = task

    def busy(self) -> bool:
        return self._task is not None

    def wait(self) -> list:
        task, self._task = self._task, None
        run, problem = self.run, task.problem
        with run.stopwatch.phase("compile"):
            self._compile([c for c in task.configs if (c.config_id, problem.epilogue) not in self._compiled],
                          problem.epilogue)
        kernels = [self._compiled[c.config_id, problem.epilogue] for c in task.configs]
        with run.stopwatch.phase("measure"):
            try:
                rows = measure_rows(self.backend, kernels, problem, run.protocol, self.overhead_us, self.prov,
                                    run.run_id, run.seed, repeat_index=task.repeat_index)
            except DeviceLost as e:
                # Everything measured before this problem is on disk; a
                # rerun resumes here in a fresh process.
                self.stopped = f"stopped at shape {problem.shape} ({problem.epilogue}): {e}"
                return []
        return [(task, rows, True)]

    def _compile(self, missing: list, epi: str) -> None:
        """Compile ``missing`` configs for ``epi`` (and the rest of the pool
        at the epilogue's first need, on a CPU while the budget lasts),
        noting the pool's compile time (estimated from the part compiled)."""
        pool, dtype = self.run.pool, self.run.dtype
        if missing and self._threads is not None:
            first = not any(e == epi for _, e in self._futures)
            if first:
                # Compile the whole pool in background threads while the
                # device measures; each problem waits only for its own configs.
                self._futures.update({(c.config_id, epi): self._threads.submit(self.backend.compile, c, dtype, epi)
                                      for c in pool})
            t_pool = time.monotonic()
            for c in missing:
                self._compiled[c.config_id, epi] = self._futures[c.config_id, epi].result()
            if first:
                self.pool_compile_s = max(self.pool_compile_s, time.monotonic() - t_pool)
        elif missing:
            first = not any(e == epi for _, e in self._compiled)
            if first and self.bar is not None:
                self.bar.set_postfix_str(f"compiling {len(pool)} configs ({epi})", refresh=True)
            t_pool = time.monotonic()
            head = list(pool) if first and len(pool) <= COMPILE_BATCH else missing
            self._compile_now(head, epi)
            if first:
                # First need of this epilogue: compile the rest of the pool too, in batches a backend can
                # parallelise, each only where it is expected to end inside the budget at the slowest rate
                # seen per config (a config left out compiles when a problem needs it).
                rest = [c for c in pool if (c.config_id, epi) not in self._compiled]
                per_config_s = (time.monotonic() - t_pool) / max(len(head), 1)
                while rest:
                    batch = rest[:max(COMPILE_BATCH, len(missing))]
                    left_s = self.run.budget_s - (time.monotonic() - self.run.t_start)
                    if per_config_s * len(batch) > left_s:
                        break
                    t0 = time.monotonic()
                    self._compile_now(batch, epi)
                    per_config_s = max(per_config_s, (time.monotonic() - t0) / len(batch))
                    rest = rest[len(batch):]
                done = sum(e == epi for _, e in self._compiled)
                self.pool_compile_s = max(self.pool_compile_s, per_config_s * len(pool) if rest else
                                          (time.monotonic() - t_pool) * len(pool) / done)

    def _compile_now(self, configs: list, epi: str) -> None:
        """Compile ``configs`` for ``epi`` in one call (the backend may parallelise it)."""
        for kern in self.backend.compile_many(configs, self.run.dtype, epilogue=epi):
            self._compiled[kern.config.config_id, epi] = kern

    def show(self, measured: int) -> None:
        if self.bar is None or not measured:
            return
        res, elapsed, budget_s = self.run.result, time.monotonic() - self.run.t_start, self.run.budget_s
        self.bar.n = min(int(elapsed), int(budget_s))
        self.bar.set_postfix_str(f"problems={res.problems_done} rows={res.rows_written} "
                                 f"valid={res.rows_valid / max(res.rows_written, 1):.0%} "
                                 f"left={max(0.0, budget_s - elapsed):.0f}s", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)


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
    shapes : list of (int, int, int), optional
        Measure these shapes (in order) instead of random ones; with
        ``strategy="prior"``, the user's shapes the prior starts from; with
        ``"active"``, the only shapes it chooses among.
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


def dataset_summary(folder) -> str:
    """One-paragraph summary of a dataset folder: rows, valid rows, shapes,
    configs, devices, quarantined and corrupt parts."""
    df, rep = load(folder)
    v = valid_rows(df)
    shapes = v[["m", "n", "k"]].drop_duplicates()
    return (f"{len(df)} rows ({len(v)} valid) over {len(shapes)} shapes and "
            f"{v['config_id'].nunique()} configs; devices: {sorted(df['device_slug'].unique())}; "
            f"{rep.summary()}")
