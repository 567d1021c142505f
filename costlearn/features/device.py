"""Device descriptors: the columns that let one model learn from the rows of
several devices (:class:`costlearn.model.transfer.MultiDeviceXGBModel`).

Each is a :class:`~costlearn.core.device.DeviceSpec` field (the presets' sources
are listed in :data:`costlearn.core.device.PRESET_SOURCES`), log2 where it is a
size or a rate so that a tree splits on ratios between devices. They are
constant over one device's rows: a model that serves one device folds them
away (:meth:`costlearn.model.forest.FlatForest.specialize`), so the
served feature set, the ranker and its C code are those of the analytic set.
"""
from __future__ import annotations

import numpy as np

from costlearn.core.device import DeviceSpec

__all__ = ["DEVICE_FEATURES", "device_features"]

DEVICE_FEATURES = ("device_log2_multiprocessors", "device_log2_smem_per_mp_bytes",
                   "device_log2_smem_per_block_optin_bytes", "device_log2_l2_bytes",
                   "device_log2_memory_bandwidth_gbps", "device_log2_peak_gflops", "device_compute_capability")
"""Column names, in order (:func:`device_features`)."""


def device_features(spec: DeviceSpec, dtype: str) -> np.ndarray:
    """The device descriptors of ``spec`` for inputs of ``dtype``.

    Parameters
    ----------
    spec : DeviceSpec
    dtype : str
        Chooses the peak (:meth:`DeviceSpec.peak_gflops_for`: the tensor-core
        peak for float16, bfloat16 and tfloat32, the float32 peak for
        float32).

    Returns
    -------
    ndarray of float64, shape (len(DEVICE_FEATURES),)
        log2 SM count, log2 shared memory per SM and per block (opt-in),
        bytes, log2 L2 bytes, log2 DRAM bandwidth (GB/s), log2 peak
        (GFLOP/s), and the compute capability as a number (``"9.0"`` -> 9.0;
        0 where it is not one, e.g. an OpenCL C version string).

    Raises
    ------
    ValueError
        If the device gives no peak for ``dtype``.
    """
    try:
        cc = float(str(spec.compute_capability).split()[-1]) if spec.api == "cuda" else 0.0
    except (ValueError, IndexError):
        cc = 0.0
    return np.array([np.log2(spec.multiprocessors), np.log2(spec.smem_per_mp_bytes),
                     np.log2(spec.smem_per_block_optin_bytes), np.log2(spec.l2_bytes),
                     np.log2(spec.memory_bandwidth_gbps), np.log2(spec.peak_gflops_for(dtype)), cc], np.float64)
