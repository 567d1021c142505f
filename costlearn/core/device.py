"""Device description: the hardware limits and peaks the tile space and the
features are computed from.

A :class:`DeviceSpec` is a frozen value. It is read from the live device by a
backend (``costlearn.collect.backends``) or taken from a named preset, so that the
tile space of a GPU that is not present can still be enumerated offline.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from costlearn.core.dtypes import get_dtype
from costlearn.core.errors import CostlearnError
from costlearn.core.registry import Registry
from costlearn.core.checks import check_instance, check_int, check_real, shown

__all__ = ["DeviceSpec", "PRESETS", "PRESET_SOURCES", "IDENTITY_FIELDS", "preset", "device_slug",
           "DeviceFileError", "MAX_DEVICE_FILE_BYTES", "MAX_DEVICE_COUNT", "MAX_DEVICE_BYTES"]

MAX_DEVICE_FILE_BYTES = 1 << 20
"""The largest ``device.json`` read (one is about 1 KB)."""
MAX_DEVICE_COUNT = 2**31 - 1
"""The largest count a DeviceSpec holds (multiprocessors, threads, registers): a product of two fits 64 bits."""
MAX_DEVICE_BYTES = 2**40
"""The largest size in bytes a DeviceSpec holds (shared memory, L2): 1 TiB."""


class DeviceFileError(CostlearnError, ValueError):
    """A ``device.json`` that describes no device (:meth:`DeviceSpec.from_file`)."""


@dataclass(frozen=True)
class DeviceSpec:
    """Limits and peaks of one device (one device class).

    Parameters
    ----------
    name : str
        Device name as the driver reports it, e.g. ``"NVIDIA H200"``.
    api : {"cuda", "opencl"}
        Programming interface the kernels are rendered for.
    multiprocessors : int
        Streaming multiprocessors (CUDA) or compute units (OpenCL).
    warp_size : int
        Threads that execute in lock-step; a block's thread count must be a
        whole multiple of it. 32 on NVIDIA; on an OpenCL CPU device the
        kernel's preferred work-group size multiple.
    max_threads_per_block : int
        Largest block (work-group) size.
    max_threads_per_mp : int
        Resident threads per multiprocessor.
    max_blocks_per_mp : int
        Resident blocks per multiprocessor.
    smem_per_block_bytes : int
        Shared (local) memory one block may use without opting in
        (48 KiB on NVIDIA).
    smem_per_block_optin_bytes : int
        Shared memory one block may use after opting in (CUDA
        ``cudaFuncAttributeMaxDynamicSharedMemorySize``); equal to
        ``smem_per_block_bytes`` where there is no opt-in.
    smem_per_mp_bytes : int
        Shared memory per multiprocessor.
    smem_reserved_per_block_bytes : int
        Shared memory the runtime reserves for each resident block (1 KiB
        on compute capability 8.0 and later), counted against
        ``smem_per_mp_bytes``.
    registers_per_mp : int or None
         32-bit registers per multiprocessor; ``None`` where the device has
        no register file visible to the programming model (OpenCL CPU).
    max_registers_per_thread : int or None
        Register cap per thread (255 on NVIDIA); ``None`` as above.
    register_alloc_unit : int
        Registers are allocated per warp in units of this many (256 on
        NVIDIA cc >= 5.0).
    l2_bytes : int
        Last-level cache size, used to size the rotating input buffers.
    peak_gflops : float
        Peak float32 (non-tensor) throughput, GFLOP/s (fused multiply-add
        counted as 2).
    peak_gflops_tf32, peak_gflops_fp16, peak_gflops_bf16 : float or None
        Dense tensor-core peaks for TF32, float16 and bfloat16 inputs with
        float32 accumulation, GFLOP/s; None where the device has none or it
        is unknown (:meth:`peak_gflops_for` then refuses that dtype).
    memory_bandwidth_gbps : float
        Peak (preset) or measured (live OpenCL) DRAM bandwidth, GB/s.
    compute_capability : str
        ``"9.0"`` on CUDA; the OpenCL C version on OpenCL.
    driver_version : str
        Driver version string, ``""`` for presets.
    source : str
        Where the numbers come from (``"preset: ..."`` or ``"queried: ..."``).
    device_type : {"gpu", "cpu", "accelerator"}
        Kind of device; decides default shape bounds and pool size (a CPU
        runs a GEMM of 8192 a side far too slowly to sample it).

    Raises
    ------
    ValueError
        Naming the field, its value (cut) and what is allowed: a count that
        is no int in [1, :data:`MAX_DEVICE_COUNT`], a size in bytes no int in
        [1, :data:`MAX_DEVICE_BYTES`], a peak that is no finite positive
        number, an unknown ``api`` or ``device_type``, a blank name.

    Notes
    -----
    The register and shared-memory figures for NVIDIA presets are those of
    the CUDA C++ Programming Guide, "Technical Specifications per Compute
    Capability"; peaks come from the vendor datasheets named in
    :data:`PRESETS`.
    """

    name: str
    api: str
    multiprocessors: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_mp: int
    max_blocks_per_mp: int
    smem_per_block_bytes: int
    smem_per_block_optin_bytes: int
    smem_per_mp_bytes: int
    smem_reserved_per_block_bytes: int
    registers_per_mp: int | None
    max_registers_per_thread: int | None
    register_alloc_unit: int
    l2_bytes: int
    peak_gflops: float
    memory_bandwidth_gbps: float
    compute_capability: str = ""
    driver_version: str = ""
    source: str = ""
    device_type: str = "gpu"
    peak_gflops_tf32: float | None = None
    peak_gflops_fp16: float | None = None
    peak_gflops_bf16: float | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"DeviceSpec.name={shown(self.name)}; must be a non-empty str")
        if self.api not in ("cuda", "opencl"):
            raise ValueError(f"DeviceSpec.api={shown(self.api)}; allowed: 'cuda', 'opencl'")
        if self.device_type not in ("gpu", "cpu", "accelerator"):
            raise ValueError(f"DeviceSpec.device_type={shown(self.device_type)}; allowed: 'gpu', 'cpu', 'accelerator'")
        for f in ("multiprocessors", "warp_size", "max_threads_per_block", "max_threads_per_mp", "max_blocks_per_mp",
                  "register_alloc_unit"):
            check_int(f"DeviceSpec.{f}", getattr(self, f), 1, MAX_DEVICE_COUNT)
        for f in ("smem_per_block_bytes", "smem_per_block_optin_bytes", "smem_per_mp_bytes", "l2_bytes"):
            check_int(f"DeviceSpec.{f}", getattr(self, f), 1, MAX_DEVICE_BYTES)
        check_int("DeviceSpec.smem_reserved_per_block_bytes", self.smem_reserved_per_block_bytes, 0, MAX_DEVICE_BYTES)
        for f in ("registers_per_mp", "max_registers_per_thread"):
            if getattr(self, f) is not None:
                check_int(f"DeviceSpec.{f}", getattr(self, f), 1, MAX_DEVICE_COUNT)
        for f in ("peak_gflops", "memory_bandwidth_gbps") + _TENSOR_PEAKS:
            if getattr(self, f) is not None or f not in _TENSOR_PEAKS:
                check_real(f"DeviceSpec.{f}", getattr(self, f), 0, strict=True)

    def differences(self, other: "DeviceSpec", settings: bool = True) -> list[str]:
        """The :data:`IDENTITY_FIELDS` in which ``other`` differs from this
        device, as ``"field a != b"`` strings (empty when they agree), and
        (``settings``) the backend settings it is measured under.

        Two devices of one class (one :attr:`slug`) can still differ: another
        CPU model reports the same OpenCL name with other core and cache
        counts, another driver generates other code, other backend settings
        (``extra["settings"]``: PoCL's thread pinning) time differently.
        Measured figures (the OpenCL bandwidth) vary run to run and are not
        compared.

        Parameters
        ----------
        other : DeviceSpec
        settings : bool
            Also compare ``extra["settings"]``. They belong to the process
            that opened the device (PoCL's pinning follows the CPUs it may
            use), so a record another process left is compared without them.

        Returns
        -------
        list of str
            One entry per differing field, this device's value first.

        Raises
        ------
        TypeError
            If ``other`` is not a DeviceSpec.
        """
        check_instance("other", other, DeviceSpec, "a DeviceSpec")
        out = [f"{f} {getattr(self, f)!r} != {getattr(other, f)!r}" for f in IDENTITY_FIELDS
               if getattr(self, f) != getattr(other, f)]
        mine, theirs = self.extra.get("settings"), other.extra.get("settings")
        if settings and mine != theirs:
            out.append(f"settings {mine!r} != {theirs!r}")
        return out

    def peak_gflops_for(self, dtype: str) -> float:
        """Peak throughput for inputs of ``dtype``, GFLOP/s: the float32 peak
        for ``float32``, the dense tensor-core peak for ``tfloat32``,
        ``float16`` and ``bfloat16`` (:data:`costlearn.core.dtypes.DTYPES`'s
        ``peak``).

        Raises
        ------
        ValueError
            If ``dtype`` is unknown, or this device gives no peak for it.
        """
        field_name = _PEAK_FIELD[get_dtype(dtype).peak]
        v = getattr(self, field_name)
        if v is None:
            raise ValueError(f"{self.name} has no {dtype} peak ({field_name} is None); give one in its "
                             "DeviceSpec or use a dtype it supports")
        return float(v)

    @property
    def slug(self) -> str:
        """Short folder name for this device class (``data/<slug>/``,
        ``models/<slug>/``); see :func:`device_slug`."""
        slug = device_slug(self.name, self.api)
        if self.api == "opencl" and self.device_type == "cpu":
            # A CPU device's times depend on how many worker threads run it
            # (costlearn.collect.backends.opencl.pocl_settings): its own class.
            slug += f"-{self.multiprocessors}w"
        return slug

    def to_dict(self) -> dict:
        """Plain-JSON form (round-trips through :meth:`from_dict`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceSpec":
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        if not isinstance(d, dict):
            raise ValueError(f"a DeviceSpec must be a JSON object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown DeviceSpec fields {shown(sorted(map(str, unknown)), 200)}; known: "
                             f"{sorted(names)}")
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = required - set(d)
        if missing:
            raise ValueError(f"DeviceSpec lacks fields {sorted(missing)}")
        return cls(**d)

    @classmethod
    def from_file(cls, path) -> "DeviceSpec":
        """The device a ``device.json`` describes (:meth:`from_dict` of its JSON).

        Parameters
        ----------
        path : path

        Returns
        -------
        DeviceSpec

        Raises
        ------
        DeviceFileError
            Naming the file and why: it is not a regular file (a folder, a
            FIFO), larger than :data:`MAX_DEVICE_FILE_BYTES`, not UTF-8, not
            JSON, nested deeper than the interpreter reads, holding an
            integer over its digit limit, or not a valid description.
        """
        path = Path(path)
        try:
            if not path.is_file():
                raise ValueError("not a regular file" if path.exists() else "no such file")
            size = path.stat().st_size
            if size > MAX_DEVICE_FILE_BYTES:
                raise ValueError(f"{size} bytes; a device description has at most {MAX_DEVICE_FILE_BYTES}")
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except RecursionError:
            why = "JSON nested too deep to read"
        except OSError as e:
            why = f"cannot read ({e.strerror or e})"
        except (ValueError, TypeError) as e:            # JSON, UTF-8, a digit limit, a field's check
            why = str(e)
        why = why if len(why) <= 300 else why[:297] + "..."
        raise DeviceFileError(f"{path}: not a valid device description ({why})")

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON with sorted keys (``device.json``)."""
        return json.dumps(self.to_dict(), sort_keys=True)


_TENSOR_PEAKS = ("peak_gflops_tf32", "peak_gflops_fp16", "peak_gflops_bf16")
_PEAK_FIELD = {"fp32": "peak_gflops", "tf32": "peak_gflops_tf32", "fp16": "peak_gflops_fp16",
               "bf16": "peak_gflops_bf16"}


# --- presets -----------------------------------------------------------------
# Sources:
#  [CG]  NVIDIA CUDA C++ Programming Guide, "Compute Capabilities", Table
#        "Technical Specifications per Compute Capability" (cc 8.0, 9.0):
#        64 K registers/SM, 255 registers/thread, 2048 threads/SM, 32 blocks/SM,
#        shared memory 164 KiB/SM and 163 KiB/block opt-in (8.0),
#        228 KiB/SM and 227 KiB/block opt-in (9.0), 1 KiB reserved per block.
#  [H200] NVIDIA H200 Tensor Core GPU datasheet (SXM): 4.8 TB/s HBM3e,
#        67 TFLOPS FP32; 132 SMs (GH100, same SM count as H100 SXM5); tensor
#        peaks as H100 SXM5 (same GH100 SMs and clocks).
#  [H100] NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s, 67 TFLOPS
#        FP32; NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs,
#        50 MB L2, dense peaks TF32 494.7, FP16/BF16 989.4 TFLOPS (the
#        datasheet's 989 / 1,979 TFLOPS are with 2:4 sparsity).
#  [A100] NVIDIA A100 datasheet (SXM4 80GB): 2,039 GB/s, 19.5 TFLOPS FP32,
#        dense TF32 156, FP16/BF16 312 TFLOPS (312 / 624 with sparsity);
#        A100 architecture whitepaper: 108 SMs, 40 MB L2.
_HOPPER = dict(
    api="cuda", warp_size=32, max_threads_per_block=1024, max_threads_per_mp=2048,
    max_blocks_per_mp=32, smem_per_block_bytes=48 * 1024,
    smem_per_block_optin_bytes=227 * 1024, smem_per_mp_bytes=228 * 1024,
    smem_reserved_per_block_bytes=1024, registers_per_mp=65536,
    max_registers_per_thread=255, register_alloc_unit=256,
    compute_capability="9.0", peak_gflops_tf32=494_700.0, peak_gflops_fp16=989_400.0,
    peak_gflops_bf16=989_400.0,
)

PRESETS = Registry("device preset", {
    "h200": DeviceSpec(name="NVIDIA H200", multiprocessors=132, l2_bytes=50 * 1024 * 1024,
                       peak_gflops=67_000.0, memory_bandwidth_gbps=4_800.0,
                       source="preset: [CG] cc 9.0; [H200] datasheet SXM; tensor peaks [H100] whitepaper",
                       **_HOPPER),
    "h100": DeviceSpec(name="NVIDIA H100 80GB HBM3", multiprocessors=132,
                       l2_bytes=50 * 1024 * 1024, peak_gflops=67_000.0,
                       memory_bandwidth_gbps=3_350.0,
                       source="preset: [CG] cc 9.0; [H100] datasheet SXM5 and whitepaper", **_HOPPER),
    "a100": DeviceSpec(name="NVIDIA A100-SXM4-80GB", api="cuda", multiprocessors=108,
                       warp_size=32, max_threads_per_block=1024, max_threads_per_mp=2048,
                       max_blocks_per_mp=32, smem_per_block_bytes=48 * 1024,
                       smem_per_block_optin_bytes=163 * 1024,
                       smem_per_mp_bytes=164 * 1024, smem_reserved_per_block_bytes=1024,
                       registers_per_mp=65536, max_registers_per_thread=255,
                       register_alloc_unit=256, l2_bytes=40 * 1024 * 1024,
                       peak_gflops=19_500.0, memory_bandwidth_gbps=2_039.0,
                       peak_gflops_tf32=156_000.0, peak_gflops_fp16=312_000.0,
                       peak_gflops_bf16=312_000.0, compute_capability="8.0",
                       source="preset: [CG] cc 8.0; [A100] datasheet SXM4 80GB"),
})


PRESET_SOURCES = {
    "[CG]": "NVIDIA CUDA C++ Programming Guide, Technical Specifications per Compute Capability",
    "[H200]": "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
    "[H100]": "NVIDIA H100 Tensor Core GPU datasheet (SXM5) and H100 architecture whitepaper",
    "[A100]": "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB) and A100 architecture whitepaper",
}
"""The documents the presets' ``source`` tags name (details in the comments
above :data:`PRESETS`)."""


def preset(name: str) -> DeviceSpec:
    """Return the preset :class:`DeviceSpec` called ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not a preset; the message lists the presets.
    """
    return PRESETS.get(str(name).lower())


IDENTITY_FIELDS = ("name", "api", "multiprocessors", "l2_bytes", "smem_per_mp_bytes", "max_threads_per_block",
                   "compute_capability", "driver_version")
"""DeviceSpec fields that tell two devices of one class apart
(:meth:`DeviceSpec.differences`): what the device reports, not what is
measured."""


def device_slug(name: str, api: str = "cuda") -> str:
    """Folder name for a device class.

    An NVIDIA device whose name contains a preset's key (``H200``,
    ``H100``, ``A100``) maps to that key, so ``data/h200`` holds every
    H200's measurements; any other device maps to its lower-cased name with
    runs of other characters replaced by ``-``, prefixed by ``ocl-`` for
    OpenCL devices (``"pthread-AMD EPYC"`` -> ``"ocl-pthread-amd-epyc"``).
    """
    low = name.lower()
    if api == "cuda":
        for key in PRESETS:
            if re.search(rf"\b{key}\b", low):
                return key
    slug = re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "device"
    return f"ocl-{slug}" if api == "opencl" else slug
