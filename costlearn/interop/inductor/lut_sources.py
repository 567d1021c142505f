"""Where an Inductor lookup table's problems come from, and a recorded table
read back as measurements.

A table (:func:`costlearn.interop.inductor.lut.export_lut`) is exported for
the problems of one source: a shapes file (:func:`read_shapes_file`), an
Inductor AutoHeuristic log (:func:`problems_from_log`), a table Inductor
recorded (:func:`read_table`) or the tuning database
(:func:`measured_from_db`); :func:`table_problems` reads the one a caller
names and keeps the problems the model store serves. A recorded table whose
entries carry a time imports as measurements (:class:`InductorLutImporter`,
``costlearn import inductor-lut``). A table's keys are read by
:mod:`costlearn.interop.inductor.lut_keys`.
"""
from __future__ import annotations

import json
import math
import re
from typing import NamedTuple

from costlearn.collect.space import check_config
from costlearn.core.checks import shown
from costlearn.core.device import device_slug
from costlearn.core.dtypes import DTYPES, dtype_names
from costlearn.core.problem import LAYOUTS, Problem, extent_of_text
from costlearn.core.version import __version__
from costlearn.families import get_family
from costlearn.interop.common import (MAX_READ_BYTES, Importer, InteropError, Measurement, SkippedLines,
                                      load_json, positive_time_us, resolve_device, source_file)
from costlearn.interop.inductor.autoheuristic import parse as parse_log
from costlearn.interop.inductor.lut import TIME_KEYS, LutProblem
from costlearn.interop.inductor.lut_keys import parse_key
from costlearn.interop.tool_names import from_tool
from costlearn.model.store import has_model, resolve_model
from costlearn.serve.predict import load_predictor
from costlearn.serve.tuning_db_server import open_store

__all__ = ["read_shapes_file", "problems_from_log", "read_table", "RecordedTable", "measured_from_db",
           "InductorLutImporter", "TableProblems", "table_problems"]


def _problem(m, n, k, dtype, layout, where: str) -> Problem:
    try:
        return Problem(m, n, k, dtype, layout)
    except (TypeError, ValueError) as e:
        raise InteropError(f"{where}: {e}") from None


def read_shapes_file(path, *, only=None, why: str = "") -> list:
    """Problems of a shapes file: one ``M N K dtype layout`` per line
    (``layout`` optional, ``NN`` by default; ``#`` starts a comment).

    Parameters
    ----------
    path : path
    only : (str, str), optional
        (dtype, layout) of a reader that takes one of each (a collection):
        a line of another is refused, naming its place, ``why`` added.

    Returns
    -------
    list of LutProblem
        Dense operands, in file order, repeats dropped.

    Raises
    ------
    InteropError
        Naming the file and line: unreadable file (no regular file, or one
        larger than :data:`~costlearn.interop.common.MAX_READ_BYTES`: it is
        read whole), a line of another form,
        an extent out of [1, 2**31 - 1], an unknown dtype or layout, one
        other than ``only``; or a file with no problem.
    """
    path = source_file(path, max_bytes=MAX_READ_BYTES)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InteropError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    out = {}
    for i, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].split()
        if not text:
            continue
        where = f"{path}:{i}"
        if len(text) not in (4, 5) or not all(re.fullmatch(r"[+-]?[0-9]+", t) for t in text[:3]):
            raise InteropError(f"{where}: {shown(line.strip(), 80)}; each line is 'M N K dtype [layout]', e.g. "
                               "'4096 4096 1024 float16 NN'")
        dtype, layout = text[3], text[4] if len(text) == 5 else "NN"
        if dtype not in DTYPES:
            raise InteropError(f"{where}: dtype={shown(dtype)}; allowed: {list(DTYPES)}")
        if layout not in LAYOUTS:
            raise InteropError(f"{where}: layout={shown(layout)}; allowed: {list(LAYOUTS)}")
        if only is not None and (dtype, layout) != tuple(only):
            raise InteropError(f"{where}: {shown(line.strip(), 80)} is {dtype} {layout}; only {only[0]} {only[1]} "
                               f"lines are taken here{why}")
        try:
            mnk = [extent_of_text(name, t) for name, t in zip("MNK", text[:3])]
        except ValueError as e:
            raise InteropError(f"{where}: {e}") from None
        p = _problem(*mnk, dtype, layout, where)
        out.setdefault(p, LutProblem.contiguous(p))
    if not out:
        raise InteropError(f"{path}: no problem (each line is 'M N K dtype [layout]')")
    return list(out.values())


def problems_from_log(path, device, skipped: SkippedLines | None = None) -> list:
    """The problems of an Inductor AutoHeuristic mm log, with the strides it
    recorded (:func:`costlearn.interop.inductor.autoheuristic.parse`), in log order.

    Parameters
    ----------
    path : path
    device : str or DeviceSpec
        The preset the log was measured on (its header must agree).
    skipped : SkippedLines, optional
        Gets the log's malformed lines, (line, why): each counted, the
        first thousand kept.

    Raises
    ------
    InteropError
        As :func:`costlearn.interop.inductor.autoheuristic.parse`, or when the log holds no
        measurement (naming the first malformed lines).
    """
    measurements, left = parse_log(path, resolve_device(device))
    out = {}
    for x in measurements:
        p = Problem(x.m, x.n, x.k, x.dtype, x.layout)
        if (p, x.strides) not in out:
            out[(p, x.strides)] = LutProblem(p, tuple(x.strides[:2]), tuple(x.strides[2:]))
    if skipped is not None:
        for line, why in left:
            skipped.add(line, why)
        skipped.total += left.total - len(left)
    if not out:
        raise InteropError(f"{path}: no measurement found" + "".join(f"; line {line}: {why}" for line, why in left[:3])
                           + "; nothing to export")
    return list(out.values())


class RecordedTable(NamedTuple):
    """What :func:`read_table` reads (its Returns). ``timed``: the entries of
    the keys read that carry a time (:data:`TIME_KEYS`), valid or not."""

    problems: list
    measurements: list
    skipped: list
    devices: tuple
    timed: int = 0


_JSON_STRING = re.compile(r'("(?:[^"\\]|\\.)*")([ \t\n\r]*:)?')
"""A JSON string, and the colon after it where it is an object's key."""


def _key_lines(text: str) -> dict:
    """The lines of each top-level key of the JSON object ``text`` (as
    :func:`json.loads` reads the key): every place it is written, in file
    order. One pass over the text's strings: the brackets between them give
    the depth, the newlines the line."""
    out: dict = {}
    depth, line, at = 0, 1, 0
    for m in _JSON_STRING.finditer(text):
        depth += sum(text.count(c, at, m.start()) for c in "{[") - sum(text.count(c, at, m.start()) for c in "}]")
        line += text.count("\n", at, m.start())
        if depth == 1 and m.group(2):
            try:
                out.setdefault(json.loads(m.group(1)), []).append(line)
            except ValueError:                          # not JSON text: json.loads refused the file already
                pass
        line += text.count("\n", m.start(), m.end())
        at = m.end()
    return out


def _entry_time(entry, j: int) -> float | None:
    """The time in microseconds table entry ``j`` carries (:data:`TIME_KEYS`):
    None for none, ``inf`` for a recorded ``inf`` (a choice that failed).

    Raises
    ------
    ValueError
        Naming the entry, where it is no object, a time is not a number or
        not a finite positive time (:func:`costlearn.interop.common.positive_time_us`),
        or ``time_us`` and ``time_ms`` disagree.
    """
    if not isinstance(entry, dict):
        raise ValueError(f"entry {j} is {type(entry).__name__}, not an object")
    times = []
    for key, unit_us in TIME_KEYS.items():
        if key not in entry:
            continue
        value = entry[key]
        try:
            times.append(math.inf if isinstance(value, float) and value == math.inf
                         else positive_time_us(value, unit_us, key))
        except ValueError as e:
            raise ValueError(f"entry {j}: {e}") from None
    if len(times) > 1 and not math.isclose(times[0], times[1], rel_tol=0.01):
        raise ValueError(f"entry {j}: time_us={shown(entry['time_us'])} and time_ms={shown(entry['time_ms'])} "
                         "disagree")
    return times[0] if times else None


def _entry_config(entry: dict, j: int, family: str):
    """The ``family`` config table entry ``j`` names; ValueError naming the
    entry where it names none (another template, an invalid parameter)."""
    try:
        config = from_tool(family, "inductor-lut", entry)
    except (ValueError, OverflowError) as e:
        raise ValueError(f"entry {j}: {e}"[:240]) from None
    if config is None:
        raise ValueError(f"entry {j}: template_id {shown(entry.get('template_id'))} is no {family} template")
    return config


def read_table(path, family: str = "triton_mm") -> RecordedTable:
    """A lookup table Inductor recorded or a user wrote (``inductor_lut_*.json``).

    Parameters
    ----------
    path : path
    family : str
        The family whose entries the table's choices are
        (:func:`costlearn.interop.tool_names.from_tool` with tool
        ``"inductor-lut"``).

    Returns
    -------
    RecordedTable
        ``problems``: every ``mm`` key's problem (float32 keys as
        ``float32``), in file order, each once. ``measurements``: entries
        that carry a time (:data:`TIME_KEYS`) and name a config of
        ``family``, as rows (``line``: the key's line in the file), each
        (problem, config) once (a table with device and device-agnostic keys
        lists it twice; another time for it is left out, named); a time of
        ``inf`` is a failed measurement. ``skipped``: (line, why) for keys and entries left
        out (a key that :func:`costlearn.interop.inductor.lut_keys.parse_key`
        does not read: too long, another op such as ``bmm``, an ``addmm``
        that is no bias epilogue, no dense two-operand matmul; an entry of
        no known template or an invalid parameter, a time that is not a
        number or not a finite positive one; a key written twice, whose
        first entries JSON does not keep): a
        :class:`~costlearn.interop.common.SkippedLines`, the first thousand
        kept, all counted. ``devices``: the device names of the keys, in
        order of first use.

    Raises
    ------
    InteropError
        If the file is unreadable (no regular file, or one larger than
        :data:`~costlearn.interop.common.MAX_READ_BYTES`), not JSON (nested too deep or with a
        number of more digits than the interpreter reads included), or not
        an object (a key whose value is no list is left out, named in
        ``skipped``).
    """
    path = source_file(path, max_bytes=MAX_READ_BYTES)
    try:
        text = path.read_text(encoding="utf-8-sig")
        table = load_json(text, path, "a lookup table (an object of key -> list of entries)")
    except (OSError, UnicodeDecodeError) as e:
        raise InteropError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise InteropError(f"{path}: not JSON ({e}); a lookup table is an object of key -> list of entries") from None
    if not isinstance(table, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(table), "a number")
        raise InteropError(f"{path}: the file holds {kind}; a lookup table is a JSON object of key -> list of "
                           "entries")
    get_family(family)                                          # an unknown family: ValueError
    problems, measurements, skipped, devices, seen, timed = {}, [], SkippedLines(), {}, {}, 0
    lines = _key_lines(text)
    for index, (key, entries) in enumerate(table.items(), 1):
        i = lines.get(key, [index])[-1]                 # the line of the key JSON keeps; else its position
        for earlier in lines.get(key, [])[:-1]:
            skipped.add(earlier, f"key {shown(key, 100)} is written again at line {i}: JSON keeps the last one's "
                                 "entries, not these")
        try:
            if not isinstance(entries, list):
                raise ValueError(f"key {shown(key, 100)}: its value is {type(entries).__name__} "
                                 f"{shown(entries, 40)}, not a list of entries")
            device, lp, _ = parse_key(key)
        except ValueError as e:
            skipped.add(i, str(e))
            continue
        if device:
            devices.setdefault(device, None)
        problems.setdefault((lp.problem, lp.strides_a, lp.strides_b), lp)
        for j, entry in enumerate(entries):
            timed += isinstance(entry, dict) and any(k in entry for k in TIME_KEYS)
            try:
                t = _entry_time(entry, j)
                if t is None:
                    continue
                config = _entry_config(entry, j, family)
            except ValueError as e:
                skipped.add(i, str(e))
                continue
            p, at = lp.problem, (lp.problem, lp.strides_a, lp.strides_b, config.config_id)
            if at in seen:                      # a device and a device-agnostic key list it twice: said once
                line, first = seen[at]
                if not math.isclose(first, t, rel_tol=0.01):
                    skipped.add(i, f"entry {j}: {config.config_id} of {p} was read at line {line} with time_us "
                                   f"{first:.6g}; the first is kept, not this {t:.6g}")
                continue
            seen[at] = (i, t)
            failed = "" if math.isfinite(t) else "recorded time inf (the choice failed to compile or run)"
            measurements.append(Measurement(i, p.m, p.n, p.k, p.dtype, p.layout, family, config,
                                            math.nan if failed else t, failed, lp.strides_a + lp.strides_b,
                                            p.epilogue))
    return RecordedTable(list(problems.values()), measurements, skipped, tuple(devices), timed)


def measured_from_db(target, device: str, family: str = "triton_mm", models_dir=None) -> tuple:
    """What a tuning database holds for the device class of the model store's
    ``device``: ``(problems, winners)``, the problems of every current entry
    (this family's template and costlearn's version) in the order recorded,
    and ``{problem: config}`` of the measured ones. A stored config that is
    infeasible on the device for its problem is left out, as a lookup
    would.

    Parameters
    ----------
    target : path or str
        A file or a ``postgresql://`` URL (opened read-only).
    device : str
        The model store's device folder: its models' device slug is the
        class whose entries are read.

    Raises
    ------
    OSError, FileNotFoundError
        As :func:`costlearn.serve.tuning_db_server.open_store`.
    ValueError
        If the store has no ``family`` model of ``device``.
    """
    served = [d for d in DTYPES if has_model(device, family, d, models_dir)]
    if not served:
        raise ValueError(f"the model store has no {family} model of {device!r}")
    spec = load_predictor(device, family, served[0], models_dir).spec
    fam = get_family(family)
    problems, winners = {}, {}
    for e in open_store(target, read_only=True).entries():
        if (e.family, e.device, e.template_hash, e.costlearn_version) != (family, spec.slug, fam.template_hash,
                                                                          __version__):
            continue
        if check_config(e.config, spec, problem=e.problem) is not None:
            continue
        problems[e.problem] = None
        if e.chosen_by == "measured":
            winners[e.problem] = e.config
    return list(problems), winners


class InductorLutImporter(Importer):
    """``costlearn import inductor-lut``: the entries of a recorded lookup
    table that carry a time (:func:`read_table`)."""

    name = "inductor-lut"

    def parse(self, path, spec, mapping=None):
        """The timed entries of the table at ``path``, measured on ``spec``.

        Raises
        ------
        InteropError
            As :func:`read_table`; if a key names a device of another class
            than ``spec`` (``NVIDIA A100 80GB PCIe`` is an ``a100``); if
            the table holds mm keys but no entry with a time; or if entries
            carry a time but none is a valid measurement (naming how many,
            and the first reasons).
        """
        if mapping is not None:
            raise InteropError("--mapping is for kernel-tuner files; a lookup table maps itself")
        got = read_table(path)
        other = [d for d in got.devices if device_slug(d, "cuda") != spec.slug]
        if other:
            raise InteropError(f"{path}: keyed for {other[0]!r}, not a {spec.name!r} ({spec.slug}); pass the "
                               "--preset the table was measured on")
        if got.problems and not got.measurements and got.timed:
            whys = [f"line {line}: {why}" for line, why in got.skipped if why.startswith("entry ")]
            which = "1 entry carries a time, but it is no" if got.timed == 1 else \
                f"{got.timed} entries carry a time, but none is a"
            raise InteropError(f"{path}: {which} valid measurement (a triton_mm config and a finite positive time; "
                               + "; ".join(whys[:3]) + ("; ..." if len(whys) > 3 else "") + ")")
        if got.problems and not got.measurements:
            raise InteropError(f"{path}: {len(got.problems)} mm keys, but no entry carries a time ("
                               f"{' or '.join(TIME_KEYS)}); PyTorch's recorder writes none. Its shapes can be "
                               "exported: costlearn export inductor-lut --from-table")
        return got.measurements, got.skipped


class TableProblems(NamedTuple):
    """What :func:`table_problems` read.

    Attributes
    ----------
    problems : list of LutProblem
        The source's problems of the dtypes kept.
    device : str
        The model store's device folder that answers them.
    device_name : str or None
        The device name the keys carry (a recorded table's own, where it
        names one device and the caller named none).
    winners : dict
        ``{problem: config}`` the tuning database measured (``from_db``).
    what : str
        The source, in words (``"shapes file"``, ``"log"``, ``"table"``,
        ``"tuning database"``).
    notes : list of str
        What was left out and why, for the caller to show.
    """

    problems: list
    device: str
    device_name: str | None
    winners: dict
    what: str
    notes: list


def table_problems(*, shapes_file=None, from_log=None, from_table=None, from_db=None, dtypes=None, device=None,
                   device_name: str | None = None, family: str = "triton_mm", models_dir=None) -> TableProblems:
    """The problems of one source a lookup table is exported for, kept to
    the dtypes, layouts and epilogues the model store serves for ``device``
    (``costlearn export inductor-lut``); those left out are named in
    ``notes``.

    Parameters
    ----------
    shapes_file, from_log, from_table : path, optional
        Exactly one of them, or none with ``from_db``: a shapes file
        (:func:`read_shapes_file`), an Inductor AutoHeuristic mm log
        (:func:`problems_from_log`), a table Inductor recorded
        (:func:`read_table`).
    from_db : path or str, optional
        A tuning database: its measured winners are returned (and, alone,
        its problems are the source: :func:`measured_from_db`).
    dtypes : sequence of str, optional
        Keep these dtypes only (default: every dtype of the source the store
        serves; the others are named in ``notes``).
    device : str, optional
        The store's device folder; default the only one with a ``family``
        model.
    device_name : str, optional
        The keys' device name (default: a recorded table's own).
    family : str
    models_dir : path, optional
        The model store.

    Returns
    -------
    TableProblems

    Raises
    ------
    ValueError
        If not exactly one source is given, the source holds no problem of
        the dtypes asked for, the store has no model for a dtype asked
        for, or no problem is left of a layout and epilogue its dtype's
        model serves (the message names what there is).
    InteropError
        If a source cannot be read.
    """
    sources = {"--shapes-file": ("shapes file", shapes_file), "--from-log": ("log", from_log),
               "--from-table": ("table", from_table)}
    given = [k for k, (_, v) in sources.items() if v]
    if len(given) != 1 and not (from_db and not given):
        raise ValueError("export inductor-lut takes one source of shapes: --shapes-file FILE ('M N K dtype layout' "
                         "per line), --from-log LOG (an Inductor AutoHeuristic mm log), --from-table JSON (a lookup "
                         f"table Inductor recorded) or --from-db alone (the tuning database's); got {given or 'none'}")
    first = (dtypes or ["float16"])[0]
    device = device or resolve_model(None, family, first, models_dir, cli=True).parents[1].name
    served = [d for d in dtype_names() if has_model(device, family, d, models_dir)]
    if not served:
        resolve_model(device, family, first, models_dir, cli=True)                 # names what there is
    what = sources[given[0]][0] if given else "tuning database"
    notes, winners = [], {}
    if from_db:
        in_db, winners = measured_from_db(from_db, device, family, models_dir)
        notes.append(f"the tuning database {from_db} holds {len(in_db)} {family} problems of {device}'s device "
                     f"class, {len(winners)} measured")
    if not given:
        problems = in_db
        if not problems:
            raise ValueError(f"--from-db {from_db}: no current {family} entry of {device}'s device class")
    elif shapes_file:
        problems = read_shapes_file(shapes_file)
    elif from_log:
        left = SkippedLines()
        problems = problems_from_log(from_log, device, left)
        notes += _left_out(from_log, left, left.total)
    else:
        got = read_table(from_table)
        problems = got.problems
        notes += _left_out(from_table, got.skipped, got.skipped.total)
        if device_name is None and len(got.devices) == 1:
            device_name = got.devices[0]          # keep the table's own device name: its GPU's torch reports it
        if not problems:
            raise ValueError(f"{from_table}: no mm key costlearn reads ({got.skipped.total} left out"
                             + "".join(f"; line {line}: {why}" for line, why in got.skipped[:3]) + ")")
    problems = [p if isinstance(p, LutProblem) else LutProblem.contiguous(p) for p in problems]
    have = sorted({lp.problem.dtype for lp in problems})
    problems = [lp for lp in problems if lp.problem.dtype in (dtypes or have)]
    if not problems:
        raise ValueError(f"--dtype {' '.join(dtypes)}: the {what} holds only {have}")
    missing = sorted({lp.problem.dtype for lp in problems} - set(served))
    if missing and (dtypes or not set(have) & set(served)):
        raise ValueError(f"the {what} holds {missing}, but the store has {family} models of {device} for {served} "
                         f"only; pass --dtype {' '.join(sorted(set(have) & set(served))) or '...'} to export those")
    for dt in missing:                         # no dtypes asked: export what the store serves, name what it leaves out
        notes.append(f"left out the {sum(lp.problem.dtype == dt for lp in problems)} {dt} problems of the {what}: "
                     f"the store has no {family}/{dt} model of {device} (train one, or pass --dtype to choose)")
    problems = [lp for lp in problems if lp.problem.dtype in served]
    problems, left = _served_kinds(problems, device, family, models_dir, what)
    notes += left
    if not problems:
        raise ValueError("; ".join(left) + "; nothing left to export")
    return TableProblems(problems, device, device_name, winners, what, notes)


def _left_out(source, skipped, total: int) -> list:
    """Notes naming the first five of a source's ``total`` lines left out."""
    notes = [f"{source}:{line}: left out: {why}" for line, why in list(skipped)[:5]]
    return notes + ([f"... {total - 5} more left out"] if total > 5 else [])


def _served_kinds(problems: list, device: str, family: str, models_dir, what: str) -> tuple:
    """``(kept, notes)``: the problems whose dtype's model serves their layout
    and epilogue, and a note for each (dtype, layout, epilogue) it does not,
    naming how many, one of them and what the model serves."""
    kept, left = [], {}
    for lp in problems:
        p = lp.problem
        pred = load_predictor(device, family, p.dtype, models_dir)
        if p.layout in pred.layouts and p.epilogue in pred.epilogues:
            kept.append(lp)
        else:
            left.setdefault((p.dtype, p.layout, p.epilogue), []).append(p)
    notes = []
    for (dtype, layout, epilogue), ps in left.items():
        pred = load_predictor(device, family, dtype, models_dir)
        kind = f"{layout}" + (f" {epilogue}-epilogue" if epilogue != "none" else "")
        notes.append(f"left out the {len(ps)} {dtype} {kind} problems of the {what} (e.g. {ps[0]}): the "
                     f"{family}/{dtype} model of {device} serves layouts {list(pred.layouts)}, epilogues "
                     f"{list(pred.epilogues)}")
    return kept, notes
