"""Backend seam: describe a device, compile a config of a kernel family once,
time it on a problem. Per-config failures are reported as a status, never by
raising."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from costlearn.core.device import DeviceSpec
from costlearn.families import family_of, get_family, measured_by
from costlearn.collect.verify import apply_epilogue, check_result, make_inputs, rotation_sets, tolerance
from costlearn.core.problem import Problem
from costlearn.core.checks import check_instance

__all__ = ["Backend", "CompiledKernel", "Workspace", "DeviceWorkspace", "HostProblem", "check_epilogue_match"]


@dataclass
class CompiledKernel:
    """A tile config compiled for one backend.

    Attributes
    ----------
    config : a family's config
    status : {"ok", "compile_error"}
    error : str
        Compiler message when ``status != "ok"``.
    registers_per_thread : int or None
        Registers the compiled kernel uses per thread (CUDA), ``None`` where
        the API does not report it.
    compile_s : float
        Wall time spent compiling, seconds.
    epilogue : str
        The epilogue the kernel fuses (:data:`costlearn.core.problem.EPILOGUES`);
        it runs only on problems with that epilogue.
    handle : object
        Backend-specific launchable object (not part of any row).
    """

    config: object
    status: str = "ok"
    error: str = ""
    registers_per_thread: int | None = None
    compile_s: float = 0.0
    handle: object = field(default=None, repr=False)
    epilogue: str = "none"


class Workspace(abc.ABC):
    """Inputs and reference for one shape on one backend (a context manager)."""

    @abc.abstractmethod
    def verify(self, kernel: CompiledKernel) -> tuple[bool, float]:
        """Must poison the output with NaN, launch once, and compare with the
        float64 reference; returns (ok, max_abs_err)."""

    @abc.abstractmethod
    def sample(self, kernel: CompiledKernel, n_launches: int) -> float:
        """Must run ``n_launches`` back-to-back launches between one pair of
        device timestamps, rotating input buffer sets, and return the
        elapsed device time in microseconds."""

    def close(self) -> None:
        """Must release device memory held by the workspace."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class DeviceWorkspace(Workspace):
    """Shared part of the real backends' workspaces for the ``gemm`` family:
    the host problem, the buffer-set rotation and verification against the
    reference. Subclasses
    provide ``_launch(kernel, set_index)`` (passing ``bias``, the
    problem's float32 bias as the kernel's last argument, where the problem
    has an epilogue), ``_poison_output()`` (fill C with NaN) and
    ``_read_output()`` (C as an array of module ``xp``), and ``sample``.
    ``ref`` and ``tol`` (float64, shape (M, N)) are the host reference and
    tolerance unless a subclass computes them on the device and sets ``xp``
    to its array module."""

    def __init__(self, prob: "HostProblem"):
        self.xp = np
        self.ref, self.tol = prob.reference, prob.tol
        self.prob = prob
        self.mnk = (np.int32(prob.m), np.int32(prob.n), np.int32(prob.k))
        self.n_sets = len(prob.a_sets)
        self._next = 0
        self._blocks: dict = {}

    def blocks(self, config) -> int:
        """Blocks on the 1-D launch grid (the family's launch geometry),
        computed once per config (this runs at every launch)."""
        got = self._blocks.get(config)
        if got is None:
            got = self._blocks[config] = family_of(config).blocks(config, self.prob.m, self.prob.n)
        return got

    def _launch_next(self, kernel: CompiledKernel):
        """Launch on the next buffer set (rotating); returns what _launch returns."""
        out = self._launch(kernel, self._next)
        self._next = (self._next + 1) % self.n_sets
        return out

    @abc.abstractmethod
    def _launch(self, kernel: CompiledKernel, s: int):
        """Must enqueue one launch of ``kernel`` on buffer set ``s``."""

    @abc.abstractmethod
    def _poison_output(self) -> None:
        """Must fill the output C on the device with NaN."""

    @abc.abstractmethod
    def _read_output(self):
        """Must wait for the device and return C as an array of ``self.xp``."""

    def verify(self, kernel: CompiledKernel) -> tuple[bool, float]:
        """Launch once over a NaN-poisoned C and compare with the float64
        host reference (:func:`costlearn.collect.verify.check_result`); returns
        (ok, max_abs_err)."""
        check_epilogue_match(kernel, self.prob.epilogue)
        self._poison_output()
        self._launch(kernel, 0)
        return check_result(self._read_output(), self.ref, self.tol, xp=self.xp)


def check_epilogue_match(kernel: CompiledKernel, epilogue: str) -> None:
    """Raise ValueError if ``kernel`` was compiled for another epilogue than
    the problem's ``epilogue`` (its arguments and output would differ)."""
    if kernel.epilogue != epilogue:
        raise ValueError(f"{kernel.config.config_id} was compiled for epilogue={kernel.epilogue!r}; this problem's "
                         f"epilogue is {epilogue!r} (compile it with epilogue={epilogue!r})")


class Backend(abc.ABC):
    """A device that compiles and times configs of the kernel families in
    :attr:`families`."""

    name: str = ""
    overlap_compile: bool = False
    """True where compiling on the host while the device measures does not
    disturb the timings (a GPU); False on a CPU device, where the compiler
    would compete with the kernels for the same cores."""

    @property
    @abc.abstractmethod
    def spec(self) -> DeviceSpec:
        """Must describe the live device (limits, peaks, identity)."""

    def recorded(self, family: str, dtype: str, layout: str) -> dict | None:
        """The only problems this backend can measure, where it is limited to
        some: ``{(m, n, k, epilogue): frozenset of config ids}`` of one
        family, dtype and layout (a replay of a recorded log); None for a
        device, which measures any feasible problem (the default)."""
        return None

    @abc.abstractmethod
    def provenance(self) -> dict:
        """Must return the provenance columns for every row measured here:
        device name, compute capability or OpenCL version, multiprocessor
        count, driver and runtime versions, library version."""

    @abc.abstractmethod
    def compile(self, config, dtype: str = "float32", epilogue: str = "none") -> CompiledKernel:
        """Must compile ``config`` (of one of :attr:`families`) once for
        inputs of ``dtype`` fusing ``epilogue``, returning a CompiledKernel
        (its ``epilogue`` set) whose status is ``compile_error`` (with the
        message) instead of raising."""

    @property
    def families(self) -> tuple:
        """Kernel families this backend runs: those that name it in their
        :attr:`~costlearn.families.KernelFamily.backends`."""
        return measured_by(self.name)

    def family_for(self, config):
        """The family of ``config``, checked to be one this backend runs.

        Raises
        ------
        TypeError
            If ``config`` is not a family's config.
        ValueError
            If this backend does not run that family.
        """
        fam = family_of(config)
        if fam.name not in self.families:
            raise ValueError(f"the {self.name!r} backend runs the families {list(self.families)}, "
                             f"not {fam.name!r}")
        return fam

    _workspace_cls = None
    host_reference = True
    """Whether the float64 reference is computed on the host (numpy); a GPU
    backend computes it on the device instead."""

    def workspace(self, problem: Problem, distribution: str = "normal", density: float = 1.0,
                  seed: int = 0) -> Workspace:
        """Allocate random inputs of the named distribution, their float64
        reference and the rotating buffer sets for one problem (the number of
        sets from the device's L2 size, :func:`costlearn.collect.verify.rotation_sets`).

        Raises
        ------
        TypeError
            If ``problem`` is not a Problem.
        ValueError
            If this backend cannot run the problem's dtype or layout.
        """
        check_instance("problem", problem, Problem, "a costlearn.Problem")
        for fam in self.families:
            get_family(fam).check_problem(problem)
        prob = HostProblem.make(problem, distribution, density, seed, self.spec.l2_bytes,
                                reference=self.host_reference)
        return self._workspace_cls(self, prob)

    @abc.abstractmethod
    def launch_overhead_us(self) -> float:
        """Must return the measured per-launch time of an empty kernel,
        microseconds (the floor below which a time is overhead)."""

    def clocks(self) -> dict:
        """Current clocks and temperature, where the device reports them
        (``sm_clock_mhz``, ``mem_clock_mhz``, ``temperature_c``); empty
        otherwise."""
        return {}

    def compile_many(self, configs, dtype: str = "float32", progress=None,
                     epilogue: str = "none") -> list[CompiledKernel]:
        """Compile several configs; backends may override to parallelise."""
        out = []
        for c in configs:
            out.append(self.compile(c, dtype, epilogue))
            if progress is not None:
                progress(1)
        return out


@dataclass
class HostProblem:
    """Host-side inputs of one problem: ``n_sets`` independent (A, B) pairs,
    the epilogue's bias (float32, shape (N,); None without one), the float64
    reference of the first pair and its error tolerance."""

    m: int
    n: int
    k: int
    dtype: str
    a_sets: list
    b_sets: list
    reference: object
    tol: object
    epilogue: str = "none"
    bias: object = None

    @classmethod
    def make(cls, problem: Problem, distribution: str, density: float, seed: int, cache_bytes: int,
             reference: bool = True) -> "HostProblem":
        """Draw the inputs; with ``reference=False`` the float64 reference
        and tolerance are left to the device (``None`` here)."""
        m, n, k, dtype = problem.m, problem.n, problem.k, problem.dtype
        rng = np.random.default_rng(seed)
        bytes_per_set = problem.element_bytes * (m * k + k * n)
        n_sets = rotation_sets(bytes_per_set, cache_bytes)
        a0, b0 = make_inputs(m, n, k, distribution, density, rng, dtype)
        # The bias has the inputs' distribution (one row of it), float32.
        bias = None if problem.epilogue == "none" else \
            np.ascontiguousarray(make_inputs(1, n, 1, distribution, density, rng, "float32")[1][0])
        a_sets, b_sets = [a0], [b0]
        # Further sets are the first one permuted (cheap, same distribution).
        for s in range(1, n_sets):
            a_sets.append(np.ascontiguousarray(np.roll(a0, s, axis=0)))
            b_sets.append(np.ascontiguousarray(np.roll(b0, s, axis=1)))
        if not reference:
            return cls(m, n, k, dtype, a_sets, b_sets, None, None, problem.epilogue, bias)
        ref = apply_epilogue(a0.astype(np.float64) @ b0.astype(np.float64), bias, problem.epilogue)
        return cls(m, n, k, dtype, a_sets, b_sets, ref, tolerance(a0, b0, dtype, bias=bias), problem.epilogue, bias)
