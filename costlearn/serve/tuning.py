"""Filter, then measure; and the tuning database: composes a
:class:`~costlearn.serve.predictor.Predictor`, a backend and a
:class:`~costlearn.serve.tuning_db.TuningDB` (design.md, "Predictor").

- *Filter, then measure*: the model's top k configs for a problem (and the
  vendor library where the family has one: the floor) are
  measured on the local device with the collection's protocol
  (:func:`costlearn.collect.rows.measure_rows`, correctness check included) and
  the fastest wins (``chosen_by="measured"``). Where the vendor model is
  sure of the answer (:attr:`costlearn.Prediction.sure`) no fewer are
  measured: on logs the model never saw, those problems' best of the first
  tile config (or the first three) and cuBLAS still loses to the best
  measured, since the estimate judges tile against vendor, not which tile
  (docs/results.md, "Triton's matmul on real A100 measurements").
- *Tuning database*: a measured answer is recorded and returned as is from
  then on; with a database but no measuring, predictions are recorded too
  and never replace a measured entry.
"""
from __future__ import annotations

import math
import os
import threading
import uuid
import weakref
from pathlib import Path

import numpy as np

from costlearn.collect.backends import get_backend
from costlearn.collect.rows import measure_rows
from costlearn.collect.protocol import Protocol
from costlearn.serve.prediction import Prediction
from costlearn.core.problem import Problem
from costlearn.families import get_family
from costlearn.serve.fleet import LEASE_S, Measurement, decide, environment, host_name
from costlearn.serve.spool import Spool
from costlearn.serve.tuning_db import TuningDB, TuningDBError, TuningEntry, default_target, is_server_url, key_values
from costlearn.serve.tuning_db_server import ServerTuningDB, open_store
from costlearn.core.version import __version__
from costlearn.core.errors import warn

__all__ = ["tune", "Tuner", "local_backend", "open_tuning_db", "spool_for", "read_entry"]

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
            _DBS[key] = _open_or_read(key)
        return _DBS[key]


def _open_or_read(target):
    """The store ``target`` names, for recording; a file this user may read
    but not write (a shared, read-only copy) is opened read-only, warning:
    its answers are used, nothing is recorded."""
    try:
        return open_store(target, create=True)
    except TuningDBError:
        raise
    except OSError as e:
        writable = os.access(target, os.W_OK) and os.access(os.path.dirname(target), os.W_OK)
        if is_server_url(target) or writable or not os.access(target, os.R_OK):
            raise
        warn(f"costlearn: the tuning database {target} cannot be written ({e}); reading it, recording nothing",
             RuntimeWarning)
        return open_store(target, read_only=True)


_SPOOLS: dict = {}
_SPOOLS_LOCK = threading.Lock()       # not _LOCK: tune() holds that while it makes a Tuner


def spool_for(db) -> Spool:
    """The process's spool for the tuning database ``db`` (by its file's
    resolved path, or its redacted URL)."""
    target = db.path if isinstance(db, ServerTuningDB) else str(Path(db.path).resolve())
    with _SPOOLS_LOCK:
        if target not in _SPOOLS:
            _SPOOLS[target] = Spool(target)
        return _SPOOLS[target]


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
        self.holder = f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        """This tuner's name on the leases it takes."""
        self.spool = spool_for(db)
        self.template_hash = (backend.provenance().get("template_hash") or "") if backend is not None else ""
        """The kernel template the backend times (a replay's: its recording's), which keys this tuner's entries;
        "" where the backend names none or there is no backend: the family's own."""

    def tune(self, problem: Problem, *, top_k: int = 5, measure_top_k: int = 0, running_on=None) -> Prediction:
        """The predictor's answer through the tuning database, measuring its
        top ``measure_top_k`` on the backend when asked (and not measured
        before): its top ``measure_top_k`` tile configs and, where the
        family has one, the vendor library beside them (the vendor's place in
        the ranking takes none of the k).

        A fleet measures a key once: the host that takes the key's lease
        measures; another asking meanwhile answers from the model (saying so
        in ``tuning_db_note``) and reads the measured answer once it lands.
        The measurements of every host decide the answer
        (:func:`costlearn.serve.fleet.decide`). A database that cannot be
        read or written costs the lookup or the record, never the answer:
        measurements taken meanwhile are spooled on this host
        (:class:`costlearn.serve.spool.Spool`) and delivered when it can
        take them.

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
        template = self.template_hash or fam.template_hash
        key = (problem, fam.name, where.slug, template)
        hit, away = read_entry(db, *key, spec=where)
        if away is None and self.spool.deliver(db):      # what was just delivered may answer this very problem
            hit, away = read_entry(db, *key, spec=where)
        if hit is not None and hit.chosen_by == "predicted" and not hit.source.startswith(pred.source):
            hit = None                  # another model's prediction: this model answers for itself
        if hit is not None and (hit.chosen_by == "measured" or not measure_top_k):
            measured = tuple(sorted(hit.times_us.items(), key=lambda kv: kv[1])) if hit.chosen_by == "measured" else ()
            return p._replace(config=hit.config, time_us=hit.time_us, top_k=p.top_k[:top_k],
                              chosen_by=hit.chosen_by, measured_us=measured, from_tuning_db=True,
                              tuning_db_source=hit.source, tied_with=_tied(db, key, hit) if measured else ())
        note = f"the tuning database was not read ({away}); answered from the model" if away else ""
        if not measure_top_k:
            if away is None:
                _put(db, TuningEntry(problem, fam.name, where.slug, template, __version__, p.config,
                                     "predicted", p.time_us, {c.config_id: t for c, t in p.top_k}, pred.source))
            return p._replace(top_k=p.top_k[:top_k], tuning_db_note=note)
        if away is None and not _lease(db, *key, self.holder):
            return p._replace(top_k=p.top_k[:top_k], tuning_db_note=(
                "another host is measuring this problem (it holds the tuning database's lease on it); answered "
                "from the model"))
        try:
            return self._measured(p, key, measure_top_k, top_k)
        finally:
            if away is None:
                _free(db, *key, self.holder)

    def _measured(self, p: Prediction, key: tuple, measure_top_k: int, top_k: int) -> Prediction:
        """Measure the model's top ``measure_top_k`` (and the vendor) for
        ``p``'s problem, record the measurements (spool them where the
        database cannot take them) and answer what they decide."""
        pred, db, backend = self.predictor, self.db, self.backend
        problem, family = key[0], key[1]
        if pred.vendor_index is None:
            configs = [c for c, _ in p.top_k[:measure_top_k]]
        else:               # the top k tile configs, and the vendor: a measured pick never loses to it
            vendor = pred.configs[pred.vendor_index]
            configs = [c for c, _ in p.top_k if c != vendor][:measure_top_k] + [vendor]
        measurements = self._measure(problem, configs)
        if not measurements:
            raise RuntimeError(f"none of the model's top {measure_top_k} configs for {problem} measured "
                               f"correctly on {backend.spec.name}; nothing written to {db.path}")
        source, note = pred.source + f", measured top {measure_top_k}", ""
        try:
            _, verdict = db.record(*key, measurements, source=source)
        except OSError as e:
            verdict = decide(measurements, pred.artifact.family.vendor_config_id)
            note = f"measured here; the tuning database could not take it ({e})" + self._spooled(key, measurements,
                                                                                                   source, e)
            warn(f"costlearn: {note}", RuntimeWarning)
        best = ({c.config_id: c for c in configs}.get(verdict.config_id)      # another host's measured winner:
                or get_family(family).config_from_id(verdict.config_id))    # by its id
        measured = tuple(sorted(verdict.times_us.items(), key=lambda kv: kv[1]))
        return p._replace(config=best, time_us=verdict.times_us[verdict.config_id], top_k=p.top_k[:top_k],
                          chosen_by="measured", measured_us=measured, tied_with=verdict.tied, tuning_db_note=note)

    def _spooled(self, key: tuple, measurements: list, source: str, error: OSError) -> str:
        """Spool measurements the database did not take, unless it never
        will (a role or store that may only read: PermissionError); the
        words that say what became of them."""
        if isinstance(error, PermissionError):
            return ": not kept (this role or store may only read)"
        try:
            return f"; spooled as {self.spool.add(key_values(*key, __version__), measurements, source)}, " \
                   "delivered when it can"
        except OSError as spool_error:
            return f", nor could the spool ({spool_error}): not kept"

    def _measure(self, problem: Problem, configs) -> list[Measurement]:
        """The valid measurements of ``configs`` on ``problem``, one
        :class:`~costlearn.serve.fleet.Measurement` a config (one tuning id
        for them all): the candidates are re-timed, interleaved, until the
        fastest's interval overlaps no other's or the cap is reached (the
        protocol of :mod:`costlearn.collect.measure`, ``until="separated"``)."""
        backend = self.backend
        compiled = self._kernels.setdefault(backend, {})
        epi = problem.epilogue                     # a kernel is compiled per (config, epilogue)
        missing = [c for c in configs if (c.config_id, epi) not in compiled]
        if missing:
            for kern in backend.compile_many(missing, problem.dtype, epilogue=epi):
                compiled[kern.config.config_id, epi] = kern
        kernels = [compiled[c.config_id, epi] for c in configs]
        provenance = backend.provenance()
        tuning_id = uuid.uuid4().hex
        rows = measure_rows(backend, kernels, problem, Protocol(max_rounds=SEPARATE_MAX_ROUNDS),
                            backend.launch_overhead_us(), provenance, tuning_id[:12],
                            repeat_index=None, until="separated")
        env, host = environment(provenance), host_name()
        out = []
        for r in rows:
            q = (r["time_us_p20"], r["time_us"], r["time_us_p80"])
            if r["status"] != "ok" or not all(np.isfinite(q)) or not 0 < q[0] <= q[1] <= q[2]:
                continue
            clocks = {c: (bool(r[c]) if c == "throttled" else float(r[c])) for c in _CLOCKS
                      if c in r and (c == "throttled" or np.isfinite(r[c]))}
            rse = float(r["rse"]) if np.isfinite(r["rse"]) and r["rse"] >= 0 else math.inf
            out.append(Measurement(r["config_id"], *map(float, q), int(r["n_samples"]), host, tuning_id, clocks, env,
                                   rse=rse))
        return out


_CLOCKS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "throttled")
"""The clock columns of a measured row kept with each measurement."""


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


def read_entry(db, *args, **kwargs) -> tuple:
    """Look up in the tuning database: ``(entry or None, None)``; a database
    that cannot be read (a server down or unreachable, a file locked) costs
    the lookup, not the answer: warn, and ``(None, why)``."""
    try:
        return db.get(*args, **kwargs), None
    except OSError as e:
        warn(f"costlearn: the tuning database was not read, answering from the model: {e}", RuntimeWarning)
        return None, str(e)


def _tied(db, key: tuple, entry) -> tuple:
    """The configs tied with a measured entry's, as the host that measured
    it was told (:meth:`~costlearn.serve.tuning_store.TuningStore.verdict`);
    none where the store cannot say: no measurements (an older store), a
    verdict that moved on since the entry was read (another host's tuning
    landed between the two reads), a store away."""
    try:
        verdict = db.verdict(*key)
    except OSError:
        return ()
    return verdict.tied if verdict is not None and verdict.config_id == entry.config.config_id else ()


def _lease(db, problem, family, device, template_hash, holder) -> bool:
    """Take the key's lease (:data:`costlearn.serve.fleet.LEASE_S`); a
    database that cannot take it (away since the lookup) does not stop this
    host measuring: its measurements are spooled."""
    try:
        return db.take_lease(problem, family, device, template_hash, holder, seconds=LEASE_S)
    except OSError:
        return True


def _free(db, problem, family, device, template_hash, holder) -> None:
    """Free the key's lease; one that cannot be freed expires."""
    try:
        db.free_lease(problem, family, device, template_hash, holder)
    except OSError:
        pass


def _put(db, entry) -> None:
    """Record in the tuning database; a database that cannot be written
    (read-only, locked) costs the record, not the answer: warn."""
    try:
        db.put(entry)
    except OSError as e:
        warn(f"costlearn: not recorded in the tuning database: {e}", RuntimeWarning)
