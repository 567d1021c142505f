"""Measuring in this process: :class:`LocalExecutor`, the executor of :func:`costlearn.collect.loop.collect`.

One task at a time on one backend: the pool is compiled once per epilogue
(in background threads where the backend overlaps compilation, else in
batches while the budget lasts, :data:`COMPILE_BATCH`), then timed by
:func:`costlearn.collect.rows.measure_rows`.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from costlearn.collect.backends.base import Backend
from costlearn.collect.executor import Executor
from costlearn.collect.measure import DeviceLost
from costlearn.collect.plan import Run, Task
from costlearn.collect.rows import measure_rows
from costlearn.core.progress import progress_bar

__all__ = ["LocalExecutor", "COMPILE_BATCH"]


COMPILE_BATCH = 64
"""Configs a CPU collection compiles in one call when it compiles the rest
of its pool, a batch only where it is expected to end inside the budget (so
a pool of thousands does not compile past the budget before the first
problem is measured)."""


class LocalExecutor(Executor):
    """Measures on ``backend`` in this process, one task at a time: the
    pool is compiled once per epilogue, at the first task that needs it
    (in background threads while the device measures, where the backend
    overlaps compilation), then timed by
    :func:`~costlearn.collect.rows.measure_rows`. A lost device
    (:class:`~costlearn.collect.measure.DeviceLost`) stops the collection;
    everything measured before is on disk, and a rerun resumes in a fresh
    process."""

    def __init__(self, backend: Backend):
        self.backend, self.spec = backend, backend.spec
        self.stopped, self.pool_compile_s = "", 0.0
        self._task, self._compiled, self._futures, self._threads = None, {}, {}, None
        self._pools: set = set()            # the epilogues whose pool compile has started
        self._probed: dict = {}             # epilogue -> its pool's compile time, estimated from one config

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

    def epilogue_compile_s(self, epilogue: str) -> float:
        """The pool's compile time for ``epilogue``, from one config of it
        compiled now (kept for the problem that needs it) times the pool's
        size, the first time it is asked. The pools compiled so far may have
        come from the backend's compile cache (PoCL keeps the kernels a
        previous run built), which says nothing of another epilogue's
        kernels."""
        if epilogue not in self._probed:
            config = self.run.pool[0]
            t0 = time.monotonic()
            if (config.config_id, epilogue) not in self._compiled:
                with self.run.stopwatch.phase("compile"):
                    self._compile_now([config], epilogue)
            self._probed[epilogue] = (time.monotonic() - t0) * len(self.run.pool)
        return self._probed[epilogue]

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
        first = bool(missing) and epi not in self._pools
        if first:
            self._pools.add(epi)
        if missing and self._threads is not None:
            if first:
                # Compile the whole pool in background threads while the
                # device measures; each problem waits only for its own configs.
                self._futures.update({(c.config_id, epi): self._threads.submit(self.backend.compile, c, dtype, epi)
                                      for c in pool if (c.config_id, epi) not in self._compiled})
            t_pool = time.monotonic()
            for c in missing:
                self._compiled[c.config_id, epi] = self._futures[c.config_id, epi].result()
            if first:
                self.pool_compile_s = max(self.pool_compile_s, time.monotonic() - t_pool)
        elif missing:
            if first and self.bar is not None:
                self.bar.set_postfix_str(f"compiling {len(pool)} configs ({epi})", refresh=True)
            t_pool = time.monotonic()
            head = [c for c in pool if (c.config_id, epi) not in self._compiled] \
                if first and len(pool) <= COMPILE_BATCH else missing
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
