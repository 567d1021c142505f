"""How PyTorch Inductor names ``triton_mm`` configs: the ``choice`` strings of
its AutoHeuristic mm logs (``torch/_inductor/autoheuristic/``), read by the
Inductor importer (:mod:`costlearn.interop.inductor`) through
:meth:`~costlearn.families.triton_mm.TritonMMFamily.from_tool`.

``extern_mm`` is the vendor library (aten's mm, cuBLAS); a Triton choice is
``type=triton_BLOCK-M=.._BLOCK-K=.._BLOCK-N=.._numstages=.._numwarps=..``.
"""
from __future__ import annotations

import re

from .config import VENDOR, TritonMMConfig

__all__ = ["INDUCTOR_GROUP_M", "VENDOR_CHOICE", "config_from_choice"]

INDUCTOR_GROUP_M = 8
"""``GROUP_M`` of every config of Inductor's mm template (``mm_options`` in
``torch/_inductor/kernel/mm_common.py``); the log does not record it."""

VENDOR_CHOICE = "extern_mm"
"""The choice name of aten's mm (the vendor library) in Inductor's logs."""

_CHOICE = re.compile(r"type=triton_BLOCK-M=(\d+)_BLOCK-K=(\d+)_BLOCK-N=(\d+)_numstages=(\d+)_numwarps=(\d+)")


def config_from_choice(choice: str):
    """The config an Inductor mm ``choice`` names.

    Parameters
    ----------
    choice : str
        ``extern_mm`` or a Triton choice (module docstring).

    Returns
    -------
    TritonMMConfig or VendorCall or None
        :data:`~costlearn.families.triton_mm.VENDOR` for ``extern_mm``; a
        TritonMMConfig with ``group_m`` = :data:`INDUCTOR_GROUP_M` for a
        Triton choice; None for any other string (not an mm choice).

    Raises
    ------
    ValueError
        If a Triton choice's values are not a valid TritonMMConfig (e.g. a
        block size that is not a power of two), naming the value.
    """
    if choice == VENDOR_CHOICE:
        return VENDOR
    m = _CHOICE.fullmatch(choice)
    if not m:
        return None
    bm, bk, bn, stages, warps = (int(v) for v in m.groups())
    return TritonMMConfig(bm, bn, bk, warps, stages, INDUCTOR_GROUP_M)
