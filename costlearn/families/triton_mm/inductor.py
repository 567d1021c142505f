"""How PyTorch Inductor names ``triton_mm`` configs.

- In its AutoHeuristic mm logs (``torch/_inductor/autoheuristic/``), read by
  the Inductor importer (:mod:`costlearn.interop.inductor.autoheuristic`) through
  :meth:`~costlearn.families.triton_mm.TritonMMFamily.from_tool`: a
  ``choice`` is ``extern_mm`` (the vendor library, aten's mm, cuBLAS) or
  ``type=triton_BLOCK-M=.._BLOCK-K=.._BLOCK-N=.._numstages=.._numwarps=..``.
- In its template lookup table (``torch/_inductor/lookup_table/``, PyTorch
  2.13 and later), written by :mod:`costlearn.interop.inductor.lut` through
  :meth:`~costlearn.families.triton_mm.TritonMMFamily.to_tool`: an entry is
  ``{"template_id": "aten::mm"}`` or ``{"template_id": "triton::mm", ...}``
  with the keyword arguments of Inductor's mm template
  (``torch/_inductor/kernel/templates/triton_mm.py.jinja``).
- In how it shrinks a config for a small problem (:func:`shrunk_variants`),
  so a model of its logs can answer with the configs Inductor runs there.
"""
from __future__ import annotations

import itertools
import re

from costlearn.families.triton_mm.config import VENDOR, TritonMMConfig, VendorCall

__all__ = ["INDUCTOR_GROUP_M", "VENDOR_CHOICE", "config_from_choice", "TRITON_TEMPLATE_ID", "VENDOR_TEMPLATE_ID",
           "VENDOR_TEMPLATE_IDS",
           "lut_entry", "config_from_entry", "shrunk_variants", "MIN_BLOCK"]

INDUCTOR_GROUP_M = 8
"""``GROUP_M`` of every config of Inductor's mm template (``mm_options`` in
``torch/_inductor/kernel/mm_common.py``); the log does not record it."""

MIN_BLOCK = 16
"""Smallest block extent Inductor shrinks a config to (``min_block_size`` of
``filtered_configs`` in ``torch/_inductor/kernel/mm_common.py``)."""

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


TRITON_TEMPLATE_ID = "triton::mm"
"""``template_id`` of Inductor's Triton mm template (``mm_template.uid``)."""

VENDOR_TEMPLATE_ID = "aten::mm"
"""``template_id`` of aten's mm, the vendor call (``aten_mm.uid``)."""

VENDOR_TEMPLATE_IDS = (VENDOR_TEMPLATE_ID, "aten::addmm", "aten::bias_addmm")
"""Inductor's template ids of the vendor call: cuBLAS through ``aten::mm``,
and for an ``addmm`` (the bias epilogue) ``aten::addmm`` or
``aten::bias_addmm`` (cuBLAS adding the bias itself)."""


def lut_entry(config, problem) -> dict:
    """A lookup-table entry running ``config`` on ``problem``.

    Parameters
    ----------
    config : TritonMMConfig or VendorCall
    problem : costlearn.Problem
        Its K decides ``EVEN_K``.

    Returns
    -------
    dict
        ``{"template_id": "aten::mm"}`` for the vendor call; else
        ``template_id`` ``"triton::mm"`` with ``BLOCK_M``, ``BLOCK_N``,
        ``BLOCK_K``, ``GROUP_M``, ``num_stages``, ``num_warps`` and the
        options Inductor derives per config (``mm_options`` in
        ``torch/_inductor/template_heuristics/triton.py``): ``EVEN_K`` (K a
        multiple of BLOCK_K, so the K loop needs no mask), ``USE_FAST_ACCUM``
        False, ``ACC_TYPE`` ``"tl.float32"`` (every dtype here accumulates in
        float32). ``ALLOW_TF32`` is left to Inductor, which sets it per
        problem from ``torch.backends.cuda.matmul.fp32_precision``.

    Raises
    ------
    TypeError
        If ``config`` is not a triton_mm config.
    """
    if isinstance(config, VendorCall):
        return {"template_id": VENDOR_TEMPLATE_ID}
    if not isinstance(config, TritonMMConfig):
        raise TypeError(f"config={config!r}; must be a TritonMMConfig or VendorCall")
    return {"template_id": TRITON_TEMPLATE_ID, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
            "BLOCK_K": config.block_k, "GROUP_M": config.group_m, "num_stages": config.num_stages,
            "num_warps": config.num_warps, "EVEN_K": problem.k % config.block_k == 0, "USE_FAST_ACCUM": False,
            "ACC_TYPE": "tl.float32"}


def config_from_entry(entry):
    """The config a lookup-table entry names (the inverse of :func:`lut_entry`).

    Returns
    -------
    TritonMMConfig or VendorCall or None
        None for an entry of another template (or not a dict).

    Raises
    ------
    ValueError
        If a ``triton::mm`` entry lacks a parameter or has an invalid one,
        naming it.
    """
    if not isinstance(entry, dict):
        return None
    template = entry.get("template_id")
    if template in VENDOR_TEMPLATE_IDS:
        return VENDOR
    if template != TRITON_TEMPLATE_ID:
        return None
    try:
        return TritonMMConfig(entry["BLOCK_M"], entry["BLOCK_N"], entry["BLOCK_K"], entry["num_warps"],
                              entry["num_stages"], entry.get("GROUP_M", INDUCTOR_GROUP_M))
    except KeyError as e:
        raise ValueError(f"a {TRITON_TEMPLATE_ID} entry without {e.args[0]}: {str(entry)[:120]}") from None
    except TypeError as e:
        raise ValueError(f"a {TRITON_TEMPLATE_ID} entry with {e}") from None


def shrunk_variants(config: TritonMMConfig) -> list:
    """The configs Inductor derives from ``config`` for problems smaller than
    its block tile, and the largest extents each is derived for.

    Inductor's rule (``filtered_configs`` in
    ``torch/_inductor/kernel/mm_common.py``): with ``e' = max(next_pow2(e),
    16)`` per extent, each block extent becomes ``max(min(block, e'), 16)``
    and ``num_warps`` becomes ``min(num_warps, BM * BN // 256)`` (one warp
    per 16 x 16 output tile). So for every power of two ``p`` in
    [:data:`MIN_BLOCK`, block) of each extent, a variant with that extent's
    block ``p``, derived for extents up to ``p``. The A100 logs hold such
    variants (``m128n32k32_w4_s3_g8`` from ``m128n128k32_w4_s3_g8`` for
    N <= 32), most of them only on the real models' small extents.

    Parameters
    ----------
    config : TritonMMConfig

    Returns
    -------
    list of (TritonMMConfig, (int or None, int or None, int or None))
        Each variant other than ``config`` (in order of its blocks), and per
        extent (M, N, K) the largest it is derived for, None where that
        block is ``config``'s.

    Raises
    ------
    TypeError
        If ``config`` is not a TritonMMConfig.
    """
    if not isinstance(config, TritonMMConfig):
        raise TypeError(f"shrunk_variants needs a TritonMMConfig, got {type(config).__name__}")
    blocks = (config.block_m, config.block_n, config.block_k)
    choices = [[(b, None)] + [(p, p) for p in _powers_below(b)] for b in blocks]
    out = []
    for (bm, cm), (bn, cn), (bk, ck) in itertools.product(*choices):
        if (cm, cn, ck) == (None, None, None):
            continue
        warps = min(config.num_warps, bm * bn // 256)
        out.append((TritonMMConfig(bm, bn, bk, warps, config.num_stages, config.group_m), (cm, cn, ck)))
    return out


def _powers_below(block: int) -> list:
    """Powers of two in [MIN_BLOCK, block)."""
    out, p = [], MIN_BLOCK
    while p < block:
        out.append(p)
        p *= 2
    return out
