"""Importer of PyTorch Inductor's AutoHeuristic mm logs (the files Inductor
writes with ``TORCHINDUCTOR_AUTOHEURISTIC_COLLECT=mm``; writer:
``torch/_inductor/autoheuristic/autoheuristic.py``, format described in
``shared/data/inductor-autoheuristic-a100/PROVENANCE.md``).

Line 1 is a JSON header (``shared_memory``, ``device_capa``, ``name``,
feature lists); line 2 the CSV column names; every other line one
measurement: ``m,k,n,mat1_dtype,mat2_dtype,mat1_stride_0,mat1_stride_1,
mat2_stride_0,mat2_stride_1,mat1_iscontig,mat2_iscontig,using_tf32,choice,
feedback``. ``feedback`` is milliseconds (``inf``: the config failed);
``choice`` is ``extern_mm`` (the vendor library) or
``type=triton_BLOCK-M=.._BLOCK-K=.._BLOCK-N=.._numstages=.._numwarps=..``;
which family's config a choice names is the tool-name registry's to say
(:func:`costlearn.interop.tool_names.config_from_tool` with tool
``"inductor"``; it maps both to ``triton_mm``'s:
:mod:`costlearn.interop.inductor.names`).
"""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

from costlearn.core.checks import shown
from costlearn.core.device import DeviceSpec
from costlearn.core.dtypes import TORCH_DTYPES
from costlearn.core.problem import MAX_EXTENT, layout_letter
from costlearn.interop.common import Importer, InteropError, Measurement, SkippedLines, load_json, source_file
from costlearn.interop.tool_names import config_from_tool

__all__ = ["InductorImporter", "parse", "check_header", "COLUMNS"]

COLUMNS = ("m", "k", "n", "mat1_dtype", "mat2_dtype", "mat1_stride_0", "mat1_stride_1", "mat2_stride_0",
           "mat2_stride_1", "mat1_iscontig", "mat2_iscontig", "using_tf32", "choice", "feedback")
"""The CSV columns an mm log must have (others are ignored)."""


def check_header(header: dict, spec: DeviceSpec, path) -> None:
    """Refuse a header whose ``device_capa`` or ``shared_memory`` contradicts
    ``spec`` (the header names no GPU; these identify it), or is not of the
    kind Inductor writes (``[major, minor]`` ints, an int of bytes).

    Raises
    ------
    InteropError
        Naming both values.
    """
    capa, smem = header.get("device_capa"), header.get("shared_memory")
    if not (isinstance(capa, list) and len(capa) == 2 and all(type(v) is int for v in capa)) \
            or type(smem) is not int:
        raise InteropError(f"{path}: the header's device_capa {shown(capa, 30)} and shared_memory {shown(smem, 30)} "
                           "must be [major, minor] and a number of bytes (ints): they say which GPU measured")
    have = f"{shown(capa[0], 12)}.{shown(capa[1], 12)}"
    if spec.compute_capability and have != spec.compute_capability:
        raise InteropError(f"{path}: the header says compute capability {have}, the preset {spec.name!r} is "
                           f"{spec.compute_capability}; pass the --preset the log was measured on")
    if smem != spec.smem_per_block_optin_bytes:
        raise InteropError(f"{path}: the header says {shown(smem, 24)} bytes of shared memory per block, the preset "
                           f"{spec.name!r} has {spec.smem_per_block_optin_bytes}; pass the --preset the "
                           "log was measured on")


def parse(path, spec: DeviceSpec):
    """Parse an Inductor mm log, lazily: the header and column line are
    checked now, the records as the measurements are iterated (one line in
    memory at a time).

    Parameters
    ----------
    path : path
    spec : DeviceSpec
        The device named on the command line; the header must agree.

    Returns
    -------
    measurements : iterator of Measurement
        Rows of the family that maps each ``choice``
        (:func:`costlearn.interop.tool_names.config_from_tool`; ``triton_mm``:
        ``extern_mm`` as the ``vendor`` candidate, a Triton choice as a
        TritonMMConfig with Inductor's ``GROUP_M``); strides as the layout; ``using_tf32 ==
        "True"`` on float32 as ``tfloat32``; feedback ms as time_us
        (``inf``: a failed row). It reads the file once, when iterated.
    skipped : SkippedLines
        Malformed lines (line number, reason; the first thousand kept, all
        counted), complete once ``measurements`` has been iterated to its end.

    Raises
    ------
    InteropError
        If the file is no regular file (a FIFO, a device) or empty, line 1
        is not Inductor's JSON header, line 2
        lacks a column of :data:`COLUMNS`, or the header contradicts ``spec``.
    """
    path = source_file(path)
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise InteropError(f"{path}: cannot read ({e.strerror})") from None
    try:
        pos = _columns(fh, path, spec)
    except BaseException:
        fh.close()
        raise
    skipped = SkippedLines()
    return _records(fh, pos, skipped), skipped


def _text(raw: bytes) -> str | None:
    """One line of the file as text (UTF-8, line end removed), None where its
    bytes are not UTF-8."""
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return None


def _columns(fh, path: Path, spec: DeviceSpec) -> dict:
    """Check the header (line 1) and read the column line (line 2) of the
    binary file ``fh``: each column's index."""
    first = _text(fh.readline())
    if first is None:
        raise InteropError(f"{path}: not a text file; an Inductor mm log starts with a JSON header")
    if not first.strip():
        raise InteropError(f"{path}: empty file")
    try:
        header = load_json(first, path, "an Inductor AutoHeuristic header (line 1)")
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or "shared_memory" not in header or "device_capa" not in header:
        raise InteropError(f"{path}: line 1 is not an Inductor AutoHeuristic header (a JSON object with "
                           "shared_memory and device_capa); is this another format?")
    if header.get("name") not in (None, "mm"):
        raise InteropError(f"{path}: an AutoHeuristic log of {shown(header.get('name'))}; only 'mm' logs hold "
                           "matmul measurements")
    check_header(header, spec, path)
    second = _text(fh.readline())
    try:
        names = next(csv.reader([second])) if second else None
    except csv.Error:
        names = None
    if not names:
        raise InteropError(f"{path}: no CSV column line after the header")
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise InteropError(f"{path}: line 2 lacks the columns {missing}")
    return {c: names.index(c) for c in COLUMNS}


def _records(fh, pos: dict, skipped: list):
    """The measurements of the records after the column line, one physical
    line each (a record never spans lines in these logs: a stray quote or a
    byte that is not UTF-8 costs its own line, reported with its number,
    never the lines after it); malformed lines go to ``skipped``. Closes
    ``fh`` when done."""
    choices: dict = {}
    with fh:
        for line, raw in enumerate(fh, start=3):
            text = _text(raw)
            if text is None:
                skipped.add(line, "not UTF-8 text")
                continue
            if not text.strip():
                continue
            try:
                rec = next(csv.reader([text], strict=True))
                m = _measurement(rec, pos, line, choices)
            except csv.Error as e:
                skipped.add(line, f"unreadable CSV ({e})"[:200])
                continue
            except (ValueError, IndexError) as e:
                skipped.add(line, str(e)[:200])
                continue
            yield m


_INTEGER = re.compile(r"[+-]?[0-9]+")
"""An integer as Inductor writes one (ASCII digits)."""


_MAX_STRIDE = 2**63 - 1
"""Largest stride (elements) a row may give: it is stored as int64."""


def _int(v: str, what: str, lo: int, hi: int) -> int:
    """``v`` as an int in [lo, hi]; ValueError naming ``what`` otherwise (the
    line is then skipped, not the import: an extent past 2**31 - 1 is one
    ``train`` would refuse, one past int64 one no column can hold)."""
    if not _INTEGER.fullmatch(v):
        raise ValueError(f"{what}={shown(v, 40)} is not an integer")
    if len(v.lstrip("+-").lstrip("0")) > len(str(hi)):
        raise ValueError(f"{what}={v[:12]}... ({len(v.lstrip('+-').lstrip('0'))} digits) is above {hi} "
                         f"(2**{hi.bit_length()} - 1)")
    x = int(v)
    if x < lo:
        raise ValueError(f"{what}={x} is below {lo}")
    if x > hi:
        raise ValueError(f"{what}={str(x)[:40]} is above {hi} (2**{hi.bit_length()} - 1)")
    return x


_DECIMAL = frozenset("0123456789+-.eE")
"""The characters of a decimal number as Python writes a float."""


def _measurement(rec: list, pos: dict, line: int, choices: dict) -> Measurement:
    if len(rec) < len(pos):
        raise ValueError(f"{len(rec)} fields, need {len(COLUMNS)}")
    g = {c: rec[i].strip() for c, i in pos.items()}
    m, k, n = (_int(g[c], c, 1, MAX_EXTENT) for c in ("m", "k", "n"))
    if g["mat1_dtype"] != g["mat2_dtype"]:
        raise ValueError(f"mixed dtypes {shown(g['mat1_dtype'], 30)} x {shown(g['mat2_dtype'], 30)}")
    dtype = TORCH_DTYPES.get(g["mat1_dtype"])
    if dtype is None:
        raise ValueError(f"mat1_dtype={shown(g['mat1_dtype'])}; allowed: {list(TORCH_DTYPES)}")
    if dtype == "float32":
        if g["using_tf32"] not in ("True", "False"):
            raise ValueError(f"using_tf32={shown(g['using_tf32'])} for float32; need True or False")
        dtype = "tfloat32" if g["using_tf32"] == "True" else "float32"
    strides = [_int(g[c], c, 0, _MAX_STRIDE)
               for c in ("mat1_stride_0", "mat1_stride_1", "mat2_stride_0", "mat2_stride_1")]
    la, lb = layout_letter(strides[:2]), layout_letter(strides[2:])
    if la is None or lb is None:
        raise ValueError(f"strides {strides}: a matrix that is neither row- nor column-major")
    choice = g["choice"]
    if choice not in choices:                  # one lookup per distinct choice of the file
        choices[choice] = config_from_tool("inductor", choice)
    if choices[choice] is None:
        raise ValueError(f"choice={shown(choice, 80)} is neither extern_mm nor a Triton mm config")
    family, config = choices[choice]
    feedback = g["feedback"]
    if feedback.lower() in ("inf", "+inf", "infinity", "+infinity"):
        return Measurement(line, m, n, k, dtype, la + lb, family, config, math.nan,
                           "inductor recorded inf (the config failed to compile or run)", tuple(strides))
    try:
        if not _DECIMAL.issuperset(feedback):           # float() also reads "1_0", "nan" and other digits
            raise ValueError
        ms = float(feedback)
    except ValueError:
        raise ValueError(f"feedback={shown(feedback, 40)} is not a number") from None
    if not (math.isfinite(ms) and ms > 0):
        raise ValueError(f"feedback={shown(feedback, 40)}; a time must be finite and positive (ms) or inf")
    return Measurement(line, m, n, k, dtype, la + lb, family, config, ms * 1e3, strides=tuple(strides))


class InductorImporter(Importer):
    """``costlearn import inductor``: :func:`parse`."""

    name = "inductor"

    def parse(self, path, spec, mapping=None):
        if mapping is not None:
            raise InteropError("--mapping is for kernel-tuner files; an Inductor log maps itself")
        return parse(path, spec)

