"""Kernel Tuner's files in: a cache file (closed, or open as Kernel Tuner
leaves it while tuning) or T4 results JSON, read through a mapping
(:func:`parse`, :class:`KernelTunerImporter`); the formats are described in
:mod:`costlearn.interop.kernel_tuner`."""
from __future__ import annotations

import json
import math
from pathlib import Path

from costlearn.core.checks import shown
from costlearn.core.device import device_slug
from costlearn.core.problem import MAX_EXTENT
from costlearn.families import get_family
from costlearn.interop.common import (MAX_READ_BYTES, Importer, InteropError, Measurement, SkippedLines,
                                      config_class, load_json, positive_time_us, source_file)
from costlearn.interop.kernel_tuner.mapping import EXTENTS, Mapping, is_int, load_mapping

__all__ = ["KernelTunerImporter", "parse", "ERROR_NAMES", "TIME_UNITS"]

ERROR_NAMES = ("ErrorConfig", "InvalidConfig", "CompilationFailedConfig", "RuntimeFailedConfig")
"""The failure markers Kernel Tuner writes into a cache entry (its
``util.ErrorConfig`` subclasses, by name)."""

TIME_UNITS = {"ms": 1e3, "milliseconds": 1e3, "millisecond": 1e3, "s": 1e6, "seconds": 1e6, "second": 1e6,
              "us": 1.0, "\u00b5s": 1.0, "\u03bcs": 1.0, "microseconds": 1.0, "microsecond": 1.0,
              "ns": 1e-3, "nanoseconds": 1e-3, "nanosecond": 1e-3}
"""Time unit names -> microseconds per unit (Kernel Tuner's own unit is ms)."""


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


def _json(text: str, path: Path):
    """:func:`costlearn.interop.common.load_json` of a Kernel Tuner file."""
    return load_json(text, path, "a Kernel Tuner file")


def _read_document(path: Path):
    """(kind, document, skipped): kind ``"cache"`` or ``"t4"``."""
    source_file(path, verb="import", max_bytes=MAX_READ_BYTES)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InteropError(f"{path}: cannot read ({e.strerror})") from None
    try:
        text = raw.decode("utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise InteropError(f"{path}: not a text file; a Kernel Tuner cache or T4 results file is JSON") from None
    if not text.strip():
        raise InteropError(f"{path}: empty file")
    skipped = SkippedLines()
    doc = None
    try:
        doc = _json(text, path)
    except json.JSONDecodeError:
        if '"cache"' in text:                       # an open cache, as Kernel Tuner leaves it while tuning
            try:
                doc = _json(_close_like_kernel_tuner(text), path)
            except json.JSONDecodeError:
                # a writer killed mid-line: drop the partial last line (Kernel Tuner's reader gives up here)
                head = text.strip()
                cut = head.rfind("\n")
                if cut > 0:
                    try:
                        doc = _json(_close_like_kernel_tuner(head[:cut]), path)
                    except json.JSONDecodeError:
                        doc = None
                    if isinstance(doc, dict) and isinstance(doc.get("cache"), dict):
                        skipped.add(len(doc["cache"]) + 1, f"truncated entry {shown(head[cut + 1:])}")
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
    need = [e for e in EXTENTS if e not in got]
    if mapping.problem_size and problem_size is not None:
        if is_int(problem_size):
            problem_size = [problem_size]
        if isinstance(problem_size, list):
            if len(problem_size) != len(mapping.problem_size):
                raise InteropError(f"{path}: problem_size={shown(problem_size)} has {len(problem_size)} entries, the "
                                   f"mapping {mapping.source} names {len(mapping.problem_size)} "
                                   f"({list(mapping.problem_size)})")
            for name, v in zip(mapping.problem_size, problem_size):
                if name is None or name in got:
                    continue
                if not is_int(v) or not 1 <= v <= MAX_EXTENT:
                    raise InteropError(f"{path}: problem_size entry {name}={shown(v)}; must be an int in "
                                       "[1, 2**31 - 1]")
                got[name] = v
        elif need:
            raise InteropError(f"{path}: problem_size={shown(problem_size)}; need a list of ints (Kernel Tuner "
                               f"records a callable problem size as a string): give {need} in the mapping's shape")
    missing = [e for e in EXTENTS if e not in got]
    if missing:
        raise InteropError(f"{path}: {where} records no problem_size for {missing}; give them in the shape of the "
                           f"mapping {mapping.source}")
    return got["m"], got["n"], got["k"]


def _config(values: dict, mapping: Mapping):
    """The family config of one entry's parameters; ValueError why not."""
    if not isinstance(values, dict):
        raise ValueError(f"parameters {shown(values)} are not an object")
    kw = dict(mapping.fixed)
    for kt, f in mapping.params.items():
        if kt not in values:
            raise ValueError(f"lacks the mapped parameter {kt!r}")
        kw[f] = values[kt]
    cls = config_class(get_family(mapping.family))
    try:
        return cls(**kw)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"not a {mapping.family} config: {e}") from None


def _check_source(path: Path, spec, mapping: Mapping, device_name, meta: dict) -> None:
    """Refuse a file that says it was measured on another device than
    ``spec`` (a cache's ``device_name``), or for another family, dtype or
    layout than the mapping's (the metadata :func:`export_t4` writes). A
    ``device_name`` (or a family, dtype, layout) present but not a string
    is refused: it cannot be checked."""
    for key, v in (("device_name", device_name),) + tuple((k, meta.get(k)) for k in ("family", "dtype", "layout")):
        if v is not None and not isinstance(v, str):
            raise InteropError(f"{path}: {key} is {type(v).__name__} {str(v)[:80]}, not a string; the file "
                               "cannot say which device or kernel it measured")
    if spec is not None and isinstance(device_name, str) and device_name.strip():
        have = device_slug(device_name, spec.api)
        if have != device_slug(spec.name, spec.api):        # the class by name (a CPU slug adds its workers)
            raise InteropError(f"{path}: measured on {shown(device_name)} ({shown(have)}), but --preset is "
                               f"{spec.name!r} ({spec.slug!r}); pass the preset of the GPU the file was measured on")
    for key, want in (("family", mapping.family), ("dtype", mapping.dtype), ("layout", mapping.layout)):
        have = meta.get(key)
        if isinstance(have, str) and have and have != want:
            raise InteropError(f"{path}: the file says {key} {shown(have)}, the mapping {mapping.source} says {want!r}")


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
    skipped : SkippedLines
        Entries not imported (index, reason; the first thousand kept, all
        counted): parameters that make no valid config of the family, a
        mapped parameter missing, no positive time, an unknown time unit, a
        T4 ``invalidity`` that is no string, a truncated last line.

    Raises
    ------
    InteropError
        If the file is not a regular file, larger than
        :data:`~costlearn.interop.common.MAX_READ_BYTES`, empty, not UTF-8
        text (a byte-order mark is allowed), or neither format ("is this
        another format?"); if a cache's ``tune_params_keys`` is not a list;
        if a cache's ``problem_size`` has another length than the mapping's
        ``problem_size`` or an extent is not a positive int; if an
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
        if keys is not None and not isinstance(keys, list):
            raise InteropError(f"{path}: tune_params_keys={shown(keys)}; must be a list of the tuned parameters' "
                               "names")
        if isinstance(keys, list):
            absent = [kt for kt in mapping.params if kt not in keys]
            if absent:
                raise InteropError(f"{path}: the mapping {mapping.source} names parameters {absent} this cache does "
                                   f"not tune; its tune_params_keys are {shown(keys, 240)}")
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
                t = positive_time_us(entry["time"], TIME_UNITS["ms"], "time (ms)")
                out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, t))
            except ValueError as e:
                skipped.add(i, f"entry {shown(key)}: {e}"[:240])
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
                    raise ValueError(f"times={shown(times)} is not an object")
                inv = res.get("invalidity", "correct")
                if not isinstance(inv, str) or not inv:
                    raise ValueError(f"invalidity={shown(inv)}; must be a string ('correct' or why not)")
                if inv != "correct":
                    out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, math.nan, inv[:80]))
                    continue
                ms = res.get("measurements")
                hit = [x for x in ms if isinstance(x, dict) and x.get("name") == "time"] \
                    if isinstance(ms, list) else []
                if not hit:
                    raise ValueError("no 'time' measurement")
                unit = hit[0].get("unit") or default_unit
                if not isinstance(unit, str) or unit not in TIME_UNITS:
                    raise ValueError(f"time unit {shown(unit)}; allowed: {list(TIME_UNITS)}")
                t = positive_time_us(hit[0].get("value"), TIME_UNITS[unit], f"time ({unit})")
                out.append(Measurement(i, m, n, k, dtype, layout, fam_name, cfg, t))
            except ValueError as e:
                skipped.add(i, f"result {i}: {e}"[:240])
    return out, skipped


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
