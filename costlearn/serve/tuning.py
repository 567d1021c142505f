"""Filter, then measure; and the tuning database: composes a
:class:`~costlearn.serve.predictor.Predictor`, a backend and a
:class:`~costlearn.serve.tuning_db.TuningDB` (design.md, "Predictor").

- *Filter, then measure*: the model's top k configs for a problem (and the
  vendor library where the family has one: the floor) are
  measured on the local device with the collection's protocol
  (:func:`costlearn.collect.loop.measure_rows`, correctness check included) and
  the fastest wins (``chosen_by="measured"``). Measuring fewer where the
  vendor model is sure of the answer (:attr:`costlearn.Prediction.sure`) was
  tried and not kept: on the A100's logs left out, those problems' best of
  the first tile and cuBLAS lost 0.8-2.7 %, of the first three 0.2-0.8 %.
- *Tuning database*: a measured answer is recorded and returned as is from
  then on; with a database but no measuring, predictions are recorded too
  and never replace a measured entry.
"""
from __future__ import annotations

import os
import threading
import uuid
import warnings
import weakref
from pathlib import Path

import numpy as np

from costlearn.collect.backends import get_backend
from costlearn.collect.loop import measure_rows
from costlearn.collect.measure import Protocol
from costlearn.serve.prediction import Prediction
from costlearn.core.problem import Problem
from costlearn.serve.tuning_db import TuningDB, TuningEntry, default_target, is_server_url
from costlearn.serve.tuning_db_server import ServerTuningDB, open_store
from costlearn.core.version import __version__

__all__ = ["tune", "Tuner", "local_backend", "open_tuning_db"]

_LOCK = threading.Lock()
_BACKEND: dict = {}
"""The local backend per kernel family (:func:`local_backend`)."""
_DBS: dict = {}


def local_backend(family: str = "gemm"):
    """The local device's backend for ``family`` (``get_backend("auto",
    family=...)``: for ``gemm`` CUDA if present, else OpenCL), created once
    per process and family.

    Raises
    ------
    costlearn.collect.backends.BackendUnavailable
        If this machine has none that measures ``family``.
    """
    with _LOCK:
        if _BACKEND.get(family) is None:
            _BACKEND[family] = get_backend("auto", family=family)
        return _BACKEND[family]


def open_tuning_db(db):
    """A tuning database as given, or the one a path or ``postgresql://``
    URL names (None: ``$COSTLEARN_TUNING_DB``, else the default path),
    opened once per process (:func:`costlearn.serve.tuning_db.open_store`).

    Raises
    ------
    TypeError
        If ``db`` is neither a path, a URL, a tuning database nor None.
    """
    if isinstance(db, (TuningDB, ServerTuningDB)):
        return db
    if db is not None and not isinstance(db, (str, os.PathLike)):
        raise TypeError(f"tuning_db={db!r}; must be a path, a postgresql:// URL, a "
                        "costlearn.serve.tuning_db.TuningDB or None")
    if db is None:
        db = default_target()
    key = db if is_server_url(db) else str(Path(db).resolve())
    with _LOCK:
        if key not in _DBS:
            _DBS[key] = open_store(key, create=True)
        return _DBS[key]


class Tuner:
    """Filter-then-measure and the tuning database for one predictor.

    Parameters
    ----------
    predictor : Predictor
    db : TuningDB
    backend : Backend, optional
        Where to measure (needed only when measuring).
    """

    def __init__(self, predictor, db, backend=None):
        self.predictor, self.db, self.backend = predictor, db, backend
        self._kernels: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def tune(self, problem: Problem, *, top_k: int = 5, measure_top_k: int = 0, running_on=None) -> Prediction:
        """The predictor's answer through the tuning database, measuring its
        top ``measure_top_k`` on the backend when asked (and not measured
        before): its top ``measure_top_k`` tile configs and, where the
        family has one, the vendor library beside them (the vendor's place in
        the ranking takes none of the k).

        Raises
        ------
        RuntimeError
            If measuring was asked and none of the configs measured correctly.
        """
        pred, db, backend = self.predictor, self.db, self.backend
        if measure_top_k and backend is None:
            raise ValueError("measuring needs a backend")
        if running_on is None and backend is not None:
            running_on = backend.spec
        where = backend.spec if backend is not None else (running_on or pred.spec)
        p = pred.predict(problem, max(top_k, measure_top_k + (pred.vendor_index is not None)), running_on)
        fam = pred.artifact.family
        hit = _get(db, problem, fam.name, where.slug, fam.template_hash, spec=where)
        if hit is not None and hit.chosen_by == "predicted" and not hit.source.startswith(pred.source):
            hit = None                  # another model's prediction: this model answers for itself
        if hit is not None and (hit.chosen_by == "measured" or not measure_top_k):
            measured = tuple(sorted(hit.times_us.items(), key=lambda kv: kv[1])) if hit.chosen_by == "measured" else ()
            return p._replace(config=hit.config, time_us=hit.time_us, top_k=p.top_k[:top_k],
                              chosen_by=hit.chosen_by, measured_us=measured, from_tuning_db=True,
                              tuning_db_source=hit.source)
        if not measure_top_k:
            _put(db, TuningEntry(problem, fam.name, where.slug, fam.template_hash, __version__, p.config,
                                 "predicted", p.time_us, {c.config_id: t for c, t in p.top_k}, pred.source))
            return p._replace(top_k=p.top_k[:top_k])
        if pred.vendor_index is None:
            configs = [c for c, _ in p.top_k[:measure_top_k]]
        else:               # the top k tile configs, and the vendor: a measured pick never loses to it
            vendor = pred.configs[pred.vendor_index]
            configs = [c for c, _ in p.top_k if c != vendor][:measure_top_k] + [vendor]
        times, tied = self._measure(problem, configs)
        if not times:
            raise RuntimeError(f"none of the model's top {measure_top_k} configs for {problem} measured "
                               f"correctly on {backend.spec.name}; nothing written to {db.path}")
        measured = tuple(sorted(times.items(), key=lambda kv: kv[1]))
        best_id, best_us = measured[0]
        best = next(c for c in configs if c.config_id == best_id)
        _put(db, TuningEntry(problem, fam.name, where.slug, fam.template_hash, __version__, best, "measured",
                             best_us, times, pred.source + f", measured top {measure_top_k}"))
        return p._replace(config=best, time_us=best_us, top_k=p.top_k[:top_k], chosen_by="measured",
                          measured_us=measured, tied_with=tuple(c for c in tied if c != best_id))

    def _measure(self, problem: Problem, configs) -> tuple[dict, list]:
        """Median times (µs) of the valid measurements of ``configs`` on
        ``problem``, by config id, and the ids tied with the fastest: the
        candidates are re-timed, interleaved, until the fastest's interval
        overlaps no other's or the cap is reached (the protocol of
        :mod:`costlearn.collect.measure`, ``until="separated"``)."""
        backend = self.backend
        compiled = self._kernels.setdefault(backend, {})
        epi = problem.epilogue                     # a kernel is compiled per (config, epilogue)
        missing = [c for c in configs if (c.config_id, epi) not in compiled]
        if missing:
            for kern in backend.compile_many(missing, problem.dtype, epilogue=epi):
                compiled[kern.config.config_id, epi] = kern
        kernels = [compiled[c.config_id, epi] for c in configs]
        rows = measure_rows(backend, kernels, problem, Protocol(max_rounds=SEPARATE_MAX_ROUNDS),
                            backend.launch_overhead_us(), backend.provenance(), uuid.uuid4().hex[:12],
                            repeat_index=None, until="separated")
        ok = [r for r in rows if r["status"] == "ok" and np.isfinite(r["time_us"]) and r["time_us"] > 0]
        return {r["config_id"]: float(r["time_us"]) for r in ok}, [r["config_id"] for r in ok if r["tied_best"]]


SEPARATE_MAX_ROUNDS = 40
"""Cap on the rounds filter-then-measure spends separating its winner (each
round times every candidate still overlapping it once)."""

_TUNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each live predictor's tuners, by (database, backend). A tuner reaches its
predictor through a weak proxy, so a predictor nothing else holds (after
:func:`costlearn.serve.predictor.clear_cache`) frees its tuners and their
compiled kernels."""


def tune(predictor, problem: Problem, *, top_k: int = 5, measure_top_k: int = 0, running_on=None,
         backend=None, tuning_db=None) -> Prediction:
    """:meth:`Tuner.tune` with the process's tuner for (predictor, database,
    backend); with ``measure_top_k`` and no backend, the local device's.

    Raises
    ------
    TypeError
        If ``tuning_db`` has the wrong type.
    costlearn.collect.backends.BackendUnavailable
        If measuring is asked and this machine has no device.
    RuntimeError
        If none of the measured configs measured correctly.
    """
    db = open_tuning_db(tuning_db)
    if measure_top_k and backend is None:
        backend = local_backend(predictor.artifact.family.name)
    key = (id(db), id(backend))                  # unique while the tuner holds both
    with _LOCK:
        tuners = _TUNERS.setdefault(predictor, {})
        tuner = tuners.get(key)
        if tuner is None:
            tuner = tuners[key] = Tuner(weakref.proxy(predictor), db, backend)
    return tuner.tune(problem, top_k=top_k, measure_top_k=measure_top_k, running_on=running_on)


def _get(db, *args, **kwargs):
    """Look up in the tuning database; a database that cannot be read (a
    server down or unreachable, a file locked) costs the lookup, not the
    answer: warn, and answer as on a miss."""
    try:
        return db.get(*args, **kwargs)
    except OSError as e:
        warnings.warn(f"costlearn: the tuning database was not read, answering from the model: {e}",
                      RuntimeWarning, stacklevel=4)
        return None


def _put(db, entry) -> None:
    """Record in the tuning database; a database that cannot be written
    (read-only, locked) costs the record, not the answer: warn."""
    try:
        db.put(entry)
    except OSError as e:
        warnings.warn(f"costlearn: not recorded in the tuning database: {e}", RuntimeWarning, stacklevel=4)
