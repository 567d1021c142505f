"""Kernel families (design.md, "Seams"): each owns its config type, value
ranges, feasibility rules, dtypes, layouts and the map to the common tile
description; see :class:`~costlearn.families.base.KernelFamily`."""
from __future__ import annotations

from costlearn.core.registry import Registry
from costlearn.families.base import (DESCRIPTION_FIELDS, VENDOR_CONFIG_ID, CompilerUnavailable, KernelFamily,
                                     TileDescription, bank_conflict_degree)

__all__ = ["FAMILIES", "get_family", "family_of", "measured_by", "KernelFamily", "TileDescription",
           "DESCRIPTION_FIELDS", "VENDOR_CONFIG_ID", "CompilerUnavailable", "bank_conflict_degree"]

FAMILIES = Registry("kernel family", {"gemm": "costlearn.families.gemm:GemmFamily",
                                      "triton_mm": "costlearn.families.triton_mm:TritonMMFamily"})
"""Registered families (name -> class, imported on first use). A new family
is a folder ``families/<name>/`` and one line here (or
``FAMILIES.register(name, cls)`` from outside the package)."""

_INSTANCES: dict = {}


def get_family(name) -> KernelFamily:
    """The (stateless, shared) instance of family ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not registered (the message lists the families).
    """
    cls = FAMILIES.get(name)
    fam = _INSTANCES.get(cls)
    if fam is None:
        fam = _INSTANCES[cls] = cls()
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


def measured_by(backend: str) -> tuple:
    """Names of the registered families backend ``backend`` measures (those
    whose :attr:`KernelFamily.backends` name it), in registry order."""
    return tuple(n for n in FAMILIES.names() if backend in get_family(n).backends)
