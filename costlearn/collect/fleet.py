"""Collection across a fleet: one plan of problems handed out over a Ray
cluster to one worker per device, the rows written by this (the driver)
process into one dataset folder exactly as :func:`costlearn.collect.loop.collect`
writes them.

Nothing here schedules jobs across machines itself (design.md, "Scale"):
Ray places the workers (:class:`~costlearn.collect.fleet_worker.FleetWorker`,
one Ray actor each, holding its own backend). The plan, the resume keys, the
parts and the summary are the local collection's: :func:`collect_fleet` runs
:func:`costlearn.collect.loop.run_collection` with a :class:`FleetExecutor`,
which hands each problem (its epilogue included) to an idle worker; a worker
compiles the candidate pool once per epilogue, then measures one problem at a
time with the local collection's protocol. So a fleet run and a local run of
one seed walk the same problems and resume each other, and a killed driver
leaves a folder that loads.

A worker lost mid-problem (its process killed, its machine gone, its device
lost) loses only that problem: it is handed out once more, to a replacement
worker or another one; lost a second time it is recorded as failed rows
(status ``launch_error``, the error naming the lost workers).

Ray is an optional dependency (``pip install 'costlearn[ray]'``): importing
this module never needs it; :func:`start_fleet` raises
:class:`FleetUnavailable` with the install hint where it is missing.
"""
from __future__ import annotations

import functools
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from costlearn.collect.executor import Executor
from costlearn.collect.fleet_worker import FleetWorker, lost_rows
from costlearn.collect.loop import run_collection
from costlearn.collect.measure import DeviceLost
from costlearn.collect.plan import problems_limit
from costlearn.collect.summary import CollectResult
from costlearn.core.registry import Unavailable
from costlearn.core.checks import check_instance, check_int, check_real
from costlearn.core.progress import progress_bar
from costlearn.core.version import __version__

__all__ = ["Fleet", "FleetResult", "FleetUnavailable", "FleetWorker", "RAY_HINT", "GPU_BACKENDS", "start_fleet",
           "collect_fleet", "check_same_device", "lost_rows", "FleetExecutor"]

RAY_HINT = "pip install 'costlearn[ray]'  (Ray >= 2.9, on the driver and on every worker machine)"
"""How to install what :func:`start_fleet` needs."""

GPU_BACKENDS = ("cuda", "triton")
"""Backends whose workers each take one GPU of the cluster (``num_gpus=1``)."""


class FleetUnavailable(Unavailable):
    """Ray is not installed, or the cluster cannot run the workers asked for."""


def _ray():
    """The ``ray`` module, imported on first use."""
    try:
        import ray
    except ImportError as e:
        raise FleetUnavailable(f"collecting on a fleet needs Ray, which is not importable here ({e}); "
                               f"install it: {RAY_HINT}") from e
    return ray


# --- the fleet (driver side) ----------------------------------------------------

@dataclass
class _Member:
    """Driver-side record of one worker: its actor, what it said about
    itself (``info``) and, per epilogue it compiled the pool for, its
    compile facts (``facts``, :meth:`FleetWorker.prepare`)."""

    index: int
    actor: object
    info: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        where = f" (pid {self.info['pid']} on {self.info['host']})" if self.info else ""
        return f"worker {self.index}{where}"

    @property
    def spec(self):
        return self.info["spec"]


def check_same_device(reference: tuple, other: tuple) -> None:
    """Refuse two workers of different device classes in one run.

    Parameters
    ----------
    reference, other : (str, DeviceSpec)
        A worker's name and the device it measures; ``reference`` is the
        fleet's first worker.

    Raises
    ------
    ValueError
        If the devices differ in class (:attr:`DeviceSpec.slug`) or in an
        identity field (:meth:`DeviceSpec.differences`); the message names
        both workers and both devices.
    """
    (name0, ref), (name, spec) = reference, other
    diff = ([f"class {ref.slug!r} != {spec.slug!r}"] if spec.slug != ref.slug else []) + ref.differences(spec)
    if diff:
        raise ValueError(f"{name} measures {spec.name!r} ({spec.slug}) but {name0} measures {ref.name!r} "
                         f"({ref.slug}); one fleet run collects one device class ({'; '.join(diff)}): start "
                         "one run per device class, each with workers on machines of that class only")


class Fleet:
    """Workers of one device class on a Ray cluster, started and checked by
    :func:`start_fleet`; :func:`collect_fleet` hands them problems. A context
    manager: leaving it stops the workers (and the Ray instance, when
    :func:`start_fleet` started it).

    Attributes
    ----------
    spec : DeviceSpec
        The device every worker measures (the first worker's).
    reference : str
        The first worker's name (whose device the others are checked against).
    members : list
        The workers alive (driver-side records).
    asked : int
        Workers asked for.
    backend : str
        Backend name the workers run (``"custom"`` for a callable).
    ray : module
        The ``ray`` module the workers were started with.
    start_timeout_s : float
        Seconds a replacement worker may take to start.
    """

    def __init__(self, ray, actor_cls, backend, members: list, asked: int, started_ray: bool,
                 start_timeout_s: float):
        self.ray, self._actor_cls, self._backend = ray, actor_cls, backend
        self.members = list(members)
        self.asked = int(asked)
        self.backend = backend if isinstance(backend, str) else "custom"
        self._started_ray = started_ray
        self.start_timeout_s = float(start_timeout_s)
        self._next_index = 1 + max((m.index for m in members), default=-1)
        self.spec = members[0].spec
        self.reference = members[0].name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"Fleet({len(self.members)} {self.backend} workers of {self.spec.name!r} ({self.spec.slug}))"

    def new_member(self) -> _Member:
        """Start one more worker (a replacement); its actor is created, not
        yet described."""
        member = _Member(self._next_index, self._actor_cls.remote(self._backend, self._next_index))
        self._next_index += 1
        return member

    def drop(self, member: _Member) -> None:
        """Stop one worker (killed, if still running) and forget it."""
        self.ray.kill(member.actor)         # a no-op for an actor already dead
        if member in self.members:
            self.members.remove(member)

    def close(self) -> None:
        """Stop every worker; shut Ray down if :func:`start_fleet` started it."""
        for m in list(self.members):
            self.drop(m)
        if self._started_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self._started_ray = False


def start_fleet(backend="auto", *, workers: int | None = None, address: str | None = None, gpu: bool | None = None,
                start_timeout_s: float = 300.0) -> Fleet:
    """Connect to a Ray cluster and start one worker per device asked for.

    Parameters
    ----------
    backend : str or callable
        Backend each worker opens (``"auto"``, ``"cuda"``, ``"opencl"``,
        ``"triton"``), or a callable taking the worker's index and returning
        a Backend (run in the worker: test doubles).
    workers : int, optional
        Workers to start. Default: one per GPU of the cluster for GPU
        workers, one per node (machine) of the cluster for CPU workers.
    address : str, optional
        The cluster (``ray.init(address=...)``: ``"host:6379"``, ``"auto"``,
        ``"ray://host:10001"``); default: the running cluster this machine
        knows (``RAY_ADDRESS``, a ``ray start`` here), else a new local one.
        Ignored when Ray is already initialised in this process.
    gpu : bool, optional
        Whether each worker takes one GPU (``num_gpus=1``); else one CPU.
        Default: yes for :data:`GPU_BACKENDS`, and for ``"auto"`` when the
        cluster has GPUs.
    start_timeout_s : float
        Seconds to wait for the workers to be placed and open their device.

    Returns
    -------
    Fleet

    Raises
    ------
    FleetUnavailable
        If Ray is not installed (with the install hint), or the cluster has
        fewer GPUs or CPUs than the workers asked for, or they did not
        start within ``start_timeout_s``.
    ValueError
        If ``workers`` < 1, or two workers measure different device classes
        (:func:`check_same_device`; both named).
    """
    if workers is not None:
        workers = check_int("workers", workers, 1)
    start_timeout_s = check_real("start_timeout_s", start_timeout_s, 0, strict=True)
    ray = _ray()
    started = False
    if not ray.is_initialized():
        ray.init(address=address, logging_level=logging.WARNING)
        started = True
    members: list = []
    try:
        res = ray.cluster_resources()
        gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
        if gpu is None:
            gpu = backend in GPU_BACKENDS or (backend == "auto" and gpus > 0)
        if gpu and gpus == 0:
            raise FleetUnavailable(f"the {backend!r} backend's workers each need a GPU, and the Ray cluster has none "
                                   f"(resources: {dict(res)}); start GPU machines into it (`ray start "
                                   "--address=...`), or collect on CPU OpenCL workers (--device opencl)")
        if workers is None:
            workers = gpus if gpu else max(1, sum(1 for n in ray.nodes() if n.get("Alive")))
        have, kind = (gpus, "GPU") if gpu else (cpus, "CPU")
        if workers > have:
            raise FleetUnavailable(f"{workers} {kind} workers asked for, but the Ray cluster has {have} {kind}s "
                                   f"(resources: {dict(res)}); start more machines into it (`ray start "
                                   "--address=...`) or ask for fewer (--workers)")
        opts = dict(num_gpus=1, num_cpus=1) if gpu else dict(num_cpus=1)
        actor_cls = ray.remote(FleetWorker).options(scheduling_strategy="SPREAD", max_restarts=0, **opts)
        members = [_Member(i, actor_cls.remote(backend, i)) for i in range(workers)]
        refs = [m.actor.describe.remote() for m in members]
        try:
            infos = ray.get(refs, timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise FleetUnavailable(f"{workers} {kind} workers did not start within {start_timeout_s:.0f} s "
                                   f"(cluster resources: {dict(res)})") from None
        except ray.exceptions.RayTaskError as e:
            raise _cause(e) from None
        except ray.exceptions.RayActorError as e:
            raise FleetUnavailable(f"a {kind} worker could not start: {e}"[:2000]) from None
        for m, info in zip(members, infos):
            m.info = info
        for m in members[1:]:
            check_same_device((members[0].name, members[0].spec), (m.name, m.spec))
        fleet = Fleet(ray, actor_cls, backend, members, workers, started, start_timeout_s)
    except BaseException:
        for m in members:
            ray.kill(m.actor)
        if started:
            ray.shutdown()
        raise
    return fleet


def _cause(e: BaseException) -> BaseException:
    """The exception raised inside a worker, for a Ray task error."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


# --- collecting -------------------------------------------------------------------

@dataclass
class FleetResult(CollectResult):
    """Summary of one :func:`collect_fleet` call: a
    :class:`~costlearn.collect.summary.CollectResult` (``seconds`` has ``start``:
    starting the workers and compiling, ``write`` and ``total``) plus what
    the fleet did.

    Attributes
    ----------
    folder : Path or None
        The dataset folder written.
    workers : list of str
        Every worker that measured or was started in the call.
    lost : list of str
        One entry per lost problem: the problem, the worker lost with it,
        why, and what became of the problem (handed out again, or recorded
        as failed rows when lost twice).
    failed : list of (int, int, int)
        Shapes of the problems lost twice, recorded as ``launch_error`` rows.
    replacements : int
        Workers started to replace lost ones.
    problems_planned, rows_planned : int
        Problems handed out (a lost one counted once) and the rows they
        were to measure.
    notes : list of str
        Replacement workers that were refused (another device class) or did
        not start.
    """

    folder: Path | None = None
    workers: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    replacements: int = 0
    problems_planned: int = 0
    rows_planned: int = 0
    notes: list = field(default_factory=list)


def _named(problem) -> str:
    """A problem as the fleet's notes name it: its shape, and its epilogue
    when it has one."""
    return str(problem.shape) + ("" if problem.epilogue == "none" else f" ({problem.epilogue})")


class FleetExecutor(Executor):
    """Measures a collection's tasks on the workers of ``fleet``
    (:class:`~costlearn.collect.executor.Executor`): one task per idle worker at
    a time. Each worker compiles the pool for the first epilogue when the
    collection opens, and for another epilogue before its first task of
    it (:meth:`FleetWorker.prepare`). A worker lost with a task in flight
    (its process, machine or device) is replaced and the task handed out
    once more, first; lost a second time, the task's rows are
    :func:`lost_rows`. A replacement of another device class is refused
    (:func:`check_same_device`) and noted in the :class:`FleetResult`.
    """

    def __init__(self, fleet: Fleet):
        self.fleet, self.ray, self.spec = fleet, fleet.ray, fleet.spec
        self.pool_compile_s, self.ready_s = 0.0, None
        # pending: object ref -> (stage, member, task); stages: describe, prepare, measure.
        self.pending, self.started_at, self.idle, self.retry = {}, {}, deque(), deque()
        ex = self.ray.exceptions
        self.lost_errors = (ex.RayActorError, ex.WorkerCrashedError, ex.ObjectLostError)

    @property
    def stopped(self) -> str:
        if self.pending or self.fleet.members:
            return ""
        left = f"; {[t.problem.shape for t in self.retry]} were lost once and not measured" if self.retry else ""
        return f"every worker was lost{left}"

    def check_family(self, family) -> None:
        for m in self.fleet.members:
            if family.name not in m.info["families"]:
                raise ValueError(f"{m.name} runs the {m.info['backend']!r} backend, which runs the families "
                                 f"{list(m.info['families'])}, not {family.name!r}")

    def open(self, run) -> None:
        self.run, self.res = run, run.result
        self.pool_ids = [c.config_id for c in run.pool]
        self.res.workers = [m.name for m in self.fleet.members]
        for m in self.fleet.members:
            self._prepare(m, run.epilogues[0])

    def progress_bar(self):
        # a bar on a terminal; in a log, a line at least every EVERY_S seconds
        self.bar = progress_bar(self.run.total, f"fleet {self.spec.slug}", "problem")
        return self.bar

    def _prepare(self, member, epilogue: str, task=None) -> None:
        """Have ``member`` compile the pool for ``epilogue``, then measure ``task`` (if any)."""
        ref = member.actor.prepare.remote(self.run.family.name, self.run.dtype, self.pool_ids, epilogue)
        self.pending[ref] = ("prepare", member, task)

    def _dispatch(self, member, task) -> None:
        run, problem = self.run, task.problem
        if problem.epilogue not in member.facts:
            self._prepare(member, problem.epilogue, task)
            return
        ref = member.actor.measure.remote(problem.shape, run.dtype, run.layout, [c.config_id for c in task.configs],
                                          task.repeat_index, run.protocol, run.run_id, run.seed, problem.epilogue)
        self.pending[ref] = ("measure", member, task)

    def free(self) -> bool:
        while self.idle and self.retry:             # a lost task goes out again first
            self._dispatch(self.idle.popleft(), self.retry.popleft())
        return bool(self.idle)

    def submit(self, task) -> None:
        self.res.problems_planned += 1
        self.res.rows_planned += len(task.configs)
        self._dispatch(self.idle.popleft(), task)

    def busy(self) -> bool:
        return bool(self.pending)

    def _replace(self, lost) -> None:
        self.fleet.drop(lost)
        member = self.fleet.new_member()
        self.res.replacements += 1
        ref = member.actor.describe.remote()
        self.pending[ref] = ("describe", member, None)
        self.started_at[ref] = time.monotonic()

    def _lose(self, member, task, why: str) -> list:
        """A worker died (or its device did) with ``task`` in flight; returns
        the task's lost rows when this was its second loss."""
        run, res = self.run, self.res
        task.lost_on.append(member.name)
        again = len(task.lost_on) < 2
        res.lost.append(f"{_named(task.problem)} on {member.name}: {why}; "
                        + (f"handed out again ({len(task.configs)} configs)" if again
                           else "lost twice: recorded as launch_error rows"))
        facts = member.facts.get(task.problem.epilogue, {})
        self._replace(member)
        if again:
            self.retry.appendleft(task)
            return []
        res.failed.append(task.problem.shape)
        msg = (f"not measured: lost twice, with {task.lost_on[0]} and then {task.lost_on[1]} ({why})")[:500]
        rows = lost_rows(task.problem, [c.config_id for c in task.configs], facts, run.family.name, run.protocol,
                         member.info["provenance"], member.info["overhead_us"], run.run_id, msg)
        return [(task, rows, False)]

    def wait(self) -> list:
        ray, fleet, res, fam = self.ray, self.fleet, self.res, self.run.family
        finished = []
        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=1.0)
        now = time.monotonic()
        for ref in [r for r in self.started_at if r not in ready and now - self.started_at[r] > fleet.start_timeout_s]:
            _, member, _ = self.pending.pop(ref)
            self.started_at.pop(ref)
            fleet.drop(member)
            res.notes.append(f"{member.name} (a replacement) did not start within {fleet.start_timeout_s:.0f} s")
        for ref in ready:
            stage, member, task = self.pending.pop(ref)
            self.started_at.pop(ref, None)
            try:
                value = ray.get(ref)
            except self.lost_errors as e:
                if task is not None:
                    finished += self._lose(member, task, f"{member.name} was lost ({type(e).__name__})")
                else:
                    fleet.drop(member)
                    res.notes.append(f"{member.name} was lost while starting ({type(e).__name__})")
                continue
            except ray.exceptions.RayTaskError as e:
                cause = _cause(e)
                if task is not None and isinstance(cause, DeviceLost):
                    finished += self._lose(member, task, f"the device of {member.name} was lost: {cause}"[:300])
                    continue
                if stage == "describe":              # a replacement that cannot open its device
                    fleet.drop(member)
                    res.notes.append(f"{member.name} (a replacement) did not start: {cause}"[:500])
                    continue
                raise cause from None
            if stage == "describe":
                member.info = value
                try:
                    check_same_device((fleet.reference, self.spec), (member.name, member.spec))
                except ValueError as e:
                    fleet.drop(member)
                    res.notes.append(f"replacement refused: {e}")
                    continue
                fleet.members.append(member)
                res.workers.append(member.name)
                self._prepare(member, self.run.epilogues[0])
            elif stage == "prepare":
                if value["template_hash"] != fam.template_hash:
                    raise ValueError(f"{member.name} runs {fam.name} kernel template {value['template_hash']} "
                                     f"(costlearn {member.info['costlearn_version']}), this process "
                                     f"{fam.template_hash} (costlearn {__version__}); install the same "
                                     "costlearn on every machine")
                member.facts[value["epilogue"]] = value["facts"]
                self.pool_compile_s = max(self.pool_compile_s, value["compile_s"])
                if task is not None:
                    self._dispatch(member, task)
                    continue
                self.idle.append(member)
                if self.ready_s is None:
                    self.ready_s = time.monotonic() - self.run.t_start
            else:
                self.idle.append(member)
                finished.append((task, value, True))
        return finished

    def show(self, measured: int) -> None:
        if self.bar is not None:
            self.bar.update(measured)
            self.bar.set_postfix_str(_progress_text(self.res, self.fleet, self.run.t_start, self.ready_s,
                                                    self.run.budget_s, self.bar.total), refresh=True)

    def seconds(self, phases: dict) -> dict:
        return dict(start=self.ready_s if self.ready_s is not None else time.monotonic() - self.run.t_start,
                    write=phases.get("write", 0.0))


def collect_fleet(fleet: Fleet, out_dir, *, budget_s: float = 180.0, family: str = "gemm", dtype: str = "float32",
                  layout: str = "NN", pool_size: int = 64, configs_per_shape: int = 48, bounds=None, protocol=None,
                  seed: int = 0, max_problems: int | None = None, shapes: list | None = None,
                  pool: list | None = None, progress: bool = True, epilogues=("none",),
                  max_shapes: int | None = None, strategy: str = "random",
                  active=None) -> FleetResult:
    """Measure one plan of problems x pool configs on every worker of
    ``fleet`` into ``out_dir``: the settings, the plan and the rows are those
    of :func:`costlearn.collect.loop.collect` with the same arguments (the
    same loop, :func:`~costlearn.collect.loop.run_collection`, with a
    :class:`FleetExecutor`); each problem is measured by one worker, once.

    Parameters
    ----------
    fleet : Fleet
        Started workers (:func:`start_fleet`).
    out_dir : path
        Dataset folder (``<data>/<fleet.spec.slug>/`` by convention); created
        if missing; ``device.json`` and ``pools.json`` are written as a local
        collection writes them, and one Parquet part per problem.
    budget_s : float
        Wall-clock budget, seconds; no new problem is handed out after it
        (problems in flight, and lost ones handed out again, are finished).
    family, dtype, layout : str
    pool_size, configs_per_shape : int
    bounds : ShapeBounds, optional
        Default: :meth:`ShapeBounds.for_device` of ``fleet.spec``.
    protocol : Protocol, optional
    seed : int
        Seed of the pool, the problems drawn and the config subsets.
    max_problems : int, optional
        Hand out at most this many problems in this call (``max_shapes``,
        its old name, still works with a DeprecationWarning).
    shapes : list of (int, int, int), optional
        The plan; default: problems drawn as :func:`collect` draws them.
    pool : list of configs, optional
        Candidate pool instead of drawing one (``pool_size`` is then ignored).
    progress : bool
        The progress on stderr, a bar on a terminal, else a line at least
        every :data:`costlearn.core.progress.EVERY_S` seconds: problems done,
        valid rows, workers alive, time left.
    epilogues : sequence of str
        As :func:`collect`'s: each random shape with one of them drawn for
        it, each given shape with every one; a worker compiles the pool for
        an epilogue before its first problem of it.
    strategy : {"random", "prior", "active"}
    active : costlearn.collect.active_shapes.ActiveSettings, optional
        As :func:`collect`'s: the fleet measures the problems the strategy
        chooses (``active`` refits on the rows the workers have returned).

    Returns
    -------
    FleetResult

    Raises
    ------
    ValueError, TypeError
        As :func:`collect` for a bad setting or shape; ValueError if a
        worker's backend does not run ``family``, or a worker runs another
        kernel template than this process (another costlearn). A
        replacement worker of another device class is refused and noted
        (:attr:`FleetResult.notes`), not raised.
    costlearn.collect.summary.CollectionInterrupted
        On Ctrl-C (every problem finished before it is on disk).
    """
    check_instance("fleet", fleet, Fleet, "a costlearn.collect.fleet.Fleet (start_fleet)")
    return run_collection(FleetExecutor(fleet), out_dir, budget_s=budget_s, family=family, dtype=dtype,
                          layout=layout, pool_size=pool_size, configs_per_shape=configs_per_shape, bounds=bounds,
                          protocol=protocol, seed=seed, max_problems=problems_limit(max_problems, max_shapes),
                          shapes=shapes, pool=pool, progress=progress, epilogues=epilogues,
                          result=functools.partial(FleetResult, folder=Path(out_dir)), strategy=strategy,
                          active=active)


def _progress_text(res: FleetResult, fleet: Fleet, t_start: float, ready_s, budget_s: float, total) -> str:
    """The progress bar's postfix: valid rows, workers alive, time left
    (from the rate so far when the plan's size is known, else the budget)."""
    elapsed = time.monotonic() - t_start
    left = budget_s - elapsed
    if total and res.problems_done and ready_s is not None:
        rate_s = max(elapsed - ready_s, 1e-9) / res.problems_done
        left = min(left, (total - res.problems_done) * rate_s)
    left_text = "?" if not math.isfinite(left) else f"{max(0.0, left):.0f}s"
    return (f"rows={res.rows_written} valid={res.rows_valid / max(res.rows_written, 1):.0%} "
            f"workers={len(fleet.members)}/{fleet.asked} left={left_text}")
