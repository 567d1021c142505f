"""The native ranker: :class:`NativeRanker`, one call of the C ranker's
``costlearn_rank_query`` (``_native_rank.c``) per ranking, in the calling thread's context.

The structs it shares with C are :mod:`costlearn.ranker.native_structs`';
loading what the install built is :mod:`costlearn.ranker.native_library`'s.
"""
from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
import weakref

import numpy as np

from costlearn.model.envelope import EMBED
from costlearn.features.base import epilogue_values
from costlearn.model.vendor import FEATURES as VENDOR_FEATURES, POW2_CAP, VendorEstimate, problem_row
from costlearn.ranker.base import Ranker, RankResult
from costlearn.ranker.native_library import library
from costlearn.ranker.native_structs import (OUTPUT_FIELDS, QUERY_FIELDS, MAX_FEATURES, MAX_STAGES, OUTPUTS,
                                             QUERY, RANK_DECIDE, RANK_ESTIMATE, SCORED_DTYPE, RankContext)

__all__ = ["NativeRanker", "walked_nodes"]

_VENDOR_HEAD = 9
"""The vendor row's columns ``vendor_estimate`` in ``_native_score.c`` computes (the
extents' logs, aspects and trailing zero bits); the rest, the epilogue's and
the layout's, are each context's ``v_tail``."""


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
        if fl is not None:                 # the floor's decision (floor_decision in _native_rank.c)
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
        mask address or 0, top, mode)`` (:data:`QUERY`), arrays kept
        alive). The shortlist
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
        const = self._const
        if self._decides and self.floor.transfer is not None:          # the transfer's line of this layout
            const = dict(const, fl_far_a=self.floor.transfer_line(layout)[0])
        rc = RankContext(**const, **ptrs, template_=self._templates[layout].ctypes.data, n_ev=n_ev, ev_k=ev_k,
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
            functools.partial(OUTPUTS.unpack_from, rc, getattr(RankContext, OUTPUT_FIELDS[0]).offset), \
            functools.partial(QUERY.pack_into, rc, getattr(RankContext, QUERY_FIELDS[0]).offset), \
            (arrays, lay_arrays)

    def _context(self, layout: str, epilogue: str = "none"):
        """This thread's context for problems of ``layout`` and ``epilogue``."""
        by_layout = getattr(self._tls, "by_layout", None)
        if by_layout is None:
            by_layout = self._tls.by_layout = {}
        ctx = by_layout[layout, epilogue] = self._new_context(layout, epilogue=epilogue)
        return ctx

    def context(self, layout: str, epilogue: str = "none") -> tuple:
        """This thread's context for problems of ``layout`` (another
        layout than the templates': the first one's) and ``epilogue``, made
        where it has none yet: (RankContext, its pointer, out_index and
        out_score as memoryviews, the outputs' reader, the query's writer,
        arrays kept alive)."""
        key = (layout if layout in self._templates else self._first_layout, epilogue)
        by_layout = getattr(self._tls, "by_layout", None)
        return (by_layout.get(key) if by_layout is not None else None) or self._context(*key)

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
            _, ref, out_index, out_score, outputs, query, _ = ctx
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
        rc, ref, _, _, _, query, _ = self.context(problem.layout, problem.epilogue)
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
        rc, ref, _, _, _, _, keep = self._new_context(layout, table=False)
        rc.tab_trees = trees
        index = np.empty((len(shapes), width), np.int16)
        resid = np.empty((len(shapes), width), np.float32)
        if self._lib.costlearn_shortlist_build(shapes.ctypes.data, len(shapes), tiles, width, ref,
                                               index.ctypes.data, resid.ctypes.data) != 0:
            raise ValueError(f"shortlist build refused tiles={tiles}, width={width}")
        return index, resid
