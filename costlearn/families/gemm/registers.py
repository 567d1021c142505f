"""Registers per thread of the ``gemm`` family's CUDA rendering, read from ``nvcc -Xptxas -v``,
for devices that are not present (so the feature table of an H200 can be
built on a machine without a GPU). On a live GPU the CUDA backend reads the
same number from the compiled kernel (``cupy`` function ``num_regs``); the
OpenCL API reports no register count, so OpenCL rows carry NaN and the
features fall back to :meth:`GemmFamily.registers_estimate`."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from costlearn.families.base import CompilerUnavailable
from costlearn.families.gemm.template import render

__all__ = ["nvcc_registers", "NvccUnavailable"]


class NvccUnavailable(CompilerUnavailable):
    """nvcc is not on the PATH."""


def _one(config, arch: str, folder: str) -> tuple[str, int]:
    src = Path(folder) / f"{config.config_id}.cu"
    src.write_text(render(config, "cuda"))
    out = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o",
                          str(src.with_suffix(".cubin")), str(src)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"nvcc failed on {config.config_id}: {out.stderr[-500:]}")
    m = re.search(r"Used (\d+) registers", out.stderr)
    if not m:
        raise RuntimeError(f"nvcc -Xptxas -v printed no register count for {config.config_id}")
    return config.config_id, int(m.group(1))


def nvcc_registers(configs, arch: str = "sm_90", n_jobs: int = 4) -> dict:
    """Registers per thread of each config's CUDA kernel, compiled by nvcc.

    Parameters
    ----------
    configs : iterable of TileConfig
    arch : str
        nvcc ``-arch`` value, e.g. ``"sm_90"`` for H100/H200, ``"sm_80"``
        for A100.
    n_jobs : int
        Parallel nvcc processes (joblib threads).

    Returns
    -------
    dict of str to int
        config_id -> registers per thread.

    Raises
    ------
    NvccUnavailable
        If nvcc is not installed.
    RuntimeError
        If nvcc fails on a config (the message names it).
    """
    if shutil.which("nvcc") is None:
        raise NvccUnavailable("nvcc is not on the PATH; install the CUDA toolkit to read register counts")
    from joblib import Parallel, delayed
    with tempfile.TemporaryDirectory(prefix="costlearn-nvcc-") as folder:
        pairs = Parallel(n_jobs=n_jobs, prefer="threads")(delayed(_one)(c, arch, folder) for c in configs)
    return dict(pairs)
