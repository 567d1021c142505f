"""The :class:`Executor` interface: what measures the tasks of the collection loop, a local run's or a fleet's.

:func:`costlearn.collect.loop.run_collection` drives any executor;
:class:`costlearn.collect.local.LocalExecutor` measures in this process,
:class:`costlearn.collect.fleet.FleetExecutor` on Ray workers.
"""
from __future__ import annotations

from costlearn.collect.plan import Run, Task

__all__ = ["Executor"]


class Executor:
    """What measures the tasks of :func:`~costlearn.collect.loop.run_collection`:
    the one part in which a local run
    (:class:`~costlearn.collect.local.LocalExecutor`) and a fleet run
    (:class:`costlearn.collect.fleet.FleetExecutor`) differ. The loop hands
    out tasks while :meth:`free`, waits for finished ones (:meth:`wait`) while
    :meth:`busy`, writes their rows, and stops when :attr:`stopped` says why
    (the device, or every worker, was lost). :attr:`spec` is the device
    measured; :attr:`pool_compile_s` the slowest compile of the pool for one
    epilogue yet, which brings in the next
    (:data:`~costlearn.collect.plan.EPILOGUE_COMPILE_SHARE`).
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

    def epilogue_compile_s(self, epilogue: str) -> float:
        """The expected compile time of the pool for ``epilogue``, seconds,
        asked before the loop brings that epilogue in, where
        :attr:`pool_compile_s` already lets it: the default is
        :attr:`pool_compile_s` itself."""
        return self.pool_compile_s

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
