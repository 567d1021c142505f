"""OpenCL backend (PyOpenCL). PoCL's CPU device is the default where no GPU
exists, so the whole pipeline runs on real measurements on any machine."""
from __future__ import annotations

import json
import math
import os
import platform
import time

import numpy as np


def _allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):          # not Linux
        return list(range(os.cpu_count() or 1))


def pocl_settings(environ=None) -> dict:
    """The PoCL CPU-device settings costlearn measures under, from
    ``environ`` (``os.environ``), each a user's own value where set:

    - ``POCL_MAX_PTHREAD_COUNT``: worker threads; default one fewer than the
      CPUs this process may use (at least 1), so the host thread, which
      launches and times the kernels, has a core of its own instead of
      sharing one with a worker (with two workers on two cores the same
      config's times vary far more from call to call than with one:
      docs/results.md, "Measurement noise: before and after protocol 3").
    - ``POCL_AFFINITY``: ``1`` pins worker i to CPU i (PoCL's pthread device;
      PoCL docs, "Tuning pocl behavior with ENV variables"); default ``1``
      when the process may use CPUs 0..n-1, else ``0``.
    - ``host_cpu``: the CPU the host thread is pinned to while it measures
      (the last allowed CPU no worker is pinned to), or None.

    The result is part of the device's identity: ``DeviceSpec.extra
    ["settings"]``, the ``device_settings`` column, and the worker count in
    the device's slug (``ocl-...-1w``).

    Returns
    -------
    dict with keys ``POCL_MAX_PTHREAD_COUNT`` (int), ``POCL_AFFINITY`` (str)
    and ``host_cpu`` (int or None).

    Raises
    ------
    ValueError
        If ``POCL_MAX_PTHREAD_COUNT`` is set to something other than a
        positive integer.
    """
    env = os.environ if environ is None else environ
    cpus = _allowed_cpus()
    raw = env.get("POCL_MAX_PTHREAD_COUNT", "")
    if raw.strip():
        try:
            workers = int(raw)
        except ValueError:
            workers = 0
        if workers < 1:
            raise ValueError(f"POCL_MAX_PTHREAD_COUNT={raw!r}; must be a positive integer (worker threads)")
    else:
        workers = max(1, len(cpus) - 1)
    contiguous = cpus == list(range(len(cpus)))
    affinity = env.get("POCL_AFFINITY", "").strip() or ("1" if contiguous else "0")
    free = [c for c in cpus if affinity != "1" or c >= workers]
    host = free[-1] if affinity == "1" and free and workers < len(cpus) else None
    return {"POCL_MAX_PTHREAD_COUNT": workers, "POCL_AFFINITY": affinity, "host_cpu": host}


# PoCL reads its settings when it initialises, at the first OpenCL call of
# the process: set them before pyopencl is imported here.
SETTINGS = pocl_settings()
"""The settings this process's PoCL was started with (:func:`pocl_settings`);
a process that made an OpenCL call before importing this module keeps the
settings it had (the backend then reports the worker count PoCL uses)."""
for _k in ("POCL_MAX_PTHREAD_COUNT", "POCL_AFFINITY"):
    os.environ.setdefault(_k, str(SETTINGS[_k]))

try:
    import pyopencl as cl
except ImportError as _e:  # pragma: no cover - exercised only without pyopencl
    raise ImportError(f"PyOpenCL is not installed ({_e})") from _e

from costlearn.core.checks import env_index  # noqa: E402 (after the PoCL settings)
from costlearn.core.device import DeviceSpec  # noqa: E402 (after the PoCL settings)
from costlearn.families import get_family  # noqa: E402 (after the PoCL settings)
from costlearn.collect.backends import BackendUnavailable  # noqa: E402 (after the PoCL settings)
from costlearn.collect.backends.base import Backend, CompiledKernel, DeviceWorkspace, HostProblem  # noqa: E402 (after the PoCL settings)

__all__ = ["OpenCLBackend", "pocl_settings", "SETTINGS"]

_PROBE_SRC = """
__kernel void probe(__global float* x) { }
__kernel void copy(__global const float4* restrict a, __global float4* restrict b) {
    size_t i = get_global_id(0); b[i] = a[i];
}
"""


def _compiler_error(e: Exception) -> str:
    """The compiler's own ``error:`` lines of a failed build, else its first line."""
    lines = [ln.strip() for ln in str(e).splitlines()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return "; ".join(dict.fromkeys(errors)) or next((ln for ln in lines if ln), type(e).__name__)


def _open(device):
    """Context and probe program on ``device``; raises ``cl.Error`` when its
    compiler cannot build the probe."""
    ctx = cl.Context([device])
    return ctx, cl.Program(ctx, _PROBE_SRC).build()


_NO_COMPILER_HINT = (
    "A PoCL whose LLVM predates this CPU asks for target CPU 'generic' and builds nothing (the PoCL "
    "wheel's LLVM 14 on AMD Zen 5, for one); install your distribution's PoCL (Debian/Ubuntu: "
    "apt install pocl-opencl-icd), which PyOpenCL finds beside the wheel's")


def _pick_device(device_index: int | None):
    """The OpenCL device to measure on, with its context and probe program.

    Without ``device_index``: the first GPU, else the first device, whose
    compiler builds the probe kernel. A device whose compiler fails is passed
    over: two PoCLs can be installed side by side and only one may know the
    CPU.

    Returns
    -------
    (device, context, program)

    Raises
    ------
    BackendUnavailable
        No OpenCL platform or device, or no device whose compiler builds a
        kernel (each device's compiler error is named).
    ValueError
        ``device_index`` out of range.
    """
    devices = []
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:   # no ICD loader / no platform
        raise BackendUnavailable(f"no OpenCL platform ({e}); install PoCL: pip install 'pyopencl[pocl]'") from e
    for p in platforms:
        try:
            devices += p.get_devices()
        except cl.Error:
            continue
    if not devices:
        raise BackendUnavailable("PyOpenCL found no OpenCL device; install PoCL: pip install 'pyopencl[pocl]'")
    if device_index is not None:
        if not 0 <= device_index < len(devices):
            raise ValueError(f"device_index={device_index}; this machine has OpenCL devices "
                             f"0..{len(devices) - 1}: {[d.name for d in devices]}")
        candidates = [devices[device_index]]
    else:
        gpus = [d for d in devices if d.type & cl.device_type.GPU]
        candidates = gpus + [d for d in devices if d not in gpus]
    failures = []
    for d in candidates:
        try:
            return (d, *_open(d))
        except cl.Error as e:
            failures.append(f"{d.name.strip()!r} ({d.platform.version.strip()}): {_compiler_error(e)}")
    raise BackendUnavailable("no OpenCL device here compiles a kernel: " + " | ".join(failures)
                             + f". {_NO_COMPILER_HINT}")


class OpenCLBackend(Backend):
    """Compile and time ``gemm`` configs on an OpenCL device.

    Parameters
    ----------
    device_index : int, optional
        Index into all OpenCL devices of all platforms; default: the first
        GPU, else the first device (PoCL's CPU device on a machine without
        GPU), whose compiler builds a kernel. ``COSTLEARN_OPENCL_DEVICE``
        sets it from the environment.

    Raises
    ------
    BackendUnavailable
        No device, or none whose compiler builds a kernel (the message names
        each compiler's error and how to get a working PoCL).
    """

    name = "opencl"

    @staticmethod
    def is_available() -> bool:
        try:
            return any(p.get_devices() for p in cl.get_platforms())
        except cl.Error:
            return False

    def __init__(self, device_index: int | None = None):
        if device_index is None:
            device_index = env_index("COSTLEARN_OPENCL_DEVICE")
        self._device_index = device_index
        self.device, self.ctx, probe = _pick_device(device_index)
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self._probe = probe.probe
        self._copy = probe.copy
        self._warp = int(self._probe.get_work_group_info(
            cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, self.device))
        self._spec = None
        self._overhead_us = None
        # Compiles first-launch their kernel on self.queue, the queue samples
        # are timed on, so compilation never overlaps measurement here.
        self.overlap_compile = False

    # -- description --------------------------------------------------------
    def _bandwidth_gbps(self) -> float:
        """Measured copy bandwidth (read + write bytes / time), GB/s."""
        n4 = (64 << 20) // 16
        a = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=n4 * 16)
        b = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=n4 * 16)
        cl.enqueue_fill_buffer(self.queue, a, np.float32(1), 0, n4 * 16)
        best = math.inf
        for _ in range(4):
            ev = self._copy(self.queue, (n4,), None, a, b)
            ev.wait()
            best = min(best, (ev.profile.end - ev.profile.start) * 1e-9)
        return 2 * n4 * 16 / max(best, 1e-9) / 1e9

    @property
    def spec(self) -> DeviceSpec:
        if self._spec is None:
            d = self.device
            is_cpu = bool(d.type & cl.device_type.CPU)
            lanes = max(1, int(d.native_vector_width_float))
            peak = d.max_compute_units * d.max_clock_frequency * lanes * 2 / 1000.0
            local = int(d.local_mem_size)
            self._spec = DeviceSpec(
                name=d.name.strip(), api="opencl", multiprocessors=int(d.max_compute_units),
                warp_size=self._warp, max_threads_per_block=int(d.max_work_group_size),
                max_threads_per_mp=int(d.max_work_group_size),
                # A CPU compute unit runs one work-group at a time.
                max_blocks_per_mp=1 if is_cpu else 16,
                smem_per_block_bytes=local, smem_per_block_optin_bytes=local,
                smem_per_mp_bytes=local, smem_reserved_per_block_bytes=0,
                registers_per_mp=None, max_registers_per_thread=None, register_alloc_unit=1,
                l2_bytes=int(d.global_mem_cache_size) or (1 << 20),
                peak_gflops=float(peak), memory_bandwidth_gbps=round(self._bandwidth_gbps(), 1),
                compute_capability=d.opencl_c_version, driver_version=d.driver_version,
                device_type="cpu" if is_cpu else ("gpu" if d.type & cl.device_type.GPU else "accelerator"),
                source=("queried: OpenCL device info; peak = compute units x max clock x native "
                        "float vector width x 2; bandwidth measured by a 64 MiB copy kernel"),
                extra=dict(settings=self.settings) if is_cpu else {},
            )
        return self._spec

    @property
    def settings(self) -> dict:
        """The settings this device is measured under (CPU devices):
        :data:`SETTINGS` with the worker count PoCL reports using (its
        compute units), which differs from the one asked for when PoCL was
        started before this module set it."""
        workers = int(self.device.max_compute_units)
        host = SETTINGS["host_cpu"] if workers == SETTINGS["POCL_MAX_PTHREAD_COUNT"] else None
        return dict(SETTINGS, POCL_MAX_PTHREAD_COUNT=workers, host_cpu=host)

    def provenance(self) -> dict:
        d = self.device
        settings = json.dumps(self.settings, sort_keys=True) if d.type & cl.device_type.CPU else ""
        return dict(device_settings=settings, device_name=d.name.strip(), device_slug=self.spec.slug, api="opencl",
                    compute_capability=d.opencl_c_version, device_version=d.version,
                    multiprocessors=int(d.max_compute_units), driver_version=d.driver_version,
                    runtime_version=d.platform.version, library_version=f"pyopencl {cl.VERSION_TEXT}",
                    host=platform.node())

    def launch_overhead_us(self) -> float:
        if self._overhead_us is None:
            buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=64)
            self._probe(self.queue, (self._warp,), (self._warp,), buf).wait()
            n = 50
            samples = []
            for _ in range(5):
                evs = [self._probe(self.queue, (self._warp,), (self._warp,), buf) for _ in range(n)]
                evs[-1].wait()
                samples.append((evs[-1].profile.end - evs[0].profile.start) * 1e-3 / n)
            self._overhead_us = float(np.median(samples))
        return self._overhead_us

    # -- compile --------------------------------------------------------------
    def compile(self, config, dtype: str = "float32", epilogue: str = "none") -> CompiledKernel:
        t0 = time.perf_counter()
        fam = self.family_for(config)
        fam.check_epilogue(epilogue)
        smem = fam.describe(config, dtype).smem_bytes
        if smem > self.device.local_mem_size:
            return CompiledKernel(config, "compile_error",
                                  f"needs {smem} B local memory, device has {self.device.local_mem_size} B",
                                  epilogue=epilogue)
        try:
            prg = cl.Program(self.ctx, fam.render(config, "opencl", dtype, epilogue)).build()
            knl = getattr(prg, fam.kernel_name(config))
            wg = knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)
            if config.threads > wg:
                return CompiledKernel(config, "compile_error",
                                      f"kernel allows {wg} work-items per group, config needs {config.threads}",
                                      compile_s=time.perf_counter() - t0, epilogue=epilogue)
            # PoCL and other drivers finish code generation at the first
            # launch; do it now so compile time is not charged to timing.
            tiny = self._tiny_buffers()
            knl.set_args(*tiny, np.int32(1), np.int32(1), np.int32(1), *([] if epilogue == "none" else [tiny[0]]))
            cl.enqueue_nd_range_kernel(self.queue, knl, (config.threads,), (config.threads,)).wait()
        except cl.Error as e:
            return CompiledKernel(config, "compile_error", str(e)[:2000], compile_s=time.perf_counter() - t0,
                                  epilogue=epilogue)
        return CompiledKernel(config, "ok", "", None, time.perf_counter() - t0, knl, epilogue)

    def compile_many(self, configs, dtype="float32", progress=None, epilogue="none", n_jobs=None):
        """Compile ``configs``, generating code in parallel worker processes.

        Each joblib worker builds and first-launches a share of the configs on
        its own context, which fills the driver's on-disk kernel cache (PoCL's
        ``kcache``); the configs are then built here from that cache. Where
        the driver keeps no cache this costs one extra build per config.
        """
        configs = list(configs)
        n_jobs = n_jobs or min(os.cpu_count() or 1, 8)
        if n_jobs > 1 and len(configs) > 2 and self.device.type & cl.device_type.CPU:
            from joblib import Parallel, delayed
            ids = [c.config_id for c in configs]
            chunks = [ids[i::n_jobs] for i in range(n_jobs)]
            family = self.family_for(configs[0]).name
            Parallel(n_jobs=n_jobs, backend="loky")(
                delayed(_warm_cache)(family, chunk, dtype, self._device_index, epilogue) for chunk in chunks if chunk)
        return super().compile_many(configs, dtype, progress, epilogue)

    def _tiny_buffers(self):
        if getattr(self, "_tiny", None) is None:
            self._tiny = [cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=16) for _ in range(3)]
        return self._tiny

class _OpenCLWorkspace(DeviceWorkspace):
    def __init__(self, be: OpenCLBackend, prob: HostProblem):
        super().__init__(prob)
        self.be = be
        # The host thread (the one that launches and waits) runs on its own
        # CPU while this workspace measures: pinned to SETTINGS["host_cpu"].
        self._affinity = None
        host = be.settings.get("host_cpu") if be.device.type & cl.device_type.CPU else None
        if host is not None:
            try:
                self._affinity = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {host})
            except (AttributeError, OSError):
                self._affinity = None
        mf = cl.mem_flags
        self.a = [cl.Buffer(be.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x) for x in prob.a_sets]
        self.b = [cl.Buffer(be.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x) for x in prob.b_sets]
        self.c_host = np.empty((prob.m, prob.n), np.float32)
        self.c = cl.Buffer(be.ctx, mf.READ_WRITE, size=self.c_host.nbytes)
        self.bias = () if prob.bias is None else \
            (cl.Buffer(be.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=prob.bias),)

    def _launch(self, kernel: CompiledKernel, s: int):
        c = kernel.config
        knl = kernel.handle
        knl.set_args(self.a[s], self.b[s], self.c, *self.mnk, *self.bias)
        return cl.enqueue_nd_range_kernel(self.be.queue, knl, (self.blocks(c) * c.threads,), (c.threads,))

    def _poison_output(self):
        self.c_host.fill(np.nan)
        cl.enqueue_copy(self.be.queue, self.c, self.c_host)

    def _read_output(self):
        cl.enqueue_copy(self.be.queue, self.c_host, self.c)
        self.be.queue.finish()
        return self.c_host

    def sample(self, kernel, n_launches):
        # Device timestamps of the first launch's start and the last's end.
        first = last = self._launch_next(kernel)
        for _ in range(n_launches - 1):
            last = self._launch_next(kernel)
        last.wait()
        return (last.profile.end - first.profile.start) * 1e-3

    def close(self):
        for buf in self.a + self.b + [self.c, *self.bias]:
            buf.release()
        self.a, self.b, self.bias = [], [], ()
        if self._affinity is not None:
            try:
                os.sched_setaffinity(0, self._affinity)
            except OSError:
                pass
            self._affinity = None


OpenCLBackend._workspace_cls = _OpenCLWorkspace


def _warm_cache(family, config_ids, dtype, device_index, epilogue="none"):
    """joblib worker: compile configs in a fresh process (fills the driver's
    kernel cache); returns how many compiled."""
    be = OpenCLBackend(device_index)
    fam = get_family(family)
    return sum(be.compile(fam.config_from_id(c), dtype, epilogue).status == "ok" for c in config_ids)
