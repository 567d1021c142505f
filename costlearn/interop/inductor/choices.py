"""An exported lookup table turned on inside PyTorch Inductor (PyTorch 2.13 and later; needs torch).

Inductor reads ``config.lookup_table.table`` only when its choice handler,
``config.inductor_choices_class``, is PyTorch's ``LookupTableChoices``
(``torch/_inductor/lookup_table/``). Inductor's FX graph cache, on by
default, puts that handler into every compiled graph's key through its
``uuid()`` (``torch._inductor.config._cache_config_factory_keys``), and
PyTorch 2.13's ``LookupTableChoices`` has none: ``torch.compile`` then fails
with "Config 'inductor_choices_class' is set to ... which does not implement
uuid()". :class:`CostlearnLookupTableChoices` is that class with a stable
``uuid()`` (PyTorch's own recipe for its custom passes, a hash of the source
files the behaviour lives in); the table itself is part of the cache key
already (``lookup_table.table`` is an Inductor setting), so a changed table
compiles anew and the same table is served from the cache.
"""
from __future__ import annotations

import inspect
import json
import os
from typing import Any

from torch._inductor import config
from torch._inductor.custom_graph_pass import get_hash_for_files
from torch._inductor.lookup_table import LookupTableChoices


class CostlearnLookupTableChoices(LookupTableChoices):
    """PyTorch's ``LookupTableChoices``, unchanged, with the ``uuid()`` the FX graph cache asks of it."""

    def uuid(self) -> str:
        """The handler's identity in Inductor's cache key.

        Returns
        -------
        str
            A hash of this module's source and of PyTorch's ``LookupTableChoices``
            source: the same while neither changes, whatever the process.
        """
        return get_hash_for_files((inspect.getfile(LookupTableChoices), __file__)).hex()


def use_lookup_table(table: str | os.PathLike | dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Make Inductor's max-autotune read ``table`` (what ``costlearn export inductor-lut`` wrote).

    Sets ``torch._inductor.config.lookup_table.table`` and
    ``torch._inductor.config.inductor_choices_class``
    (:class:`CostlearnLookupTableChoices`) for this process; the FX graph cache
    stays on.

    Parameters
    ----------
    table : str, os.PathLike or dict
        The table's JSON file, or the table itself: ``{key: [entry, ...]}``.

    Returns
    -------
    dict
        The table Inductor now reads.

    Raises
    ------
    ValueError
        Where the table is not a JSON object of lists.
    """
    if not isinstance(table, dict):
        with open(table, encoding="utf-8") as f:
            table = json.load(f)
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, list) for k, v in table.items()):
        raise ValueError("an Inductor lookup table is a JSON object of lists: {key: [entry, ...]}")
    config.lookup_table.table = table
    config.inductor_choices_class = CostlearnLookupTableChoices
    return table
