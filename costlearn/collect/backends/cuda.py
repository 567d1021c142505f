"""CUDA backend (CuPy): NVRTC compilation through ``cupy.RawModule``, CUDA
event timing, NVML clocks where ``pynvml`` is installed. Never changes
clocks, power limits or any GPU setting."""
from __future__ import annotations

import os
import platform
import time

import numpy as np

try:
    import cupy as cp
except ImportError as _e:  # pragma: no cover - exercised only without CuPy
    raise ImportError(f"CuPy is not installed ({_e})") from _e

from costlearn.core.checks import env_index
from costlearn.core.device import DeviceSpec
from costlearn.collect.protocol import Protocol
from costlearn.collect.verify import apply_epilogue, tolerance
from costlearn.core.problem import Problem
from costlearn.collect.backends.base import Backend, CompiledKernel, DeviceWorkspace, HostProblem
from costlearn.collect.backends.nvml import ClockReader

__all__ = ["CudaBackend", "FP32_LANES_PER_SM"]

FP32_LANES_PER_SM = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128,
                     "10.0": 128, "12.0": 128}
"""FP32 FMA lanes per SM by compute capability (CUDA C++ Programming Guide,
"Arithmetic Instructions", throughput table)."""

_EMPTY = r'extern "C" __global__ void empty(float* x) { }'

class CudaBackend(Backend):
    """Compile and time ``gemm`` configs on an NVIDIA GPU through CuPy.

    Parameters
    ----------
    device_index : int
        CUDA device ordinal (default 0; ``COSTLEARN_CUDA_DEVICE`` sets it).
    """

    name = "cuda"
    overlap_compile = True
    host_reference = False

    @staticmethod
    def is_available() -> bool:
        try:
            return cp.cuda.runtime.getDeviceCount() > 0
        except Exception:  # no driver, no device: simply not available
            return False

    def __init__(self, device_index: int | None = None):
        if device_index is None:
            device_index = env_index("COSTLEARN_CUDA_DEVICE", 0)
        n = cp.cuda.runtime.getDeviceCount()
        if not 0 <= device_index < n:
            raise ValueError(f"device_index={device_index}; this machine has CUDA devices 0..{n - 1}")
        self.index = device_index
        self.device = cp.cuda.Device(device_index)
        self.device.use()
        self.props = cp.cuda.runtime.getDeviceProperties(device_index)
        self._spec = None
        self._overhead_us = None
        self._clocks = ClockReader(device_index)

    @property
    def spec(self) -> DeviceSpec:
        if self._spec is None:
            p = self.props
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            cc = f"{p['major']}.{p['minor']}"
            lanes = FP32_LANES_PER_SM.get(cc, 128)
            # Clock rates (kHz) as device attributes: CUDA 13 dropped them from
            # cudaDeviceProp, so the properties dict may lack them.
            attrs = self.device.attributes
            clock_khz = attrs.get("ClockRate", p.get("clockRate", 0))
            mem_khz = attrs.get("MemoryClockRate", p.get("memoryClockRate", 0))
            bus_bits = attrs.get("GlobalMemoryBusWidth", p.get("memoryBusWidth", 0))
            peak = p["multiProcessorCount"] * lanes * 2 * clock_khz / 1e6
            bw = 2 * mem_khz * 1e3 * (bus_bits / 8) / 1e9
            self._spec = DeviceSpec(
                name=name, api="cuda", multiprocessors=int(p["multiProcessorCount"]),
                warp_size=int(p["warpSize"]), max_threads_per_block=int(p["maxThreadsPerBlock"]),
                max_threads_per_mp=int(p["maxThreadsPerMultiProcessor"]),
                max_blocks_per_mp=int(p.get("maxBlocksPerMultiProcessor", 16)),
                smem_per_block_bytes=int(p["sharedMemPerBlock"]),
                smem_per_block_optin_bytes=int(p.get("sharedMemPerBlockOptin", p["sharedMemPerBlock"])),
                smem_per_mp_bytes=int(p["sharedMemPerMultiprocessor"]),
                smem_reserved_per_block_bytes=int(p.get("reservedSharedMemPerBlock", 0)),
                registers_per_mp=int(p["regsPerMultiprocessor"]), max_registers_per_thread=255,
                register_alloc_unit=256, l2_bytes=int(p["l2CacheSize"]), peak_gflops=float(peak),
                memory_bandwidth_gbps=float(bw), compute_capability=cc,
                driver_version=str(cp.cuda.runtime.driverGetVersion()),
                source=("queried: cudaGetDeviceProperties; peak = SMs x FP32 lanes x 2 x boost clock; "
                        "bandwidth = 2 x memory clock x bus width"))
        return self._spec

    def provenance(self) -> dict:
        s = self.spec
        return dict(device_name=s.name, device_slug=s.slug, api="cuda", compute_capability=s.compute_capability,
                    device_version=f"sm_{s.compute_capability.replace('.', '')}",
                    multiprocessors=s.multiprocessors, driver_version=s.driver_version,
                    runtime_version=str(cp.cuda.runtime.runtimeGetVersion()),
                    library_version=f"cupy {cp.__version__}", host=platform.node())

    def clocks(self) -> dict:
        """Clocks, temperature and throttle reasons now
        (:class:`costlearn.collect.backends.nvml.ClockReader`); read only."""
        return self._clocks.read()

    def launch_overhead_us(self) -> float:
        if self._overhead_us is None:
            fn = cp.RawKernel(_EMPTY, "empty")
            x = cp.zeros(1, cp.float32)
            fn((1,), (32,), (x,))
            cp.cuda.Device().synchronize()
            n, samples = 200, []
            for _ in range(5):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                for _ in range(n):
                    fn((1,), (32,), (x,))
                b.record()
                b.synchronize()
                samples.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / n)
            self._overhead_us = float(np.median(samples))
        return self._overhead_us

    def compile(self, config, dtype: str = "float32", epilogue: str = "none") -> CompiledKernel:
        t0 = time.perf_counter()
        self.device.use()
        fam = self.family_for(config)
        fam.check_epilogue(epilogue)
        smem = fam.describe(config, dtype).smem_bytes
        try:
            mod = cp.RawModule(code=fam.render(config, "cuda", dtype, epilogue), options=("--std=c++14",))
            fn = mod.get_function(fam.kernel_name(config))
            if smem > self.spec.smem_per_block_bytes:
                fn.max_dynamic_shared_size_bytes = smem  # opt in above 48 KiB
            regs = int(fn.num_regs)
        except Exception as e:  # NVRTC or driver failure: a compile_error row
            return CompiledKernel(config, "compile_error", f"{type(e).__name__}: {e}"[:2000],
                                  compile_s=time.perf_counter() - t0, epilogue=epilogue)
        return CompiledKernel(config, "ok", "", regs, time.perf_counter() - t0, (fn, smem), epilogue)

    def vendor_time_us(self, m: int, n: int, k: int, protocol=None) -> float:
        """cuBLAS float32 time of C = A @ B through ``cupy.matmul``, µs, the
        outside reference for the kernel's own quality: warmed up, then the
        median over ``protocol.rounds`` samples of n back-to-back calls (n
        chosen as for our kernels), rotating the same buffer sets. TF32 is
        used only if ``CUPY_TF32=1`` is set; leave it unset for a float32
        reference."""
        protocol = protocol or Protocol()
        with self.workspace(Problem(m, n, k)) as ws:
            ws.sample_vendor(2)
            est = max(ws.sample_vendor(1), 1e-3)
            reps = int(min(protocol.max_launches, max(1, np.ceil(protocol.min_sample_us / est))))
            return float(np.median([ws.sample_vendor(reps) / reps for _ in range(protocol.rounds)]))

    def compile_many(self, configs, dtype="float32", progress=None, epilogue="none"):
        """Compile in parallel threads (NVRTC releases the GIL)."""
        from joblib import Parallel, delayed
        return Parallel(n_jobs=min(8, os.cpu_count() or 1), prefer="threads")(
            delayed(self.compile)(c, dtype, epilogue) for c in configs)

class _CudaWorkspace(DeviceWorkspace):
    def __init__(self, be: CudaBackend, prob: HostProblem):
        super().__init__(prob)
        self.be = be
        be.device.use()
        self.a = [cp.asarray(x) for x in prob.a_sets]
        self.b = [cp.asarray(x) for x in prob.b_sets]
        self.c = cp.empty((prob.m, prob.n), cp.float32)
        self.bias = () if prob.bias is None else (cp.asarray(prob.bias),)
        # float64 reference and tolerance of set 0, computed on the GPU (a
        # host reference of an 8192^3 product would take the CPU seconds).
        self.xp = cp
        bias = self.bias[0] if self.bias else None
        self.ref = apply_epilogue(self.a[0].astype(cp.float64) @ self.b[0].astype(cp.float64), bias,
                                  prob.epilogue, xp=cp)
        self.tol = tolerance(self.a[0], self.b[0], "float32", xp=cp, bias=bias)

    def _launch(self, kernel: CompiledKernel, s: int):
        fn, smem = kernel.handle
        c = kernel.config
        fn((self.blocks(c),), (c.threads,), (self.a[s], self.b[s], self.c, *self.mnk, *self.bias), shared_mem=smem)

    def _poison_output(self):
        self.c.fill(np.nan)

    def _read_output(self):
        return self.c

    def sample(self, kernel, n_launches):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(n_launches):
            self._launch_next(kernel)
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e3

    def sample_vendor(self, n_launches: int) -> float:
        """Device time of ``n_launches`` back-to-back ``cupy.matmul`` calls
        (cuBLAS) on the rotating buffer sets, microseconds."""
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(n_launches):
            s = self._next
            cp.matmul(self.a[s], self.b[s], out=self.c)
            self._next = (s + 1) % self.n_sets
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e3

    def close(self):
        self.a, self.b, self.c, self.ref, self.tol, self.bias = [], [], None, None, None, ()


CudaBackend._workspace_cls = _CudaWorkspace
