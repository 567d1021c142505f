"""The mapping file of a Kernel Tuner import: from the kernel's own
tune-parameter names to a costlearn family's config fields, and the problem
(M, N, K, dtype, layout) the tuning ran (:func:`load_mapping`)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from costlearn.core.checks import shown
from costlearn.core.problem import MAX_EXTENT
from costlearn.families import FAMILIES, get_family
from costlearn.interop.common import MAX_READ_BYTES, InteropError, config_class, load_json, source_file

__all__ = ["Mapping", "load_mapping", "is_int", "EXTENTS"]

_MAPPING_KEYS = ("family", "dtype", "layout", "params", "fixed", "problem_size", "shape")
EXTENTS = ("m", "n", "k")
"""The extents a mapping's ``problem_size`` and ``shape`` name."""


@dataclass(frozen=True)
class Mapping:
    """How a Kernel Tuner kernel's results map onto a costlearn family.

    Attributes
    ----------
    family : str
        A registered family (``"gemm"``, ``"triton_mm"``).
    dtype, layout : str
        The problem's dtype and layout; the family runs both.
    params : dict of str to str
        Kernel Tuner tune-parameter name -> a field of the family's config.
    fixed : dict of str to object
        Config fields not tuned, with their value (other unmapped fields
        take the config class's default).
    problem_size : tuple of {"m", "n", "k", None}
        What each entry of Kernel Tuner's ``problem_size`` is (None:
        ignored).
    shape : dict of str to int
        Extents given outright (``"m"``, ``"n"``, ``"k"`` -> elements);
        they override ``problem_size``.
    source : str
        The mapping file, for messages.
    """

    family: str
    dtype: str
    layout: str
    params: dict
    fixed: dict = field(default_factory=dict)
    problem_size: tuple = ()
    shape: dict = field(default_factory=dict)
    source: str = ""


def is_int(v) -> bool:
    """True for a Python int that is not a bool (a JSON integer as
    ``json.load`` gives it)."""
    return isinstance(v, int) and not isinstance(v, bool)


def load_mapping(path) -> Mapping:
    """Read a mapping file.

    The file is one JSON object::

        {"family": "triton_mm", "dtype": "float16", "layout": "NN",
         "params": {"BLOCK_M": "block_m", "BLOCK_N": "block_n", "BLOCK_K": "block_k",
                    "num_warps": "num_warps", "num_stages": "num_stages"},
         "fixed": {"group_m": 8},
         "problem_size": ["m", "n", "k"],
         "shape": {"k": 4096}}

    ``family``, ``dtype`` and ``params`` are required; ``layout`` defaults
    to ``"NN"``, ``fixed`` and ``shape`` to none, ``problem_size`` to ``[]``.
    Each of M, N and K (elements) must be named in ``problem_size`` or given
    in ``shape``; ``shape`` wins where both give one.

    Parameters
    ----------
    path : path
        The mapping file.

    Returns
    -------
    Mapping

    Raises
    ------
    InteropError
        Naming the file, the bad value and what is allowed: the file is
        unreadable, not JSON or not an object; a key at top level is unknown;
        the family is unknown; the family does not run the dtype or layout;
        a ``params`` value or ``fixed`` key is not a field of the family's
        config, or a field is mapped twice; a field without a default is
        neither mapped nor fixed; a ``problem_size`` entry is not
        ``"m"``/``"n"``/``"k"``/null or names an extent twice; a ``shape``
        key is not m/n/k or its value not an int in [1, 2**31 - 1]; an extent
        ends up unknown.
    """
    try:
        path = source_file(path, verb="read as the mapping", max_bytes=MAX_READ_BYTES)
        text = path.read_text(encoding="utf-8")
        d = load_json(text, path, "a mapping")
    except InteropError as e:
        raise InteropError(f"mapping {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InteropError(f"mapping {path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise InteropError(f"mapping {path}: not JSON ({e})") from None
    if not isinstance(d, dict):
        raise InteropError(f"mapping {path}: a {type(d).__name__}; must be a JSON object with keys "
                           f"{list(_MAPPING_KEYS)}")
    unknown = [k for k in d if k not in _MAPPING_KEYS]
    if unknown:
        raise InteropError(f"mapping {path}: unknown keys {unknown}; allowed: {list(_MAPPING_KEYS)}")
    for k in ("family", "dtype", "params"):
        if k not in d:
            raise InteropError(f"mapping {path}: no {k!r}; required: ['family', 'dtype', 'params']")
    family = d["family"]
    if not isinstance(family, str) or family not in FAMILIES:
        raise InteropError(f"mapping {path}: family={shown(family)}; allowed: {list(FAMILIES.names())}")
    fam = get_family(family)
    dtype, layout = d["dtype"], d.get("layout", "NN")
    for key, v in (("dtype", dtype), ("layout", layout)):
        if not isinstance(v, str):
            raise InteropError(f"mapping {path}: {key}={shown(v)}; must be a string the {family!r} family runs "
                               f"({list(fam.dtypes if key == 'dtype' else fam.layouts)})")
    try:
        fam.check_dtype(dtype, layout)
    except ValueError as e:
        raise InteropError(f"mapping {path}: {e}") from None
    cls = config_class(fam)
    fields = [f.name for f in dataclasses.fields(cls)]
    params = d["params"]
    if not isinstance(params, dict) or not params:
        raise InteropError(f"mapping {path}: params={shown(params)}; must be a non-empty object of Kernel Tuner "
                           f"parameter name -> {family} config field ({fields})")
    seen: dict = {}
    for kt, f in params.items():
        if f not in fields:
            raise InteropError(f"mapping {path}: params[{shown(kt)}]={shown(f)} is not a parameter of the {family!r} "
                               f"family; allowed: {fields}")
        if f in seen:
            raise InteropError(f"mapping {path}: params {shown(seen[f])} and {shown(kt)} both map to {shown(f)}; "
                               "each field takes one Kernel Tuner parameter")
        seen[f] = kt
    fixed = d.get("fixed", {})
    if not isinstance(fixed, dict):
        raise InteropError(f"mapping {path}: fixed={shown(fixed)}; must be an object of {family} config field -> value")
    for f in fixed:
        if f not in fields:
            raise InteropError(f"mapping {path}: fixed[{shown(f)}] is not a parameter of the {family!r} family; "
                               f"allowed: {fields}")
        if f in seen:
            raise InteropError(f"mapping {path}: {shown(f)} is both mapped (from {shown(seen[f])}) and fixed; give one")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [f for f in required if f not in seen and f not in fixed]
    if missing:
        raise InteropError(f"mapping {path}: the {family!r} fields {missing} are neither mapped in params nor "
                           "given in fixed (they have no default)")
    ps = d.get("problem_size", [])
    if not isinstance(ps, list):
        raise InteropError(f"mapping {path}: problem_size={shown(ps)}; must be a list of 'm', 'n', 'k' or null, one "
                           "per entry of Kernel Tuner's problem_size")
    for i, e in enumerate(ps):
        if e is not None and e not in EXTENTS:
            raise InteropError(f"mapping {path}: problem_size[{i}]={shown(e)}; allowed: 'm', 'n', 'k' or null")
        if e is not None and ps.index(e) != i:
            raise InteropError(f"mapping {path}: problem_size names {shown(e)} twice (entries {ps.index(e)} and {i})")
    shape = d.get("shape", {})
    if not isinstance(shape, dict):
        raise InteropError(f"mapping {path}: shape={shown(shape)}; must be an object of 'm', 'n', 'k' -> int")
    for k, v in shape.items():
        if k not in EXTENTS:
            raise InteropError(f"mapping {path}: shape key {shown(k)}; allowed: 'm', 'n', 'k'")
        if not is_int(v) or not 1 <= v <= MAX_EXTENT:
            raise InteropError(f"mapping {path}: shape[{shown(k)}]={shown(v)}; must be an int in [1, 2**31 - 1]")
    unknown_ext = [e for e in EXTENTS if e not in shape and e not in ps]
    if unknown_ext:
        raise InteropError(f"mapping {path}: extents {unknown_ext} are unknown; name them in problem_size or "
                           "give them in shape")
    return Mapping(family=family, dtype=dtype, layout=layout, params=dict(params), fixed=dict(fixed),
                   problem_size=tuple(ps), shape=dict(shape), source=str(path))
