"""Backend registry: a name maps to an implementation imported on first use,
so a missing optional dependency (CuPy, PyOpenCL) fails only when that backend
is asked for."""
from __future__ import annotations

import importlib

from ..registry import lookup
from .base import Backend, CompiledKernel, Workspace

__all__ = ["Backend", "CompiledKernel", "Workspace", "BACKENDS", "BackendUnavailable", "get_backend", "available"]

BACKENDS = {
    "cuda": ("costlearn.backends.cuda", "CudaBackend",
             "pip install 'costlearn[cuda]'  (CuPy for your CUDA version, e.g. cupy-cuda12x)"),
    "opencl": ("costlearn.backends.opencl", "OpenCLBackend",
               "pip install 'pyopencl[pocl]'  (PoCL provides a CPU OpenCL device)"),
    "replay": ("costlearn.backends.replay", "ReplayBackend", ""),
}


class BackendUnavailable(RuntimeError):
    """The backend's library or device is missing."""


def _load(name: str):
    mod, cls, hint = lookup(BACKENDS, name, "backend (or 'auto')")
    try:
        return getattr(importlib.import_module(mod), cls)
    except ImportError as e:
        raise BackendUnavailable(f"backend {name!r} needs a missing library ({e}); install with: {hint}") from e


def available(name: str) -> bool:
    """True when backend ``name`` can be constructed here (library and device present)."""
    try:
        return bool(_load(name).is_available())
    except BackendUnavailable:
        return False


def get_backend(name: str = "auto", **kwargs) -> Backend:
    """Construct a backend by name.

    Parameters
    ----------
    name : {"auto", "cuda", "opencl", "replay"}
        ``"auto"`` picks ``cuda`` when CuPy sees a GPU, else ``opencl``.
    **kwargs
        Passed to the backend's constructor.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known ones).
    BackendUnavailable
        If the backend's library or device is missing (with an install hint).
    """
    if name == "auto":
        if available("cuda"):
            name = "cuda"
        elif available("opencl"):
            name = "opencl"
        else:
            raise BackendUnavailable(
                "no device found: neither CuPy with a CUDA GPU nor PyOpenCL with an OpenCL device; "
                f"install one of: {BACKENDS['cuda'][2]} | {BACKENDS['opencl'][2]}")
    return _load(name)(**kwargs)
