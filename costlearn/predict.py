"""Predictor: rank a model's candidate configs for a shape, in microseconds,
and say when the answer is a guess (design.md, "Predictor")."""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import math
import numbers
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import __version__, native
from .codegen import TEMPLATE_HASH
from .device import DeviceSpec
from .features import CandidateFeatures
from .model import artifact as _artifact
from .model import forest as _forest
from .space import TileConfig, check_shape, next_pow2, tile_fits_problem

__all__ = ["Prediction", "Predictor", "predict_best", "clear_cache"]


@dataclass(frozen=True)
class Prediction:
    """Answer of :func:`predict_best`.

    Attributes
    ----------
    config : TileConfig
        The chosen config: the lowest predicted time, or the fastest
        measured (``chosen_by == "measured"``).
    time_us : float
        Its time, microseconds: predicted, or the measured median.
    top_k : tuple of (TileConfig, float)
        The model's k best configs with predicted times in microseconds,
        best first.
    ood : bool
        True when the shape or the device is outside what the model was
        trained on; ``ood_reasons`` says why.
    ood_reasons : tuple of str
    m, n, k : int
    dtype : str
    device : str
        Device the model was trained on (its folder name).
    chosen_by : {"predicted", "measured"}
    measured_us : tuple of (str, float)
        Measured median times by config id, fastest first (empty unless
        measured, now or in an earlier run found in the tuning database).
    from_tuning_db : bool
        The answer came from the tuning database.
    """

    config: TileConfig
    time_us: float
    top_k: tuple
    ood: bool
    ood_reasons: tuple
    m: int
    n: int
    k: int
    dtype: str
    device: str
    chosen_by: str = "predicted"
    measured_us: tuple = ()
    from_tuning_db: bool = False


class Predictor:
    """Ranks the candidate configs of one model artifact, in microseconds.

    What makes a cold call cheap without changing its answer:

    - per-config features computed once (:class:`~costlearn.features.CandidateFeatures`);
      per call only the shape-dependent columns, vectorised over candidates;
    - the ensemble as flat arrays (:mod:`costlearn.model.forest`);
    - one C call per shape (``costlearn_rank`` in ``costlearn/_native.c``):
      features, both cascade stages, the sort, and the nearest training
      shape for the OOD check; numpy, the flat forest or XGBoost's
      ``inplace_predict`` where no C compiler is available (the reference
      the tests hold the C path equal to);
    - feasibility masks cached by the next powers of two of the extents;
    - a two-stage cascade: the first ``cascade_trees`` trees score every
      feasible candidate, the ``cascade_keep`` best of those get the rest of
      the trees. Both numbers are calibrated when the model loads, on
      training shapes: the smallest cost at which the full model's top 5 is
      kept on every calibration shape. ``scripts/bench_predict.py`` checks
      the choice against the full model on 1,000 unseen shapes.

    Repeated shapes are answered from a per-predictor cache. Everything runs
    on the calling thread (XGBoost pinned to one thread).

    Parameters
    ----------
    folder : path
        ``models/<device>/<dtype>/``.
    cascade : bool
        Use the calibrated cascade (default); False evaluates every tree on
        every feasible candidate.

    Attributes
    ----------
    cascade_trees, cascade_keep : int
        Calibrated cascade (0, 0 when off).
    backend : str
        ``"c"`` (flat forest) or ``"xgboost"`` (fallback).

    Raises
    ------
    costlearn.model.artifact.ArtifactError
        If the artifact is missing or does not match this code.
    """

    RESULT_CACHE_SIZE = 1 << 16

    def __init__(self, folder, *, cascade: bool = True):
        self.artifact = _artifact.load(folder)
        self.spec: DeviceSpec = self.artifact.spec
        self.dtype = self.artifact.dtype
        self.device = Path(folder).resolve().parent.name
        model = self.artifact.model
        side = self.artifact.sidecar
        cands = self.artifact.candidates.reset_index(drop=True)
        self._configs = self.artifact.candidate_configs()
        self._bm, self._bn, self._bk = (cands[c].to_numpy(np.int64) for c in ("block_m", "block_n", "block_k"))
        self._features = CandidateFeatures(model.feature_set, cands, self.spec, self.dtype)
        self.envelope = self.artifact.envelope
        self._booster = model.booster_
        self._booster.set_param({"nthread": 1})
        self._sign = -1.0 if (model.params and model.params.objective == "rank_pairwise") else 1.0
        self._forest = None
        self._sha = side.get("model_sha256") or hashlib.sha256(
            (self.artifact.path / "model.ubj").read_bytes()).hexdigest()
        if native.library() is not None:
            try:
                self._forest = _forest.FlatForest.cached(self._booster, self._sha)
            except _forest.ForestError as e:
                warnings.warn(f"costlearn: {folder}: {e}; using xgboost inplace_predict", RuntimeWarning,
                              stacklevel=2)
        if self._forest is not None:
            # The flat forest must give XGBoost's margins; a cache that does not
            # (damaged, or written by other code) is reported and rebuilt.
            shapes = self.envelope.shapes
            probe = np.concatenate([self._features(*(int(v) for v in shapes[i * len(shapes) // 4]))
                                    for i in range(4)])
            ref = np.asarray(self._booster.inplace_predict(probe, validate_features=False), np.float64)
            if not np.abs(self._forest.predict_margin(probe) - ref).max() <= 1e-3:
                warnings.warn(f"costlearn: the cached flat forest of {folder} disagrees with its XGBoost model; "
                              "rebuilt it", RuntimeWarning, stacklevel=2)
                self._forest = _forest.FlatForest.cached(self._booster, self._sha, rebuild=True)
        self.backend = "c" if self._forest is not None else "xgboost"
        self._identity_reasons = []
        if side.get("template_hash") != TEMPLATE_HASH:
            self._identity_reasons.append(
                f"kernel template {side.get('template_hash')} at training, {TEMPLATE_HASH} now")
        if side.get("costlearn_version") != __version__:
            self._identity_reasons.append(
                f"trained with costlearn {side.get('costlearn_version')}, running {__version__}")
        self._results: dict = {}
        self._masks: dict = {}
        self._kernels: dict = {}
        self._tls = threading.local()
        self._native = self._native_setup()
        self.cascade_trees, self.cascade_keep = self._calibrate() if cascade else (0, 0)

    # -- scoring ---------------------------------------------------------

    def _feasible(self, m: int, n: int, k: int) -> np.ndarray:
        """Candidates whose block tile does not exceed the problem (the
        ``block_tile_exceeds_problem`` rule of ``costlearn.space``), bool,
        shape (C,). The rule depends on each extent only through its next
        power of two, so masks are cached by that triple (read-only)."""
        key = (next_pow2(m), next_pow2(n), next_pow2(k))
        mask = self._masks.get(key)
        if mask is None:
            mask = tile_fits_problem(self._bm, self._bn, self._bk, m, n, k, warp_size=self.spec.warp_size)
            mask.flags.writeable = False
            self._masks[key] = mask
        return mask

    def _score(self, X: np.ndarray, first: int = 0, last: int | None = None) -> np.ndarray:
        """Sum of trees [first, last) per row (the base score added when
        first == 0), float64; lower is faster after :attr:`_sign`."""
        if self._forest is not None:
            out = self._forest.partial_sum(X, first, last)
            return out + self._forest.base_score if first == 0 else out
        last = self._booster.num_boosted_rounds() if last is None else last
        margin = np.asarray(self._booster.inplace_predict(X, iteration_range=(first, last),
                                                          validate_features=False), np.float64)
        return margin

    def _native_setup(self):
        """The constant part of ``costlearn_rank``'s context (``_native.c``),
        or None where the C path does not apply (no compiler, or a feature
        set without a C twin)."""
        f, forest = self._features, self._forest
        if forest is None or not getattr(f, "_fast", False) or f._lib is None:
            return None
        env = self.envelope
        keep_alive = (np.ascontiguousarray(f._template), env._points)
        s_bytes, peak, bw = f._c_scalars
        const = dict(template=keep_alive[0].ctypes.data, n_cands=f.n_candidates, n_features=len(f.names),
                     block=f._c_block.ctypes.data, slots=f._c_slots.ctypes.data, tile_occ=f._c_occ.ctypes.data,
                     s=s_bytes, peak=peak, bw=bw, cols=f._c_cols.ctypes.data,
                     nodes=forest._ptrs[0], leaf_value=forest._ptrs[1], roots=forest._ptrs[2],
                     depths=forest._ptrs[3], n_trees=forest.n_trees, base=forest.base_score, sign=self._sign,
                     env_points=env._points.ctypes.data, n_env=len(env._points))
        return f._lib.costlearn_rank, const, keep_alive

    def _context(self):
        """This thread's ``costlearn_rank`` context (scratch arrays are per
        thread) and its output arrays."""
        ctx = getattr(self._tls, "ctx", None)
        if ctx is None:
            from .envelope import _EMBED
            from .native import RankContext
            c, f = self._features.n_candidates, len(self._features.names)
            arrays = dict(X=np.empty((c, f), np.float32), Xk=np.empty((c, f), np.float32),
                          work=np.empty(2 * c, np.float64), part=np.empty(c, np.float64),
                          rest=np.empty(c, np.float64), row_cand=np.empty(c, np.int32),
                          out_index=np.empty(c, np.int32), out_score=np.empty(c, np.float64))
            rc = RankContext(**self._native[1], **{k: a.ctypes.data for k, a in arrays.items()})
            rc.embed[:] = [float(v) for v in _EMBED.ravel()]
            ctx = self._tls.ctx = (rc, ctypes.byref(rc), arrays["out_index"], arrays["out_score"], arrays)
        return ctx

    def _ranked(self, m: int, n: int, k: int, mask: np.ndarray, need: int, cascade: bool = True):
        """Candidate indices (into :attr:`_configs`) best first, their
        predicted log2 times (for the ``mask`` candidates; with the cascade
        only the ``cascade_keep + need - 5`` survivors of stage one), and the
        nearest training shape (index, distance) or None. One C call
        (``costlearn_rank``) where available; numpy and the flat forest (or
        XGBoost) otherwise, which is the reference the tests compare the C
        path to."""
        keep = self.cascade_keep + max(0, min(need, len(self._configs)) - 5)
        if self._native is not None:
            rc, ref, out_index, out_score, _ = self._context()
            got = self._native[0](m, n, k, mask.ctypes.data, self.cascade_trees if cascade else 0, keep, ref)
            return out_index[:got].astype(np.int64), out_score[:got].copy(), \
                (rc.nearest, math.sqrt(rc.nearest_d2))
        idx, log2_t = self._ranked_numpy(m, n, k, mask, keep, cascade)
        return idx, log2_t, None

    def _ranked_numpy(self, m: int, n: int, k: int, mask: np.ndarray, keep: int, cascade: bool = True):
        """:meth:`_ranked` without ``costlearn_rank``."""
        idx = np.flatnonzero(mask)
        X = self._features(m, n, k)
        if len(idx) != len(X):
            X = X[idx]
        if cascade and self.cascade_trees and len(idx) > keep and self._forest is not None:
            first = self._score(X, 0, self.cascade_trees)
            part = np.argsort(self._sign * first, kind="stable")[:keep]     # ties: lower row, as in C
            log2_t = self._sign * (first[part] + self._score(np.ascontiguousarray(X[part]),
                                                             self.cascade_trees))
            idx = idx[part]
        else:
            log2_t = self._sign * self._score(X)
        order = np.argsort(log2_t, kind="stable")
        return idx[order], log2_t[order]

    CASCADE_GRID = ((4, 8, 16, 32), (8, 12, 16, 24, 32, 48))
    CALIBRATION_SHAPES = 400

    def _calibrate(self):
        """Smallest-cost (trees, keep) cascade that keeps the full model's
        top 5 on every calibration shape: up to :attr:`CALIBRATION_SHAPES`
        training shapes (seeded), ranked exactly as :meth:`predict_best`
        ranks them. Cached beside the flat forest, keyed by the model's
        sha256 (about 0.1 s the first time)."""
        if self._forest is None:
            return 0, 0
        path = native.cache_dir() / f"cascade-v1-{self._sha[:32]}.json"
        try:
            got = json.loads(path.read_text())
            trees, keep = got["trees"], got["keep"]
            if type(trees) is int and type(keep) is int and got.get("model_sha256") == self._sha \
                    and ((trees, keep) == (0, 0) or (0 < trees < self._forest.n_trees
                                                     and 5 <= keep <= len(self._configs))):
                return trees, keep
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass                        # unreadable, damaged or another model's: calibrate again
        grid_trees, grid_keep = self.CASCADE_GRID
        total = self._forest.n_trees
        shapes = np.asarray(self.envelope.shapes)
        pick = np.random.default_rng(0).permutation(len(shapes))[:self.CALIBRATION_SHAPES]
        cases = []
        for m, n, k in shapes[pick].tolist():
            mask = self._feasible(m, n, k)
            if mask.sum() <= min(grid_keep):
                continue
            X = np.ascontiguousarray(self._features(m, n, k)[mask])
            full = self._sign * self._score(X)
            cases.append((X, set(np.argsort(full, kind="stable")[:5].tolist())))
        best, best_cost = (0, 0), 1.0
        for t in grid_trees:
            if t >= total:
                continue
            firsts = [self._sign * self._score(X, 0, t) for X, _ in cases]
            for keep in grid_keep:
                if all(len(f) <= keep or top <= set(np.argsort(f, kind="stable")[:keep].tolist())
                       for f, (_, top) in zip(firsts, cases)):
                    cost = (t * len(self._configs) + (total - t) * keep) / (total * len(self._configs))
                    if cost < best_cost:
                        best, best_cost = (t, keep), cost
                    break
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"trees": best[0], "keep": best[1], "shapes": len(cases),
                                       "model_sha256": self._sha}))
            os.replace(tmp, path)
        except OSError:
            pass
        return best

    def rank(self, m: int, n: int, k: int, mask: np.ndarray | None = None) -> tuple[list[TileConfig], np.ndarray]:
        """Rank candidates for (m, n, k) with the full model (no cascade).

        Parameters
        ----------
        m, n, k : int
        mask : ndarray of bool, shape (C,), optional
            Candidates to rank; :meth:`_feasible` by default. Where no
            candidate's block tile fits the problem, all C are ranked (and
            :meth:`predict_best` flags the answer OOD).

        Returns
        -------
        configs : list of TileConfig
            Fastest predicted first.
        time_us : ndarray of float64, shape (len(configs),)
            Predicted times, microseconds.
        """
        m, n, k, _ = check_shape(m, n, k, self.dtype)
        if mask is not None:
            mask = np.ascontiguousarray(mask)
            if mask.dtype != bool or mask.shape != (len(self._configs),):
                raise ValueError(f"mask: need a bool array of shape ({len(self._configs)},), got {mask.dtype} "
                                 f"{mask.shape}")
        mask = self._feasible(m, n, k) if mask is None else mask
        if not mask.any():
            mask = np.ones(len(self._configs), bool)
        idx, log2_t, _ = self._ranked(m, n, k, mask, len(self._configs), cascade=False)
        return [self._configs[i] for i in idx], np.exp2(log2_t)

    def predict_best(self, m, n, k, *, top_k: int = 5, running_on: DeviceSpec | None = None,
                     measure_top_k: int = 0, backend=None, tuning_db=None) -> Prediction:
        """See :func:`costlearn.predict_best`."""
        if type(m) is int and type(n) is int and type(k) is int and type(top_k) is int and running_on is None \
                and type(measure_top_k) is int and measure_top_k == 0 and backend is None and tuning_db is None:
            hit = self._results.get((m, n, k, top_k, None))
            if hit is not None:
                return hit
        m, n, k, _ = check_shape(m, n, k, self.dtype)
        top_k = _check_count("top_k", top_k, 1)
        measure_top_k = _check_count("measure_top_k", measure_top_k, 0)
        if running_on is not None and not isinstance(running_on, DeviceSpec):
            raise TypeError(f"running_on={running_on!r}; must be a DeviceSpec (e.g. costlearn.preset('h200')) "
                            "or None")
        if backend is not None and not hasattr(backend, "spec"):
            raise TypeError(f"backend={backend!r}; must be a costlearn Backend (costlearn.backends.get_backend) "
                            "or None")
        if running_on is None and backend is not None:
            running_on = backend.spec
        if measure_top_k or tuning_db is not None:
            return self._tuned(m, n, k, top_k, running_on, measure_top_k, backend, tuning_db)
        return self._predict(m, n, k, top_k, running_on)

    def _tuned(self, m, n, k, top_k, running_on, measure_top_k, backend, tuning_db) -> Prediction:
        """predict_best through the tuning database, measuring the top
        ``measure_top_k`` on ``backend`` when asked (and not already
        measured)."""
        from .tuning_db import TuningEntry
        db = _tuning_db(tuning_db)
        if measure_top_k and backend is None:
            backend = _local_backend()
        where = backend.spec if backend is not None else (running_on or self.spec)
        pred = self._predict(m, n, k, max(top_k, measure_top_k), running_on)
        source = f"{self.device}/{self.dtype} model {self._sha[:12]}"
        hit = db.get(m, n, k, self.dtype, where.slug, TEMPLATE_HASH, spec=where)
        if hit is not None and hit.how == "predicted" and not hit.source.startswith(source):
            hit = None                  # another model's prediction: this model answers for itself
        if hit is not None and (hit.how == "measured" or not measure_top_k):
            measured = tuple(sorted(hit.times_us.items(), key=lambda kv: kv[1])) if hit.how == "measured" else ()
            return dataclasses.replace(pred, config=hit.config, time_us=hit.time_us, top_k=pred.top_k[:top_k],
                                       chosen_by=hit.how, measured_us=measured, from_tuning_db=True)
        if not measure_top_k:
            _put(db, TuningEntry(m, n, k, self.dtype, where.slug, TEMPLATE_HASH, __version__, pred.config,
                                 "predicted", pred.time_us, {c.config_id: t for c, t in pred.top_k}, source))
            return dataclasses.replace(pred, top_k=pred.top_k[:top_k])
        configs = [c for c, _ in pred.top_k[:measure_top_k]]
        times = self._measure(backend, (m, n, k), configs)
        if not times:
            raise RuntimeError(f"none of the model's top {measure_top_k} configs for {m}x{n}x{k} measured "
                               f"correctly on {backend.spec.name}; nothing written to {db.path}")
        measured = tuple(sorted(times.items(), key=lambda kv: kv[1]))
        best_id, best_us = measured[0]
        best = next(c for c in configs if c.config_id == best_id)
        _put(db, TuningEntry(m, n, k, self.dtype, where.slug, TEMPLATE_HASH, __version__, best, "measured",
                             best_us, times, source + f", measured top {measure_top_k}"))
        return dataclasses.replace(pred, config=best, time_us=best_us, top_k=pred.top_k[:top_k], chosen_by="measured",
                                   measured_us=measured)

    def _measure(self, backend, shape, configs) -> dict:
        """Median times (µs) of the valid measurements of ``configs`` on
        ``shape``, by config id (measurement protocol of costlearn.measure)."""
        import uuid

        from .collect import measure_rows
        from .measure import Protocol
        missing = [c for c in configs if (id(backend), c.config_id) not in self._kernels]
        if missing:
            for kern in backend.compile_many(missing, self.dtype):
                self._kernels[(id(backend), kern.config.config_id)] = kern
        kernels = [self._kernels[(id(backend), c.config_id)] for c in configs]
        rows = measure_rows(backend, kernels, shape, self.dtype, Protocol(), backend.launch_overhead_us(),
                            backend.provenance(), uuid.uuid4().hex[:12])
        return {r["config_id"]: float(r["time_us"]) for r in rows
                if r["status"] == "ok" and np.isfinite(r["time_us"]) and r["time_us"] > 0}

    def _predict(self, m: int, n: int, k: int, top_k: int, running_on) -> Prediction:
        mask = self._feasible(m, n, k)
        any_fits = bool(mask.any())
        if not any_fits:
            mask = np.ones(len(self._configs), bool)
        # Where nothing fits (tiny shapes, flagged OOD below) every candidate is
        # ranked with the full model: the cascade is calibrated on training
        # shapes, which always have fitting candidates.
        idx, log2_t, nearest = self._ranked(m, n, k, mask, top_k, cascade=any_fits)
        shape_reasons = self.envelope.reasons(m, n, k, nearest)
        if shape_reasons and any_fits and self.cascade_trees:
            # The cascade is calibrated inside the envelope; outside it the
            # full model ranks (so every path gives the full model's answer).
            idx, log2_t, _ = self._ranked(m, n, k, mask, top_k, cascade=False)
        reasons = shape_reasons + self._identity_reasons
        if not any_fits:
            reasons.append(f"no candidate's block tile fits {m}x{n}x{k}; ranked all "
                           f"{len(self._configs)} candidates anyway")
        if running_on is not None and running_on.name != self.spec.name:
            reasons.append(f"trained on {self.spec.name}, running on {running_on.name}")
        t = np.exp2(log2_t[:top_k])
        top = tuple((self._configs[i], float(v)) for i, v in zip(idx[:top_k].tolist(), t))
        pred = Prediction(config=top[0][0], time_us=top[0][1], top_k=top, ood=bool(reasons),
                          ood_reasons=tuple(reasons), m=m, n=n, k=k, dtype=self.dtype, device=self.device)
        if running_on is None:
            if len(self._results) >= self.RESULT_CACHE_SIZE:
                self._results.clear()
            self._results[(m, n, k, top_k, None)] = pred
        return pred


def _put(db, entry) -> None:
    """Record in the tuning database; a database that cannot be written
    (read-only, locked) costs the record, not the answer: warn."""
    try:
        db.put(entry)
    except OSError as e:
        warnings.warn(f"costlearn: not recorded in the tuning database: {e}", RuntimeWarning, stacklevel=4)


def _check_count(name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name}={v!r} ({type(v).__name__}); must be an int >= {lo}")
    if v < lo:
        raise ValueError(f"{name}={v!r}; must be an int >= {lo}")
    return int(v)


_BACKEND = None
_DBS: dict = {}


def _tuning_db(db):
    """A TuningDB as given, or the one for a path (None: the default path),
    opened once per process."""
    from .tuning_db import TuningDB, default_path
    if isinstance(db, TuningDB):
        return db
    if db is not None and not isinstance(db, (str, os.PathLike)):
        raise TypeError(f"tuning_db={db!r}; must be a path, a costlearn.tuning_db.TuningDB or None")
    key = str(Path(db).resolve() if db is not None else default_path().resolve())
    with _LOCK:
        if key not in _DBS:
            _DBS[key] = TuningDB(key)
        return _DBS[key]



def _local_backend():
    """The local device's backend (CUDA if present, else OpenCL), created
    once per process."""
    global _BACKEND
    with _LOCK:
        if _BACKEND is None:
            from .backends import get_backend
            _BACKEND = get_backend("auto")
        return _BACKEND


_CACHE: dict = {}
_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget loaded predictors (after retraining in the same process)."""
    with _LOCK:
        _CACHE.clear()


def _resolve(device, dtype: str, models_dir) -> Path:
    if models_dir is not None and not isinstance(models_dir, (str, Path)):
        raise TypeError(f"models_dir={models_dir!r}; must be a path (str or pathlib.Path) or None")
    root = Path(models_dir) if models_dir is not None else _artifact.default_models_dir()
    have = _artifact.list_models(root)
    if isinstance(device, DeviceSpec):
        device = device.slug
    if device is None:
        devs = sorted({d for d, t in have if t == dtype})
        if len(devs) == 1:
            device = devs[0]
        else:
            raise ValueError(f"device=None is ambiguous: models for dtype {dtype!r} exist for {devs} "
                             f"in {str(root)!r}; pass device=<one of them>" if devs else
                             f"no model for dtype {dtype!r} in {str(root)!r}; train one with "
                             "`costlearn train` (models present: "
                             f"{[f'{d}/{t}' for d, t in have] or 'none'})")
    if not isinstance(device, str):
        raise TypeError(f"device={device!r} ({type(device).__name__}); must be a str or DeviceSpec")
    if (device, dtype) not in have:
        raise ValueError(f"no model for device={device!r}, dtype={dtype!r} in {str(root)!r}; "
                         f"models present: {[f'{d}/{t}' for d, t in have] or 'none'}")
    return root / device / dtype


def predict_best(M, N, K, dtype: str = "float32", device=None, *, top_k: int = 5,
                 models_dir=None, running_on: DeviceSpec | None = None, measure_top_k: int = 0,
                 backend=None, tuning_db=None) -> Prediction:
    """Predict the fastest tile config for C[M,N] = A[M,K] @ B[K,N].

    A shape seen before in the process is answered from a cache (about a
    microsecond); an unseen one costs about 0.1 ms (``scripts/
    bench_predict.py`` measures both).

    Parameters
    ----------
    M, N, K : int
        Problem extents, each >= 1 (Python or numpy integers; not bool or
        float).
    dtype : {"float32"}
        Element type.
    device : str or DeviceSpec, optional
        Model to use: a device folder name under the models directory (e.g.
        ``"h200"``), or a DeviceSpec whose slug names it. Default: the only
        model present for ``dtype``.
    top_k : int
        Length of :attr:`Prediction.top_k`.
    models_dir : path, optional
        Model store; ``$COSTLEARN_MODELS`` or the source tree's ``models/``
        by default.
    running_on : DeviceSpec, optional
        The device the kernel will run on; a different device name than the
        model's is an OOD reason.
    measure_top_k : int
        0 (default): predict only. k >= 1: *filter, then measure*: measure
        the model's top k on ``backend`` (the local device by default) with
        costlearn's measurement protocol, return the fastest
        (``chosen_by="measured"``) and write it to the tuning database. A
        shape already measured there is not measured again.
    backend : costlearn.backends.Backend, optional
        Where to measure; ``get_backend("auto")`` by default. Its device is
        also ``running_on`` when that is None.
    tuning_db : path or costlearn.tuning_db.TuningDB, optional
        Tuning database to consult first and write to (with
        ``measure_top_k`` the default database,
        :func:`costlearn.tuning_db.default_path`, is used when None). A
        stored measured config is returned as is; a stored config that is no
        longer feasible is ignored.

    Returns
    -------
    Prediction

    Raises
    ------
    TypeError
        If an extent is not an integer (bool and float included), or an
        argument has the wrong type.
    ValueError
        If an extent is < 1 or >= 2**31, ``dtype`` is unknown, ``top_k`` <
        1, ``measure_top_k`` < 0, or there is no model for ``device`` (the
        message lists the models present).
    RuntimeError
        If ``measure_top_k`` is set and none of the configs measured
        correctly.
    costlearn.model.artifact.ArtifactError
        If the model does not match this code.

    Examples
    --------
    >>> import costlearn
    >>> p = costlearn.predict_best(1, 4096, 4096, device="h200")  # doctest: +SKIP
    >>> p.config.config_id, p.time_us, p.ood                      # doctest: +SKIP
    """
    # Hot path: a shape this process has answered, plain ints, no options.
    if type(M) is int and type(N) is int and type(K) is int and type(top_k) is int and running_on is None \
            and type(measure_top_k) is int and measure_top_k == 0 and backend is None and tuning_db is None \
            and models_dir is None and (device is None or type(device) is str):
        pred = _CACHE.get((device, dtype, models_dir))
        if pred is not None:
            hit = pred._results.get((M, N, K, top_k, None))
            if hit is not None:
                return hit
    m, n, k, dtype = check_shape(M, N, K, dtype)
    if models_dir is not None and not isinstance(models_dir, (str, os.PathLike)):
        raise TypeError(f"models_dir={models_dir!r}; must be a path (str or pathlib.Path) or None")
    # A given models_dir is keyed by its absolute path: a relative one means
    # another folder after a chdir.
    key = (device.slug if isinstance(device, DeviceSpec) else device, dtype,
           None if models_dir is None else str(Path(models_dir).resolve()))
    with _LOCK:
        pred = _CACHE.get(key) if isinstance(key[0], (str, type(None))) else None
    if pred is None:
        folder = _resolve(device, dtype, models_dir)
        with _LOCK:
            pred = _CACHE.get(key)
            if pred is None:
                pred = _CACHE[key] = Predictor(folder)
    return pred.predict_best(m, n, k, top_k=top_k, running_on=running_on, measure_top_k=measure_top_k,
                             backend=backend, tuning_db=tuning_db)
