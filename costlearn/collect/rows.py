"""A problem's timings as dataset rows: :func:`measure_rows` (measured in a fresh workspace) and :func:`rows_for`.

Every row gets every column of :data:`costlearn.collect.dataset.COLUMNS`:
the problem, the config's tile description, the compiled facts, the device's
clocks, the protocol and the provenance, with this process's measurement
session (:data:`SESSION_ID`). The local loop, a fleet's workers, re-timings
(:mod:`costlearn.collect.noise`) and filter-then-measure
(:mod:`costlearn.serve.tuning`) all measure through them.
"""
from __future__ import annotations

import math
import uuid
from datetime import datetime, timezone

import numpy as np

from costlearn.collect.backends.base import Backend
from costlearn.collect.dataset import NOT_IMPORTED, SCHEMA_VERSION
from costlearn.collect.measure import measure_shape
from costlearn.collect.protocol import Protocol
from costlearn.core.problem import Problem
from costlearn.core.version import __version__
from costlearn.families import family_of

__all__ = ["SESSION_ID", "rows_for", "measure_rows"]

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
