"""Training envelope: where a model has seen data, so a prediction outside it
is flagged out-of-distribution (OOD) with reasons in words.

Two checks on the shape, both in log2 space, where GEMM cost scales:

- **Range.** Each of log2 M, N, K must lie within the trained [min, max],
  widened by ``RANGE_MARGIN_LOG2`` (a quarter doubling, 19 %) on each side so
  that a shape at the collection's own bound (1024 when the largest drawn was
  1016) is not flagged.
- **Density.** The distance from the shape to the nearest training shape in
  *log-shape and aspect space*, the six coordinates (log2 M, log2 N, log2 K,
  log2 M/N, log2 N/K, log2 K/M), must not exceed a threshold calibrated on
  held-out training shapes: the training shapes are split into
  ``CALIBRATION_FOLDS`` folds, each shape's distance to the nearest shape of
  the *other* folds is measured, and the threshold is the
  ``CALIBRATION_QUANTILE`` quantile of those distances (at least
  ``MIN_THRESHOLD``, half a doubling). A new shape drawn like the training
  shapes is then flagged with probability about 1 - quantile (a held-out
  shape sees only the other folds, so slightly less); ``python -m
  studies.ood`` measures the actual rates.

The aspect coordinates are linear in the log-shape ones, so the six-D
distance is a Euclidean distance in three dimensions after a fixed linear map
(:data:`EMBED`, the Cholesky factor of I + AᵀA for the aspect rows A); a
query costs one pass over the training shapes.

Identity checks (device, dtype, kernel template, costlearn version) are made
by the predictor against the artifact's sidecar.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["fit_envelope", "Envelope", "shape_reasons", "embed", "embed_query", "EMBED",
           "RANGE_MARGIN_LOG2", "fit_coverage", "Coverage",
           "outside_rows", "nearest_evidence", "measured_ranges",
           "COVERAGE_MARGIN_LOG2",
           "CALIBRATION_QUANTILE", "CALIBRATION_FOLDS", "ENVELOPE_VERSION"]

ENVELOPE_VERSION = 2
RANGE_MARGIN_LOG2 = 0.25
CALIBRATION_QUANTILE = 0.99
CALIBRATION_FOLDS = 5
MIN_THRESHOLD = 0.5

_ASPECT = np.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0], [-1.0, 0.0, 1.0]])
EMBED = np.linalg.cholesky(np.eye(3) + _ASPECT.T @ _ASPECT)
"""x @ EMBED has the Euclidean norm of the six-D (log-shape, aspect) vector
of x: |x L|² = x L Lᵀ xᵀ = x (I + AᵀA) xᵀ = |x|² + |A x|²."""


def embed(shapes) -> np.ndarray:
    """Coordinates of shapes in which Euclidean distance is the log-shape and
    aspect distance.

    Parameters
    ----------
    shapes : array-like of int, shape (S, 3)

    Returns
    -------
    ndarray of float64, shape (S, 3)
    """
    return np.log2(np.asarray(shapes, dtype=np.float64).reshape(-1, 3)) @ EMBED


def embed_query(m: int, n: int, k: int) -> np.ndarray:
    """One problem embedded as :func:`embed` does, in the arithmetic of the
    C ranker (``x0 * E[0] + x1 * E[1] + x2 * E[2]`` with ``x = log2`` of the
    extents, left to right): float64, shape (3,). The nearest training shape
    (:meth:`Envelope.nearest_index`) and the floor's evidence
    (:meth:`costlearn.model.vendor_floor.VendorFloor.near`) use it, so the two rankers
    give the same bits: the logarithms are the C library's (:func:`math.log2`),
    as the C ranker's are; numpy's may differ in the last bit on CPUs with
    AVX-512 (:func:`costlearn.features.shape.libm_log2`)."""
    x0, x1, x2 = math.log2(m), math.log2(n), math.log2(k)
    return x0 * EMBED[0] + x1 * EMBED[1] + x2 * EMBED[2]


def nearest_evidence(points: np.ndarray, log_vendor: np.ndarray, log_model: np.ndarray, k: int,
                     q: np.ndarray) -> tuple[float, float]:
    """Means over the ``k`` evidence problems nearest the embedded query
    ``q`` (by squared distance, then index) of their log1p vendor regrets
    (the finite ones; NaN when none) and log1p model regrets (NaN without
    evidence), summed in that order: the twin of ``evidence_near`` in
    ``_native_rank.c`` (the same bits).

    Parameters
    ----------
    points : ndarray of float64, shape (E, 3)
        Evidence problems embedded (:func:`costlearn.model.envelope.embed`).
    log_vendor, log_model : ndarray of float64, shape (E,)
    k : int
    q : ndarray of float64, shape (3,)
        :func:`costlearn.model.envelope.embed_query` of the problem.
    """
    if not len(points):
        return math.nan, math.nan
    d = points - q
    d2 = d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1] + d[:, 2] * d[:, 2]
    near = np.lexsort((np.arange(len(d2)), d2))[:min(k, len(d2))]
    sv, nv, sm = 0.0, 0, 0.0
    for i in near.tolist():
        v = float(log_vendor[i])
        if math.isfinite(v):
            sv += v
            nv += 1
        sm += float(log_model[i])
    return (sv / nv if nv else math.nan), sm / len(near)


def _heldout_nn(points: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Distance of each point to the nearest point of the other folds."""
    fold = np.random.default_rng(seed).permutation(len(points)) % folds
    out = np.empty(len(points))
    for f in range(folds):
        test, train = points[fold == f], points[fold != f]
        d2 = ((test[:, None, :] - train[None, :, :]) ** 2).sum(-1)
        out[fold == f] = np.sqrt(d2.min(axis=1))
    return out


def fit_envelope(shapes, seed: int = 0) -> dict:
    """Learn the envelope of training shapes.

    Parameters
    ----------
    shapes : array-like of int, shape (S, 3)
        Training shapes (M, N, K), S >= 1; duplicates are dropped.
    seed : int
        Seed of the calibration folds.

    Returns
    -------
    dict
        JSON-ready: ``version``, ``min``/``max`` extents per dimension,
        ``shapes`` (the distinct training shapes), ``density_threshold_log2``
        (distance in :func:`embed` space, doublings) and ``calibration`` (quantile,
        folds, the held-out distance quantiles p50/p90/p99).

    Raises
    ------
    ValueError
        If there are no shapes or an extent is < 1.
    """
    a = np.asarray(shapes, dtype=np.int64).reshape(-1, 3)
    if len(a) == 0:
        raise ValueError("cannot fit an envelope on zero shapes")
    if (a < 1).any():
        raise ValueError(f"shape extents must be >= 1, got min {a.min()}")
    a = np.unique(a, axis=0)
    cal = dict(quantile=CALIBRATION_QUANTILE, folds=CALIBRATION_FOLDS, min_threshold=MIN_THRESHOLD)
    if len(a) >= 2 * CALIBRATION_FOLDS:
        nn = _heldout_nn(embed(a), CALIBRATION_FOLDS, seed)
        thr = max(MIN_THRESHOLD, float(np.quantile(nn, CALIBRATION_QUANTILE)))
        cal.update({f"heldout_nn_p{q}": float(np.quantile(nn, q / 100)) for q in (50, 90, 99)})
    else:
        thr = 2.0 * MIN_THRESHOLD      # too few shapes to calibrate: one doubling
    return dict(version=ENVELOPE_VERSION,
                min=dict(M=int(a[:, 0].min()), N=int(a[:, 1].min()), K=int(a[:, 2].min())),
                max=dict(M=int(a[:, 0].max()), N=int(a[:, 1].max()), K=int(a[:, 2].max())),
                shapes=a.tolist(), density_threshold_log2=thr, calibration=cal)


class Envelope:
    """A fitted envelope, ready for many queries.

    Parameters
    ----------
    envelope : dict
        From :func:`fit_envelope` (a model sidecar's ``envelope``).

    Raises
    ------
    ValueError
        If the dict is not a version-2 envelope, or its shapes, ranges,
        threshold or calibration are malformed (at least one shape, extents
        >= 1, a finite threshold >= 0, 1 <= min <= max per extent); the
        message names the value.
    """

    def __init__(self, envelope: dict):
        if not isinstance(envelope, dict) or envelope.get("version") != ENVELOPE_VERSION:
            got = envelope.get("version") if isinstance(envelope, dict) else type(envelope).__name__
            raise ValueError(f"envelope version {got!r}; this code reads version "
                             f"{ENVELOPE_VERSION} (retrain with `costlearn train`)")
        try:
            shapes = np.asarray(envelope["shapes"])
            thr = float(envelope["density_threshold_log2"])
            lo = {d: int(envelope["min"][d]) for d in "MNK"}
            hi = {d: int(envelope["max"][d]) for d in "MNK"}
            float(envelope["calibration"]["quantile"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed envelope ({type(e).__name__}: {e})") from None
        if not (shapes.ndim == 2 and shapes.shape[1] == 3 and len(shapes) >= 1
                and np.issubdtype(shapes.dtype, np.integer)):
            raise ValueError(f"malformed envelope: shapes of shape {shapes.shape} dtype {shapes.dtype}; need at "
                             "least one (M, N, K) row of integers")
        if not (shapes >= 1).all():
            raise ValueError(f"malformed envelope: training shape {shapes[(shapes < 1).any(axis=1)][0].tolist()} "
                             "has an extent below 1")
        if not (np.isfinite(thr) and thr >= 0):
            raise ValueError(f"malformed envelope: density_threshold_log2={thr!r}; must be finite and >= 0")
        bad = [d for d in "MNK" if not 1 <= lo[d] <= hi[d]]
        if bad:
            raise ValueError(f"malformed envelope: ranges min={lo} max={hi}; need 1 <= min <= max for {bad}")
        self.envelope = envelope
        self.shapes = envelope["shapes"]
        self.points = np.ascontiguousarray(embed(self.shapes))
        self.points.flags.writeable = False
        self.threshold_log2 = float(envelope["density_threshold_log2"])
        lo = np.array([envelope["min"][d] for d in "MNK"], np.float64)
        hi = np.array([envelope["max"][d] for d in "MNK"], np.float64)
        self._lo = tuple(float(v) for v in lo * 2.0 ** -RANGE_MARGIN_LOG2)
        self._hi = tuple(float(v) for v in hi * 2.0 ** RANGE_MARGIN_LOG2)
        self._bounds = [(name, int(a), int(b), lo_, hi_) for name, a, b, lo_, hi_ in
                        zip("MNK", lo, hi, self._lo, self._hi)]
        # The words of the density reason that do not depend on the query, once.
        self._shape_text = [str(tuple(int(v) for v in s)) for s in self.shapes]
        self._density_tail = (f" in log-shape and aspect space (threshold {self.threshold_log2:.2f}, the "
                              f"{envelope['calibration']['quantile']:.0%} quantile on held-out training shapes)")

    def nearest_index(self, m: int, n: int, k: int) -> tuple[int, float]:
        """Index (into :attr:`shapes`) of the nearest training shape and its
        distance in log-shape and aspect space, in doublings (log2 units).

        The same arithmetic, in the same order, as ``nearest`` in
        ``costlearn/ranker/_native_rank.c``: the query embedded as
        sum_i log2(x_i) * E[i, j], squared distances (a*a + b*b) + c*c, the
        lowest index among equals; the two give the same bits.
        """
        d = self.points - embed_query(m, n, k)
        d2 = d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1] + d[:, 2] * d[:, 2]
        i = int(d2.argmin())
        return i, float(np.sqrt(d2[i]))

    def shape_text(self, index: int) -> str:
        """Training shape ``index`` as the reasons write it: ``(M, N, K)``."""
        return self._shape_text[index]

    def nearest(self, m: int, n: int, k: int) -> tuple[tuple, float]:
        """The nearest training shape (M, N, K) and its distance, doublings
        (see :meth:`nearest_index`)."""
        i, dist = self.nearest_index(m, n, k)
        return tuple(self.shapes[i]), dist

    @property
    def extent_bounds(self) -> tuple[tuple, tuple]:
        """The extents (M, N, K) a problem may have and be inside: the
        trained minima and maxima widened by ``RANGE_MARGIN_LOG2`` doublings,
        (lo, hi), floats (:meth:`reasons`' first test; the native ranker's
        ``env_lo``/``env_hi``)."""
        return self._lo, self._hi

    def reasons(self, m: int, n: int, k: int, nearest: tuple | None = None) -> list[str]:
        """Reasons (in words, with numbers) why shape (m, n, k) is outside
        the envelope; empty when it is inside.

        Parameters
        ----------
        m, n, k : int
        nearest : (int, float), optional
            Index of the nearest training shape and its distance, when the
            caller has computed them (the ranker does).
        """
        lo, hi = self._lo, self._hi                      # within the extents: three pairs of comparisons
        within = lo[0] <= m <= hi[0] and lo[1] <= n <= hi[1] and lo[2] <= k <= hi[2]
        if within and nearest is not None and nearest[1] <= self.threshold_log2:
            return []                                    # the common case, inside
        out = []
        if not within:
            for (name, lo, hi, lo_m, hi_m), v in zip(self._bounds, (m, n, k)):
                if v < lo_m:
                    out.append(f"{name}={v} below the trained minimum {lo}")
                elif v > hi_m:
                    out.append(f"{name}={v} above the trained maximum {hi}")
        if nearest is None:
            nearest = self.nearest_index(m, n, k)
        if nearest[1] > self.threshold_log2:
            out.append(f"nearest trained shape {self._shape_text[nearest[0]]} is {nearest[1]:.2f} doublings away"
                       + self._density_tail)
        return out


def shape_reasons(envelope: dict, m: int, n: int, k: int) -> list[str]:
    """:meth:`Envelope.reasons` for a one-off query (builds the Envelope)."""
    return Envelope(envelope).reasons(m, n, k)


COVERAGE_MARGIN_LOG2 = 1.5
"""How far (doublings, per extent) beyond the extents a config was measured at
it is still a candidate: a config measured on N <= 16 is not ranked for
N = 3584, while the grid of a shape sweep (every config on every problem)
covers its whole range. Chosen by leaving one A100 log out at a time
(docs/results.md, "Triton's matmul on real A100 measurements"): a wider
margin answers more problems no log measured. Recorded with each artifact,
so a model keeps the margin it was trained with."""


def outside_rows(train_rows, test_rows) -> np.ndarray:
    """Whether each test row's problem lies outside the extent envelope of
    the training rows' shapes (:func:`fit_envelope`, :meth:`Envelope.reasons`).

    Parameters
    ----------
    train_rows, test_rows : DataFrame
        Rows with integer columns ``m``, ``n``, ``k``.

    Returns
    -------
    ndarray of bool, shape (len(test_rows),)
    """
    env = Envelope(fit_envelope(train_rows[["m", "n", "k"]].drop_duplicates().to_numpy()))
    keys = list(test_rows[["m", "n", "k"]].itertuples(index=False, name=None))
    out = {s: bool(env.reasons(*s)) for s in set(keys)}
    return np.array([out[s] for s in keys], bool)


def measured_ranges(rows) -> tuple:
    """The log2 M, N, K range of the problems each config was measured on.

    Parameters
    ----------
    rows : DataFrame
        Valid rows (``config_id``, ``m``, ``n``, ``k``).

    Returns
    -------
    lo, hi : DataFrame
        Indexed by ``config_id``, columns ``m``, ``n``, ``k`` (float64,
        log2 of the smallest and largest extent).
    """
    lg = rows[["m", "n", "k"]].astype(np.float64).apply(np.log2)
    lg["config_id"] = rows["config_id"].astype(object).to_numpy()
    g = lg.groupby("config_id")
    return g[["m", "n", "k"]].min(), g[["m", "n", "k"]].max()


def fit_coverage(rows, config_ids, derived=None) -> dict:
    """Per-candidate coverage: the log2 M, N, K range of the problems each
    config was measured on (valid rows), or where it is derived for.

    Parameters
    ----------
    rows : DataFrame
        Valid training rows (``config_id``, ``m``, ``n``, ``k``).
    config_ids : sequence of str, length C
        The candidates, in the scorer's order.
    derived : dict of str to (array of float, array of float), optional
        For candidates without rows of their own (a tool's variants of a
        measured config, :meth:`costlearn.families.KernelFamily.shrunk_variants`):
        the log2 [M, N, K] low and high ends of where the tool derives them
        (one box, as for a measured config's range). The margin does not
        widen them: it widens only measured ranges.

    Returns
    -------
    dict
        JSON-ready: ``margin_log2`` and ``lo`` / ``hi``, lists of C
        [log2 M, log2 N, log2 K] triples; ``derived``, the indices of the
        derived candidates, where there are any.

    Raises
    ------
    ValueError
        If a candidate has no row.
    """
    lo, hi = measured_ranges(rows)
    derived = dict(derived or {})
    missing = [c for c in config_ids if c not in lo.index and c not in derived]
    if missing:
        raise ValueError(f"no training row of candidate(s) {missing[:5]}")
    ids = list(config_ids)
    ends = [np.array([frame.loc[c].to_numpy(np.float64) if c in frame.index else np.asarray(derived[c][i], np.float64)
                      for c in ids]).reshape(-1, 3) for i, frame in enumerate((lo, hi))]
    out = dict(margin_log2=COVERAGE_MARGIN_LOG2, lo=ends[0].round(6).tolist(), hi=ends[1].round(6).tolist())
    if derived:
        out["derived"] = [i for i, c in enumerate(ids) if c not in lo.index]
    return out


class Coverage:
    """Where each candidate was measured, for the candidate mask of a problem
    (design.md: a config is a candidate only where the data covers it near
    the problem).

    Parameters
    ----------
    coverage : dict or None
        :func:`fit_coverage`'s result; None (an artifact trained before
        coverage was recorded) covers every candidate everywhere.
    n_candidates : int

    Attributes
    ----------
    lo, hi : ndarray of float64, shape (C, 3)
        Where each candidate is ranked, log2 [M, N, K]: its range widened
        by ``margin_log2`` (a derived candidate's: as recorded).

    Raises
    ------
    ValueError
        If the ranges do not hold ``n_candidates`` finite triples with lo <= hi,
        or ``derived`` is not a list of distinct candidate indices.
    """

    def __init__(self, coverage: dict | None, n_candidates: int):
        self.recorded = coverage is not None
        if coverage is None:
            self.lo = np.full((n_candidates, 3), -np.inf)
            self.hi = np.full((n_candidates, 3), np.inf)
            self.margin_log2 = 0.0
            return
        try:
            lo = np.asarray(coverage["lo"], np.float64)
            hi = np.asarray(coverage["hi"], np.float64)
            margin = float(coverage["margin_log2"])
            derived = np.asarray(coverage.get("derived", []), np.int64).reshape(-1)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed coverage ({type(e).__name__}: {e})") from None
        if lo.shape != (n_candidates, 3) or hi.shape != (n_candidates, 3) or not (
                np.isfinite(lo).all() and np.isfinite(hi).all() and (lo <= hi).all()) or not margin >= 0:
            raise ValueError(f"malformed coverage: lo {lo.shape}, hi {hi.shape}, margin {margin!r}; need "
                             f"({n_candidates}, 3) finite ranges with lo <= hi and a margin >= 0")
        if not ((derived >= 0) & (derived < n_candidates)).all() or len(set(derived.tolist())) != len(derived):
            raise ValueError(f"malformed coverage: derived {derived.tolist()[:8]} are not distinct indices of "
                             f"{n_candidates} candidates")
        self.margin_log2 = margin
        widen = np.full((n_candidates, 1), margin)
        widen[derived] = 0.0
        self.lo, self.hi = lo - widen, hi + widen

    def mask(self, m: int, n: int, k: int) -> np.ndarray:
        """Candidates whose measured range, widened by the margin, holds
        (M, N, K): bool, shape (C,)."""
        x = np.log2(np.array([m, n, k], np.float64))
        return ((self.lo <= x) & (x <= self.hi)).all(axis=1)
