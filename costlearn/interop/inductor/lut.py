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
(:func:`costlearn.interop.tool_names.to_tool` with tool ``"inductor"``:
:func:`costlearn.interop.inductor.names.lut_entry` for ``triton_mm``).

float32 and tfloat32 problems share one key (the tensors are float32 either
way; ``torch.backends.cuda.matmul.fp32_precision`` decides), so one table
holds one of them per shape.

Where a table's problems come from (a shapes file, a log, a recorded table,
the tuning database), and a recorded table read back as measurements, is
:mod:`costlearn.interop.inductor.lut_sources`.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from costlearn.core.dtypes import TORCH_DTYPES
from costlearn.families import VENDOR_CONFIG_ID, get_family
from costlearn.serve.predict import load_predictor, predict_many
from costlearn.core.problem import Problem
from costlearn.core.checks import check_int, shown
from costlearn.core.files import atomic_write, check_output
from costlearn.interop.tool_names import to_tool

__all__ = ["LutProblem", "check_lut_out", "lookup_key", "inputs_key", "choices_for", "confident", "export_lut",
           "LutReport", "OP_NAME", "TIME_KEYS", "OP_EPILOGUES", "TORCH_NAME", "MAX_DEVICE_NAME", "check_device_name"]


OP_NAME = "mm"
"""The op name of a plain matmul in Inductor's keys."""


OP_EPILOGUES = {"mm": "none", "addmm": "bias"}
"""The ops whose keys are read, and the epilogue each is
(:data:`costlearn.core.problem.EPILOGUES`): ``addmm`` with ``alpha = beta = 1``
and a bias that is one row broadcast over the output's rows is the ``bias``
epilogue; other ``addmm`` keys (a scaled or full-matrix bias) and other ops
(``bmm``, ...) are left out, naming why."""


TORCH_NAME = {**{v: k for k, v in TORCH_DTYPES.items()}, "tfloat32": "torch.float32"}
"""How torch prints each costlearn dtype's tensors."""


TIME_KEYS = {"time_us": 1.0, "time_ms": 1e3}
"""Fields of a recorded table's entry read as its measured time (factor to
microseconds). PyTorch's own recorder writes none; an entry without one gives
its shape only."""


MAX_DEVICE_NAME = 256
"""The longest device name a key carries (torch's names are a few dozen
characters)."""


def check_device_name(name) -> str:
    """``name`` as the device part of a key: what
    ``torch.cuda.get_device_properties(i).gcnArchName`` can report.

    Raises
    ------
    ValueError
        Naming it (cut), if it is not a str of 1 to :data:`MAX_DEVICE_NAME`
        printable characters with something besides spaces and no ``+``
        (which separates a key's parts).
    """
    if not isinstance(name, str) or not name.strip() or "+" in name or not name.isprintable() \
            or len(name) > MAX_DEVICE_NAME:
        raise ValueError(f"device name {shown(name)}; must be the GPU's name as torch reports it, e.g. 'NVIDIA H100 "
                         f"80GB HBM3' (printable, no '+', not empty, at most {MAX_DEVICE_NAME} characters)")
    return name


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
    same_key : int
        Problems not counted in ``problems``: their keys are an earlier
        problem's of the same dtype (a 1-by-1 operand is both row- and
        column-major: NN and NT of K = N = 1 are one matmul to Inductor).
    """

    path: Path
    problems: int
    keys: int
    candidates: dict = field(default_factory=dict)
    confident: int = 0
    short: int = 0
    seconds: float = 0.0
    measured: int = 0
    same_key: int = 0

    def summary(self) -> str:
        """One line: keys, problems, choices per problem, time."""
        counts = ", ".join(f"{n} choice{'s' if n > 1 else ''}: {c}" for n, c in sorted(self.candidates.items()))
        short = f"; {self.short} with fewer candidate configs than asked" if self.short else ""
        measured = f"; {self.measured} measured winners from the tuning database" if self.measured else ""
        same = f"; {self.same_key} more with the key of another of their dtype (one matmul to Inductor)" \
            if self.same_key else ""
        return (f"wrote {self.keys} keys for {self.problems} problems into {self.path} ({counts}; the model was "
                f"sure of {self.confident}{short}{measured}{same}); answers and table in {self.seconds * 1e3:.0f} ms")


def check_lut_out(out) -> Path:
    """``out`` as the lookup table's file path (:func:`costlearn.core.files.check_output` of ``--out``).

    Raises
    ------
    ValueError
        If it is a folder, has no file name, its folder does not exist (a
        mistyped folder is not created) or cannot be written.
    """
    return check_output(out, "--out", create=False, example="lut.json")


def _one_per_key(lps: list, names: dict, portable: bool) -> tuple:
    """``(kept, same)``: the problems whose keys no earlier problem has, in
    order, and how many were left out for sharing the keys of one kept of
    their dtype (the same matmul to Inductor: a 1-by-1 operand is both
    row- and column-major). ValueError naming both where problems of two
    dtypes share a key (float32 and tfloat32)."""
    seen: dict = {}
    kept, same = [], 0
    for lp in lps:
        keys = [lookup_key(lp, names[lp.problem.dtype])] + ([lookup_key(lp)] if portable else [])
        other = next((seen[k] for k in keys if k in seen), None)
        if other is None:
            kept.append(lp)
            seen.update(dict.fromkeys(keys, lp.problem))
        elif other.dtype == lp.problem.dtype:
            same += 1
        else:
            raise ValueError(f"{other} and {lp.problem} share the key {shown(keys[0], 120)} (float32 and tfloat32 "
                             "tensors are both torch.float32); export them into separate tables")
    return kept, same


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
        If ``top_k`` < 1, ``device_name`` is no name torch reports
        (:func:`check_device_name`), ``problems`` is empty or ``out`` is a
        folder or lies in a folder that does not exist; if problems of two
        dtypes share a key (float32 and tfloat32 of one shape), naming them
        (two of one dtype that share a key are one matmul to Inductor: the
        first is listed, the others counted in ``same_key``); or as
        :func:`costlearn.predict_many` (no model for a dtype, a layout it
        does not serve).
    """
    top_k = check_int("top_k", top_k, 1)
    out = check_lut_out(out)
    if device_name is not None:
        check_device_name(device_name)
    lps = [p if isinstance(p, LutProblem) else LutProblem.contiguous(p) for p in problems]
    if not lps:
        raise ValueError("no problems to export")
    fam = get_family(family)
    vendor = fam.config_from_id(fam.vendor_config_id) if fam.vendor_config_id is not None else None
    t0 = time.perf_counter()
    names = {}
    for lp in lps:
        dtype = lp.problem.dtype
        if dtype not in names:
            names[dtype] = device_name or load_predictor(device, family, dtype, models_dir).spec.name
    lps, same = _one_per_key(lps, names, portable)
    by_dtype: dict = {}
    for i, lp in enumerate(lps):
        by_dtype.setdefault(lp.problem.dtype, []).append(i)
    preds = [None] * len(lps)
    for dtype, idx in by_dtype.items():
        answers = predict_many([lps[i].problem for i in idx], dtype, device, family=family, top_k=top_k + 1,
                               models_dir=models_dir)
        for i, a in zip(idx, answers):
            preds[i] = a
    table, report = {}, LutReport(Path(out), len(lps), 0, same_key=same)
    measured = measured or {}
    for lp, pred in zip(lps, preds):
        winner = measured.get(lp.problem)
        configs = [winner] if winner is not None else choices_for(pred, top_k, vendor)
        tiles = sum(c.config_id != VENDOR_CONFIG_ID for c in configs)
        report.measured += winner is not None
        report.short += tiles < top_k and winner is None and not (top_k == 1 and confident(pred))
        entries = [to_tool(family, "inductor", c, lp.problem) for c in configs]
        if any(e is None for e in entries):
            raise ValueError(f"family={family!r} has no Inductor lookup-table entries; the triton_mm family has")
        n = len(entries)
        report.candidates[n] = report.candidates.get(n, 0) + 1
        report.confident += confident(pred)
        for key in [lookup_key(lp, names[lp.problem.dtype])] + ([lookup_key(lp)] if portable else []):
            table[key] = entries
    report.keys = len(table)
    report.seconds = time.perf_counter() - t0
    atomic_write(Path(out), json.dumps(table, indent=1) + "\n")
    return report
