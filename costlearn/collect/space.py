"""Tile space: which configs of a kernel family a device can run, and which of
those suit a problem. Feasibility is decided here, from a
:class:`~costlearn.core.device.DeviceSpec` and the family's rules, before any code
is generated (design.md, "The gemm family: ... its tile space").

The problem rule is shared by every family: ``block_tile_exceeds_problem``
rejects a config whose block tile is larger than the problem in a way that
computes only padding (:func:`tile_fits_problem`, with the family's minimum tile caps).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from costlearn.core.device import DeviceSpec
from costlearn.families import family_of, get_family
from costlearn.core.problem import Problem
from costlearn.core.checks import check_instance

__all__ = ["SpaceResult", "enumerate_space", "check_config", "tile_fits_problem", "next_pow2", "PROBLEM_RULE",
           "rules_of"]

PROBLEM_RULE = "block_tile_exceeds_problem"


def rules_of(family) -> tuple[str, ...]:
    """Every rule of ``family`` (its device rules, then :data:`PROBLEM_RULE`)."""
    return tuple(family.rules) + (PROBLEM_RULE,)


def next_pow2(x):
    """Smallest power of two >= x, for an int >= 1 or an int array (elementwise)."""
    if type(x) is int:
        return 1 << (x - 1).bit_length()
    if np.ndim(x) == 0:
        return 1 << (int(x) - 1).bit_length()
    a = np.asarray(x, np.int64)
    out = np.ones_like(a)
    while np.any(out < a):       # at most 31 doublings for 32-bit extents
        out = np.where(out < a, out * 2, out)
    return out


def tile_fits_problem(block_m, block_n, block_k, m, n, k, caps):
    """Rule ``block_tile_exceeds_problem``, vectorised: True where

    - BM <= max(next_pow2(M), min_cap_m),
    - BN <= max(next_pow2(N), min_cap_n),
    - KS <= max(next_pow2(K), min_cap_k),

    with ``caps = (min_cap_m, min_cap_n, min_cap_k)`` from the family's
    ``min_tile_caps(spec)``. A block tile beyond the next power of two of the
    extent computes only padding (e.g. BM = 64 for M = 1). Every other
    argument may be an int or an int array of one length; the result is then
    a bool array.
    """
    fm, fn, fk = caps
    ok = (np.asarray(block_m) <= np.maximum(next_pow2(m), fm)) \
        & (np.asarray(block_n) <= np.maximum(next_pow2(n), fn)) \
        & (np.asarray(block_k) <= np.maximum(next_pow2(k), fk))
    return bool(ok) if np.ndim(ok) == 0 else ok


def check_config(config, spec: DeviceSpec, *, dtype: str = "float32", problem: Problem | None = None) -> str | None:
    """The first rule ``config`` breaks on ``spec``, or None if it is feasible.

    Parameters
    ----------
    config : a family's config
    spec : DeviceSpec
    dtype : str
        Element type (ignored when ``problem`` is given: its dtype is used).
    problem : Problem, optional
        When given, the problem rule is checked too.

    Raises
    ------
    TypeError
        If ``config`` is not a family's config or ``spec`` not a DeviceSpec.
    ValueError
        If the dtype is not one the family supports.
    """
    fam = family_of(config)
    check_instance("spec", spec, DeviceSpec, "a DeviceSpec (costlearn.preset('h200') or a backend's .spec)")
    dtype = problem.dtype if problem is not None else dtype
    fam.check_dtype(dtype)
    why = fam.check_device(config, spec, dtype)
    if why is None and problem is not None and not tile_fits_problem(
            *fam.block_tile(config), problem.m, problem.n, problem.k, fam.min_tile_caps(spec)):
        why = PROBLEM_RULE
    return why


@dataclass(frozen=True)
class SpaceResult:
    """Outcome of :func:`enumerate_space`.

    Attributes
    ----------
    family : str
    configs : tuple
        Feasible configs, sorted by ``config_id``.
    rejected : dict of str to int
        How many configs each rule rejected (first failing rule only); zero
        counts included.
    total : int
        Configs considered before any rule.
    """

    family: str
    configs: tuple
    rejected: dict
    total: int

    def summary(self) -> str:
        """Lines: feasible of total, then each rule that rejected some."""
        lines = [f"{len(self.configs)} feasible of {self.total} {self.family} configs"]
        lines += [f"  rejected by {r}: {n}" for r, n in self.rejected.items() if n]
        return "\n".join(lines)


def enumerate_space(spec: DeviceSpec, *, family: str = "gemm", dtype: str = "float32",
                    problem: Problem | None = None) -> SpaceResult:
    """Enumerate the feasible configs of ``family`` on ``spec``.

    Parameters
    ----------
    spec : DeviceSpec
        Device whose limits decide feasibility.
    family : str
        Kernel family name (:data:`costlearn.families.FAMILIES`).
    dtype : str
        Element type (a dtype the family supports); ``problem``'s dtype when
        a problem is given.
    problem : Problem, optional
        When given, block tiles larger than the problem are rejected too
        (rule ``block_tile_exceeds_problem``).

    Returns
    -------
    SpaceResult
        Feasible configs and per-rule rejection counts.

    Raises
    ------
    TypeError
        If ``spec`` is not a DeviceSpec or ``problem`` not a Problem.
    ValueError
        If the family is unknown or does not support the dtype or layout.
    """
    check_instance("spec", spec, DeviceSpec, "a DeviceSpec (costlearn.preset('h200') or a backend's .spec)")
    fam = get_family(family)
    if problem is not None:
        check_instance("problem", problem, Problem, "a costlearn.Problem(M, N, K, dtype, layout)")
        fam.check_problem(problem)
        dtype = problem.dtype
    else:
        fam.check_dtype(dtype)
    rejected = Counter({r: 0 for r in rules_of(fam)})
    ok = []
    cands = fam.all_configs()
    caps = fam.min_tile_caps(spec)
    for c in cands:
        why = fam.check_device(c, spec, dtype)
        if why is None and problem is not None and not tile_fits_problem(
                *fam.block_tile(c), problem.m, problem.n, problem.k, caps):
            why = PROBLEM_RULE
        if why is None:
            ok.append(c)
        else:
            rejected[why] += 1
    ok.sort(key=lambda c: c.config_id)
    return SpaceResult(family=fam.name, configs=tuple(ok), rejected=dict(rejected), total=len(cands))
