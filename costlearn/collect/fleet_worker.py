"""One device of a fleet (:mod:`costlearn.collect.fleet`): the worker a Ray
actor runs, and the rows of a problem lost with its worker.

A worker opens its backend, compiles the candidate pool once per epilogue
(:meth:`FleetWorker.prepare`) and measures one problem at a time with the
local collection's protocol (:func:`costlearn.collect.rows.measure_rows`),
so its rows are a local collection's. Plain Python: nothing here needs Ray.
"""
from __future__ import annotations

import os
import socket
import time

from costlearn.collect.backends import get_backend
from costlearn.collect.backends.base import CompiledKernel
from costlearn.collect.rows import measure_rows, rows_for
from costlearn.collect.measure import measure_shape
from costlearn.core.problem import Problem
from costlearn.core.version import __version__
from costlearn.families import get_family

__all__ = ["FleetWorker", "lost_rows"]


class FleetWorker:
    """One device of a fleet: its backend, its compiled candidate pool, and
    the measurement of one problem at a time. Runs inside a Ray actor
    (:func:`costlearn.collect.fleet.start_fleet` wraps it); plain Python otherwise, so it can be
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
        ``overhead_us`` (launch overhead, microseconds), ``families``,
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

    def prepare(self, family: str, dtype: str, config_ids: list, epilogue: str = "none") -> dict:
        """Compile the candidate pool once for ``epilogue``
        (``backend.compile_many``), for the problems of that epilogue.

        Returns
        -------
        dict
            ``facts``: config_id -> (status, error, registers_per_thread,
            compile_s) of each compiled config; ``template_hash`` of the
            family here; ``compile_s``, wall seconds; ``epilogue``.
        """
        fam = get_family(family)
        t0 = time.monotonic()
        kernels = self.backend.compile_many([fam.config_from_id(c) for c in config_ids], dtype, epilogue=epilogue)
        self._kernels[epilogue] = {k.config.config_id: k for k in kernels}
        facts = {cid: (k.status, k.error, k.registers_per_thread, k.compile_s)
                 for cid, k in self._kernels[epilogue].items()}
        return dict(facts=facts, template_hash=fam.template_hash, compile_s=time.monotonic() - t0, epilogue=epilogue)

    def measure(self, shape: tuple, dtype: str, layout: str, config_ids: list, repeat_index: int, protocol,
                run_id: str, seed: int, epilogue: str = "none") -> list[dict]:
        """Measure the pool configs ``config_ids`` (compiled for ``epilogue``
        by :meth:`prepare`) on one problem, as a local collection does
        (:func:`costlearn.collect.rows.measure_rows`); returns its dataset rows.

        Raises
        ------
        costlearn.collect.measure.DeviceLost
            If the device fails in a way that persists (the driver then
            treats this worker as lost).
        """
        if self._prov is None:
            self.describe()
        problem = Problem(*shape, dtype, layout, epilogue)
        kernels = [self._kernels[epilogue][c] for c in config_ids]
        return measure_rows(self.backend, kernels, problem, protocol, self._overhead_us, self._prov, run_id, seed,
                            repeat_index=repeat_index)


def lost_rows(problem, config_ids: list, facts: dict, family: str, protocol, prov: dict, overhead_us: float,
              run_id: str, why: str) -> list[dict]:
    """Dataset rows recording that ``problem`` could not be measured: one
    per config, status ``launch_error`` with ``why`` as the error (a config
    that failed to compile keeps its ``compile_error``), no time.

    Parameters
    ----------
    problem : Problem
        With its epilogue (the rows record it, as measured rows do).
    config_ids : list of str
    facts : dict
        config_id -> (status, error, registers_per_thread, compile_s), from
        :meth:`FleetWorker.prepare` for the problem's epilogue.
    family : str
    protocol : Protocol
    prov : dict
        Provenance columns of the worker that was lost.
    overhead_us : float
        That worker's launch overhead, microseconds.
    run_id, why : str
    """
    fam = get_family(family)
    kernels = []
    for cid in config_ids:
        status, error, regs, compile_s = facts.get(cid, ("ok", "", None, 0.0))
        kernels.append(CompiledKernel(fam.config_from_id(cid), "compile_error" if status == "compile_error"
                                      else "launch_error", error if status == "compile_error" else why,
                                      regs, compile_s, problem.epilogue))
    # No kernel has status "ok", so measure_shape only shapes the rows (the
    # workspace is never used).
    results = measure_shape(None, kernels, protocol)
    return rows_for(results, {k.config.config_id: k for k in kernels}, problem, protocol, prov, {}, overhead_us,
                    run_id)
