"""How PyTorch Inductor names ``triton_mm`` configs, in and out.

- In its AutoHeuristic mm logs (``torch/_inductor/autoheuristic/``), read by
  the Inductor importer (:mod:`costlearn.interop.inductor.autoheuristic`):
  a ``choice`` is ``extern_mm`` (the vendor library, aten's mm, cuBLAS) or
  ``type=triton_BLOCK-M=.._BLOCK-K=.._BLOCK-N=.._numstages=.._numwarps=..``
  (:func:`config_from_choice`).
- In its template lookup table (``torch/_inductor/lookup_table/``, PyTorch
  2.13 and later), written by :mod:`costlearn.interop.inductor.lut` and read
  back by :mod:`costlearn.interop.inductor.lut_sources`: an entry is
  ``{"template_id": "aten::mm"}`` or ``{"template_id": "triton::mm", ...}``
  with the keyword arguments of Inductor's mm template
  (``torch/_inductor/kernel/templates/triton_mm.py.jinja``; :func:`lut_entry`,
  :func:`config_from_entry`).

Callers reach these through :mod:`costlearn.interop.tool_names`, keyed by
(family, tool). The configs are built through the family's public interface
(:func:`costlearn.interop.common.config_class`, its vendor id), not its own
modules. How Inductor shrinks a config for a small problem is the family's
(:meth:`costlearn.families.KernelFamily.shrunk_variants`): a model of its
logs answers with it.
"""
from __future__ import annotations

import re

from costlearn.core.checks import shown
from costlearn.families import VENDOR_CONFIG_ID, get_family
from costlearn.interop.common import config_class

__all__ = ["FAMILY", "INDUCTOR_GROUP_M", "VENDOR_CHOICE", "config_from_choice", "TRITON_TEMPLATE_ID",
           "VENDOR_TEMPLATE_ID", "VENDOR_TEMPLATE_IDS", "lut_entry", "config_from_entry"]

FAMILY = "triton_mm"
"""The family whose configs Inductor's mm template and aten's mm are."""

INDUCTOR_GROUP_M = 8
"""``GROUP_M`` of every config of Inductor's mm template (``mm_options`` in
``torch/_inductor/kernel/mm_common.py``); the log does not record it."""

VENDOR_CHOICE = "extern_mm"
"""The choice name of aten's mm (the vendor library) in Inductor's logs."""

_CHOICE = re.compile(r"type=triton_BLOCK-M=([0-9]+)_BLOCK-K=([0-9]+)_BLOCK-N=([0-9]+)_numstages=([0-9]+)"
                     r"_numwarps=([0-9]+)")


def _vendor():
    """The family's vendor call (its one instance)."""
    return get_family(FAMILY).config_from_id(VENDOR_CONFIG_ID)


def config_from_choice(choice: str):
    """The config an Inductor mm ``choice`` names.

    Parameters
    ----------
    choice : str
        ``extern_mm`` or a Triton choice (module docstring).

    Returns
    -------
    TritonMMConfig or VendorCall or None
        The family's vendor call for ``extern_mm``; a TritonMMConfig with
        ``group_m`` = :data:`INDUCTOR_GROUP_M` for a Triton choice; None for
        any other string (not an mm choice).

    Raises
    ------
    ValueError
        If a Triton choice's values are not a valid TritonMMConfig (e.g. a
        block size that is not a power of two), naming the value.
    """
    if choice == VENDOR_CHOICE:
        return _vendor()
    m = _CHOICE.fullmatch(choice)
    if not m:
        return None
    long = [v for v in m.groups() if len(v) > 9]
    if long:                                    # no block size, stage or warp count has ten digits
        raise ValueError(f"choice {shown(choice, 80)}: a number of {len(long[0])} digits; its values are a config's "
                         "block sizes, stages and warps")
    bm, bk, bn, stages, warps = (int(v) for v in m.groups())
    return config_class(get_family(FAMILY))(bm, bn, bk, warps, stages, INDUCTOR_GROUP_M)


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
    if not isinstance(config, get_family(FAMILY).config_type):
        raise TypeError(f"config={config!r}; must be a TritonMMConfig or VendorCall")
    if config.config_id == VENDOR_CONFIG_ID:
        return {"template_id": VENDOR_TEMPLATE_ID}
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
        return _vendor()
    if template != TRITON_TEMPLATE_ID:
        return None
    try:
        return config_class(get_family(FAMILY))(entry["BLOCK_M"], entry["BLOCK_N"], entry["BLOCK_K"],
                                                entry["num_warps"], entry["num_stages"],
                                                entry.get("GROUP_M", INDUCTOR_GROUP_M))
    except KeyError as e:
        raise ValueError(f"a {TRITON_TEMPLATE_ID} entry without {e.args[0]}: {str(entry)[:120]}") from None
    except TypeError as e:
        raise ValueError(f"a {TRITON_TEMPLATE_ID} entry with {e}") from None
