"""Name -> implementation lookup shared by the seams' registries (backends,
feature sets, cost models): an unknown name is a ValueError that lists the
known ones."""
from __future__ import annotations

__all__ = ["lookup"]


def lookup(table: dict, name, what: str):
    """Return ``table[name]``.

    Raises
    ------
    ValueError
        If ``name`` is not a key of ``table``; the message names ``what``
        and lists the known names.
    """
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"unknown {what} {name!r}; known: {sorted(table)}")
    return table[name]
