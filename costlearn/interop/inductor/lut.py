"""PyTorch Inductor's template lookup table, out and in.

Inductor (PyTorch 2.13 and later, ``torch/_inductor/lookup_table/``) reads
``torch._inductor.config.lookup_table.table = {key: [entry, ...]}`` when
``LookupTableChoices`` is its choice handler; on a key match it uses only the
listed choices: one entry is used as is (no autotuning), several are
autotuned among themselves. :func:`export_lut` writes such a table from a
``triton_mm`` model's predictions, so ``mode="max-autotune"`` times a few
candidates per matmul instead of Inductor's ~30.

Key (``LookupTableChoices.make_lookup_key``; checked against PyTorch's own
code by ``tests/interop/test_interop_inductor_lut.py``)::

    [device_name+]str(((dtype, [M, K], [sa0, sa1]), (dtype, [K, N], [sb0, sb1])))+mm

with ``dtype`` printed as torch prints it (``torch.float16``), the shapes
and strides of ``mat1`` and ``mat2`` as Inductor sees them, and the device
name ``torch.cuda.get_device_properties(i).gcnArchName`` reports (the
preset's name by default). A device-agnostic key (``portable``) leaves the
device out; Inductor tries the device key first. Entries are the family's
(:meth:`~costlearn.families.KernelFamily.to_tool` with tool ``"inductor"``).

float32 and tfloat32 problems share one key (the tensors are float32 either
way; ``torch.backends.cuda.matmul.fp32_precision`` decides), so one table
holds one of them per shape.
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from costlearn.collect.space import check_config
from costlearn.core.device import device_slug
from costlearn.core.version import __version__
from costlearn.model.store import has_model
from costlearn.serve.tuning_db_server import open_store
from costlearn.core.dtypes import DTYPES, TORCH_DTYPES
from costlearn.families import VENDOR_CONFIG_ID, get_family
from costlearn.serve.predict import load_predictor, predict_many
from costlearn.core.problem import LAYOUTS, Problem
from costlearn.core.checks import check_int
from costlearn.core.files import atomic_write
from costlearn.interop.common import Importer, InteropError, Measurement, resolve_device
from costlearn.interop.inductor.autoheuristic import parse as parse_log

__all__ = ["LutProblem", "check_lut_out", "measured_from_db", "lookup_key", "inputs_key", "read_shapes_file",
           "problems_from_log",
           "read_table", "RecordedTable", "dense_layout",
           "choices_for", "confident", "export_lut", "LutReport", "InductorLutImporter", "OP_NAME", "TIME_KEYS",
           "OP_EPILOGUES", "addmm_bias_problem"]

OP_NAME = "mm"
"""The op name of a plain matmul in Inductor's keys."""

OP_EPILOGUES = {"mm": "none", "addmm": "bias"}
"""The ops whose keys are read, and the epilogue each is
(:data:`costlearn.core.problem.EPILOGUES`): ``addmm`` with ``alpha = beta = 1``
and a bias that is one row broadcast over the output's rows is the ``bias``
epilogue; other ``addmm`` keys (a scaled or full-matrix bias) and other ops
(``bmm``, ...) are left out, naming why."""

_KEY = re.compile(r"(?:(?P<dev>.+?)\+)?(?P<inputs>\(\(.*\)\))(?:\+(?P<scalars>[^+]*=[^+]*))?\+(?P<op>\w+)")
"""A table key: [device+]((inputs))[+scalars]+op."""

_ANY_INPUT = re.compile(r"\((torch\.\w+), \[([\d, ]*)\], \[([\d, ]*)\]\)")

TORCH_NAME = {**{v: k for k, v in TORCH_DTYPES.items()}, "tfloat32": "torch.float32"}
"""How torch prints each costlearn dtype's tensors."""

TIME_KEYS = {"time_us": 1.0, "time_ms": 1e3}
"""Fields of a recorded table's entry read as its measured time (factor to
microseconds). PyTorch's own recorder writes none; an entry without one gives
its shape only."""

_INPUT = re.compile(r"\((torch\.\w+), \[(\d+), (\d+)\], \[(\d+), (\d+)\]\)")


@dataclass(frozen=True)
class LutProblem:
    """A matmul as Inductor keys it: the problem and the operands' strides.

    Attributes
    ----------
    problem : Problem
    strides_a, strides_b : tuple of (int, int)
        Element strides of ``mat1`` [M, K] and ``mat2`` [K, N];
        :meth:`contiguous` gives the dense ones of the problem's layout.
    """

    problem: Problem
    strides_a: tuple
    strides_b: tuple

    @classmethod
    def contiguous(cls, problem: Problem) -> "LutProblem":
        """Dense operands: ``N`` row-major ([K, 1], [N, 1]), ``T``
        column-major ([1, M], [1, K])."""
        m, n, k = problem.shape
        a = (k, 1) if problem.layout[0] == "N" else (1, m)
        b = (n, 1) if problem.layout[1] == "N" else (1, k)
        return cls(problem, a, b)


def inputs_key(lp: LutProblem) -> str:
    """``str()`` of Inductor's ``(dtype, shape, stride)`` tuple of the two
    operands (``LookupTableChoices._generate_kernel_inputs_key``; an mm has
    no scalars)."""
    p, t = lp.problem, TORCH_NAME[lp.problem.dtype]
    (a0, a1), (b0, b1) = lp.strides_a, lp.strides_b
    return f"(({t}, [{p.m}, {p.k}], [{a0}, {a1}]), ({t}, [{p.k}, {p.n}], [{b0}, {b1}]))"


def lookup_key(lp: LutProblem, device_name: str | None = None) -> str:
    """The table key of ``lp``: ``device_name+inputs+mm``, or without the
    device (a device-agnostic key) when ``device_name`` is None."""
    parts = ([device_name] if device_name else []) + [inputs_key(lp), OP_NAME]
    return "+".join(parts)


def _problem(m, n, k, dtype, layout, where: str) -> Problem:
    try:
        return Problem(m, n, k, dtype, layout)
    except (TypeError, ValueError) as e:
        raise InteropError(f"{where}: {e}") from None


def read_shapes_file(path) -> list:
    """Problems of a shapes file: one ``M N K dtype layout`` per line
    (``layout`` optional, ``NN`` by default; ``#`` starts a comment).

    Returns
    -------
    list of LutProblem
        Dense operands, in file order, repeats dropped.

    Raises
    ------
    InteropError
        Naming the file and line: unreadable file, a line of another form,
        an extent out of [1, 2**31 - 1], an unknown dtype or layout; or a
        file with no problem.
    """
    path = Path(path)
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
            raise InteropError(f"{where}: {line.strip()!r}; each line is 'M N K dtype [layout]', e.g. "
                               "'4096 4096 1024 float16 NN'")
        dtype, layout = text[3], text[4] if len(text) == 5 else "NN"
        if dtype not in DTYPES:
            raise InteropError(f"{where}: dtype={dtype!r}; allowed: {list(DTYPES)}")
        if layout not in LAYOUTS:
            raise InteropError(f"{where}: layout={layout!r}; allowed: {list(LAYOUTS)}")
        p = _problem(*(int(t) for t in text[:3]), dtype, layout, where)
        out.setdefault(p, LutProblem.contiguous(p))
    if not out:
        raise InteropError(f"{path}: no problem (each line is 'M N K dtype [layout]')")
    return list(out.values())


def problems_from_log(path, device) -> list:
    """The problems of an Inductor AutoHeuristic mm log, with the strides it
    recorded (:func:`costlearn.interop.inductor.autoheuristic.parse`), in log order.

    Parameters
    ----------
    path : path
    device : str or DeviceSpec
        The preset the log was measured on (its header must agree).

    Raises
    ------
    InteropError
        As :func:`costlearn.interop.inductor.autoheuristic.parse`, or when the log holds no
        measurement.
    """
    measurements, _ = parse_log(path, resolve_device(device))
    out = {}
    for x in measurements:
        p = Problem(x.m, x.n, x.k, x.dtype, x.layout)
        if (p, x.strides) not in out:
            out[(p, x.strides)] = LutProblem(p, tuple(x.strides[:2]), tuple(x.strides[2:]))
    if not out:
        raise InteropError(f"{path}: no measurement found; nothing to export")
    return list(out.values())


def dense_layout(shape, strides) -> str | None:
    """``N`` for a row-major matrix of ``shape`` (rows, cols) with these
    element strides (the last 1, the first at least cols: padding allowed),
    ``T`` for a column-major one, None for anything else (a broadcast, an
    overlapping or a strided view)."""
    (rows, cols), (s0, s1) = shape, strides
    if s1 == 1 and (s0 >= cols or rows == 1):
        return "N"
    if s0 == 1 and (s1 >= rows or cols == 1):
        return "T"
    return None


def _parse_key(key: str):
    """(device name or None, LutProblem, op) of a table key; None when the
    key is not a two-operand matmul key (after the bias of an ``addmm``
    key, which :func:`addmm_bias_problem` checks); the problem's epilogue
    is the op's (:data:`OP_EPILOGUES`)."""
    m = _KEY.fullmatch(key)
    if not m:
        return None
    inputs = m.group("inputs")
    if m.group("op") == "addmm":                  # the bias first: drop it, read the two matrices
        first = _ANY_INPUT.match(inputs, 1)
        if first is None or inputs[first.end():first.end() + 2] != ", ":
            return None
        inputs = "(" + inputs[first.end() + 2:]
    ops = _INPUT.findall(inputs)
    if len(ops) != 2 or inputs != "(" + ", ".join(
            f"({d}, [{x}, {y}], [{s}, {t}])" for d, x, y, s, t in ops) + ")":
        return None
    (da, m_, k, a0, a1), (db, k2, n, b0, b1) = ops
    if da != db or k != k2 or da not in TORCH_DTYPES:
        return None
    sa, sb = (int(a0), int(a1)), (int(b0), int(b1))
    la, lb = dense_layout((int(m_), int(k)), sa), dense_layout((int(k), int(n)), sb)
    if la is None or lb is None:
        return None
    try:
        p = Problem(int(m_), int(n), int(k), TORCH_DTYPES[da], la + lb, OP_EPILOGUES.get(m.group("op"), "none"))
    except ValueError:                     # an extent of 0 or beyond 2**31 - 1
        return None
    return m.group("dev"), LutProblem(p, sa, sb), m.group("op")


def addmm_bias_problem(key: str) -> str | None:
    """Why an ``addmm`` key is not the ``bias`` epilogue, or None when it is:
    ``alpha`` and ``beta`` 1 (or not recorded), and a bias of the operands'
    dtype that is one length-N row broadcast over the rows: shape [N] with
    stride [1], [1, N], or [M, N] with strides [0, 1]."""
    m = _KEY.fullmatch(key)
    if not m or m.group("op") != "addmm":
        return "not an addmm key"
    scalars = dict(kv.split("=", 1) for kv in (m.group("scalars") or "").split("&") if "=" in kv)
    scaled = {k: v for k, v in scalars.items() if k in ("alpha", "beta") and v.strip() not in ("1", "1.0")}
    if scaled:
        return (f"addmm with {', '.join(f'{k}={v}' for k, v in scaled.items())}: a scaled product or bias is no "
                f"epilogue costlearn maps (it maps bias = A @ B + bias[n])")
    ops = _ANY_INPUT.findall(m.group("inputs"))
    if len(ops) != 3:
        return f"addmm with {len(ops)} inputs; expected bias, mat1, mat2"
    (db, shape, stride), (da, mk, _), (_, kn, _) = ops
    shape = [int(x) for x in shape.replace(" ", "").split(",") if x]
    stride = [int(x) for x in stride.replace(" ", "").split(",") if x]
    mm_, n = int(mk.split(",")[0]), int(kn.split(",")[-1])
    row = shape == [n] and stride == [1] or shape == [1, n] and stride[-1:] == [1] \
        or shape == [mm_, n] and stride == [0, 1]
    if not row:
        return (f"addmm with a bias of shape {shape} and strides {stride}: not a length-{n} row broadcast over the "
                "rows (the bias epilogue); a full-matrix or column bias is no epilogue costlearn maps")
    if db != da:
        return f"addmm with a {db} bias and {da} operands: costlearn's bias has the operands' dtype"
    return None


class RecordedTable(NamedTuple):
    """What :func:`read_table` reads."""

    problems: list
    measurements: list
    skipped: list
    devices: tuple


def _key_lines(text: str, keys: list) -> list:
    """The line of each top-level key of the JSON object ``text`` (keys in
    file order), or 0 where its text is not found as a key (followed by a
    colon). One pass: each key is looked for from where the previous one was
    found, and lines are counted between the two."""
    out, at, line = [], 0, 1
    for key in keys:
        found = -1
        for form in (json.dumps(key), json.dumps(key, ensure_ascii=False)):
            found = text.find(form, at)
            while found >= 0 and not text[found + len(form):found + len(form) + 64].lstrip().startswith(":"):
                found = text.find(form, found + 1)          # the same text inside a value: not the key
            if found >= 0:
                break
        if found < 0:                          # e.g. written with other escapes: its position is used
            out.append(0)
            continue
        line += text.count("\n", at, found)
        at = found
        out.append(line)
    return out


def read_table(path, family: str = "triton_mm") -> RecordedTable:
    """A lookup table Inductor recorded or a user wrote (``inductor_lut_*.json``).

    Parameters
    ----------
    path : path
    family : str
        The family whose entries the table's choices are
        (:meth:`~costlearn.families.KernelFamily.from_tool` with tool
        ``"inductor-lut"``).

    Returns
    -------
    RecordedTable
        ``problems``: every ``mm`` key's problem (float32 keys as
        ``float32``), in file order, each once. ``measurements``: entries
        that carry a time (:data:`TIME_KEYS`) and name a config of
        ``family``, as rows (``line``: the key's line in the file), each
        (problem, config) once (a table with device and device-agnostic keys
        lists it twice). ``skipped``: (line, why) for keys and entries left
        out (another op such as ``addmm``, a key of no dense two-operand
        matmul, an entry of no known template, a time that is not a
        number). ``devices``: the device names of the keys, in order of
        first use.

    Raises
    ------
    InteropError
        If the file is unreadable, not JSON, or not an object of lists.
    """
    path = Path(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
        table = json.loads(text)
    except (OSError, UnicodeDecodeError) as e:
        raise InteropError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise InteropError(f"{path}: not JSON ({e}); a lookup table is an object of key -> list of entries") from None
    except RecursionError:
        raise InteropError(f"{path}: JSON nested too deep; a lookup table is an object of key -> list of "
                           "entries") from None
    if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
        raise InteropError(f"{path}: a lookup table is a JSON object of key -> list of entries")
    fam = get_family(family)
    problems, measurements, skipped, devices, seen = {}, [], [], {}, set()
    lines = _key_lines(text, list(table))
    for index, (key, entries) in enumerate(table.items(), 1):
        i = lines[index - 1] or index                               # the key's line; else its position
        op = re.search(r"\+(\w+)$", key)
        if op and op.group(1) not in OP_EPILOGUES:
            skipped.append((i, f"op {op.group(1)!r}: only {' and '.join(map(repr, OP_EPILOGUES))} keys are read "
                               "(mm, and addmm as the bias epilogue)"))
            continue
        why = addmm_bias_problem(key) if op and op.group(1) == "addmm" else None
        if why is not None:
            skipped.append((i, why))
            continue
        parsed = _parse_key(key)
        if parsed is None:
            skipped.append((i, f"key {key[:100]!r} is not an mm key costlearn reads (two operands of one dtype, "
                               "extents >= 1, each a dense row- or column-major matrix)"))
            continue
        device, lp, _ = parsed
        if device:
            devices.setdefault(device, None)
        problems.setdefault((lp.problem, lp.strides_a, lp.strides_b), lp)
        for j, entry in enumerate(entries):
            if not isinstance(entry, dict):
                skipped.append((i, f"entry {j} is {type(entry).__name__}, not an object"))
                continue
            bad = [k for k in TIME_KEYS if k in entry and (isinstance(entry[k], bool)
                                                           or not isinstance(entry[k], (int, float)))]
            if bad:
                skipped.append((i, f"entry {j}: {bad[0]}={entry[bad[0]]!r} is not a number"))
                continue
            times = [float(entry[k]) * f for k, f in TIME_KEYS.items() if k in entry]
            if not times:
                continue
            if len(times) > 1 and not math.isclose(times[0], times[1], rel_tol=0.01):
                skipped.append((i, f"entry {j}: time_us={entry['time_us']!r} and time_ms={entry['time_ms']!r} "
                                   "disagree"))
                continue
            try:
                config = fam.from_tool("inductor-lut", entry)
            except ValueError as e:
                skipped.append((i, str(e)[:200]))
                continue
            if config is None:
                skipped.append((i, f"entry {str(entry)[:80]} is no {family} config"))
                continue
            p, t = lp.problem, times[0]
            if (p, lp.strides_a, lp.strides_b, config.config_id) in seen:
                continue
            seen.add((p, lp.strides_a, lp.strides_b, config.config_id))
            ok = math.isfinite(t) and t > 0
            measurements.append(Measurement(i, p.m, p.n, p.k, p.dtype, p.layout, family, config,
                                            t if ok else math.nan, "" if ok else "recorded time is not positive",
                                            lp.strides_a + lp.strides_b, p.epilogue))
    return RecordedTable(list(problems.values()), measurements, skipped, tuple(devices))


def choices_for(prediction, top_k: int, vendor=None) -> list:
    """The configs a table lists for one prediction.

    With ``top_k`` 1 and a confident prediction (chosen by the model, the
    problem inside what it was trained on): the answer alone, which
    Inductor then runs without autotuning. Otherwise the ``top_k`` best tile
    configs and the vendor call, so a problem the model is not sure of (the
    vendor floor or the OOD fallback chose, or it is flagged) never lists
    fewer than the vendor and one config.

    Parameters
    ----------
    prediction : costlearn.Prediction
        With at least ``top_k + 1`` ranked configs.
    top_k : int
        >= 1.
    vendor : config, optional
        The family's vendor call; None for a family without one (then only
        tile configs are listed).

    Returns
    -------
    list of configs, best predicted first, the vendor call last.
    """
    if top_k == 1 and confident(prediction):
        return [prediction.config]
    tiles = [c for c, _ in prediction.top_k if c.config_id != VENDOR_CONFIG_ID][:top_k]
    return tiles + ([vendor] if vendor is not None else [])


def confident(prediction) -> bool:
    """Whether a :class:`costlearn.Prediction` lists one config: a tile
    config the model chose (``chosen_by == "predicted"``, not the vendor
    floor or the OOD fallback) and :attr:`~costlearn.Prediction.sure` (not
    ``ood``; where the model has a vendor model, the whole interval of its
    estimate says the tile beats the vendor)."""
    return prediction.chosen_by == "predicted" and prediction.sure


@dataclass
class LutReport:
    """What :func:`export_lut` wrote.

    Attributes
    ----------
    path : Path
    problems : int
    keys : int
        Keys written (two per problem with ``portable``).
    candidates : dict of int to int
        Problems by how many choices their entry lists.
    confident : int
        Problems the model was sure of.
    short : int
        Problems with fewer than ``top_k`` candidate tile configs (tiny
        shapes the model knows few configs for).
    seconds : float
        Wall time of the predictions and the table, not the file write.
    measured : int
        Problems listed with the tuning database's measured winner alone.
    """

    path: Path
    problems: int
    keys: int
    candidates: dict = field(default_factory=dict)
    confident: int = 0
    short: int = 0
    seconds: float = 0.0
    measured: int = 0

    def summary(self) -> str:
        """One line: keys, problems, choices per problem, time."""
        counts = ", ".join(f"{n} choice{'s' if n > 1 else ''}: {c}" for n, c in sorted(self.candidates.items()))
        short = f"; {self.short} with fewer candidate configs than asked" if self.short else ""
        measured = f"; {self.measured} measured winners from the tuning database" if self.measured else ""
        return (f"wrote {self.keys} keys for {self.problems} problems into {self.path} ({counts}; the model was "
                f"sure of {self.confident}{short}{measured}); answers and table in {self.seconds * 1e3:.0f} ms")


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


def check_lut_out(out) -> Path:
    """``out`` as the lookup table's file path.

    Raises
    ------
    ValueError
        If it is a folder, has no file name, or its folder does not exist
        (a mistyped folder is not created).
    """
    out = Path(out)
    if out.is_dir() or (out.parent.exists() and not out.parent.is_dir()) or not out.name:
        raise ValueError(f"--out {str(out)!r}: give the JSON file to write (a file path in an existing folder)")
    if not out.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: the folder {str(out.parent)!r} does not exist; create it, or give a "
                         "file path in an existing folder")
    return out


def export_lut(problems, out, *, device, top_k: int = 3, family: str = "triton_mm", models_dir=None,
               device_name: str | None = None, portable: bool = False, measured: dict | None = None) -> LutReport:
    """Write an Inductor lookup table of the model's choices for ``problems``.

    Parameters
    ----------
    problems : sequence of LutProblem or Problem
        A Problem is taken with dense operands.
    out : path
        The JSON file to write (atomically).
    device : str
        The model store's device folder (``a100``), whose models answer.
    top_k : int
        Tile configs per problem (:func:`choices_for`), >= 1.
    family : str
        A family whose configs map to Inductor entries (``triton_mm``).
    models_dir : path, optional
        Model store root (:func:`costlearn.model.store.default_store`).
    device_name : str, optional
        The device part of the keys: what ``torch.cuda.get_device_properties
        (i).gcnArchName`` reports on the GPU the table is for; by default the
        model's device preset name (e.g. ``"NVIDIA A100-SXM4-80GB"``).
    portable : bool
        Also write each entry under its device-agnostic key.
    measured : dict of Problem to config, optional
        Measured winners (:func:`measured_from_db`): such a problem lists
        its winner alone, which Inductor runs without autotuning (the
        measurement timed the vendor beside it); the others list the
        model's choices.

    Returns
    -------
    LutReport

    Raises
    ------
    ValueError
        If ``top_k`` < 1, ``problems`` is empty or ``out`` is a folder or
        lies in a folder that does not exist; if two problems share a
        key (float32 and tfloat32 of one shape), naming them; or as
        :func:`costlearn.predict_many` (no model for a dtype, a layout it
        does not serve).
    """
    top_k = check_int("top_k", top_k, 1)
    out = check_lut_out(out)
    if device_name is not None and (not isinstance(device_name, str) or not device_name.strip()
                                    or "+" in device_name):
        raise ValueError(f"device_name={device_name!r}; must be the GPU's name as torch reports it, e.g. "
                         "'NVIDIA H100 80GB HBM3' (no '+', not empty)")
    lps = [p if isinstance(p, LutProblem) else LutProblem.contiguous(p) for p in problems]
    if not lps:
        raise ValueError("no problems to export")
    fam = get_family(family)
    vendor = fam.config_from_id(fam.vendor_config_id) if fam.vendor_config_id is not None else None
    t0 = time.perf_counter()
    by_dtype: dict = {}
    for i, lp in enumerate(lps):
        by_dtype.setdefault(lp.problem.dtype, []).append(i)
    preds = [None] * len(lps)
    names = {}
    for dtype, idx in by_dtype.items():
        answers = predict_many([lps[i].problem for i in idx], dtype, device, family=family, top_k=top_k + 1,
                               models_dir=models_dir)
        for i, a in zip(idx, answers):
            preds[i] = a
        names[dtype] = device_name or load_predictor(device, family, dtype, models_dir).spec.name
    table, seen, report = {}, {}, LutReport(Path(out), len(lps), 0)
    measured = measured or {}
    for lp, pred in zip(lps, preds):
        winner = measured.get(lp.problem)
        configs = [winner] if winner is not None else choices_for(pred, top_k, vendor)
        tiles = sum(c.config_id != VENDOR_CONFIG_ID for c in configs)
        report.measured += winner is not None
        report.short += tiles < top_k and winner is None and not (top_k == 1 and confident(pred))
        entries = [fam.to_tool("inductor", c, lp.problem) for c in configs]
        if any(e is None for e in entries):
            raise ValueError(f"family={family!r} has no Inductor lookup-table entries; the triton_mm family has")
        n = len(entries)
        report.candidates[n] = report.candidates.get(n, 0) + 1
        report.confident += confident(pred)
        keys = [lookup_key(lp, names[lp.problem.dtype])] + ([lookup_key(lp)] if portable else [])
        for key in keys:
            if key in seen and seen[key] != lp.problem:
                raise ValueError(f"{seen[key]} and {lp.problem} share the key {key[:120]!r} (float32 and tfloat32 "
                                 "tensors are both torch.float32); export them into separate tables")
            seen[key] = lp.problem
            table[key] = entries
    report.keys = len(table)
    report.seconds = time.perf_counter() - t0
    atomic_write(Path(out), json.dumps(table, indent=1) + "\n")
    return report


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
            than ``spec`` (``NVIDIA A100 80GB PCIe`` is an ``a100``); or if
            the table holds mm keys but no timed entry.
        """
        if mapping is not None:
            raise InteropError("--mapping is for kernel-tuner files; a lookup table maps itself")
        got = read_table(path)
        other = [d for d in got.devices if device_slug(d, "cuda") != spec.slug]
        if other:
            raise InteropError(f"{path}: keyed for {other[0]!r}, not a {spec.name!r} ({spec.slug}); pass the "
                               "--preset the table was measured on")
        if got.problems and not got.measurements:
            raise InteropError(f"{path}: {len(got.problems)} mm keys, but no entry carries a time ("
                               f"{' or '.join(TIME_KEYS)}); PyTorch's recorder writes none. Its shapes can be "
                               "exported: costlearn export inductor-lut --from-table")
        return got.measurements, got.skipped
