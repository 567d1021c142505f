"""What other tools call costlearn's configs: a registry keyed by (family,
tool) that the importers and exporters ask.

A tool is an importer's or exporter's name (:data:`costlearn.interop.IMPORTERS`,
or ``"triton"`` for Triton's autotuner hook). In :data:`FROM_TOOL`, a
function reads what the tool names a config (an Inductor log's ``choice``, a
lookup-table entry, a ``triton.Config``'s values) as the family's config, or
None when it names none of the family's; in :data:`TO_TOOL`, a function
writes a config as the tool names it (an Inductor lookup-table entry). A
(family, tool) pair with no entry maps nothing: :func:`from_tool` and
:func:`to_tool` answer None.

``triton_mm`` maps Inductor's names (:mod:`costlearn.interop.inductor.names`)
and Triton's autotune values (:func:`config_from_autotune`). The kernel
families know nothing of these tools; a new mapping is a line here (or an
entry added from outside the package).
"""
from __future__ import annotations

from costlearn.families import FAMILIES, get_family
from costlearn.interop.common import config_class
from costlearn.interop.inductor.names import config_from_choice, config_from_entry, lut_entry

__all__ = ["FROM_TOOL", "TO_TOOL", "AUTOTUNE_FIELDS", "from_tool", "to_tool", "config_from_tool",
           "config_from_autotune"]

AUTOTUNE_FIELDS = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m")
"""The values of a Triton autotune config, as :mod:`costlearn.interop.triton_autotune`
reads them, in the order of ``triton_mm``'s config."""


def config_from_autotune(values: dict):
    """The ``triton_mm`` config of a Triton autotune config's values.

    Parameters
    ----------
    values : dict
        :data:`AUTOTUNE_FIELDS` (others are ignored).

    Returns
    -------
    TritonMMConfig

    Raises
    ------
    KeyError
        If a field is missing.
    TypeError, ValueError
        If a value is not a valid one of the config's (the config says
        which).
    """
    args = [values[f] for f in AUTOTUNE_FIELDS]
    return config_class(get_family("triton_mm"))(*args)


FROM_TOOL = {("triton_mm", "inductor"): config_from_choice,
             ("triton_mm", "inductor-lut"): config_from_entry,
             ("triton_mm", "triton"): config_from_autotune}
"""(family, tool) -> a function of what ``tool`` names a config: the family's
config, or None where it names none of the family's (ValueError where it is
the family's but its values are invalid)."""

TO_TOOL = {("triton_mm", "inductor"): lut_entry}
"""(family, tool) -> a function of (config, problem): what ``tool`` calls
``config`` on ``problem`` (TypeError where ``config`` is not the family's)."""


def from_tool(family: str, tool: str, choice):
    """The config of ``family`` that ``tool`` names ``choice``.

    Parameters
    ----------
    family : str
        A family name (:data:`costlearn.families.FAMILIES`).
    tool : str
        An importer's name (:data:`costlearn.interop.IMPORTERS`) or ``"triton"``.
    choice : object
        What the tool's file says (a choice string, a lookup-table entry, a
        dict of values).

    Returns
    -------
    config or None
        None where (family, tool) has no mapping (:data:`FROM_TOOL`) or the
        choice names none of the family's configs.

    Raises
    ------
    ValueError
        If ``choice`` is the family's but its values are invalid.
    """
    read = FROM_TOOL.get((family, tool))
    return None if read is None else read(choice)


def to_tool(family: str, tool: str, config, problem):
    """What ``tool`` calls ``config`` of ``family`` on ``problem`` (e.g. an
    Inductor lookup-table entry); the inverse of :func:`from_tool`.

    Returns
    -------
    object or None
        None where (family, tool) has no mapping (:data:`TO_TOOL`).

    Raises
    ------
    TypeError
        If ``config`` is not one of the family's.
    """
    write = TO_TOOL.get((family, tool))
    return None if write is None else write(config, problem)


def config_from_tool(tool: str, choice):
    """The (family name, config) ``tool`` names ``choice``, asking each
    registered family in registry order (:func:`from_tool`); None when none
    maps it.

    Raises
    ------
    ValueError
        If a family recognises ``choice`` but its values are invalid.
    """
    for name in FAMILIES.names():
        config = from_tool(name, tool, choice)
        if config is not None:
            return name, config
    return None
