"""Kernel families (design.md, "Seams"): each owns its config type, value
ranges, feasibility rules, dtypes, layouts and the map to the common tile
description; see :class:`~costlearn.families.base.KernelFamily`."""
from __future__ import annotations

from ..registry import Registry
from .base import DESCRIPTION_FIELDS, KernelFamily, TileDescription, bank_conflict_degree

__all__ = ["FAMILIES", "get_family", "family_of", "KernelFamily", "TileDescription", "DESCRIPTION_FIELDS",
           "bank_conflict_degree"]

FAMILIES = Registry("kernel family", {"gemm": "costlearn.families.gemm:GemmFamily",
                                      "triton_mm": "costlearn.families.triton_mm:TritonMMFamily"})
"""Registered families (name -> class, imported on first use)."""

_INSTANCES: dict = {}


def get_family(name) -> KernelFamily:
    """The (stateless, shared) instance of family ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not registered (the message lists the families).
    """
    fam = _INSTANCES.get(name)
    if fam is None:
        fam = _INSTANCES[name] = FAMILIES.get(name)()
    return fam


def family_of(config) -> KernelFamily:
    """The family a config belongs to (its ``family`` attribute).

    Raises
    ------
    TypeError
        If ``config`` is not a config of a registered family.
    """
    name = getattr(type(config), "family", None)
    if not isinstance(name, str) or name not in FAMILIES:
        raise TypeError(f"config={config!r}; must be a config of a kernel family {list(FAMILIES.names())} "
                        "(e.g. costlearn.families.gemm.GemmConfig)")
    fam = get_family(name)
    if not isinstance(config, fam.config_type):
        types = fam.config_type if isinstance(fam.config_type, tuple) else (fam.config_type,)
        raise TypeError(f"config={config!r}; must be a {' or '.join(t.__name__ for t in types)}")
    return fam
