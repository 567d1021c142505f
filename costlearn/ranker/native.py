"""The native ranker: ``_native.c``, built by the package build
(:mod:`costlearn.ranker._build`), called with :mod:`ctypes`, one call per
ranking; and the served path's extension (``_served.c``).

The structs shared with C are defined once, here (:class:`RankContext`, and
the node layout :data:`costlearn.model.forest.NODE_DTYPE`); their C
declarations (:func:`c_header`) are kept in ``costlearn_structs.h``
(:func:`write_header`), and at load the library reports
its struct sizes and field offsets (``costlearn_layout``), which must equal
ctypes' (:func:`check_layout`). No compiler runs here: where the install
built no library, :func:`library` warns once and returns None, and the numpy
ranker is used.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.machinery
import importlib.util
import math
import os
import struct
import sys
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np

from costlearn.model.envelope import EMBED
from costlearn.features.base import epilogue_values
from costlearn.model.forest import NODE_DTYPE
from costlearn.model.vendor import FEATURES as VENDOR_FEATURES, POW2_CAP, VendorEstimate, problem_row
from costlearn.ranker._build import EXTENSIONS, HEADER, source_sha256
from costlearn.ranker.base import Ranker, RankResult

__all__ = ["library", "served_module", "served_unavailable", "library_unavailable", "NativeRanker", "RankContext",
           "c_header", "check_layout", "write_header"]

_HERE = Path(__file__).resolve().parent

_P, _I32, _I64, _D = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_double

RANK_ESTIMATE = 4
"""``costlearn_rank``'s mode bit asking for the vendor model's estimate too
(``RANK_ESTIMATE`` in ``_native.c``)."""

RANK_DECIDE = 8
"""``costlearn_rank``'s mode bit asking for the floor's decision too
(``RANK_DECIDE`` in ``_native.c``; :attr:`costlearn.ranker.base.RankResult.decision`)."""

MAX_FEATURES = 255
"""Most features a scorer of the C ranker may read: a node's feature is a
byte, and the walk's sentinel column (-inf, where every leaf points) comes
after them."""

MAX_STAGES = 4
"""Most cascade stages the context holds (:class:`costlearn.model.scorer.Scorer`)."""


class RankContext(ctypes.Structure):
    """``costlearn_ctx``: everything ``costlearn_rank`` needs (the model's
    arrays, a thread's scratch), the query it ranks (``costlearn_rank_query``)
    and its outputs. The one definition of the struct; ``c_header`` writes its C
    declaration. Comments give the C element type of each pointer."""

    _fields_ = [
        # candidates' features
        ("template_", _P),        # const float*  [n_cands x n_features], per-config columns, the sentinel last
        ("n_cands", _I32), ("n_features", _I32),   # n_features: a row's width, the sentinel column (-inf) included
        ("block", _P),            # const int64_t* [3 x n_cands]: BM, BN, KS
        ("slots", _P),            # const int64_t* [n_cands]
        ("tile_occ", _P),         # const double*  [n_cands]
        ("fill", _P),             # const double*  [n_cands]
        ("s", _D), ("peak", _D), ("bw", _D),
        ("epi_flops", _D), ("epi_bytes", _D),   # the problem's epilogue (set per call): flops per element,
                                                # bias bytes per column
        ("cols", _P),             # const int32_t* [23]
        ("min_cap_m", _I64), ("min_cap_n", _I64), ("min_cap_k", _I64),
        # the candidate rule beyond the fit: coverage, the vendor candidate
        ("cov_lo", _P), ("cov_hi", _P),   # const double* [n_cands x 3] (log2, margin applied) or NULL
        ("vendor", _I32),                 # the vendor candidate, -1: none
        # scorer
        ("has_forest", _I32),
        ("nodes", _P),            # const costlearn_node* (leaves on the sentinel: costlearn_sentinel_leaves)
        ("roots", _P),            # const int32_t* [n_trees]
        ("depths", _P),           # const int32_t* [n_trees]
        ("n_trees", _I32), ("base", _D), ("sign", _D),
        ("column", _I32), ("column_weight", _D),
        ("offsets", _P),          # const double* [n_cands] or NULL
        ("n_stages", _I32), ("stage_trees", _I32 * MAX_STAGES), ("stage_keep", _I32 * MAX_STAGES),
        ("stage_margin", _D * MAX_STAGES),
        # envelope: training shapes embedded, sorted by first coordinate
        ("env_points", _P),       # const double*  [n_env x 3]
        ("env_index", _P),        # const int32_t* [n_env]
        ("n_env", _I32), ("embed", _D * 9),
        # held-out evidence of the vendor floor (this layout's), embedded, sorted by first coordinate
        ("ev_points", _P),        # const double* [n_ev x 3]
        ("ev_index", _P),         # const int32_t* [n_ev]: each point's place in the evidence's list
        ("ev_vendor", _P), ("ev_model", _P),   # const double* [n_ev]: log1p regrets
        ("n_ev", _I32), ("ev_k", _I32),
        # shortlist table (this layout's) or NULL
        ("tab_index", _P),        # const int16_t* [points x tab_width], -1 ends a list
        ("tab_resid", _P),        # const float*   [points x tab_width]
        ("tab_n", _I64 * 3), ("tab_step", _D), ("tab_width", _I32), ("tab_trees", _I32),
        # the vendor model (costlearn.model.vendor.VendorModel) or v_members = 0
        ("v_nodes", _P),          # const costlearn_node*
        ("v_roots", _P), ("v_depths", _P),   # const int32_t* [its trees]
        ("v_bounds", _P),         # const int32_t* [v_members + 1]: member i's trees
        ("v_bases", _P),          # const double*  [v_members]
        ("v_members", _I32), ("v_features", _I32), ("v_pow2_cap", _I32),
        ("v_tail", _P),           # const float* [v_features - 9]: this context's epilogue flops, layout one-hot
        # the floor's decision (RANK_DECIDE; costlearn.serve.ood.OODVerdict.problem_reasons, then
        # costlearn.serve.vendor_policy.VendorPolicy.decide), with dec_on = 1 where the ranker has a floor
        ("dec_on", _I32),
        ("env_lo", _D * 3), ("env_hi", _D * 3),   # the envelope's extents, margins applied (Envelope.extent_bounds)
        ("env_threshold", _D),    # its nearest-shape distance limit, doublings
        ("fl_uses_evidence", _I32), ("fl_ood_fallback", _I32),
        ("fl_unsure_regret", _D), ("fl_margin", _D), ("fl_vendor_near_min", _D),
        ("fl_est_on", _I32), ("fl_est_margin", _D), ("fl_est_z", _D), ("fl_est_unsure", _D),
        # the transfer beyond fl_near doublings of every training shape: fl_far_a + fl_far_b * the estimate
        ("fl_far_on", _I32), ("fl_near", _D), ("fl_far_a", _D), ("fl_far_b", _D),
        ("tr_peak", _D), ("tr_bw", _D),   # flop and DRAM bytes per us a time is checked against, 0: not checked
        ("tr_l2", _D), ("tr_elem", _D),   # L2 bytes, element bytes (OODVerdict.time_limits)
        # scratch, one set per calling thread
        ("X", _P), ("Xk", _P),    # float* [n_cands x n_features]
        ("work", _P),             # costlearn_scored* [n_cands]
        ("pick", _P),             # costlearn_scored* [n_cands]: a cascade stage's selection
        ("part", _P), ("acc", _P), ("lin", _P),   # double* [n_cands]
        ("row_cand", _P),         # int32_t* [n_cands]
        ("mask", _P),             # uint8_t* [n_cands]
        ("seen", _P), ("resid", _P),   # double* [n_cands]
        ("ev_work", _P),          # costlearn_scored* [max(n_ev, 1)]
        ("v_row", _P),            # float*  [v_features + 1]: the sentinel last
        ("v_sums", _P),           # double* [v_members]
        # the query (costlearn_rank_query; set per call with QUERY's pack_into)
        ("q_m", _I64), ("q_n", _I64), ("q_k", _I64),
        ("q_mask", _P),           # const uint8_t* [n_cands]: the candidates to rank, or NULL: the candidate rule's
        ("q_top", _I32), ("q_mode", _I32),
        # outputs
        ("out_index", _P),        # int32_t* [n_cands]
        ("out_score", _P),        # double*  [n_cands]
        ("nearest", _I32), ("nearest_d2", _D), ("fits", _I32), ("level", _I32),
        ("vendor_near", _D), ("model_near", _D), ("used_table", _I32),
        ("v_mean", _D), ("v_sd", _D),      # the vendor model's estimate (RANK_ESTIMATE), else NaN
        ("decision", _I32),       # RANK_DECIDE: DECIDED | flags | chosen << 4 | (tile + 1) << 6, else 0
        ("v_score", _D),          # with it: the vendor candidate's score (NaN without one)
    ]


_C_POINTER = {  # the C type of each void* field of RankContext
    "template_": "const float *", "block": "const int64_t *", "slots": "const int64_t *",
    "tile_occ": "const double *", "fill": "const double *", "cols": "const int32_t *",
    "nodes": "const costlearn_node *", "roots": "const int32_t *", "depths": "const int32_t *",
    "offsets": "const double *", "env_points": "const double *", "env_index": "const int32_t *",
    "cov_lo": "const double *", "cov_hi": "const double *", "ev_points": "const double *",
    "ev_index": "const int32_t *",
    "ev_vendor": "const double *", "ev_model": "const double *", "tab_index": "const int16_t *",
    "tab_resid": "const float *", "v_nodes": "const costlearn_node *", "v_roots": "const int32_t *",
    "v_depths": "const int32_t *", "v_bounds": "const int32_t *", "v_bases": "const double *",
    "v_tail": "const float *", "v_row": "float *", "v_sums": "double *", "mask": "uint8_t *",
    "seen": "double *", "resid": "double *", "q_mask": "const uint8_t *",
    "ev_work": "costlearn_scored *",
    "X": "float *", "Xk": "float *", "work": "costlearn_scored *", "pick": "costlearn_scored *",
    "part": "double *", "acc": "double *",
    "lin": "double *", "row_cand": "int32_t *", "out_index": "int32_t *", "out_score": "double *"}
_C_SCALAR = {_I32: "int32_t", _I64: "int64_t", _D: "double"}
_C_NUMPY = {"<f4": "float", "<f8": "double", "<u2": "uint16_t", "|u1": "uint8_t", "<i4": "int32_t"}

_VENDOR_HEAD = 9
"""The vendor row's columns ``vendor_estimate`` in ``_native.c`` computes (the
extents' logs, aspects and trailing zero bits); the rest, the epilogue's and
the layout's, are each context's ``v_tail``."""

SCORED_DTYPE = np.dtype([("score", "<f8"), ("index", "<i4")], align=True)
"""Layout of ``costlearn_scored`` (the sort's records, 16 bytes)."""


_QUERY = ("q_m", "q_n", "q_k", "q_mask", "q_top", "q_mode")
"""A ranking's inputs in :class:`RankContext`, written in one call (:data:`QUERY`)."""

_OUTPUTS = ("nearest", "nearest_d2", "fits", "level", "vendor_near", "model_near", "used_table", "v_mean", "v_sd",
            "decision", "v_score")
"""The scalar outputs of a ranking, read in one call (:data:`OUTPUTS`)."""


def _fields_struct(names: tuple) -> struct.Struct:
    """A :class:`struct.Struct` of :class:`RankContext`'s consecutive fields
    ``names`` (padding between them skipped), from the first one's offset: its
    ``pack_into(context, offset, ...)`` writes them, its
    ``unpack_from(context, offset)`` reads them, in one call each (a tenth of
    ctypes' per-argument conversions)."""
    fields, code = dict(RankContext._fields_), {_I32: "i", _I64: "q", _D: "d", _P: "Q"}
    fmt, at = "<", getattr(RankContext, names[0]).offset
    for name in names:
        desc = getattr(RankContext, name)
        if desc.offset < at:
            raise ValueError(f"RankContext field {name!r} is out of order")
        fmt += "x" * (desc.offset - at) + code[fields[name]]
        at = desc.offset + desc.size
    return struct.Struct(fmt)


QUERY = _fields_struct(_QUERY)
"""m, n, k, the mask's address (0: none), top and mode, at the offset of
``q_m``: what ``costlearn_rank_query`` ranks."""

OUTPUTS = _fields_struct(_OUTPUTS)
"""The scalar outputs (nearest ... v_score), at the offset of ``nearest``."""


def c_header() -> str:
    """The C declarations of ``costlearn_node``, ``costlearn_scored`` and
    ``costlearn_ctx``, generated from :data:`NODE_DTYPE`, :data:`SCORED_DTYPE`
    and :class:`RankContext`, with ``COSTLEARN_CTX_OFFSETS`` (the offsetof
    of every context field, in order)."""
    def struct(name, dtype):
        fields = " ".join(f"{_C_NUMPY[dtype.fields[f][0].str]} {f};" for f in dtype.names)
        return f"typedef struct {{ {fields} }} {name};"
    lines = ["/* generated by costlearn/ranker/native.py (write_header): do not edit */", "#include <stddef.h>",
             "#include <stdint.h>", struct("costlearn_node", NODE_DTYPE), struct("costlearn_scored", SCORED_DTYPE),
             "typedef struct {"]
    for name, kind in RankContext._fields_:
        if kind is _P:
            lines.append(f"    {_C_POINTER[name]}{name};")
        elif issubclass(kind, ctypes.Array):
            lines.append(f"    {_C_SCALAR[kind._type_]} {name}[{kind._length_}];")
        else:
            lines.append(f"    {_C_SCALAR[kind]} {name};")
    lines.append("} costlearn_ctx;")
    offsets = ", ".join(f"(int64_t)offsetof(costlearn_ctx, {name})" for name, _ in RankContext._fields_)
    lines.append(f"#define COSTLEARN_CTX_OFFSETS {offsets}")
    return "\n".join(lines) + "\n"


def write_header() -> Path:
    """Write :func:`c_header` to ``costlearn_structs.h`` beside this module
    (after a change to the structs; then reinstall, ``pip install -e .``,
    to rebuild the C code). Returns its path."""
    path = _HERE / HEADER
    path.write_text(c_header())
    return path


def check_layout(lib) -> None:
    """Compare the compiled library's struct sizes and offsets with ctypes'
    and numpy's.

    Raises
    ------
    OSError
        Naming the first field whose offset differs.
    """
    n = len(RankContext._fields_) + 3
    out = (ctypes.c_int64 * n)()
    got = lib.costlearn_layout(out, n)
    want = [NODE_DTYPE.itemsize, SCORED_DTYPE.itemsize, ctypes.sizeof(RankContext)] + [
        getattr(RankContext, f).offset for f, _ in RankContext._fields_]
    names = ["sizeof(costlearn_node)", "sizeof(costlearn_scored)", "sizeof(costlearn_ctx)"] + [
        f for f, _ in RankContext._fields_]
    if got != n:
        raise OSError(f"the compiled ranker reports {got} layout values, Python expects {n}")
    for name, a, b in zip(names, list(out), want):
        if a != b:
            raise OSError(f"the compiled ranker's {name} is {a}, Python's is {b}: rebuild (C and Python "
                          "disagree on the struct layout)")


def _built(name: str) -> Path | None:
    """The built extension ``name`` (:data:`costlearn.ranker._build.EXTENSIONS`)
    beside this module, or None where the install built none."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _HERE / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


_ELF = {2: dict(head="QQ", at=32, sizes=54, segment="QQ", offset=8, filesz=32),     # 64-bit
        1: dict(head="II", at=28, sizes=42, segment="II", offset=4, filesz=16)}     # 32-bit
"""Where an ELF file's header keeps its program and section header tables'
offsets and sizes, and a program header its segment's offset and size in
the file (the ELF specification, by class)."""


def _check_whole(path) -> None:
    """Refuse a built library cut short (a copy or an install killed
    midway): loading an ELF file whose segments or tables reach past its end
    crashes the process (SIGBUS) instead of failing. Other formats are left
    to the loader.

    Raises
    ------
    OSError
        Naming the file, where it is shorter than its own headers say.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:4] != b"\x7fELF" or data[4] not in _ELF or len(data) < 64:
        return
    f, order = _ELF[data[4]], "<" if data[5] == 1 else ">"
    phoff, shoff = struct.unpack_from(order + f["head"], data, f["at"])
    phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, f["sizes"])
    ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
    for at in range(phoff, min(phoff + phentsize * phnum, len(data) - phentsize + 1), max(phentsize, 1)):
        offset = struct.unpack_from(order + f["segment"][0], data, at + f["offset"])[0]
        filesz = struct.unpack_from(order + f["segment"][1], data, at + f["filesz"])[0]
        ends.append(offset + filesz)
    if max(ends) > len(data):
        raise OSError(f"{path} is cut short ({len(data)} bytes where its headers reach {max(ends)}): reinstall "
                      "(pip install -e .)")


def _subnormals_kept() -> bool:
    """Whether this process still computes subnormal floats (a library built
    with fast math flushes them to zero for the whole process when it loads)."""
    tiny = sys.float_info.min
    return tiny / 1024.0 > 0.0


def _check_subnormals(path) -> None:
    """Raise OSError where loading ``path`` turned subnormals off."""
    if not _subnormals_kept():
        raise OSError(f"loading {path} made this process flush subnormal floats to zero (it was built with fast "
                      "math); rebuild without it (pip install -e . drops such flags)")


def _check_source(name: str, built: str) -> None:
    """Refuse a build of extension ``name`` made from another source than
    the one beside it (``built``: the sha256 it reports; an editable
    install whose C changed since ``pip install``). Where no source is
    beside it (a wheel), nothing is compared.

    Raises
    ------
    OSError
        Saying how to rebuild.
    """
    try:
        want = source_sha256(name)
    except OSError:
        return
    if built != want:
        raise OSError(f"the built {name} was compiled from another source than {_HERE / EXTENSIONS[name]} "
                      "(rebuild: pip install -e . in the source tree)")


_SYMBOLS = ("costlearn_forest_predict", "costlearn_sentinel_leaves", "costlearn_shape_features", "costlearn_rank_query",
            "costlearn_rank_many", "costlearn_shortlist_build", "costlearn_layout", "costlearn_fsum",
            "costlearn_source_sha256")


def _open(path: Path):
    """Load a built library, declare its functions and check its layout."""
    _check_whole(path)
    lib = ctypes.CDLL(str(path))
    for name in _SYMBOLS:
        getattr(lib, name)                      # AttributeError if missing
    lib.costlearn_source_sha256.restype = ctypes.c_char_p
    lib.costlearn_source_sha256.argtypes = []
    _check_source("_native", lib.costlearn_source_sha256().decode())
    _check_subnormals(path)
    lib.costlearn_layout.restype = _I32
    lib.costlearn_layout.argtypes = [_P, _I32]
    check_layout(lib)
    lib.costlearn_forest_predict.restype = _I32
    lib.costlearn_forest_predict.argtypes = [_P, _P, _P, _I32, _P, _I32, _I32, _P]
    lib.costlearn_sentinel_leaves.restype = _I32
    lib.costlearn_sentinel_leaves.argtypes = [_P, _I64, _I32, _P]
    lib.costlearn_shape_features.restype = None
    lib.costlearn_shape_features.argtypes = [_I64, _I64, _I64, _P, _I32, _I32, _P, _P, _P, _P, _D, _D, _D, _D, _D,
                                             _P, _P, _I32]
    lib.costlearn_rank_query.restype = _I32
    lib.costlearn_rank_query.argtypes = None    # always given a context's byref(), passed as its pointer without
                                                # argtypes' from_param (a large share of a ranking's call:
                                                # docs/results.md, "Speed")
    lib.costlearn_rank_many.restype = _I32
    lib.costlearn_rank_many.argtypes = [_P, _I32, _I32, _I32, _I32, ctypes.POINTER(RankContext)] + [_P] * 13
    lib.costlearn_fsum.restype = _D
    lib.costlearn_fsum.argtypes = [_P, _I32]
    lib.costlearn_shortlist_build.restype = _I32
    lib.costlearn_shortlist_build.argtypes = [_P, _I32, _I32, _I32, ctypes.POINTER(RankContext), _P, _P]
    return lib


_tuple_new = tuple.__new__
"""``_tuple_new(RankResult, fields)``: a named tuple from all its fields in
order, without a Python frame (their own ``__new__`` is a Python function of
keywords, ``_make`` a Python method)."""

_WALKED = weakref.WeakKeyDictionary()
"""FlatForest -> its nodes as the C walk reads them (:func:`walked_nodes`),
made once per forest in a process (a second load of a model reuses its
forest, and every floor set on a Predictor makes a new ranker)."""


def walked_nodes(lib, forest, n_features: int) -> np.ndarray:
    """``forest``'s nodes as ``costlearn_forest_predict`` walks them: each
    leaf's feature the sentinel column ``n_features`` (-inf in every row, so
    a leaf stays put without a flag to test; ``costlearn_sentinel_leaves``),
    kept for the forest's lifetime.

    Parameters
    ----------
    lib : ctypes.CDLL
        The compiled ranker (:func:`library`).
    forest : costlearn.model.forest.FlatForest
    n_features : int
        The width of its feature rows, without the sentinel (< 256).

    Returns
    -------
    ndarray of :data:`~costlearn.model.forest.NODE_DTYPE`, shape (len(forest.nodes),)
        Read-only.

    Raises
    ------
    ValueError
        If a split reads a feature at or after the sentinel.
    """
    got = _WALKED.get(forest)
    if got is not None and got[0] == n_features:
        return got[1]
    out = np.empty_like(forest.nodes)
    if lib.costlearn_sentinel_leaves(forest.nodes.ctypes.data, len(out), n_features, out.ctypes.data) != 0:
        raise ValueError(f"a forest splits on a feature at or after its sentinel column {n_features}")
    out.flags.writeable = False
    _WALKED[forest] = (n_features, out)
    return out


_LIB = None
_LIB_TRIED = False
_LIB_WHY = ""
_LIB_LOCK = threading.Lock()


def library():
    """The compiled ranker (a :class:`ctypes.CDLL` of the ``_native``
    extension the install built), or None (with one warning) where the
    install built none or it cannot be loaded. Set ``COSTLEARN_NO_C=1`` to
    skip it (tests of the fallback use this)."""
    global _LIB, _LIB_TRIED, _LIB_WHY
    with _LIB_LOCK:
        if _LIB_TRIED:
            return _LIB
        _LIB_TRIED = True
        if os.environ.get("COSTLEARN_NO_C"):
            _LIB_WHY = "COSTLEARN_NO_C is set"
            return None
        path = _built("_native")
        try:
            if path is None:
                raise OSError("the install built no C ranker (no C compiler worked at pip install)")
            _LIB = _open(path)
        except (OSError, AttributeError) as e:
            _LIB_WHY = str(e)
            warnings.warn(f"costlearn: its C ranker is unavailable ({e}); ranking falls back to numpy (the same "
                          "answers, about 20x slower)", RuntimeWarning, stacklevel=3)
        return _LIB


_SERVED = None
_SERVED_TRIED = False
_SERVED_WHY = ""


def served_module():
    """The served path's CPython extension (``_served.c``: the
    :func:`costlearn.predict_best` builtin, ``entry``, and a predictor's
    unseen problems answered in C, ``Served``), as the install built it;
    None where it was not built or cannot be loaded (or ``COSTLEARN_NO_C``
    is set): :func:`served_unavailable` says why. No warning: what it serves
    has a Python twin that gives the same answers, only slower."""
    global _SERVED, _SERVED_TRIED, _SERVED_WHY
    with _LIB_LOCK:
        if _SERVED_TRIED:
            return _SERVED
        _SERVED_TRIED = True
        if os.environ.get("COSTLEARN_NO_C"):
            _SERVED_WHY = "COSTLEARN_NO_C is set"
            return None
        try:
            spec = importlib.util.find_spec("costlearn.ranker._served")
            if spec is not None and spec.origin:
                _check_whole(spec.origin)
            module = importlib.import_module("costlearn.ranker._served")
            _check_source("_served", getattr(module, "SOURCE_SHA256", None))
            _check_subnormals(module.__file__)
            getattr(module, "entry")
            _SERVED = module
        except (ImportError, OSError, AttributeError) as e:
            _SERVED_WHY = f"the install built none or it does not load: {e}"
        return _SERVED


def served_unavailable() -> str:
    """Why :func:`served_module` returned None ("" where it did not, or
    was not asked yet)."""
    return _SERVED_WHY


def library_unavailable() -> str:
    """Why :func:`library` returned None ("" where it did not, or was not
    asked yet)."""
    return _LIB_WHY


class NativeRanker(Ranker):
    """:class:`~costlearn.ranker.base.Ranker` in C: one ``costlearn_rank_query``
    call per ranking (the query written into the thread's context first).
    Per-thread scratch arrays, so one ranker serves many threads.

    Raises
    ------
    OSError
        If the C library is unavailable (:func:`library` returned None).
    """

    name = "native"

    def __init__(self, features, scorer, envelope, min_tile_caps, **rule):
        super().__init__(features, scorer, envelope, min_tile_caps, **rule)
        lib = library()
        if lib is None:
            why = "COSTLEARN_NO_C is set" if os.environ.get("COSTLEARN_NO_C") \
                else "it could not be built (see the warning)"
            raise OSError(f"the C ranker is unavailable here: {why}; use the numpy ranker")
        self._lib = lib
        self._rank = lib.costlearn_rank_query
        f, sc = features, scorer
        env_order = np.lexsort((np.arange(len(envelope.points)), envelope.points[:, 0]))
        keep_alive = dict(
            block=f.block, slots=f.slots, tile_occ=f.tile_occ,
            fill=f.fill_loads, cols=np.ascontiguousarray(f.shape_columns, np.int32),
            env_points=np.ascontiguousarray(envelope.points[env_order], np.float64),
            env_index=np.ascontiguousarray(env_order, np.int32))
        forest = sc.forest
        n_features = len(f.names)
        if n_features > MAX_FEATURES:
            raise ValueError(f"{n_features} features; the C ranker walks at most {MAX_FEATURES} (use the numpy "
                             "ranker)")
        if forest is not None:
            keep_alive.update(nodes=walked_nodes(lib, forest, n_features), roots=forest.roots, depths=forest.depths)
        if sc.offsets is not None:
            keep_alive["offsets"] = np.ascontiguousarray(sc.offsets, np.float64)
        vm = self.vendor_model
        if vm is not None:                 # at most MAX_MEMBERS members (VendorModel checks), as the C sums take
            keep_alive.update(v_nodes=walked_nodes(lib, vm.forest, len(VENDOR_FEATURES)), v_roots=vm.forest.roots,
                              v_depths=vm.forest.depths,
                              v_bounds=np.ascontiguousarray(vm.bounds, np.int32),
                              v_bases=np.ascontiguousarray(vm.bases, np.float64))
        if self.coverage is not None:
            keep_alive.update(cov_lo=np.ascontiguousarray(self.coverage.lo, np.float64),
                              cov_hi=np.ascontiguousarray(self.coverage.hi, np.float64))
        # One template per layout (they differ in the layout columns only); a
        # thread's context per layout points at its layout's template, evidence and table.
        self._templates = {lay: np.ascontiguousarray(np.pad(t, ((0, 0), (0, 1)), constant_values=-np.inf),
                                                     np.float32) for lay, t in f.templates.items()}
        self._layout_arrays = {}
        for lay in self._templates:
            pts, lv, lm, kk = self.evidence_arrays(lay)
            ev_order = np.lexsort((np.arange(len(pts)), pts[:, 0]))    # as the envelope's: evidence_near's scan
            arrays = dict(ev_points=np.ascontiguousarray(pts[ev_order], np.float64),
                          ev_index=np.ascontiguousarray(ev_order, np.int32),
                          ev_vendor=np.ascontiguousarray(lv, np.float64), ev_model=np.ascontiguousarray(lm, np.float64))
            tab = self.shortlist.tables.get(lay) if self.shortlist is not None else None
            if tab is not None:
                arrays.update(tab_index=tab[0], tab_resid=tab[1])
            self._layout_arrays[lay] = (arrays, len(pts), int(min(kk, max(len(pts), 1))))   # an int32 in C
        self._keep_alive = keep_alive
        ptr = {k: a.ctypes.data for k, a in keep_alive.items()}
        self._const = dict(
            n_cands=f.n_candidates, n_features=n_features + 1, block=ptr["block"],
            slots=ptr["slots"], tile_occ=ptr["tile_occ"], fill=ptr["fill"], s=f.element_bytes,
            peak=f.peak_flop_per_us, bw=f.bytes_per_us, cols=ptr["cols"], min_cap_m=self.min_tile_caps[0],
            min_cap_n=self.min_tile_caps[1], min_cap_k=self.min_tile_caps[2], cov_lo=ptr.get("cov_lo", 0),
            cov_hi=ptr.get("cov_hi", 0),
            vendor=-1 if self.vendor is None else int(self.vendor), has_forest=int(forest is not None),
            nodes=ptr.get("nodes", 0), roots=ptr.get("roots", 0), depths=ptr.get("depths", 0),
            n_trees=sc.n_trees, base=forest.base_score if forest is not None else 0.0, sign=sc.sign,
            column=sc.column, column_weight=sc.column_weight, offsets=ptr.get("offsets", 0),
            n_stages=len(sc.cascade), env_points=ptr["env_points"], env_index=ptr["env_index"],
            n_env=len(envelope.points), v_nodes=ptr.get("v_nodes", 0), v_roots=ptr.get("v_roots", 0),
            v_depths=ptr.get("v_depths", 0), v_bounds=ptr.get("v_bounds", 0), v_bases=ptr.get("v_bases", 0),
            v_members=0 if vm is None else len(vm.bases), v_features=len(VENDOR_FEATURES), v_pow2_cap=POW2_CAP)
        if len(sc.cascade) > MAX_STAGES:
            raise ValueError(f"a cascade of {len(sc.cascade)} stages; the native ranker takes {MAX_STAGES}")
        if any(not (0 < t < sc.n_trees and 5 <= k < 2**30) for t, k, _ in sc.cascade):
            raise ValueError(f"cascade {list(sc.cascade)} out of range for {sc.n_trees} trees")
        self._stages = ([t for t, _, _ in sc.cascade], [k for _, k, _ in sc.cascade],
                        [float(d) for _, _, d in sc.cascade])
        fl = self.floor
        if fl is not None:                 # the floor's decision (floor_decision in _native.c)
            est_margin, est_z = fl.estimate if fl.estimate is not None else (0.0, 0.0)
            self._const.update(
                dec_on=1, env_threshold=envelope.threshold_log2, fl_uses_evidence=int(fl.uses_evidence(
                    self.vendor is not None)), fl_ood_fallback=int(fl.ood_fallback),
                fl_unsure_regret=fl.unsure_regret, fl_margin=fl.margin_log2, fl_vendor_near_min=fl.vendor_near_min,
                fl_est_on=int(fl.estimate is not None), fl_est_margin=est_margin, fl_est_z=est_z,
                fl_est_unsure=fl.estimate_unsure)
            if fl.transfer is not None:
                self._const.update(zip(("fl_far_on", "fl_near", "fl_far_a", "fl_far_b"), (1, *fl.transfer[:3])))
            if self.time_limits is not None:
                self._const.update(zip(("tr_peak", "tr_bw", "tr_l2", "tr_elem"), self.time_limits))
            self._env_bounds = envelope.extent_bounds
        self._decides = fl is not None
        self._served_estimate = self.vendor_model is not None
        served = (RANK_ESTIMATE if self._served_estimate else 0) | RANK_DECIDE
        self._served_modes = (served, 2 | served)            # rank_served's without and with the cascade
        self._embed = [float(v) for v in EMBED.ravel()]
        self._first_layout = next(iter(self._templates))
        self._no_candidate = np.zeros(self.n_candidates, np.uint8)
        self._tls = threading.local()

    def _new_context(self, layout: str, *, table: bool = True, epilogue: str = "none"):
        """A context for problems of ``layout`` and ``epilogue`` with its own
        scratch and output arrays: (RankContext, its pointer, out_index and
        out_score as memoryviews, a callable reading its scalar outputs as a
        tuple (:data:`OUTPUTS`), a callable writing a query ``(m, n, k,
        mask address or 0, top, mode)`` (:data:`QUERY`), arrays kept alive,
        the RankContext's address). The shortlist
        table, built for epilogue-free problems, is left out (NULL) for
        another epilogue."""
        c, f = self.n_candidates, len(self.features.names) + 1     # the sentinel column last
        lay_arrays, n_ev, ev_k = self._layout_arrays[layout]
        arrays = dict(X=np.empty((c, f), np.float32), Xk=np.empty((c, f), np.float32),
                      work=np.empty(c, SCORED_DTYPE), pick=np.empty(c, SCORED_DTYPE), part=np.empty(c, np.float64),
                      acc=np.empty(c, np.float64),
                      lin=np.empty(c, np.float64), row_cand=np.empty(c, np.int32), mask=np.empty(c, np.uint8),
                      seen=np.empty(c, np.float64), resid=np.empty(c, np.float64),
                      ev_work=np.empty(max(n_ev, 1), SCORED_DTYPE),
                      v_row=np.empty(len(VENDOR_FEATURES) + 1, np.float32),
                      v_sums=np.empty(max(self._const["v_members"], 1), np.float64),
                      v_tail=np.array(problem_row(1, 1, 1, layout, epilogue)[_VENDOR_HEAD:], np.float32),
                      out_index=np.empty(c, np.int32), out_score=np.empty(c, np.float64))
        ptrs = {k: a.ctypes.data for k, a in arrays.items()}
        table = table and epilogue == "none"
        ptrs.update({k: a.ctypes.data for k, a in lay_arrays.items() if table or not k.startswith("tab_")})
        epi_flops, epi_bytes = epilogue_values(epilogue, self.features.element_bytes)
        rc = RankContext(**self._const, **ptrs, template_=self._templates[layout].ctypes.data, n_ev=n_ev, ev_k=ev_k,
                         epi_flops=epi_flops, epi_bytes=epi_bytes)
        rc.embed[:] = self._embed
        if self._decides:
            rc.env_lo[:], rc.env_hi[:] = self._env_bounds
        n = len(self._stages[0])
        rc.stage_trees[:n], rc.stage_keep[:n], rc.stage_margin[:n] = self._stages
        sl = self.shortlist
        if sl is not None:
            rc.tab_n[:] = list(sl.n)
            rc.tab_step, rc.tab_width, rc.tab_trees = sl.step, sl.width, sl.trees
        return rc, ctypes.byref(rc), memoryview(arrays["out_index"]), memoryview(arrays["out_score"]), \
            functools.partial(OUTPUTS.unpack_from, rc, getattr(RankContext, _OUTPUTS[0]).offset), \
            functools.partial(QUERY.pack_into, rc, getattr(RankContext, _QUERY[0]).offset), (arrays, lay_arrays), \
            ctypes.addressof(rc)

    def _context(self, layout: str, epilogue: str = "none"):
        """This thread's context for problems of ``layout`` and ``epilogue``."""
        by_layout = getattr(self._tls, "by_layout", None)
        if by_layout is None:
            by_layout = self._tls.by_layout = {}
        ctx = by_layout[layout, epilogue] = self._new_context(layout, epilogue=epilogue)
        return ctx

    @property
    def thread_contexts(self) -> threading.local:
        """The calling thread's contexts: its ``by_layout`` (absent before
        the thread's first ranking) maps (layout, epilogue) to the context
        :meth:`context` made, whose last item is the
        :class:`RankContext`'s address (what ``_served.c`` ranks with,
        calling :attr:`rank_function`)."""
        return self._tls

    def context(self, layout: str, epilogue: str = "none") -> tuple:
        """This thread's context for problems of ``layout`` (another
        layout than the templates': the first one's) and ``epilogue``, made
        where it has none yet: (RankContext, its pointer, out_index and
        out_score as memoryviews, the outputs' reader, the query's writer,
        arrays kept alive, the RankContext's address)."""
        key = (layout if layout in self._templates else self._first_layout, epilogue)
        by_layout = getattr(self._tls, "by_layout", None)
        return (by_layout.get(key) if by_layout is not None else None) or self._context(*key)

    def served_mode(self, cascade: bool = True) -> int:
        """The mode bits :meth:`rank_served` ranks with (``costlearn_rank``'s
        ``mode``), with or without the ``cascade``."""
        return self._served_modes[bool(cascade)]

    @property
    def served_estimate(self) -> bool:
        """Whether :meth:`rank_served`'s results carry the vendor model's
        estimate."""
        return self._served_estimate

    @property
    def rank_function(self) -> int:
        """The address of ``costlearn_rank_query`` (``int32_t (*)(costlearn_ctx *)``)
        in the compiled ranker."""
        return ctypes.cast(self._rank, ctypes.c_void_p).value

    @staticmethod
    def _mode(cascade: bool, shortlist: bool) -> int:
        return 0 if not cascade else (2 if shortlist else 1)

    def rank(self, problem, mask=None, *, top: int = 5, cascade: bool = True, shortlist: bool = True,
             estimate: bool = False, decide: bool = False) -> RankResult:
        top = top if type(top) is int and 0 < top < 2**31 else self._top(top)
        if mask is not None:
            mask = self.check_mask(mask)
        estimate = estimate and self.vendor_model is not None
        return self._ranked(problem.m, problem.n, problem.k, problem.layout, problem.epilogue,
                            None if mask is None else mask.ctypes.data, top,
                            (0 if not cascade else 2 if shortlist else 1)    # _mode's, inlined (a call a ranking)
                            | (RANK_ESTIMATE if estimate else 0) | (RANK_DECIDE if decide else 0), estimate)

    def rank_served(self, m: int, n: int, k: int, layout: str, epilogue: str, top: int,
                    cascade: bool = True) -> RankResult:
        """:meth:`Ranker.rank_served` in one C call, without a Problem."""
        return self._ranked(m, n, k, layout, epilogue, None, top if top < 2**31 else 2**31 - 1,
                            self._served_modes[cascade], self._served_estimate)

    def _ranked(self, m: int, n: int, k: int, layout: str, epilogue: str, mask_ptr, top: int, mode: int,
                estimate: bool) -> RankResult:
        """``costlearn_rank`` of the problem (m, n, k, layout, epilogue) in
        this thread's context: the candidates of the mask at ``mask_ptr``
        (None: the candidate rule's), ``top`` and the ``mode`` bits given,
        ``estimate`` where the mode asks for it; its RankResult."""
        ctx = self.context(layout, epilogue)
        busy = self._tls.__dict__.setdefault("busy", set())
        if id(ctx) in busy:                     # re-entered on this thread (a signal handler that predicts): a
            ctx, mine = self._new_context(layout, epilogue=epilogue), False     # context of its own
        else:
            busy.add(id(ctx))
            mine = True
        try:
            _, ref, out_index, out_score, outputs, query, _, _ = ctx
            query(m, n, k, mask_ptr or 0, top, mode)
            got = self._rank(ref)
            near, d2, fits, level, vnear, mnear, used, v_mean, v_sd, decision, v_score = outputs()
            order, scores = out_index[:got].tolist(), out_score[:got].tolist()
        finally:
            if mine:
                busy.discard(id(ctx))
        # the named tuples through tuple.__new__: their own __new__ is a Python function of keywords
        return _tuple_new(RankResult, (order, scores, near, math.sqrt(d2), fits != 0, level, math.expm1(vnear),
                                       math.expm1(mnear), used != 0,
                                       _tuple_new(VendorEstimate, (v_mean, v_sd)) if estimate else None,
                                       (decision, v_score) if decision else None))

    def vendor_estimate(self, problem):
        """:meth:`Ranker.vendor_estimate` in C: ``costlearn_rank`` with the
        estimate and a mask of no candidate (nothing is scored)."""
        if self.vendor_model is None:
            return None
        rc, ref, _, _, _, query, _, _ = self.context(problem.layout, problem.epilogue)
        query(problem.m, problem.n, problem.k, self._no_candidate.ctypes.data, 1, RANK_ESTIMATE)
        self._rank(ref)
        return VendorEstimate(rc.v_mean, rc.v_sd)

    def rank_many(self, problems, *, top: int = 5, cascade: bool = True, shortlist: bool = True,
                  estimate: bool = False, decide: bool = False) -> list:
        """:meth:`rank` with the candidate rule for many problems: one C call
        per (layout, epilogue) among them.

        Parameters
        ----------
        problems : sequence of Problem
        top, cascade, shortlist, estimate, decide
            As :meth:`rank`.

        Returns
        -------
        list of RankResult
            In the order of ``problems``.
        """
        top = self._top(top)
        estimate = estimate and self.vendor_model is not None
        mode = self._mode(cascade, shortlist) | (RANK_ESTIMATE if estimate else 0) | (RANK_DECIDE if decide else 0)
        return self._ranked_many([(q.m, q.n, q.k, q.layout, q.epilogue) for q in problems], top, mode, estimate)

    def rank_many_served(self, shapes, top: int, cascade: bool = True) -> list:
        """:meth:`Ranker.rank_many_served`: one C call per (layout,
        epilogue) among the shapes, without a Problem."""
        return self._ranked_many(shapes, top if top < 2**31 else 2**31 - 1, self._served_modes[cascade],
                                 self._served_estimate)

    def _ranked_many(self, shapes, top: int, mode: int, estimate: bool) -> list:
        """``costlearn_rank_many`` of ``shapes`` ((m, n, k, layout, epilogue)
        tuples) with the candidate rule, grouped by (layout, epilogue):
        their RankResults, in order."""
        out: list = [None] * len(shapes)
        groups: dict = {}
        templates, first = self._templates, self._first_layout
        for i, s in enumerate(shapes):
            groups.setdefault((s[3] if s[3] in templates else first, s[4]), []).append(i)
        width = self.n_candidates
        for key, idx in groups.items():
            p = len(idx)
            mnk = np.array([shapes[i][:3] for i in idx], np.int64)
            ctx = self.context(*key)
            count, level, used = np.empty(p, np.int32), np.empty(p, np.int32), np.empty(p, np.int32)
            index, score = np.empty((p, width), np.int32), np.empty((p, width))
            nearest, d2, vnear, mnear = np.empty(p, np.int32), np.empty(p), np.empty(p), np.empty(p)
            v_mean, v_sd, decision, v_score = np.empty(p), np.empty(p), np.empty(p, np.int32), np.empty(p)
            self._lib.costlearn_rank_many(mnk.ctypes.data, p, top, width, mode, ctx[1], count.ctypes.data,
                                          index.ctypes.data, score.ctypes.data, nearest.ctypes.data, d2.ctypes.data,
                                          level.ctypes.data, vnear.ctypes.data, mnear.ctypes.data, used.ctypes.data,
                                          v_mean.ctypes.data, v_sd.ctypes.data, decision.ctypes.data,
                                          v_score.ctypes.data)
            ests = [_tuple_new(VendorEstimate, e) for e in zip(v_mean.tolist(), v_sd.tolist())] if estimate \
                else [None] * p
            dist = np.sqrt(d2).tolist()                       # IEEE-exact; the exponentials are libm's, as rank's
            vnear, mnear = [math.expm1(v) for v in vnear.tolist()], [math.expm1(v) for v in mnear.tolist()]
            decisions = [(d, v) if d else None for d, v in zip(decision.tolist(), v_score.tolist())]
            flat_index, flat_score = memoryview(index).cast("B").cast("i"), memoryview(score).cast("B").cast("d")
            at = 0
            for j, (i, c, lv, u, near) in enumerate(zip(idx, count.tolist(), level.tolist(), used.tolist(),
                                                        nearest.tolist())):
                out[i] = _tuple_new(RankResult, (flat_index[at:at + c].tolist(), flat_score[at:at + c].tolist(), near,
                                                 dist[j], lv < 2, lv, vnear[j], mnear[j], u != 0, ests[j],
                                                 decisions[j]))
                at += width
        return out

    def shortlist_lists(self, layout: str, shapes, tiles: int, trees: int):
        """The shortlist table's lists at grid points ``shapes`` (int64,
        shape (P, 3)) of ``layout``: ``costlearn_shortlist_build``.

        Returns
        -------
        index : ndarray of int16, shape (P, width)
        resid : ndarray of float32, shape (P, width)
        """
        shapes = np.ascontiguousarray(shapes, np.int64).reshape(-1, 3)
        width = tiles + (self.vendor is not None)
        rc, ref, _, _, _, _, keep, _ = self._new_context(layout, table=False)
        rc.tab_trees = trees
        index = np.empty((len(shapes), width), np.int16)
        resid = np.empty((len(shapes), width), np.float32)
        if self._lib.costlearn_shortlist_build(shapes.ctypes.data, len(shapes), tiles, width, ref,
                                               index.ctypes.data, resid.ctypes.data) != 0:
            raise ValueError(f"shortlist build refused tiles={tiles}, width={width}")
        return index, resid

