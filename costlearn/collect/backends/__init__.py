"""Backend registry: a name maps to an implementation imported on first use,
so a missing optional dependency (CuPy, PyOpenCL) fails only when that backend
is asked for."""
from __future__ import annotations

import json

from costlearn.families import FAMILIES, get_family
from costlearn.core.registry import Registry, Unavailable
from costlearn.core.files import atomic_write
from costlearn.core.keyed_cache import LOCAL_DEVICE_FILE, cache_dir, recorded_local_device
from costlearn.collect.backends.base import Backend, CompiledKernel, Workspace

__all__ = ["Backend", "CompiledKernel", "Workspace", "BACKENDS", "BackendUnavailable", "get_backend", "available",
           "auto_order", "auto_name", "measuring_backends", "local_device", "local_record", "record_local_device"]


class BackendUnavailable(Unavailable):
    """The backend's library or device is missing."""


BACKENDS = Registry("backend", {
    "cuda": "costlearn.collect.backends.cuda:CudaBackend",
    "opencl": "costlearn.collect.backends.opencl:OpenCLBackend",
    "replay": "costlearn.collect.backends.replay:ReplayBackend",
    "triton": "costlearn.collect.backends.triton:TritonBackend",
}, hints={"triton": "pip install 'costlearn[triton]'  (PyTorch with CUDA and Triton, on an NVIDIA GPU machine)",
          "cuda": "pip install 'costlearn[cuda]'  (CuPy for your CUDA version, e.g. cupy-cuda12x)",
          "opencl": "pip install 'pyopencl[pocl]'  (PoCL provides a CPU OpenCL device)"},
    unavailable=BackendUnavailable)
"""Registered backends (``auto`` picks cuda, else opencl)."""

def auto_order(family: str = "gemm") -> tuple:
    """The backends that measure ``family`` on a device, in the order
    ``auto`` tries them (the family's :attr:`~costlearn.families.KernelFamily.backends`).

    Raises
    ------
    ValueError
        If ``family`` is not registered, or no backend measures it.
    """
    order = get_family(family).backends
    if not order:
        raise ValueError(f"family={family!r}: no backend measures it on a device (it is imported or replayed only)")
    return order


def measuring_backends() -> tuple:
    """Every backend some registered family is measured by, in the order of
    the families' :func:`auto_order` (the choices of ``--device``)."""
    return tuple(dict.fromkeys(b for name in FAMILIES.names() for b in get_family(name).backends))


def auto_name(family: str = "gemm") -> str:
    """``"auto"``, or the one backend that measures ``family`` when it has
    only one (so a name can be handed to other processes unresolved)."""
    order = auto_order(family)
    return order[0] if len(order) == 1 else "auto"


def available(name: str) -> bool:
    """True when backend ``name`` can be constructed here (library and device present)."""
    try:
        return bool(BACKENDS.get(name).is_available())
    except BackendUnavailable:
        return False


def get_backend(name: str = "auto", family: str = "gemm", **kwargs) -> Backend:
    """Construct a backend by name.

    Parameters
    ----------
    name : {"auto", "cuda", "opencl", "triton", "replay"}
        ``"auto"`` picks the first available of :func:`auto_order` for
        ``family``: for ``gemm``, ``cuda`` when CuPy sees a GPU, else
        ``opencl``; for ``triton_mm``, ``triton``.
    family : str
        The kernel family to measure (only ``auto`` looks at it).
    **kwargs
        Passed to the backend's constructor.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known ones), or
        ``name`` is ``auto`` and no backend measures ``family``.
    BackendUnavailable
        If the backend's library or device is missing (with an install hint).
    """
    auto = name == "auto"
    if auto:
        order = auto_order(family)
        for candidate in order:
            if available(candidate):
                name = candidate
                break
        else:
            if len(order) > 1:
                raise BackendUnavailable(
                    f"no device found for the {family!r} family: none of the backends {list(order)} is available "
                    "here; install one of: " + " | ".join(BACKENDS.hint(b) for b in order))
            return BACKENDS.get(order[0])(**kwargs)     # raises BackendUnavailable with its own hint
    elif name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {['auto', *BACKENDS.names()]}")
    backend = BACKENDS.get(name)(**kwargs)
    if auto:
        record_local_device(backend.spec)
    return backend


def record_local_device(spec) -> None:
    """Remember ``spec`` as this machine's device (best effort: an unwritable
    cache is ignored)."""
    try:
        atomic_write(cache_dir() / LOCAL_DEVICE_FILE, json.dumps(local_record(spec), default=str))
    except OSError:
        pass


def local_device(probe: bool = True) -> dict | None:
    """This machine's device as ``{"slug", "name", "api", "spec"}`` (spec:
    :meth:`DeviceSpec.to_dict`, absent from records older than it): the record
    :func:`get_backend` keeps in the user cache, else (with ``probe``) found
    by opening the ``auto`` backend once (then recorded); None when there is
    no device or nothing is known.

    Never called on :func:`costlearn.predict_best`'s path: the CLI uses it to
    choose a default model and to say when a model is another device's.
    """
    recorded = recorded_local_device()
    if recorded is not None:
        return recorded
    if not probe:
        return None
    try:
        spec = get_backend("auto").spec
    except Exception:  # no library, no device: nothing is known
        return None
    return local_record(spec)


def local_record(spec) -> dict:
    """The record of a device :func:`local_device` returns:
    ``{"slug", "name", "api", "spec"}`` of DeviceSpec ``spec``."""
    return dict(slug=spec.slug, name=spec.name, api=spec.api, spec=spec.to_dict())
