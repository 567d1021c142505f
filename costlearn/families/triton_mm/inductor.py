"""How PyTorch Inductor shrinks a ``triton_mm`` config for a problem smaller
than its block tile (:func:`shrunk_variants`), so a model of its logs can
answer with the configs Inductor runs there (the family's
:meth:`~costlearn.families.triton_mm.TritonMMFamily.shrunk_variants`).

What Inductor calls the family's configs (its AutoHeuristic log's choices,
its lookup table's entries) is interop's, not the family's:
:mod:`costlearn.interop.inductor.names`.
"""
from __future__ import annotations

import itertools

from costlearn.families.triton_mm.config import TritonMMConfig

__all__ = ["shrunk_variants", "MIN_BLOCK"]

MIN_BLOCK = 16
"""Smallest block extent Inductor shrinks a config to (``min_block_size`` of
``filtered_configs`` in ``torch/_inductor/kernel/mm_common.py``)."""


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
