"""Collection: measure random shapes x candidate configs on one backend, under
a time budget, into a Parquet dataset.

A collection is deterministic for its seed: the candidate pool and the shape
sequence depend only on the seed and the device, so a restarted collection
walks the same shapes and skips every (shape, config) already in the
dataset.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.backends.base import Backend
from costlearn.collect.dataset import (
    NOT_IMPORTED,
    SCHEMA_VERSION,
    load,
    measured_keys,
    noise_floor,
    valid_rows,
    write_part,
)
from costlearn.families import family_of, get_family
from costlearn.collect.measure import DeviceLost, Protocol, Stopwatch, measure_shape
from costlearn.core.problem import EPILOGUES, Problem, check_epilogue
from costlearn.collect.sampler import ShapeBounds, iter_shapes, select_pool
from costlearn.collect.space import check_config, enumerate_space
from costlearn.core.util import atomic_write, check_int, check_real
from costlearn.core.version import __version__

__all__ = ["EPILOGUE_COMPILE_SHARE", "CollectResult", "CollectionInterrupted", "collect", "rows_for", "measure_rows",
           "candidate_pool", "shape_configs", "SESSION_ID", "record_pool", "write_device_json", "dataset_summary",
           "measurement_key", "open_collection", "plan_problems", "check_epilogues"]


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
        The backend's provenance columns.
    clocks : dict
        ``sm_clock_mhz``, ``mem_clock_mhz``, ``temperature_c``, ``throttled``,
        ``throttle_reasons`` where known.
    overhead_us : float
        Launch-overhead floor, microseconds.
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
                   template_hash=fam.template_hash,
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
                   **{"device_settings": "", **prov})
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
        The backend's launch-overhead floor, microseconds.
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


def shape_configs(pool: list, spec, problem: Problem, seed: int, configs_per_shape: int):
    """The pool configs measured on ``problem``: a seeded random subset of
    ``configs_per_shape`` of those feasible for it on ``spec`` (all of them
    when fewer), in pool order; and the problem's generator, which then picks
    the config timed twice. Depends only on its arguments, so every
    collector of one plan (a fleet's workers included) measures the same
    configs on a problem.

    Returns
    -------
    (list of configs, numpy.random.Generator)
    """
    m, n, k = problem.shape
    feasible = [c for c in pool if check_config(c, spec, problem=problem) is None]
    rng = np.random.default_rng([seed, 3, m, n, k])
    order = rng.permutation(len(feasible))[:configs_per_shape]
    return [feasible[i] for i in sorted(order)], rng


def plan_problems(shapes, dtype: str, layout: str, epilogues, seed: int, drawn: bool, in_play=None):
    """The problems a collection measures, in order: each shape of
    ``shapes`` with one epilogue of ``epilogues`` drawn for it (``drawn``,
    random shapes: seeded by the shape), or with every one of them in turn
    (given shapes: an evaluation compares the epilogues on the same shapes).

    Parameters
    ----------
    shapes : iterable of (int, int, int)
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
while compiling it, estimated as long as the slowest pool compiled so far,
takes at most this share of the budget left: on 2 cores PoCL compiles a
48-config pool in about 45 s, so a 120 s collection of four epilogues
compiled for 184 s and measured 7 rows; now it measures one epilogue."""


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


def measurement_key(slug: str, family, problem: Problem, config_id: str, protocol: Protocol) -> tuple:
    """The :data:`costlearn.collect.dataset.KEY_COLUMNS` tuple of one measurement
    (``family`` a KernelFamily): what a resumed collection skips."""
    return (slug, family.name, problem.dtype, problem.layout, problem.epilogue, *problem.shape, config_id,
            family.template_hash, protocol.version, protocol.distribution, float(protocol.density))


def open_collection(out_dir, spec, family, dtype: str, seed: int, pool, pool_size: int):
    """Prepare ``out_dir`` for a collection on ``spec``: its ``device.json``
    (:func:`write_device_json`), the keys already measured there, the
    candidate pool (``pool``, else :func:`candidate_pool` of ``pool_size``)
    and the other pools recorded in the folder (:func:`record_pool`).

    Returns
    -------
    (Path, set of tuple, list of configs, list of dict)

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
    return out_dir, done, pool, record_pool(out_dir, family.name, dtype, seed, pool)


def collect(backend: Backend, out_dir, *, budget_s: float = 180.0, family: str = "gemm", dtype: str = "float32",
            layout: str = "NN", pool_size: int = 64, configs_per_shape: int = 48,
            bounds: ShapeBounds | None = None, protocol: Protocol | None = None, seed: int = 0,
            max_shapes: int | None = None, shapes: list | None = None, pool: list | None = None,
            progress: bool = True, epilogues=("none",)) -> CollectResult:
    """Measure random shapes x pool configs of a kernel family on ``backend``
    into ``out_dir``.

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
    max_shapes : int, optional
        Stop after this many shapes measured by this call.
    shapes : list of (int, int, int), optional
        Measure these shapes (in order) instead of random ones.
    pool : list of configs of ``family``, optional
        Candidate pool to use instead of drawing one (``pool_size`` is then
        ignored); an evaluation passes a model's candidate set.
    progress : bool
        Show a progress bar (tqdm) on stderr.
    epilogues : sequence of str
        Epilogues (:data:`costlearn.core.problem.EPILOGUES`) the kernels fuse:
        each random shape is measured with one of them drawn for it, each
        given shape with every one (:func:`plan_problems`); the pool is
        compiled once per epilogue, when a shape first needs it. Random
        shapes start with the first epilogue and bring in the next while its
        compile fits the budget left (:data:`EPILOGUE_COMPILE_SHARE`), so a
        short budget measures instead of compiling.

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
    budget_s = check_real("budget_s", budget_s, 0, strict=True)
    pool_size = check_int("pool_size", pool_size, 1)
    configs_per_shape = check_int("configs_per_shape", configs_per_shape, 1)
    fam = get_family(family)
    fam.check_dtype(dtype, layout)
    epilogues = check_epilogues(epilogues)
    for e in epilogues:
        fam.check_epilogue(e)
    if fam.name not in backend.families:
        raise ValueError(f"the {backend.name!r} backend runs the families {list(backend.families)}, "
                         f"not {fam.name!r}")
    if shapes is not None:
        shapes = [Problem(*s, dtype, layout).shape for s in shapes]
    t_start = time.monotonic()
    protocol = protocol or Protocol()
    spec = backend.spec
    if bounds is None:
        bounds = ShapeBounds.for_device(spec.device_type == "cpu")
    out_dir, done, pool, other_pools = open_collection(out_dir, spec, fam, dtype, seed, pool, pool_size)
    prov = backend.provenance()
    rng = np.random.default_rng([seed, 2])
    in_play = list(epilogues[:1]) if shapes is None else list(epilogues)
    problems = plan_problems(iter_shapes(bounds, rng) if shapes is None else shapes, dtype, layout, epilogues,
                             seed, drawn=shapes is None, in_play=in_play)
    pool_compile_s = 0.0                  # the slowest pool compile yet: the estimate for an epilogue's pool
    overhead_us = backend.launch_overhead_us()
    run_id = uuid.uuid4().hex[:12]
    compiled: dict = {}
    sw = Stopwatch()
    res = CollectResult(other_pools=other_pools, budget_s=budget_s)
    spreads = []
    written: list = []
    # Overlapping compilation with measurement helps on a GPU; on a CPU
    # device the compiler would compete with the kernels being timed.
    overlap = bool(getattr(backend, "overlap_compile", False))
    executor = None
    futures: dict = {}
    if overlap:
        executor = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1))
    bar = None
    if progress:
        from tqdm.auto import tqdm
        # disable=None: no bar when stderr is not a terminal (logs stay clean).
        bar = tqdm(total=int(budget_s), unit="s", desc=f"collect {spec.slug}", dynamic_ncols=True,
                   disable=None,
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s{postfix}")
    try:
        for problem in problems:
            left = budget_s - (time.monotonic() - t_start)
            if left < 0:
                break
            if len(in_play) < len(epilogues) and pool_compile_s and pool_compile_s <= EPILOGUE_COMPILE_SHARE * left:
                in_play.append(epilogues[len(in_play)])     # read by the next draw
            if max_shapes is not None and res.problems_done >= max_shapes:
                break
            shape, epi = problem.shape, problem.epilogue
            chosen, sub_rng = shape_configs(pool, spec, problem, seed, configs_per_shape)
            todo = [c for c in chosen if measurement_key(spec.slug, fam, problem, c.config_id, protocol) not in done]
            res.skipped += len(chosen) - len(todo)
            if not todo:
                continue
            with sw.phase("compile"):
                missing = [c for c in todo if (c.config_id, epi) not in compiled]
                if missing and overlap:
                    first = not any(e == epi for _, e in futures)
                    if first:
                        # Compile the whole pool in background threads while
                        # the device measures; each shape waits only for its
                        # own configs.
                        futures.update({(c.config_id, epi): executor.submit(backend.compile, c, dtype, epi)
                                        for c in pool})
                    t_pool = time.monotonic()
                    for c in missing:
                        compiled[c.config_id, epi] = futures[c.config_id, epi].result()
                    if first:
                        pool_compile_s = max(pool_compile_s, time.monotonic() - t_pool)
                elif missing:
                    if not any(e == epi for _, e in compiled):
                        # First need of this epilogue: compile the whole pool
                        # at once, so that backends can parallelise code
                        # generation.
                        missing = list(pool)
                        if bar is not None:
                            bar.set_postfix_str(f"compiling {len(missing)} configs ({epi})", refresh=True)
                    t_pool = time.monotonic()
                    for kern in backend.compile_many(missing, dtype, epilogue=epi):
                        compiled[kern.config.config_id, epi] = kern
                    if len(missing) == len(pool):
                        pool_compile_s = max(pool_compile_s, time.monotonic() - t_pool)
            kernels = [compiled[c.config_id, epi] for c in todo]
            with sw.phase("measure"):
                try:
                    rows = measure_rows(backend, kernels, problem, protocol, overhead_us, prov, run_id,
                                        seed, repeat_index=int(sub_rng.integers(len(kernels))))
                except DeviceLost as e:
                    # Everything measured before this shape is on disk; a
                    # rerun resumes here in a fresh process.
                    res.stopped = f"stopped at shape {shape} ({epi}): {e}"
                    break
            with sw.phase("write"):
                res.parts.append(write_part(rows, out_dir))
            written.extend(rows)
            for r in rows:
                done.add(measurement_key(spec.slug, fam, problem, r["config_id"], protocol))
                if r["status"] == "ok":
                    res.rows_valid += 1
                    spreads.append((r["time_us_p80"] - r["time_us_p20"]) / r["time_us"])
            res.rows_written += len(rows)
            res.problems_done += 1
            if bar is not None:
                bar.n = min(int(time.monotonic() - t_start), int(budget_s))
                left = max(0.0, budget_s - (time.monotonic() - t_start))
                bar.set_postfix_str(f"problems={res.problems_done} rows={res.rows_written} "
                                    f"valid={res.rows_valid / max(res.rows_written, 1):.0%} "
                                    f"left={left:.0f}s", refresh=False)
                bar.refresh()
    except KeyboardInterrupt:
        raise CollectionInterrupted(res, out_dir) from None
    finally:
        if bar is not None:
            bar.close()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
    res.seconds = dict(sw.seconds, total=time.monotonic() - t_start)
    res.epilogues_left_out = list(epilogues[len(in_play):])
    res.spread_frac = float(np.median(spreads)) if spreads else math.nan
    res.target_rse = protocol.target_rse
    ok = [r for r in written if r["status"] == "ok"]
    if ok:
        res.at_target = sum(r["stop_reason"] in ("target", "fixed") for r in ok) / len(ok)
    if written:
        res.noise_floor = noise_floor(pd.DataFrame(written))
    return res


def write_device_json(spec, folder) -> Path:
    """Store the DeviceSpec beside the dataset (``device.json``) so training
    needs no device; an existing file is kept (the first description wins).
    Written atomically (:func:`costlearn.core.util.atomic_write`)."""
    path = Path(folder) / "device.json"
    if not path.exists():
        atomic_write(path, json.dumps(spec.to_dict(), indent=1, sort_keys=True))
    return path


def dataset_summary(folder) -> str:
    """One-paragraph summary of a dataset folder: rows, valid rows, shapes,
    configs, devices, quarantined and corrupt parts."""
    df, rep = load(folder)
    v = valid_rows(df)
    shapes = v[["m", "n", "k"]].drop_duplicates()
    return (f"{len(df)} rows ({len(v)} valid) over {len(shapes)} shapes and "
            f"{v['config_id'].nunique()} configs; devices: {sorted(df['device_slug'].unique())}; "
            f"{rep.summary()}")
