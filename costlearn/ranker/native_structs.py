"""The structs the C ranker shares with Python, defined once, here.

:class:`RankContext` (``costlearn_ctx``: the model's arrays, a thread's
scratch, the query and its outputs) and the node layout
:data:`costlearn.model.forest.NODE_DTYPE` are the one definition; their C
declarations (:func:`c_header`) are kept in ``costlearn_structs.h``
(:func:`write_header` rewrites it after a change; a test holds the two
equal), and at load the library reports its struct sizes and field offsets
(``costlearn_layout``), which must equal ctypes' (:func:`check_layout`).
:data:`QUERY` and :data:`OUTPUTS` write a ranking's inputs and read its
outputs in one call each.
"""
from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import numpy as np

from costlearn.model.forest import NODE_DTYPE
from costlearn.ranker._build import HEADER

__all__ = ["RankContext", "c_header", "write_header", "check_layout", "QUERY", "OUTPUTS", "SCORED_DTYPE",
           "RANK_ESTIMATE", "RANK_DECIDE", "MAX_FEATURES", "MAX_STAGES", "QUERY_FIELDS", "OUTPUT_FIELDS", "C_POINTER",
           "C_INT32", "C_INT64", "C_DOUBLE"]

_HERE = Path(__file__).resolve().parent

C_POINTER, C_INT32, C_INT64, C_DOUBLE = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_double
"""The C types of :class:`RankContext`'s fields (pointers, int32, int64, double)."""
_P, _I32, _I64, _D = C_POINTER, C_INT32, C_INT64, C_DOUBLE


RANK_ESTIMATE = 4
"""``costlearn_rank``'s mode bit asking for the vendor model's estimate too
(``RANK_ESTIMATE`` in ``_native_rank.c``)."""


RANK_DECIDE = 8
"""``costlearn_rank``'s mode bit asking for the floor's decision too
(``RANK_DECIDE`` in ``_native_rank.c``; :attr:`costlearn.ranker.base.RankResult.decision`)."""


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


_C_POINTER_TYPES = {  # the C type of each void* field of RankContext
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


SCORED_DTYPE = np.dtype([("score", "<f8"), ("index", "<i4")], align=True)
"""Layout of ``costlearn_scored`` (the sort's records, 16 bytes)."""


QUERY_FIELDS = ("q_m", "q_n", "q_k", "q_mask", "q_top", "q_mode")
"""A ranking's inputs in :class:`RankContext`, written in one call (:data:`QUERY`)."""


OUTPUT_FIELDS = ("nearest", "nearest_d2", "fits", "level", "vendor_near", "model_near", "used_table", "v_mean", "v_sd",
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


QUERY = _fields_struct(QUERY_FIELDS)
"""m, n, k, the mask's address (0: none), top and mode, at the offset of
``q_m``: what ``costlearn_rank_query`` ranks."""


OUTPUTS = _fields_struct(OUTPUT_FIELDS)
"""The scalar outputs (nearest ... v_score), at the offset of ``nearest``."""


def c_header() -> str:
    """The C declarations of ``costlearn_node``, ``costlearn_scored`` and
    ``costlearn_ctx``, generated from :data:`NODE_DTYPE`, :data:`SCORED_DTYPE`
    and :class:`RankContext`, with ``COSTLEARN_CTX_OFFSETS`` (the offsetof
    of every context field, in order)."""
    def struct(name, dtype):
        fields = " ".join(f"{_C_NUMPY[dtype.fields[f][0].str]} {f};" for f in dtype.names)
        return f"typedef struct {{ {fields} }} {name};"
    lines = ["/* generated by costlearn/ranker/native_structs.py (write_header): do not edit */", "#include <stddef.h>",
             "#include <stdint.h>", struct("costlearn_node", NODE_DTYPE), struct("costlearn_scored", SCORED_DTYPE),
             "typedef struct {"]
    for name, kind in RankContext._fields_:
        if kind is _P:
            lines.append(f"    {_C_POINTER_TYPES[name]}{name};")
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
