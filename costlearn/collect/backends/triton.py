"""Triton backend: times, on an NVIDIA GPU, the kernels of the families that
name it in their ``backends`` (``triton_mm``: costlearn's own Triton matmul
and the vendor library, ``torch.mm``), each launched through the family's
:meth:`~costlearn.families.KernelFamily.torch_launcher`, with the collection
protocol of :mod:`costlearn.collect.measure`.

Needs PyTorch with CUDA and Triton (``pip install 'costlearn[triton]'``);
importing costlearn never does. Inputs are torch tensors on the GPU in the
problem's dtype and layout (a transposed operand is a transposed view of a
contiguous tensor); several input sets, together twice the L2, rotate so a
launch does not find its inputs in cache; the output is poisoned with NaN
before the one verifying launch and compared with a float64 reference
computed on the GPU; time is CUDA events around n back-to-back launches.
"""
from __future__ import annotations

import dataclasses
import math
import time

from costlearn.core.device import PRESETS, DeviceSpec, device_slug
from costlearn.core.dtypes import get_dtype
from costlearn.families import get_family
from costlearn.collect.verify import rotation_sets
from costlearn.core.problem import Problem
from costlearn.core.checks import check_instance
from costlearn.collect.backends import BackendUnavailable
from costlearn.collect.backends.base import Backend, CompiledKernel, Workspace, check_epilogue_match
from costlearn.collect.backends.nvml import ClockReader

__all__ = ["TritonBackend"]

TORCH_DTYPE_NAMES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "tfloat32": "float32"}
"""torch dtype (by name) of each costlearn dtype's tensors (tfloat32 data is
float32, multiplied at TF32 precision)."""


def _torch():
    import torch
    return torch


class TritonBackend(Backend):
    """Compile and time configs of the Triton families (``triton_mm``: its
    tile configs and the vendor call) on one CUDA GPU through Triton and
    PyTorch.

    Parameters
    ----------
    device_index : int
        CUDA device ordinal.

    Raises
    ------
    costlearn.collect.backends.BackendUnavailable
        If PyTorch, Triton or a CUDA GPU is missing.
    """

    name = "triton"

    @staticmethod
    def is_available() -> bool:
        try:
            import triton  # noqa: F401
            torch = _torch()
            return bool(torch.cuda.is_available())
        except Exception:
            return False

    def __init__(self, device_index: int = 0):
        if not self.is_available():
            raise BackendUnavailable("the triton backend needs PyTorch with CUDA, Triton and an NVIDIA GPU: "
                                     "pip install 'costlearn[triton]' on a GPU machine")
        torch = _torch()
        self.torch = torch
        self.index = int(device_index)
        self.dev = torch.device("cuda", self.index)
        self._spec = None
        self._overhead_us = None
        self._clocks = ClockReader(self.index)

    # -- description --------------------------------------------------------
    @property
    def spec(self) -> DeviceSpec:
        """The preset whose key the GPU's name contains (``NVIDIA H200`` ->
        ``h200``), with the queried SM count and L2; an unknown GPU is
        described from ``torch.cuda.get_device_properties`` alone."""
        if self._spec is None:
            props = self.torch.cuda.get_device_properties(self.index)
            slug = device_slug(props.name, "cuda")
            cc = f"{props.major}.{props.minor}"
            if slug in PRESETS:
                base = PRESETS[slug]
                self._spec = dataclasses.replace(base, name=props.name, multiprocessors=props.multi_processor_count,
                                                 l2_bytes=int(getattr(props, "L2_cache_size", base.l2_bytes)),
                                                 compute_capability=cc, source=base.source + "; queried: torch")
            else:
                raise BackendUnavailable(f"no preset for {props.name!r} (cc {cc}); the triton backend knows "
                                         f"{sorted(PRESETS)}")
        return self._spec

    def provenance(self) -> dict:
        import triton
        torch = self.torch
        props = torch.cuda.get_device_properties(self.index)
        return dict(device_name=props.name, device_slug=self.spec.slug, api="cuda",
                    compute_capability=f"{props.major}.{props.minor}", device_version="",
                    multiprocessors=int(props.multi_processor_count), driver_version=str(torch.version.cuda or ""),
                    runtime_version=f"torch {torch.__version__}", library_version=f"triton {triton.__version__}",
                    host=__import__("platform").node(), device_settings="")

    def clocks(self) -> dict:
        """Clocks, temperature and throttle reasons now
        (:class:`costlearn.collect.backends.nvml.ClockReader`); read only."""
        return self._clocks.read()

    def launch_overhead_us(self) -> float:
        """Per-launch time of the first family's smallest config
        (:meth:`~costlearn.families.KernelFamily.overhead_config`) on a 1x1x1
        problem, 200 launches back to back between two CUDA events, median
        of 5."""
        if self._overhead_us is None:
            fam = get_family(self.families[0])
            dtype = "float16" if "float16" in fam.dtypes else fam.dtypes[0]
            kern = self.compile(fam.overhead_config(), dtype)
            with self.workspace(Problem(1, 1, 1, dtype)) as ws:
                ws.sample(kern, 10)
                self._overhead_us = float(sorted(ws.sample(kern, 200) / 200 for _ in range(5))[2])
        return self._overhead_us

    # -- compile --------------------------------------------------------------
    def compile(self, config, dtype: str = "float32", epilogue: str = "none") -> CompiledKernel:
        """The family's launcher for ``config`` in ``dtype``
        (:meth:`~costlearn.families.KernelFamily.torch_launcher`); Triton
        compiles a kernel at its first launch on a problem's layout (the
        verifying launch, untimed). A launcher that cannot be built (e.g.
        Triton fails to import) is a ``compile_error``."""
        t0 = time.perf_counter()
        fam = self.family_for(config)
        fam.check_dtype(dtype)
        fam.check_epilogue(epilogue)
        try:
            launcher = fam.torch_launcher(config, dtype, epilogue)
        except Exception as e:
            return CompiledKernel(config, "compile_error", f"{type(e).__name__}: {e}"[:2000],
                                  compile_s=time.perf_counter() - t0, epilogue=epilogue)
        return CompiledKernel(config, "ok", "", None, time.perf_counter() - t0, launcher, epilogue)

    def workspace(self, problem: Problem, distribution: str = "normal", density: float = 1.0,
                  seed: int = 0) -> Workspace:
        check_instance("problem", problem, Problem, "a costlearn.Problem")
        for fam in self.families:
            get_family(fam).check_problem(problem)
        return _TritonWorkspace(self, problem, distribution, density, seed)


class _TritonWorkspace(Workspace):
    def __init__(self, be: TritonBackend, problem: Problem, distribution: str, density: float, seed: int):
        torch = be.torch
        self.be, self.problem = be, problem
        m, n, k = problem.shape
        tdt = getattr(torch, TORCH_DTYPE_NAMES[problem.dtype])
        gen = torch.Generator(device=be.dev).manual_seed(int(seed))
        n_sets = rotation_sets(problem.element_bytes * (m * k + k * n), be.spec.l2_bytes)
        a_col, b_col = problem.layout[0] == "T", problem.layout[1] == "T"
        self.a, self.b = [], []
        for _ in range(n_sets):
            a = _draw((k, m) if a_col else (m, k), distribution, density, gen, be.dev).to(tdt)
            b = _draw((n, k) if b_col else (k, n), distribution, density, gen, be.dev).to(tdt)
            self.a.append(a.t() if a_col else a)          # logical (M, K) and (K, N) views
            self.b.append(b.t() if b_col else b)
        self.c = torch.empty((m, n), dtype=tdt, device=be.dev)
        # The bias (length N, the inputs' distribution and dtype) of an
        # epilogue; None without one.
        self.bias = None if problem.epilogue == "none" else \
            _draw((1, n), distribution, density, gen, be.dev).to(tdt).reshape(n)
        a64, b64 = self.a[0].to(torch.float64), self.b[0].to(torch.float64)
        scale = a64.abs() @ b64.abs()
        eps = get_dtype(problem.dtype).eps
        if self.bias is None:
            self.ref = a64 @ b64
            self.tol = 16.0 * math.sqrt(k) * eps * scale + 1e-30
        else:     # the bound of costlearn.collect.verify.tolerance with a bias, in torch
            bias64 = self.bias.to(torch.float64)
            v = a64 @ b64 + bias64
            if problem.epilogue == "bias_relu":
                v = torch.relu(v)
            elif problem.epilogue == "bias_gelu":
                v = torch.nn.functional.gelu(v, approximate="tanh")
            self.ref = v
            scale = scale + bias64.abs()
            # The output is stored in the input dtype: its rounding of the
            # result's magnitude is part of the bound.
            self.tol = 1.2 * 16.0 * math.sqrt(k) * eps * scale + (2.0 ** -20 + eps) * (scale + 1.0)
        self.n_sets, self._next = n_sets, 0
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def _launch(self, kernel: CompiledKernel, s: int) -> None:
        kernel.handle(self.a[s], self.b[s], self.c, self.bias)

    def verify(self, kernel: CompiledKernel) -> tuple[bool, float]:
        check_epilogue_match(kernel, self.problem.epilogue)
        torch = self.be.torch
        self.c.fill_(float("nan"))
        self._launch(kernel, 0)
        torch.cuda.synchronize(self.be.dev)
        c = self.c.to(torch.float64)
        err = (c - self.ref).abs()
        finite = bool(torch.isfinite(c).all())
        max_err = float(err.max()) if finite else math.inf
        return finite and bool((err <= self.tol).all()), max_err

    def sample(self, kernel: CompiledKernel, n_launches: int) -> float:
        self.start.record()
        for _ in range(n_launches):
            self._launch(kernel, self._next)
            self._next = (self._next + 1) % self.n_sets
        self.end.record()
        self.end.synchronize()
        return float(self.start.elapsed_time(self.end)) * 1e3       # ms -> us

    def close(self) -> None:
        self.a, self.b, self.c, self.ref, self.tol, self.bias = [], [], None, None, None, None


def _draw(shape, distribution: str, density: float, gen, device):
    """Random float32 values of ``distribution`` (:data:`costlearn.collect.protocol.
    DISTRIBUTIONS`) on the GPU, never all zero."""
    import torch
    if distribution == "uniform":
        x = torch.rand(shape, generator=gen, device=device) * 2 - 1
    else:
        x = torch.randn(shape, generator=gen, device=device)
    if distribution == "sparse" and density < 1:
        x = x * (torch.rand(shape, generator=gen, device=device) < density)
    x.view(-1)[0] = 1.0 if not bool(x.any()) else x.view(-1)[0]
    return x
