"""Kernel Tuner's files, in and out: its cache files and T4 results JSON
(Kernel Tuner 1.x, https://github.com/KernelTuner/kernel_tuner; the readers
and writers are ``kernel_tuner/util.py`` (``process_cache``, ``read_cache``,
``store_cache``) and ``kernel_tuner/file_utils.py`` (``get_t4_results``,
``get_t4_metadata``), the T4 schemas ``kernel_tuner/schema/T4/1.0.0/``).

A Kernel Tuner kernel has parameters of its own names, so an import needs a
mapping file (:func:`load_mapping`) from them to a costlearn family's config
fields, and the problem (M, N, K, dtype, layout) the tuning ran.

Cache file: one JSON object, ``device_name``, ``kernel_name``,
``problem_size``, ``tune_params_keys``, ``tune_params``, ``objective`` and,
last, ``cache``: ``"v1,v2,..."`` (each tune parameter's value, ``str()``,
joined by commas in ``tune_params_keys`` order) -> the parameters and what
was measured: ``time`` (ms, the mean of ``times``), ``times`` (ms, one per
iteration), ``compile_time``, ``verification_time``, ``benchmark_time``
(ms), ``timestamp``. A failed config carries ``"__error__":
"CompilationFailedConfig"`` (or ``InvalidConfig``, ``RuntimeFailedConfig``)
and no time; older caches put that string in ``time`` itself. While tuning,
Kernel Tuner leaves the file open: the last entry ends in ``,`` and the two
closing braces are missing (its reader closes it before parsing).

T4 results: ``{"schema_version": "1.0.0", "results": [...], "metadata":
{"timeunit": "milliseconds"}}``; each result has ``configuration`` (the
parameters), ``times`` (``compilation`` as Kernel Tuner writes it,
``compilation_time`` as the schema names it, ``runtimes`` ...),
``invalidity`` (``"correct"`` or why not: ``compile``, ``runtime``,
``constraints``, ``correctness``, ``timeout``), ``correctness`` and
``measurements`` (``{"name": "time", "value": ..., "unit": "ms"}``). It
records no problem size.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.core.device import device_slug
from costlearn.families import FAMILIES, VENDOR_CONFIG_ID, get_family
from costlearn.core.problem import MAX_EXTENT
from costlearn.core.util import atomic_write
from costlearn.core.version import __version__
from costlearn.interop.common import Importer, InteropError, Measurement

__all__ = ["KernelTunerImporter", "Mapping", "load_mapping", "parse",
           "export_cache", "export_t4", "ERROR_NAMES", "TIME_UNITS",
           "T4_SCHEMA_VERSION", "cache_key"]

ERROR_NAMES = ("ErrorConfig", "InvalidConfig", "CompilationFailedConfig", "RuntimeFailedConfig")
"""The failure markers Kernel Tuner writes into a cache entry (its
``util.ErrorConfig`` subclasses, by name)."""

TIME_UNITS = {"ms": 1e3, "milliseconds": 1e3, "millisecond": 1e3, "s": 1e6, "seconds": 1e6, "second": 1e6,
              "us": 1.0, "\u00b5s": 1.0, "\u03bcs": 1.0, "microseconds": 1.0, "microsecond": 1.0,
              "ns": 1e-3, "nanoseconds": 1e-3, "nanosecond": 1e-3}
"""Time unit names -> microseconds per unit (Kernel Tuner's own unit is ms)."""

T4_SCHEMA_VERSION = "1.0.0"
"""The T4 schema version :func:`export_t4` writes (Kernel Tuner 1.x's)."""

_MAPPING_KEYS = ("family", "dtype", "layout", "params", "fixed", "problem_size", "shape")
_EXTENTS = ("m", "n", "k")
_TIMING_KEYS = ("compile_time", "verification_time", "benchmark_time")


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


def _config_class(fam):
    """The family's tile-config dataclass (the one with fields; not
    ``triton_mm``'s vendor call)."""
    types = fam.config_type if isinstance(fam.config_type, tuple) else (fam.config_type,)
    for t in types:
        if dataclasses.is_dataclass(t) and dataclasses.fields(t):
            return t
    raise InteropError(f"family {fam.name!r} has no config dataclass with parameters")


def _is_int(v) -> bool:
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
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InteropError(f"mapping {path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    try:
        d = json.loads(text)
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
    if family not in FAMILIES:
        raise InteropError(f"mapping {path}: family={family!r}; allowed: {list(FAMILIES.names())}")
    fam = get_family(family)
    dtype, layout = d["dtype"], d.get("layout", "NN")
    try:
        fam.check_dtype(dtype, layout)
    except ValueError as e:
        raise InteropError(f"mapping {path}: {e}") from None
    cls = _config_class(fam)
    fields = [f.name for f in dataclasses.fields(cls)]
    params = d["params"]
    if not isinstance(params, dict) or not params:
        raise InteropError(f"mapping {path}: params={params!r}; must be a non-empty object of Kernel Tuner "
                           f"parameter name -> {family} config field ({fields})")
    seen: dict = {}
    for kt, f in params.items():
        if f not in fields:
            raise InteropError(f"mapping {path}: params[{kt!r}]={f!r} is not a parameter of the {family!r} "
                               f"family; allowed: {fields}")
        if f in seen:
            raise InteropError(f"mapping {path}: params {seen[f]!r} and {kt!r} both map to {f!r}; each field "
                               "takes one Kernel Tuner parameter")
        seen[f] = kt
    fixed = d.get("fixed", {})
    if not isinstance(fixed, dict):
        raise InteropError(f"mapping {path}: fixed={fixed!r}; must be an object of {family} config field -> value")
    for f in fixed:
        if f not in fields:
            raise InteropError(f"mapping {path}: fixed[{f!r}] is not a parameter of the {family!r} family; "
                               f"allowed: {fields}")
        if f in seen:
            raise InteropError(f"mapping {path}: {f!r} is both mapped (from {seen[f]!r}) and fixed; give one")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [f for f in required if f not in seen and f not in fixed]
    if missing:
        raise InteropError(f"mapping {path}: the {family!r} fields {missing} are neither mapped in params nor "
                           "given in fixed (they have no default)")
    ps = d.get("problem_size", [])
    if not isinstance(ps, list):
        raise InteropError(f"mapping {path}: problem_size={ps!r}; must be a list of 'm', 'n', 'k' or null, one "
                           "per entry of Kernel Tuner's problem_size")
    for i, e in enumerate(ps):
        if e is not None and e not in _EXTENTS:
            raise InteropError(f"mapping {path}: problem_size[{i}]={e!r}; allowed: 'm', 'n', 'k' or null")
        if e is not None and ps.index(e) != i:
            raise InteropError(f"mapping {path}: problem_size names {e!r} twice (entries {ps.index(e)} and {i})")
    shape = d.get("shape", {})
    if not isinstance(shape, dict):
        raise InteropError(f"mapping {path}: shape={shape!r}; must be an object of 'm', 'n', 'k' -> int")
    for k, v in shape.items():
        if k not in _EXTENTS:
            raise InteropError(f"mapping {path}: shape key {k!r}; allowed: 'm', 'n', 'k'")
        if not _is_int(v) or not 1 <= v <= MAX_EXTENT:
            raise InteropError(f"mapping {path}: shape[{k!r}]={v!r}; must be an int in [1, 2**31 - 1]")
    unknown_ext = [e for e in _EXTENTS if e not in shape and e not in ps]
    if unknown_ext:
        raise InteropError(f"mapping {path}: extents {unknown_ext} are unknown; name them in problem_size or "
                           "give them in shape")
    return Mapping(family=family, dtype=dtype, layout=layout, params=dict(params), fixed=dict(fixed),
                   problem_size=tuple(ps), shape=dict(shape), source=str(path))


# ---------------------------------------------------------------------------------------------------- reading


def _close_like_kernel_tuner(text: str) -> str:
    """What Kernel Tuner's ``correct_open_cache`` makes of an open cache: a
    file whose last three characters are neither ``}\\n}`` nor ``}}}`` loses
    a trailing comma and gets ``}\\n}`` appended."""
    s = text.strip()
    if s and s[-3:] not in ("}\n}", "}}}"):
        if s[-1] == ",":
            s = s[:-1]
        s += "}\n}"
    return s


def _read_document(path: Path):
    """(kind, document, skipped): kind ``"cache"`` or ``"t4"``."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InteropError(f"{path}: cannot read ({e.strerror})") from None
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise InteropError(f"{path}: not a text file; a Kernel Tuner cache or T4 results file is JSON") from None
    if not text.strip():
        raise InteropError(f"{path}: empty file")
    skipped: list = []
    doc = None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        if '"cache"' in text:                       # an open cache, as Kernel Tuner leaves it while tuning
            try:
                doc = json.loads(_close_like_kernel_tuner(text))
            except json.JSONDecodeError:
                # a writer killed mid-line: drop the partial last line (Kernel Tuner's reader gives up here)
                head = text.strip()
                cut = head.rfind("\n")
                if cut > 0:
                    try:
                        doc = json.loads(_close_like_kernel_tuner(head[:cut]))
                    except json.JSONDecodeError:
                        doc = None
                    if isinstance(doc, dict) and isinstance(doc.get("cache"), dict):
                        skipped.append((len(doc["cache"]) + 1, f"truncated entry {head[cut + 1:][:60]!r}"))
    if isinstance(doc, dict) and isinstance(doc.get("cache"), dict) and \
            ("tune_params_keys" in doc or "tune_params" in doc):
        return "cache", doc, skipped
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return "t4", doc, skipped
    hint = ""
    first = text.lstrip().split("\n", 1)[0]
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        header = None
    if isinstance(header, dict) and "shared_memory" in header and "device_capa" in header:
        hint = " (line 1 looks like a PyTorch Inductor AutoHeuristic header: import it as 'inductor')"
    raise InteropError(f"{path}: neither a Kernel Tuner cache file (a JSON object with tune_params_keys and "
                       f"cache) nor a T4 results file (a JSON object with a results list); is this another "
                       f"format?{hint}")


def _extents(mapping: Mapping, problem_size, path: Path, where: str) -> tuple[int, int, int]:
    """(M, N, K) from the file's problem size and the mapping."""
    got = dict(mapping.shape)
    need = [e for e in _EXTENTS if e not in got]
    if mapping.problem_size and problem_size is not None:
        if _is_int(problem_size):
            problem_size = [problem_size]
        if isinstance(problem_size, list):
            if len(problem_size) != len(mapping.problem_size):
                raise InteropError(f"{path}: problem_size={problem_size} has {len(problem_size)} entries, the "
                                   f"mapping {mapping.source} names {len(mapping.problem_size)} "
                                   f"({list(mapping.problem_size)})")
            for name, v in zip(mapping.problem_size, problem_size):
                if name is None or name in got:
                    continue
                if not _is_int(v) or not 1 <= v <= MAX_EXTENT:
                    raise InteropError(f"{path}: problem_size entry {name}={v!r}; must be an int in "
                                       "[1, 2**31 - 1]")
                got[name] = v
        elif need:
            raise InteropError(f"{path}: problem_size={problem_size!r}; need a list of ints (Kernel Tuner records a "
                               f"callable problem size as a string): give {need} in the mapping's shape")
    missing = [e for e in _EXTENTS if e not in got]
    if missing:
        raise InteropError(f"{path}: {where} records no problem_size for {missing}; give them in the shape of the "
                           f"mapping {mapping.source}")
    return got["m"], got["n"], got["k"]


def _config(values: dict, mapping: Mapping):
    """The family config of one entry's parameters; ValueError why not."""
    if not isinstance(values, dict):
        raise ValueError(f"parameters {values!r} are not an object")
    kw = dict(mapping.fixed)
    for kt, f in mapping.params.items():
        if kt not in values:
            raise ValueError(f"lacks the mapped parameter {kt!r}")
        kw[f] = values[kt]
    cls = _config_class(get_family(mapping.family))
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"not a {mapping.family} config: {e}") from None


def _positive_time_us(value, unit_us: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what}={value!r} is not a positive time")
    return float(value) * unit_us


def _check_source(path: Path, spec, mapping: Mapping, device_name, meta: dict) -> None:
    """Refuse a file that says it was measured on another device than
    ``spec`` (a cache's ``device_name``), or for another family, dtype or
    layout than the mapping's (the metadata :func:`export_t4` writes)."""
    if spec is not None and isinstance(device_name, str) and device_name.strip():
        have = device_slug(device_name, spec.api)
        if have != device_slug(spec.name, spec.api):        # the class by name (a CPU slug adds its workers)
            raise InteropError(f"{path}: measured on {device_name!r} ({have!r}), but --preset is {spec.name!r} "
                               f"({spec.slug!r}); pass the preset of the GPU the file was measured on")
    for key, want in (("family", mapping.family), ("dtype", mapping.dtype), ("layout", mapping.layout)):
        have = meta.get(key)
        if isinstance(have, str) and have and have != want:
            raise InteropError(f"{path}: the file says {key} {have!r}, the mapping {mapping.source} says {want!r}")


def parse(path, mapping: Mapping, spec=None):
    """Parse a Kernel Tuner cache file or T4 results file.

    The kind is told by content: a JSON object with ``cache`` and
    ``tune_params_keys`` (or ``tune_params``) is a cache, also when left
    open as Kernel Tuner does while tuning (closed the way its
    ``read_cache`` does; a partial last line is dropped and reported); one
    with a ``results`` list is T4.

    Parameters
    ----------
    path : path
        The file.
    mapping : Mapping
        From :func:`load_mapping`.
    spec : DeviceSpec, optional
        The device named on the command line; a cache whose
        ``device_name`` names another is refused.

    Returns
    -------
    measurements : list of Measurement
        One per entry (``line`` = its 1-based index in ``cache`` or
        ``results``), of ``mapping``'s family, dtype and layout; M, N, K from
        the file's ``problem_size`` (a T4 file's ``metadata.problem_size``,
        which :func:`export_t4` writes and Kernel Tuner does not) and the
        mapping's ``shape``. ``time_us``: a cache's ``time`` (ms) or a T4
        ``time`` measurement in its unit (``ms`` when it names none, or the
        file's ``metadata.timeunit``), in microseconds. A failed entry (a
        cache value that is one of :data:`ERROR_NAMES`, a T4 ``invalidity``
        other than ``"correct"``) has ``time_us`` NaN and ``error`` that
        name. Tune parameters the mapping does not name are ignored.
    skipped : list of (int, str)
        Entries not imported (index, reason): parameters that make no valid
        config of the family, a mapped parameter missing, no positive time,
        an unknown time unit, a truncated last line.

    Raises
    ------
    InteropError
        If the file is empty, not text, or neither format ("is this another
        format?"); if a cache's ``problem_size`` has another length than the
        mapping's ``problem_size`` or an extent is not a positive int; if an
        extent is known neither from the file nor from the mapping's
        ``shape``; if the mapping names a parameter a cache's
        ``tune_params_keys`` lacks; if the file names another device than
        ``spec`` or another family, dtype or layout than the mapping.
    """
    path = Path(path)
    kind, doc, skipped = _read_document(path)
    fam_name, dtype, layout = mapping.family, mapping.dtype, mapping.layout
    out: list = []
    if kind == "cache":
        keys = doc.get("tune_params_keys")
        if isinstance(keys, list):
            absent = [kt for kt in mapping.params if kt not in keys]
            if absent:
                raise InteropError(f"{path}: the mapping {mapping.source} names parameters {absent} this cache does "
                                   f"not tune; its tune_params_keys are {keys}")
        _check_source(path, spec, mapping, doc.get("device_name"), {})
        m, n, k = _extents(mapping, doc.get("problem_size"), path, "the cache")
        for i, (key, entry) in enumerate(doc["cache"].items(), start=1):
            try:
                cfg = _config(entry, mapping)
                errors = [v for v in entry.values() if isinstance(v, str) and v in ERROR_NAMES]
                if errors:
                    out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, math.nan, errors[0]))
                    continue
                if "time" not in entry:
                    raise ValueError("no time and no error recorded")
                t = _positive_time_us(entry["time"], TIME_UNITS["ms"], "time (ms)")
                out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, t))
            except ValueError as e:
                skipped.append((i, f"entry {str(key)[:60]!r}: {e}"[:240]))
    else:
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        _check_source(path, spec, mapping, meta.get("device_name"), meta)
        m, n, k = _extents(mapping, meta.get("problem_size"), path, "a T4 results file")
        default_unit = meta.get("timeunit") or "ms"
        for i, res in enumerate(doc["results"], start=1):
            try:
                if not isinstance(res, dict):
                    raise ValueError(f"a {type(res).__name__}, not an object")
                cfg = _config(res.get("configuration"), mapping)
                times = res.get("times")
                if times is not None and not isinstance(times, dict):
                    raise ValueError(f"times={times!r} is not an object")
                inv = res.get("invalidity", "correct")
                if inv != "correct":
                    out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, math.nan, str(inv)))
                    continue
                ms = res.get("measurements")
                hit = [x for x in ms if isinstance(x, dict) and x.get("name") == "time"] \
                    if isinstance(ms, list) else []
                if not hit:
                    raise ValueError("no 'time' measurement")
                unit = hit[0].get("unit") or default_unit
                if unit not in TIME_UNITS:
                    raise ValueError(f"time unit {unit!r}; allowed: {list(TIME_UNITS)}")
                t = _positive_time_us(hit[0].get("value"), TIME_UNITS[unit], f"time ({unit})")
                out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, t))
            except ValueError as e:
                skipped.append((i, f"result {i}: {e}"[:240]))
    return out, skipped


# ---------------------------------------------------------------------------------------------------- writing


def cache_key(values) -> str:
    """A cache key as Kernel Tuner forms it: each value's ``str()``, joined
    by ``,`` (``runners/sequential.py``, ``runners/simulation.py``)."""
    return ",".join(str(v) for v in values)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", str(s)).strip("-").lower() or "device"


def _problems(rows):
    """Yield (stem, group info, per-config records) for each problem of
    ``rows``; a record is (config, times_ms, compile_ms, timestamp)."""
    if rows is None or len(rows) == 0:
        return
    rows = rows[rows["config_id"] != VENDOR_CONFIG_ID]
    keys = ["device_name", "family", "dtype", "layout", "m", "n", "k"]
    several_devices = rows["device_name"].nunique(dropna=False) > 1
    for key, g in rows.groupby(keys, sort=True, dropna=False):
        device_name, family, dtype, layout, m, n, k = key
        fam = get_family(family)
        configs: dict = {}
        order = [c for c in ("timestamp", "run_id", "source_line") if c in g.columns]
        g = g.sort_values(order, kind="stable") if order else g
        for cid, cg in g.groupby("config_id", sort=False):
            cfg = fam.config_from_id(cid)
            if not dataclasses.is_dataclass(cfg) or not dataclasses.fields(cfg):
                continue                             # the vendor call has no parameters to tune
            t = cg["time_us"].to_numpy(np.float64)
            keep = np.isfinite(t) & (t > 0)
            if not keep.any():
                continue
            comp = cg["compile_s"].to_numpy(np.float64)[keep]
            comp = comp[np.isfinite(comp)]
            stamps = [s for s in cg["timestamp"].astype(object).to_numpy()[keep] if isinstance(s, str) and s]
            configs[cid] = (cfg, [float(x) / 1e3 for x in t[keep]],
                            float(np.median(comp)) * 1e3 if comp.size else 0.0, max(stamps) if stamps else "")
        if not configs:
            continue
        stem = f"{family}_{dtype}_{layout}_{int(m)}x{int(n)}x{int(k)}"
        if several_devices:
            stem = f"{_slug(device_name)}_{stem}"
        fields = [f.name for f in dataclasses.fields(next(iter(configs.values()))[0])]
        first = g.iloc[0]
        info = dict(device_name=_plain(device_name, ""),
                    family=str(family), dtype=str(dtype), layout=str(layout), m=int(m), n=int(n), k=int(k),
                    fields=fields, first=first)
        yield stem, info, sorted(configs.values(), key=lambda r: r[0])


def _plain(v, default=""):
    """A pandas cell as a JSON value (missing -> ``default``)."""
    try:
        if pd.isna(v):
            return default
    except (TypeError, ValueError):
        pass
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v if isinstance(v, (int, float, str)) else str(v)


def _tune_params(fields, records) -> dict:
    return {f: sorted({getattr(c, f) for c, *_ in records}) for f in fields}


def _write(path: Path, text: str) -> Path:
    atomic_write(path, text.encode("utf-8"))
    return path


def export_cache(rows, out_dir) -> list[Path]:
    """Write valid dataset rows as Kernel Tuner cache files.

    One file per (device_name, family, dtype, layout, M, N, K), called
    ``<family>_<dtype>_<layout>_<M>x<N>x<K>.json`` (prefixed by the device
    when the rows hold several), laid out as Kernel Tuner writes a closed
    cache: ``device_name``, ``kernel_name`` (the family's name),
    ``problem_size`` [M, N, K], ``tune_params_keys`` and ``tune_params`` (the
    family config's fields, each with the values the rows hold, sorted),
    ``objective`` ``"time"``, and last ``cache``: one entry per config under
    Kernel Tuner's key (:func:`cache_key`), with the parameters, ``time``
    (ms, the median over the config's rows), ``times`` (ms, each row's),
    ``compile_time`` (ms, the median ``compile_s``, 0 where unknown),
    ``verification_time`` and ``benchmark_time`` (0: not recorded) and
    ``timestamp``. Kernel Tuner's ``read_cache`` reads it; its simulation
    mode (``tune_kernel(..., simulation_mode=True, cache=file)``) needs
    restrictions that keep the parameter combinations no row measured out of
    the search space, which ``kernel_tuner.tune_cache(file)`` infers.

    Parameters
    ----------
    rows : pandas.DataFrame
        Valid dataset rows (columns of :data:`costlearn.collect.dataset.COLUMNS`);
        ``config_id == "vendor"`` rows are left out.
    out_dir : path
        Folder to write into (created).

    Returns
    -------
    list of Path
        The files written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, info, records in _problems(rows):
        fields = info["fields"]
        head = dict(device_name=info["device_name"], kernel_name=info["family"],
                    problem_size=[info["m"], info["n"], info["k"]], tune_params_keys=fields,
                    tune_params=_tune_params(fields, records), objective="time", cache={})
        # Kernel Tuner's own layout: the header indented by "", then one entry a line (process_cache, store_cache)
        text = json.dumps(head, indent="")[:-3]
        lines = []
        for cfg, times, compile_ms, stamp in records:
            vals = [getattr(cfg, f) for f in fields]
            entry = dict(zip(fields, vals))
            entry.update(time=float(np.median(times)), times=times, compile_time=compile_ms, verification_time=0,
                         benchmark_time=0, timestamp=stamp)
            lines.append("\n" + json.dumps({cache_key(vals): entry})[1:-1])
        text += ",".join(lines) + "}\n}"
        written.append(_write(out_dir / f"{stem}.json", text))
    return written


def export_t4(rows, out_dir) -> list[Path]:
    """Write valid dataset rows as T4 results and metadata files.

    Per problem (as :func:`export_cache`) ``<stem>_results.json``: T4
    results (schema 1.0.0), one result per config with ``configuration``
    (the family config's fields), ``times`` (``compilation`` as Kernel
    Tuner writes it and ``compilation_time`` as the schema names it, ms;
    ``runtimes``, ms, each row's; the other timings 0), ``invalidity``
    ``"correct"``, ``correctness`` 1, the ``time`` measurement (ms, the
    median) and ``objectives`` ``["time"]``; top-level ``metadata`` holds
    ``timeunit`` ``"milliseconds"`` as Kernel Tuner writes it, and the
    problem (``problem_size`` [M, N, K], family, dtype, layout,
    ``tune_params_keys``, ``device_name``), which T4 has no place for and
    :func:`parse` reads back. And ``<stem>_metadata.json``: T4 metadata,
    the device (from the rows' provenance) as the hardware description and
    costlearn's version as the requirements.

    Parameters
    ----------
    rows : pandas.DataFrame
        Valid dataset rows; ``config_id == "vendor"`` rows are left out.
    out_dir : path
        Folder to write into (created).

    Returns
    -------
    list of Path
        Every file written (results then metadata, per problem).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, info, records in _problems(rows):
        fields = info["fields"]
        results = []
        for cfg, times, compile_ms, stamp in records:
            r = {}
            if stamp:
                r["timestamp"] = stamp
            r["configuration"] = {f: getattr(cfg, f) for f in fields}
            r["times"] = dict(compilation=compile_ms, compilation_time=compile_ms, benchmark=0, framework=0,
                              search_algorithm=0, validation=0, runtimes=times)
            r["invalidity"] = "correct"
            r["correctness"] = 1
            r["measurements"] = [dict(name="time", value=float(np.median(times)), unit="ms")]
            r["objectives"] = ["time"]
            results.append(r)
        meta = dict(timeunit="milliseconds", kernel_name=info["family"], device_name=info["device_name"],
                    problem_size=[info["m"], info["n"], info["k"]], family=info["family"], dtype=info["dtype"],
                    layout=info["layout"], tune_params_keys=fields)
        res_doc = dict(results=results, schema_version=T4_SCHEMA_VERSION, metadata=meta)
        first = info["first"]

        hw = {c: _plain(first[c]) for c in ("device_name", "device_slug", "api", "compute_capability",
                                            "multiprocessors", "driver_version", "runtime_version",
                                            "library_version") if c in first.index}
        meta_doc = dict(schema_version=T4_SCHEMA_VERSION, metadata=dict(
            hardware=dict(hardware_description=[hw]),
            environment=dict(device_query={}, requirements=[f"costlearn=={__version__}"])))
        written.append(_write(out_dir / f"{stem}_results.json", json.dumps(res_doc, indent=1)))
        written.append(_write(out_dir / f"{stem}_metadata.json", json.dumps(meta_doc, indent=1)))
    return written


class KernelTunerImporter(Importer):
    """``costlearn import kernel-tuner --mapping FILE``: :func:`parse` with
    :func:`load_mapping`."""

    name = "kernel-tuner"
    takes_mapping = True

    def parse(self, path, spec, mapping=None):
        if mapping is None:
            raise InteropError("a kernel-tuner import needs --mapping FILE (the kernel's parameter names -> a "
                               "family's; see the README's Kernel Tuner paragraph)")
        return parse(path, load_mapping(mapping), spec)

