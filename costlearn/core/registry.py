"""Name -> implementation registries for the seams (kernel families, dtypes,
backends, feature sets, cost models, rankers, device presets, import and
export formats): every one is a :class:`Registry`.

An entry is either the object itself or ``"module:attribute"``, imported on
first use, so a missing optional dependency (CuPy, PyOpenCL, Triton) fails
only when that implementation is asked for, with the install hint given at
registration. An unknown name is a ValueError that lists the known ones;
command-line choices come from :meth:`Registry.names`.
"""
from __future__ import annotations

import importlib

from costlearn.core.checks import shown
from costlearn.core.errors import CostlearnError

__all__ = ["Registry", "Unavailable"]


class Unavailable(CostlearnError, RuntimeError):
    """The implementation needs a library (or device) that is not here."""


class Registry:
    """Named implementations of one seam.

    Parameters
    ----------
    what : str
        What a name names, for messages (``"kernel family"``).
    entries : dict of str to object or str
        Name -> implementation, or ``"package.module:Name"``.
    hints : dict of str to str, optional
        Name -> install hint shown when importing it fails.
    unavailable : type, optional
        The :class:`Unavailable` subclass raised when importing fails.
    """

    def __init__(self, what: str, entries: dict, hints: dict | None = None, unavailable: type | None = None):
        self.what = what
        self._entries = dict(entries)
        self._hints = dict(hints or {})
        self._unavailable = unavailable or Unavailable
        self._loaded: dict = {}

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and name in self._entries

    def __iter__(self):
        """The names in the order they were registered (a table's own order:
        DTYPES from float32 down)."""
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name):
        """:meth:`get`, for registries of values used as tables (``DTYPES[name]``)."""
        return self.get(name)

    def get(self, name):
        """The implementation registered as ``name``.

        Raises
        ------
        ValueError
            If ``name`` is not registered (the message lists the names).
        Unavailable
            If its module cannot be imported (with the install hint).
        """
        if name not in self:
            raise ValueError(f"unknown {self.what} {shown(name)}; known: {list(self.names())}")
        if name not in self._loaded:
            entry = self._entries[name]
            if isinstance(entry, str):
                mod, _, attr = entry.partition(":")
                try:
                    entry = getattr(importlib.import_module(mod), attr)
                except ImportError as e:
                    hint = self._hints.get(name, "")
                    raise self._unavailable(f"{self.what} {name!r} needs a missing library ({e})"
                                            + (f"; install with: {hint}" if hint else "")) from e
            self._loaded[name] = entry
        return self._loaded[name]

    def register(self, name: str, entry, hint: str | None = None) -> None:
        """Add ``name`` -> ``entry`` (the object or ``"module:attribute"``),
        e.g. a kernel family defined outside costlearn.

        Raises
        ------
        ValueError
            If ``name`` is not a non-empty string or is already registered.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name={shown(name)}; a {self.what} name must be a non-empty string")
        if name in self:
            raise ValueError(f"{self.what} {name!r} is already registered; known: {list(self.names())}")
        self._entries[name] = entry
        if hint:
            self._hints[name] = hint

    def unregister(self, name: str) -> None:
        """Remove ``name`` (what :meth:`register` added).

        Raises
        ------
        ValueError
            If ``name`` is not registered.
        """
        if name not in self:
            raise ValueError(f"unknown {self.what} {shown(name)}; known: {list(self.names())}")
        del self._entries[name]
        self._loaded.pop(name, None)
        self._hints.pop(name, None)

    def hint(self, name: str) -> str:
        """The install hint of ``name`` ("" if none)."""
        return self._hints.get(name, "")
