"""Inductor lookup-table keys read back: a key's device, problem and op.

A key (:func:`costlearn.interop.inductor.lut.lookup_key`, PyTorch's
``LookupTableChoices.make_lookup_key``) is ``[device+]((inputs))[+scalars]+op``.
:func:`split_key` cuts it into those parts with string methods in one pass
over the key (no pattern that backtracks), after refusing a key longer than
:data:`MAX_KEY_CHARS`; :func:`parse_key` reads the parts as a
:class:`~costlearn.interop.inductor.lut.LutProblem`, or says why it cannot.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from costlearn.core.checks import shown
from costlearn.core.dtypes import TORCH_DTYPES
from costlearn.core.problem import Problem
from costlearn.interop.inductor.lut import OP_EPILOGUES, LutProblem, check_device_name

__all__ = ["MAX_KEY_CHARS", "KeyParts", "split_key", "ParsedKey", "parse_key", "dense_layout", "addmm_bias_problem"]


MAX_KEY_CHARS = 1024
"""The longest key read. A key Inductor writes for an ``mm`` or ``addmm`` is
a device name and at most three tensors' dtypes, shapes and strides of at
most 10 digits each: a few hundred characters. A longer key is left out
unread, naming its length."""


_OP = re.compile(r"[A-Za-z0-9_]+")

_NUMBER = r"(0|[1-9][0-9]*)"

_MATRIX = re.compile(rf"\((torch\.[a-z0-9_]+), \[{_NUMBER}, {_NUMBER}\], \[{_NUMBER}, {_NUMBER}\]\)")
"""One operand of two dimensions: (dtype, [rows, cols], [stride0, stride1])."""

_TENSOR = re.compile(r"\((torch\.[a-z0-9_]+), \[([0-9, ]*)\], \[([0-9, ]*)\]\)")
"""One operand of any rank (an ``addmm`` bias)."""


class KeyParts(NamedTuple):
    """A key's parts (:func:`split_key`).

    Attributes
    ----------
    device : str or None
        The device name; None for a device-agnostic key.
    inputs : str
        ``((dtype, [shape], [strides]), ...)``.
    scalars : str or None
        ``alpha=1&beta=1`` where the key records scalars.
    op : str
    """

    device: str | None
    inputs: str
    scalars: str | None
    op: str


def _not_mm(key: str) -> ValueError:
    return ValueError(f"key {shown(key, 100)} is not an mm key costlearn reads (two operands of one dtype, extents "
                      ">= 1, each a dense row- or column-major matrix)")


def split_key(key: str) -> KeyParts:
    """The parts of a table key ``[device+]((inputs))[+scalars]+op``.

    The op is what follows the last ``+``; scalars, where the inputs do not
    end the rest, what follows the ``+`` before it; the device, what
    precedes the first ``+((`` after the key's first character. Time and
    memory are linear in the key's length.

    Raises
    ------
    ValueError
        If ``key`` is not a str, is longer than :data:`MAX_KEY_CHARS`
        (naming its length), or is not of that form (naming the key, cut).
    """
    if not isinstance(key, str):
        raise ValueError(f"key {shown(key)} is not a str")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError(f"a key of {len(key)} characters ({shown(key, 40)}): longer than the {MAX_KEY_CHARS} a "
                         "lookup-table key can be; not read")
    head, plus, op = key.rpartition("+")
    if not plus or not _OP.fullmatch(op):
        raise ValueError(f"key {shown(key, 100)} does not end in '+op' (e.g. '+mm')")
    scalars = None
    if not head.endswith("))"):
        head, plus, scalars = head.rpartition("+")
        if not plus or "=" not in scalars:
            raise _not_mm(key)
    at = head.find("+((", 1)
    device, inputs = (head[:at], head[at + 1:]) if at > 0 else (None, head)
    if not (inputs.startswith("((") and inputs.endswith("))")):
        raise _not_mm(key)
    return KeyParts(device, inputs, scalars, op)


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


def _bias_problem(parts: KeyParts) -> str | None:
    """:func:`addmm_bias_problem` of a split ``addmm`` key."""
    scalars = dict(kv.split("=", 1) for kv in (parts.scalars or "").split("&") if "=" in kv)
    scaled = {k: v for k, v in scalars.items() if k in ("alpha", "beta") and v.strip() not in ("1", "1.0")}
    if scaled:
        named = ", ".join(f"{k}={v if len(v) <= 20 and v.isprintable() else shown(v, 20)}" for k, v in scaled.items())
        return (f"addmm with {named}: a scaled product or bias is no epilogue costlearn maps (it maps bias = A @ B + "
                "bias[n])")
    ops = _TENSOR.findall(parts.inputs)
    if len(ops) != 3:
        return f"addmm with {len(ops)} inputs; expected bias, mat1, mat2"
    (db, shape, stride), (da, mk, _), (_, kn, _) = ops
    shape = [int(x) for x in shape.replace(" ", "").split(",") if x]
    stride = [int(x) for x in stride.replace(" ", "").split(",") if x]
    mk, kn = [x for x in mk.replace(" ", "").split(",") if x], [x for x in kn.replace(" ", "").split(",") if x]
    if len(mk) != 2 or len(kn) != 2:
        return f"addmm with operands of shapes {mk} and {kn}; expected two matrices"
    mm_, n = int(mk[0]), int(kn[-1])
    row = shape == [n] and stride == [1] or shape == [1, n] and stride[-1:] == [1] \
        or shape == [mm_, n] and stride == [0, 1]
    if not row:
        return (f"addmm with a bias of shape {shape} and strides {stride}: not a length-{n} row broadcast over the "
                "rows (the bias epilogue); a full-matrix or column bias is no epilogue costlearn maps")
    if db != da:
        return f"addmm with a {db} bias and {da} operands: costlearn's bias has the operands' dtype"
    return None


def addmm_bias_problem(key: str) -> str | None:
    """Why an ``addmm`` key is not the ``bias`` epilogue, or None when it is:
    ``alpha`` and ``beta`` 1 (or not recorded), and a bias of the operands'
    dtype that is one length-N row broadcast over the rows: shape [N] with
    stride [1], [1, N], or [M, N] with strides [0, 1]. A key that is no
    ``addmm`` key (:func:`split_key`) says why."""
    try:
        parts = split_key(key)
    except ValueError as e:
        return str(e)
    return "not an addmm key" if parts.op != "addmm" else _bias_problem(parts)


class ParsedKey(NamedTuple):
    """A key read by :func:`parse_key`: its device name (None for a
    device-agnostic key), its problem and strides, its op."""

    device: str | None
    problem: LutProblem
    op: str


def parse_key(key: str) -> ParsedKey:
    """The device, problem and op of a table key.

    Only ops of :data:`~costlearn.interop.inductor.lut.OP_EPILOGUES` are
    read; the problem's epilogue is the op's (an ``addmm`` key must be the
    bias epilogue: :func:`addmm_bias_problem`). Float32 keys read as
    ``float32``.

    Raises
    ------
    ValueError
        Saying why the key is left out: too long or not of a key's form
        (:func:`split_key`), another op, an ``addmm`` that is no bias
        epilogue, not two dense operands of one dtype with extents in
        [1, 2**31 - 1], or a device name torch could not report
        (:func:`~costlearn.interop.inductor.lut.check_device_name`).
    """
    parts = split_key(key)
    if parts.op not in OP_EPILOGUES:
        raise ValueError(f"op {shown(parts.op, 40)}: only {' and '.join(map(repr, OP_EPILOGUES))} keys are read (mm, "
                         "and addmm as the bias epilogue)")
    inputs = parts.inputs
    if parts.op == "addmm":                  # the bias first: drop it, read the two matrices
        why = _bias_problem(parts)
        if why is not None:
            raise ValueError(why)
        first = _TENSOR.match(inputs, 1)
        if first is None or inputs[first.end():first.end() + 2] != ", ":
            raise _not_mm(key)
        inputs = "(" + inputs[first.end() + 2:]
    ops = _MATRIX.findall(inputs)
    if len(ops) != 2 or inputs != "(" + ", ".join(f"({d}, [{x}, {y}], [{s}, {t}])" for d, x, y, s, t in ops) + ")":
        raise _not_mm(key)
    (da, m, k, a0, a1), (db, k2, n, b0, b1) = ops
    if da != db or k != k2 or da not in TORCH_DTYPES:
        raise _not_mm(key)
    sa, sb = (int(a0), int(a1)), (int(b0), int(b1))
    la, lb = dense_layout((int(m), int(k)), sa), dense_layout((int(k), int(n)), sb)
    if la is None or lb is None:
        raise _not_mm(key)
    try:
        p = Problem(int(m), int(n), int(k), TORCH_DTYPES[da], la + lb, OP_EPILOGUES[parts.op])
    except ValueError:                     # an extent of 0 or beyond 2**31 - 1
        raise _not_mm(key) from None
    if parts.device is not None:
        check_device_name(parts.device)
    return ParsedKey(parts.device, LutProblem(p, sa, sb), parts.op)
