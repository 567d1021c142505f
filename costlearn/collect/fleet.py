"""Collection across a fleet: one plan of problems handed out over a Ray
cluster to one worker per device, the rows written by this (the driver)
process into one dataset folder exactly as :func:`costlearn.collect.loop.collect`
writes them.

Nothing here schedules jobs across machines itself (design.md, "Scale"):
Ray places the workers, one Ray actor each, holding its own backend; this
module keeps the plan. A worker compiles its candidate pool once, then
measures one problem at a time with the local collection's protocol
(:func:`costlearn.collect.loop.measure_rows`); the driver chooses each problem's
configs (:func:`costlearn.collect.loop.shape_configs`), skips what the folder
already holds (:func:`costlearn.collect.dataset.measured_keys`) and writes one
atomic part per problem (:func:`costlearn.collect.dataset.write_part`). So a fleet
run and a local run of one seed walk the same problems and resume each
other, and a killed driver leaves a folder that loads.

A worker lost mid-problem (its process killed, its machine gone, its device
lost) loses only that problem: it is handed out once more, to a replacement
worker or another one; lost a second time it is recorded as failed rows
(status ``launch_error``, the error naming the lost workers).

Ray is an optional dependency (``pip install 'costlearn[ray]'``): importing
this module never needs it; :func:`start_fleet` raises
:class:`FleetUnavailable` with the install hint where it is missing.
"""
from __future__ import annotations

import logging
import math
import os
import socket
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.backends import get_backend
from costlearn.collect.backends.base import CompiledKernel
from costlearn.collect.loop import (
    CollectionInterrupted,
    CollectResult,
    measure_rows,
    measurement_key,
    open_collection,
    rows_for,
    shape_configs,
)
from costlearn.collect.dataset import noise_floor, write_part
from costlearn.families import get_family
from costlearn.collect.measure import DeviceLost, Protocol, measure_shape
from costlearn.core.problem import Problem
from costlearn.core.registry import Unavailable
from costlearn.collect.sampler import ShapeBounds, iter_shapes
from costlearn.core.util import check_instance, check_int, check_real
from costlearn.core.version import __version__

__all__ = ["Fleet", "FleetResult", "FleetUnavailable", "FleetWorker", "RAY_HINT", "GPU_BACKENDS", "start_fleet",
           "collect_fleet", "check_same_device", "lost_rows"]

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


# --- the worker (runs inside a Ray actor) -------------------------------------

class FleetWorker:
    """One device of a fleet: its backend, its compiled candidate pool, and
    the measurement of one problem at a time. Runs inside a Ray actor
    (:func:`start_fleet` wraps it); plain Python otherwise, so it can be
    tested without Ray.

    Parameters
    ----------
    backend : str or callable
        A backend name (:func:`costlearn.collect.backends.get_backend`), or a callable
        taking this worker's index and returning a Backend (called in the
        worker's process: a test double, or a backend with settings).
    index : int
        This worker's number in its fleet (replacements get new numbers).
    """

    def __init__(self, backend, index: int):
        self.index = int(index)
        self._make = backend
        self.backend = None
        self._kernels: dict = {}
        self._overhead_us = None
        self._prov = None

    def describe(self) -> dict:
        """Open the backend (first call) and say who this worker is: ``spec``
        (DeviceSpec), ``provenance`` (the backend's row columns),
        ``overhead_us`` (launch-overhead floor, microseconds), ``families``,
        ``backend`` (its name), ``host``, ``pid``, ``costlearn_version``.

        Raises
        ------
        costlearn.collect.backends.BackendUnavailable, ValueError
            As :func:`costlearn.collect.backends.get_backend` (raised here rather than
            at construction, so the driver receives the backend's own error).
        """
        if self.backend is None:
            self.backend = self._make(self.index) if callable(self._make) else get_backend(self._make)
        be = self.backend
        self._prov = be.provenance()
        self._overhead_us = float(be.launch_overhead_us())
        return dict(spec=be.spec, provenance=self._prov, overhead_us=self._overhead_us,
                    families=tuple(be.families), backend=be.name, host=socket.gethostname(), pid=os.getpid(),
                    costlearn_version=__version__)

    def prepare(self, family: str, dtype: str, config_ids: list) -> dict:
        """Compile the candidate pool once (``backend.compile_many``).

        Returns
        -------
        dict
            ``facts``: config_id -> (status, error, registers_per_thread,
            compile_s) of each compiled config; ``template_hash`` of the
            family here; ``compile_s``, wall seconds.
        """
        fam = get_family(family)
        t0 = time.monotonic()
        kernels = self.backend.compile_many([fam.config_from_id(c) for c in config_ids], dtype)
        self._kernels = {k.config.config_id: k for k in kernels}
        facts = {cid: (k.status, k.error, k.registers_per_thread, k.compile_s) for cid, k in self._kernels.items()}
        return dict(facts=facts, template_hash=fam.template_hash, compile_s=time.monotonic() - t0)

    def measure(self, shape: tuple, dtype: str, layout: str, config_ids: list, repeat_index: int, protocol,
                run_id: str, seed: int) -> list[dict]:
        """Measure the pool configs ``config_ids`` on one problem, as a local
        collection does (:func:`costlearn.collect.loop.measure_rows`); returns its
        dataset rows.

        Raises
        ------
        costlearn.collect.measure.DeviceLost
            If the device fails in a way that persists (the driver then
            treats this worker as lost).
        """
        if self._prov is None:
            self.describe()
        problem = Problem(*shape, dtype, layout)
        kernels = [self._kernels[c] for c in config_ids]
        return measure_rows(self.backend, kernels, problem, protocol, self._overhead_us, self._prov, run_id, seed,
                            repeat_index=repeat_index)


# --- the fleet (driver side) ----------------------------------------------------

@dataclass
class _Member:
    """Driver-side record of one worker: its actor and what it said about itself."""

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
    :class:`~costlearn.collect.loop.CollectResult` (``seconds`` has ``start``:
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
        Problems lost twice, recorded as ``launch_error`` rows.
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


@dataclass
class _Task:
    """One problem handed out: its configs to measure and the one timed twice."""

    problem: object
    config_ids: list
    repeat_index: int
    lost_on: list = field(default_factory=list)


def lost_rows(problem, config_ids: list, facts: dict, family: str, protocol, prov: dict, overhead_us: float,
              run_id: str, why: str) -> list[dict]:
    """Dataset rows recording that ``problem`` could not be measured: one
    per config, status ``launch_error`` with ``why`` as the error (a config
    that failed to compile keeps its ``compile_error``), no time.

    Parameters
    ----------
    problem : Problem
    config_ids : list of str
    facts : dict
        config_id -> (status, error, registers_per_thread, compile_s), from
        :meth:`FleetWorker.prepare`.
    family : str
    protocol : Protocol
    prov : dict
        Provenance columns of the worker that was lost.
    overhead_us : float
        That worker's launch-overhead floor, microseconds.
    run_id, why : str
    """
    fam = get_family(family)
    kernels = []
    for cid in config_ids:
        status, error, regs, compile_s = facts.get(cid, ("ok", "", None, 0.0))
        kernels.append(CompiledKernel(fam.config_from_id(cid), "compile_error" if status == "compile_error"
                                      else "launch_error", error if status == "compile_error" else why,
                                      regs, compile_s))
    # No kernel has status "ok", so measure_shape only shapes the rows (the
    # workspace is never used).
    results = measure_shape(None, kernels, protocol)
    return rows_for(results, {k.config.config_id: k for k in kernels}, problem, protocol, prov, {}, overhead_us,
                    run_id)


def collect_fleet(fleet: Fleet, out_dir, *, budget_s: float = 180.0, family: str = "gemm", dtype: str = "float32",
                  layout: str = "NN", pool_size: int = 64, configs_per_shape: int = 48, bounds=None, protocol=None,
                  seed: int = 0, max_shapes: int | None = None, shapes: list | None = None, pool: list | None = None,
                  progress: bool = True) -> FleetResult:
    """Measure one plan of problems x pool configs on every worker of
    ``fleet`` into ``out_dir``: the settings, the plan and the rows are those
    of :func:`costlearn.collect.loop.collect` with the same arguments; each
    problem is measured by one worker, once.

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
    max_shapes : int, optional
        Hand out at most this many problems in this call.
    shapes : list of (int, int, int), optional
        The plan; default: problems drawn as :func:`collect` draws them.
    pool : list of configs, optional
        Candidate pool instead of drawing one (``pool_size`` is then ignored).
    progress : bool
        A progress bar on stderr (none when stderr is not a terminal):
        problems done, valid rows, workers alive, time left.

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
    costlearn.collect.loop.CollectionInterrupted
        On Ctrl-C (every problem finished before it is on disk).
    """
    check_instance("fleet", fleet, Fleet, "a costlearn.collect.fleet.Fleet (start_fleet)")
    budget_s = check_real("budget_s", budget_s, 0, strict=True)
    pool_size = check_int("pool_size", pool_size, 1)
    configs_per_shape = check_int("configs_per_shape", configs_per_shape, 1)
    if max_shapes is not None:
        max_shapes = check_int("max_shapes", max_shapes, 0)
    fam = get_family(family)
    fam.check_dtype(dtype, layout)
    for m in fleet.members:
        if fam.name not in m.info["families"]:
            raise ValueError(f"{m.name} runs the {m.info['backend']!r} backend, which runs the families "
                             f"{list(m.info['families'])}, not {fam.name!r}")
    if shapes is not None:
        shapes = [Problem(*s, dtype, layout).shape for s in shapes]
    ray = fleet.ray
    t_start = time.monotonic()
    protocol = protocol or Protocol()
    spec = fleet.spec
    if bounds is None:
        bounds = ShapeBounds.for_device(spec.device_type == "cpu")
    out_dir, done, pool, other_pools = open_collection(out_dir, spec, fam, dtype, seed, pool, pool_size)
    pool_ids = [c.config_id for c in pool]
    res = FleetResult(other_pools=other_pools, budget_s=budget_s, folder=out_dir, target_rse=protocol.target_rse)
    plan = iter(shapes) if shapes is not None else iter_shapes(bounds, np.random.default_rng([seed, 2]))
    run_id = uuid.uuid4().hex[:12]

    def key(problem, config_id):
        return measurement_key(spec.slug, fam, problem, config_id, protocol)

    handed = 0

    def next_task():
        """The plan's next problem with something left to measure, or None."""
        nonlocal handed
        if time.monotonic() - t_start > budget_s or (max_shapes is not None and handed >= max_shapes):
            return None
        for shape in plan:
            problem = Problem(*shape, dtype, layout)
            chosen, sub_rng = shape_configs(pool, spec, problem, seed, configs_per_shape)
            todo = [c for c in chosen if key(problem, c.config_id) not in done]
            res.skipped += len(chosen) - len(todo)
            if todo:
                handed += 1
                res.problems_planned += 1
                res.rows_planned += len(todo)
                return _Task(problem, [c.config_id for c in todo], int(sub_rng.integers(len(todo))))
        return None

    # pending: object ref -> (stage, member, task); stages: describe, prepare, measure.
    pending: dict = {}
    started_at: dict = {}
    idle: deque = deque()
    retry: deque = deque()
    spreads, written = [], []
    res.workers = [m.name for m in fleet.members]

    def prepare(member):
        pending[member.actor.prepare.remote(fam.name, dtype, pool_ids)] = ("prepare", member, None)

    def replace(lost):
        fleet.drop(lost)
        member = fleet.new_member()
        res.replacements += 1
        ref = member.actor.describe.remote()
        pending[ref] = ("describe", member, None)
        started_at[ref] = time.monotonic()

    def write(rows, problem):
        t0 = time.monotonic()
        res.parts.append(write_part(rows, out_dir))
        res.seconds["write"] = res.seconds.get("write", 0.0) + time.monotonic() - t0
        written.extend(rows)
        for r in rows:
            done.add(key(problem, r["config_id"]))
            if r["status"] == "ok":
                res.rows_valid += 1
                spreads.append((r["time_us_p80"] - r["time_us_p20"]) / r["time_us"])
        res.rows_written += len(rows)
        res.problems_done += 1

    def lose(member, task, why):
        """A worker died (or its device did) with ``task`` in flight."""
        task.lost_on.append(member.name)
        again = len(task.lost_on) < 2
        res.lost.append(f"{task.problem.shape} on {member.name}: {why}; "
                        + (f"handed out again ({len(task.config_ids)} configs)" if again
                           else "lost twice: recorded as launch_error rows"))
        facts = member.facts
        replace(member)
        if again:
            retry.appendleft(task)
            return
        res.failed.append(task.problem.shape)
        msg = (f"not measured: lost twice, with {task.lost_on[0]} and then {task.lost_on[1]} ({why})")[:500]
        write(lost_rows(task.problem, task.config_ids, facts, fam.name, protocol, member.info["provenance"],
                        member.info["overhead_us"], run_id, msg), task.problem)

    for m in fleet.members:
        prepare(m)
    ready_s = None
    bar = None
    if progress:
        from tqdm.auto import tqdm
        total = len(shapes) if shapes is not None else max_shapes
        # disable=None: no bar when stderr is not a terminal (logs stay clean).
        bar = tqdm(total=total, unit="problem", desc=f"fleet {spec.slug}", dynamic_ncols=True, disable=None,
                   file=sys.stderr)
    lost_errors = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError)
    try:
        while True:
            while idle:
                task = retry.popleft() if retry else next_task()
                if task is None:
                    break
                member = idle.popleft()
                ref = member.actor.measure.remote(task.problem.shape, dtype, layout, task.config_ids,
                                                  task.repeat_index, protocol, run_id, seed)
                pending[ref] = ("measure", member, task)
            if not pending:
                if not fleet.members:
                    left = f"; {[t.problem.shape for t in retry]} were lost once and not measured" if retry else ""
                    res.stopped = f"every worker was lost{left}"
                break
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            now = time.monotonic()
            for ref in [r for r in started_at if r not in ready and now - started_at[r] > fleet.start_timeout_s]:
                _, member, _ = pending.pop(ref)
                started_at.pop(ref)
                fleet.drop(member)
                res.notes.append(f"{member.name} (a replacement) did not start within {fleet.start_timeout_s:.0f} s")
            for ref in ready:
                stage, member, task = pending.pop(ref)
                started_at.pop(ref, None)
                try:
                    value = ray.get(ref)
                except lost_errors as e:
                    if stage == "measure":
                        lose(member, task, f"{member.name} was lost ({type(e).__name__})")
                    else:
                        fleet.drop(member)
                        res.notes.append(f"{member.name} was lost while starting ({type(e).__name__})")
                    continue
                except ray.exceptions.RayTaskError as e:
                    cause = _cause(e)
                    if stage == "measure" and isinstance(cause, DeviceLost):
                        lose(member, task, f"the device of {member.name} was lost: {cause}"[:300])
                        continue
                    if stage == "describe":              # a replacement that cannot open its device
                        fleet.drop(member)
                        res.notes.append(f"{member.name} (a replacement) did not start: {cause}"[:500])
                        continue
                    raise cause from None
                if stage == "describe":
                    member.info = value
                    try:
                        check_same_device((fleet.reference, spec), (member.name, member.spec))
                    except ValueError as e:
                        fleet.drop(member)
                        res.notes.append(f"replacement refused: {e}")
                        continue
                    fleet.members.append(member)
                    res.workers.append(member.name)
                    prepare(member)
                elif stage == "prepare":
                    if value["template_hash"] != fam.template_hash:
                        raise ValueError(f"{member.name} runs {fam.name} kernel template {value['template_hash']} "
                                         f"(costlearn {member.info['costlearn_version']}), this process "
                                         f"{fam.template_hash} (costlearn {__version__}); install the same "
                                         "costlearn on every machine")
                    member.facts = value["facts"]
                    idle.append(member)
                    if ready_s is None:
                        ready_s = time.monotonic() - t_start
                else:
                    idle.append(member)
                    write(value, task.problem)
                    if bar is not None:
                        bar.update(1)
            if bar is not None:
                bar.set_postfix_str(_progress_text(res, fleet, t_start, ready_s, budget_s, bar.total), refresh=True)
    except KeyboardInterrupt:
        raise CollectionInterrupted(res, out_dir) from None
    finally:
        if bar is not None:
            bar.close()
    res.seconds = dict(start=ready_s if ready_s is not None else time.monotonic() - t_start,
                       write=res.seconds.get("write", 0.0), total=time.monotonic() - t_start)
    res.spread_frac = float(np.median(spreads)) if spreads else math.nan
    ok = [r for r in written if r["status"] == "ok"]
    if ok:
        res.at_target = sum(r["stop_reason"] in ("target", "fixed") for r in ok) / len(ok)
    if written:
        res.noise_floor = noise_floor(pd.DataFrame(written))
    return res


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
