"""The vendor floor and the held-out evidence near a problem (design.md, "What
"good" means for a user": the honest score, the floor, the coverage).

A model is trusted for a problem only as far as its held-out record near that
problem allows. At training, every training problem gets a prediction from a
model that did not see it (leave one log out where the training folder holds
several logs, else a problem-grouped hold-out: :func:`heldout_folds`); from
those predictions :func:`heldout_problems` records, per problem, the measured
regret of the vendor library, the regret of the model's own top-1 and the
predicted log2 ratio of its best tile config to the vendor.

At prediction, :class:`VendorFloor` looks up the ``NEIGHBORS`` nearest of those
problems of the same layout (log-shape and aspect distance,
:func:`costlearn.envelope.embed`) and:

- **flags** the problem as out of distribution when the model's held-out top-1
  regret there (geometric mean) is above ``unsure_regret``: what predicts
  error on held-out logs, not only distance from the training shapes;
- **keeps the vendor** unless the best tile config is predicted faster by more
  than ``margin_log2`` (log2 of the time ratio) *and* the vendor was not
  already within ``vendor_near_min`` of the best on the neighbours (the
  measured evidence that the library is beatable there);
- **falls back to the vendor outside the extent envelope** only where
  ``ood_fallback`` says so: on the A100's three logs the envelope's flag did
  not predict error (the model's own top-1 on the problems it flags lost
  2.3-6.3 %, the vendor 5.7-24 %), so whether it sends a problem to the
  vendor is calibrated like the thresholds (a hold-out without envelope-OOD
  problems leaves it off).

Where the family has a vendor candidate, training also fits the vendor
model (:mod:`costlearn.model.vendor`): per problem, an estimate of the best
tile config's time over the vendor's and its members' spread, cross-fitted on
the same folds. Where the held-out problems carry it, the floor decides with
it instead of the neighbours' evidence: a tile config is chosen where the
cost model ranks it ahead of the vendor and the estimate, one deviation up,
is below 0 (:data:`ESTIMATE_RULE`: no tolerance, no threshold fitted on few
held-out problems; the uncertainty is per problem). The neighbours'
evidence then neither decides nor flags (``vendor_near_min`` and
``unsure_regret`` off): the vendor model's doubt flags
(:meth:`VendorFloor.estimate_reason`); docs/results.md has the measured
effect.

The thresholds are calibrated together (:func:`calibrate_floor`) on the
held-out problems, each scored with its *other* neighbours: among the grid
points whose rule is never worse than the vendor alone on any held-out log
(or the least worse), the lowest geometric-mean regret; where the hold-out
is within one log, the setting that keeps the vendor most often among those
within :data:`TOLERANCE` of it. Untrained behaviour (no
held-out evidence, e.g. ``train(..., holdout=False)``) is the plain argmin:
margin 0, nothing flagged. A family without a vendor candidate keeps the
evidence but flags nothing (``unsure_regret`` None): with no default to fall
back to, a flag would only repeat its noise floor.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from .envelope import embed, embed_query
from .families import VENDOR_CONFIG_ID
from .metrics import PROBLEM_COLUMNS, geomean_regret
from .model.base import shape_groups
from .ranker.base import nearest_evidence

__all__ = ["FLOOR_VERSION", "NEIGHBORS", "MARGIN_GRID", "VENDOR_NEAR_GRID", "UNSURE_GRID", "OOD_FALLBACK_GRID",
           "TOLERANCE",
           "ESTIMATE_RULE", "ESTIMATE_UNSURE_QUANTILE", "estimate_wins", "estimate_doubt",
           "heldout_folds", "heldout_problems", "calibrate_floor", "VendorFloor", "neighbour_stats", "rule_regrets"]

FLOOR_VERSION = 1
NEIGHBORS = 5
"""Held-out problems a decision looks at (the nearest of the same layout)."""
MARGIN_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
"""Candidate margins, log2 of (vendor time / tile time) a tile must be predicted to win by."""
VENDOR_NEAR_GRID = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2)
"""Candidate ``vendor_near_min``: the vendor's measured regret on the neighbours
below which it is kept."""
OOD_FALLBACK_GRID = (False, True)
"""Whether a problem outside the extent envelope falls back to the vendor."""
ESTIMATE_UNSURE_QUANTILE = 0.95
"""A problem is flagged (an OOD reason, not a decision) where the vendor
model's deviation over its distance from a tie, ``sd / |mean|``, is above this
quantile of the held-out problems' (the score's AUROC for "the answer loses
more than 5 %" was 0.86 on the H100 random log's 80/20 split, but 0.44 on the
A100's logs left out: it marks doubt about tile against vendor in
distribution, not errors on unfamiliar shapes; scripts/decision_study.py)."""
ESTIMATE_RULE = (0.0, 1.0)
"""(margin log2, z) of the decision where the vendor model's estimate exists:
a tile config is chosen where the cost model ranks it ahead of the vendor and
the estimate one deviation up is below 0 (:func:`estimate_wins`): the tile is
expected to win under the members' spread. Fixed, not calibrated: choosing
(margin, z, the cost model's margin) on each fold's held-out logs gave 5.35 %
on the A100's float16 logs left out, this rule 4.98 % (prune path 4.80 % and
4.33 %), with 0.97 % on the H100 80/20 split and 5.88 % from the A100's random
log to HuggingFace + timm (scripts/a100_study.py, scripts/decision_study.py)."""
UNSURE_GRID = (0.03, 0.05, 0.08, 0.12, math.inf)
"""Candidate ``unsure_regret``: the model's held-out top-1 regret on the
neighbours above which a problem is flagged (and the vendor kept)."""
TOLERANCE = 0.02
"""Held-out geometric-mean regret (2 points) a calibration within one log
gives up for a more conservative floor: among the settings within it of the
best, the one that keeps the vendor most often. A hold-out of one log sees
shapes like the training rows, not the shapes the model will be asked
about: on an A100, a float16 model of the random-shape log scored 8.1 %
(against 5.2 % for cuBLAS alone) on HuggingFace shapes with the plain
calibration, 4.0 % with this one (timm: 11.5 % and 10.4 %, cuBLAS 10.8 %);
0.5 and 1 point were not enough. Where the hold-out leaves whole logs out,
it sees the shift itself and no tolerance is given."""
MIN_SPLIT_PROBLEMS = 500
"""Below this many problems in one log, the hold-out is 5-fold (every problem
held out once) instead of one 20 % split."""


def heldout_folds(rows: pd.DataFrame, seed: int = 0, min_train_problems: int = 2) -> tuple[list, str]:
    """Train/test row indices from which every held-out prediction comes.

    Leave one log out where the rows come from two or more logs
    (``source_file``: imported files, or collected rows as ``""``) and at
    least two of those folds keep ``min_train_problems`` problems to train
    on (a log's fold whose other logs hold fewer is not made: its log is
    not held out); else a problem-grouped split: 5 folds below
    :data:`MIN_SPLIT_PROBLEMS` problems, one 80/20 split above.

    Parameters
    ----------
    rows : DataFrame
        Valid rows of one (family, dtype), with the problem columns.
    seed : int
        Of the problem-grouped split.
    min_train_problems : int
        Fewest problems a leave-one-log-out fold trains on (a model fits on
        2 at least).

    Returns
    -------
    folds : list of (ndarray of int, ndarray of int)
        Positional (train, test) indices; a problem is in one test set at most.
    kind : str
        ``"leave-one-log-out (N logs)"`` (``"(N logs, H held out)"`` where
        some were not), ``"5-fold by problem"`` or
        ``"20 % of problems"``.
    """
    from sklearn.model_selection import GroupKFold, GroupShuffleSplit

    src = rows["source_file"].astype(object).fillna("").to_numpy() if "source_file" in rows else \
        np.full(len(rows), "", object)
    logs = sorted(set(src))
    if len(logs) >= 2:
        folds = [(np.flatnonzero(src != s), np.flatnonzero(src == s)) for s in logs]
        # a problem measured in two logs is held out with each, but never trained on where it is tested
        groups = shape_groups(rows)
        out = []
        for tr, te in folds:
            tr = tr[~np.isin(groups[tr], groups[te])]
            if len(np.unique(groups[tr])) >= max(min_train_problems, 1):
                out.append((tr, te))
        if len(out) >= 2:
            held = "" if len(out) == len(logs) else f", {len(out)} held out"
            return out, f"leave-one-log-out ({len(logs)} logs{held})"
    groups = shape_groups(rows)
    n = int(groups.max()) + 1 if len(groups) else 0
    if n < MIN_SPLIT_PROBLEMS:
        k = max(2, min(5, n))
        return list(GroupKFold(n_splits=k).split(rows, groups=groups)), f"{k}-fold by problem"
    tr, te = next(GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=seed).split(rows, groups=groups))
    return [(tr, te)], "20 % of problems"


def heldout_problems(rows: pd.DataFrame, pred: np.ndarray, envelope_ood: np.ndarray | None = None) -> pd.DataFrame:
    """Per-problem record of held-out predictions.

    Parameters
    ----------
    rows : DataFrame
        Valid held-out rows (``time_us``, ``config_id``, the problem columns,
        optionally ``source_file``).
    pred : ndarray of float64, shape (len(rows),)
        Predicted time, microseconds (or a relative score), by a model that
        did not see these problems.
    envelope_ood : ndarray of bool, shape (len(rows),), optional
        Whether the row's problem lies outside the extent envelope of the
        model that predicted it (False where not given).

    Returns
    -------
    DataFrame
        One row per problem: ``m, n, k, dtype, layout``, ``source`` (the log),
        ``vendor_regret`` (measured vendor time / best of all - 1; NaN
        without a vendor row), ``model_regret`` (top-1 regret of the
        model's argmin over the measured configs, against the best of all),
        ``tile_lr`` (log2 predicted best tile / predicted vendor; NaN
        without both), ``tile_regret`` (regret of that tile against the best
        of all), ``envelope_ood``.
    """
    cols = [c for c in PROBLEM_COLUMNS if c in rows.columns]
    df = rows.assign(_pred=np.asarray(pred, np.float64),
                     _src=rows["source_file"].astype(object).fillna("") if "source_file" in rows else "",
                     _ood=np.zeros(len(rows), bool) if envelope_ood is None else np.asarray(envelope_ood, bool))
    df = df.groupby(cols + ["_src", "config_id"], sort=False, observed=True).agg(
        time_us=("time_us", "median"), _pred=("_pred", "mean"), _ood=("_ood", "max")).reset_index()
    out = []
    for key, g in df.groupby(cols, sort=True, observed=True):
        t, p, ids = g["time_us"].to_numpy(), g["_pred"].to_numpy(), g["config_id"].astype(object).to_numpy()
        best = t.min()
        vend = ids == VENDOR_CONFIG_ID
        rec = dict(zip(cols, key))
        rec["source"] = str(g["_src"].iloc[0])
        rec["envelope_ood"] = bool(g["_ood"].any())
        rec["model_regret"] = float(t[np.argmin(p)] / best - 1.0)
        rec["vendor_regret"] = float(t[vend].min() / best - 1.0) if vend.any() else math.nan
        if vend.any() and (~vend).any():
            j = np.flatnonzero(~vend)[np.argmin(p[~vend])]
            rec["tile_lr"] = float(np.log2(p[j] / p[vend].min()))
            rec["tile_regret"] = float(t[j] / best - 1.0)
        else:
            rec["tile_lr"] = rec["tile_regret"] = math.nan
        out.append(rec)
    return pd.DataFrame(out)


def neighbour_stats(points: np.ndarray, layouts: np.ndarray, vendor_regret: np.ndarray, model_regret: np.ndarray,
                    qpoints: np.ndarray, qlayouts: np.ndarray, exclude_self: bool = False,
                    k: int = NEIGHBORS) -> tuple[np.ndarray, np.ndarray]:
    """Geometric-mean vendor and model regret over each query's ``k`` nearest
    evidence problems of its layout (all layouts where its own has fewer
    than ``k``).

    Parameters
    ----------
    points : ndarray of float64, shape (E, 3)
        :func:`costlearn.envelope.embed` of the evidence problems.
    layouts : ndarray of object, shape (E,)
    vendor_regret, model_regret : ndarray of float64, shape (E,)
        NaN entries are left out of a mean.
    qpoints : ndarray of float64, shape (Q, 3)
    qlayouts : ndarray of object, shape (Q,)
    exclude_self : bool
        Queries are the evidence problems themselves (Q == E, same order):
        each leaves itself out (the calibration's leave-one-out).

    Returns
    -------
    vendor_near, model_near : ndarray of float64, shape (Q,)
        NaN where no evidence is left.
    """
    q = len(qpoints)
    vn, mn = np.full(q, np.nan), np.full(q, np.nan)
    if len(points) == 0:
        return vn, mn
    for lay in np.unique(qlayouts):
        qi = np.flatnonzero(qlayouts == lay)
        ei = np.flatnonzero(layouts == lay)
        if len(ei) < k + int(exclude_self):
            ei = np.arange(len(points))
        d2 = ((qpoints[qi, None, :] - points[None, ei, :]) ** 2).sum(-1)
        if exclude_self:
            d2[qi[:, None] == ei[None, :]] = np.inf
        kk = min(k, len(ei) - int(exclude_self))
        if kk <= 0:
            continue
        near = ei[np.argsort(d2, axis=1, kind="stable")[:, :kk]]
        with np.errstate(invalid="ignore"):
            vn[qi] = np.expm1(np.nanmean(np.log1p(vendor_regret[near]), axis=1)) \
                if np.isfinite(vendor_regret[near]).any() else np.nan
            mn[qi] = np.expm1(np.nanmean(np.log1p(model_regret[near]), axis=1))
    return vn, mn


def rule_regrets(held: pd.DataFrame, vendor_near: np.ndarray, model_near: np.ndarray, margin_log2: float,
                 vendor_near_min: float | None, unsure_regret: float, ood_fallback: bool = False,
                 estimate: tuple | None = None) -> np.ndarray:
    """Regret of the floor's choice on held-out problems (float64, shape
    (len(held),)): the vendor where the model is unsure there, the tile's
    predicted win is below the margin, the vendor was near-best on the
    neighbours (not checked when ``vendor_near_min`` is None), (with
    ``ood_fallback``) the problem is outside the envelope, or (with
    ``estimate`` = (margin, z)) the vendor model does not expect the best
    tile to win by the margin at z deviations (:func:`estimate_wins`, the
    held-out ``estimate_log2`` and ``estimate_sd_log2``); else the
    predicted-best tile."""
    unsure = np.nan_to_num(model_near, nan=-math.inf) > unsure_regret
    if ood_fallback and "envelope_ood" in held:
        unsure |= held["envelope_ood"].to_numpy(bool)
    beatable = np.nan_to_num(vendor_near, nan=math.inf) > (-math.inf if vendor_near_min is None else vendor_near_min)
    tile = ~unsure & beatable & (held["tile_lr"].to_numpy() < -margin_log2)
    if estimate is not None:
        tile &= estimate_wins(held["estimate_log2"].to_numpy(np.float64),
                              held["estimate_sd_log2"].to_numpy(np.float64), *estimate)
    return np.where(tile, held["tile_regret"].to_numpy(), held["vendor_regret"].to_numpy())


def estimate_doubt(mean_log2, sd_log2):
    """How unsure the vendor model is of the decision: its members' deviation
    over the estimate's distance from a tie, ``sd / max(|mean|, 0.001)``
    (float or float64 array; a float's in Python arithmetic, the same value,
    a microsecond sooner on the query path)."""
    if type(mean_log2) is float and type(sd_log2) is float:
        return sd_log2 / max(abs(mean_log2), 1e-3)
    return sd_log2 / np.maximum(np.abs(mean_log2), 1e-3)


def estimate_wins(mean_log2, sd_log2, margin_log2: float, z: float):
    """Where the vendor model (:mod:`costlearn.model.vendor`) expects a tile
    config to beat the vendor library: ``mean + z * sd < -margin`` (log2 of
    best tile time / vendor time; NaN: no). Works on floats and float64
    arrays alike."""
    return np.nan_to_num(mean_log2 + z * sd_log2, nan=math.inf) < -margin_log2


def calibrate_floor(held: pd.DataFrame, has_vendor: bool, kind: str = "", tolerance: float | None = None,
                    vendor_near_grid=VENDOR_NEAR_GRID) -> dict:
    """Calibrate the floor's thresholds on held-out problems.

    Parameters
    ----------
    held : DataFrame
        :func:`heldout_problems` of every held-out prediction.
    has_vendor : bool
        The family has a vendor candidate and the rows measure it.
    kind : str
        How the hold-out was made (:func:`heldout_folds`), recorded.
    tolerance : float, optional
        Regret (absolute) within which of the lowest the setting that keeps
        the vendor most often is chosen. Default: 0 where the problems come
        from two or more logs or carry the vendor model's estimate (its
        uncertainty is per problem), else :data:`TOLERANCE` (within one log
        the calibration cannot see another kind of shape). A transfer passes
        0: its held-out problems are the destination's, and the source's
        rows carry the kinds of shape (:mod:`costlearn.transfer`).
    vendor_near_grid : sequence of float or None
        Candidate ``vendor_near_min`` (None: the neighbours' vendor regret is
        not checked; a transfer offers it, since on the H100 cuBLAS is the
        best of all on many problems, and a threshold of 0 then keeps it on
        every problem near them).

    Returns
    -------
    dict
        JSON-ready: ``version``, ``margin_log2``, ``vendor_near_min``,
        ``unsure_regret``, ``ood_fallback``, ``estimate`` (None, or ``[margin
        log2, z]`` of :func:`estimate_wins`: :data:`ESTIMATE_RULE` where
        ``held`` has the vendor model's cross-fitted ``estimate_log2`` and
        ``estimate_sd_log2``, the decision then; the rules of the evidence
        are calibrated only without it), ``estimate_unsure`` (the doubt above
        which a problem is flagged, :data:`ESTIMATE_UNSURE_QUANTILE` of the
        held-out problems'), ``neighbors``, ``layouts``, ``problems`` (rows of
        ``[m, n, k, layout index, vendor_regret, model_regret]``, NaN as
        None) and ``calibration`` (the hold-out kind, problems, and the
        rule's, the vendor's and the plain argmin's geometric-mean regret
        per log and overall).
    """
    held = held.reset_index(drop=True)
    lays = sorted(held["layout"].astype(str).unique().tolist()) if len(held) else []
    pts = embed(held[["m", "n", "k"]].to_numpy(np.int64)) if len(held) else np.zeros((0, 3))
    lay = held["layout"].astype(str).to_numpy(object) if len(held) else np.zeros(0, object)
    vr = held["vendor_regret"].to_numpy(np.float64) if len(held) else np.zeros(0)
    mr = held["model_regret"].to_numpy(np.float64) if len(held) else np.zeros(0)
    out = dict(version=FLOOR_VERSION, margin_log2=0.0, vendor_near_min=0.0, unsure_regret=None, ood_fallback=False,
               estimate=None, neighbors=NEIGHBORS, layouts=lays,
               problems=[[int(a), int(b), int(c), lays.index(str(d)), _num(v), _num(w)]
                         for a, b, c, d, v, w in zip(held.get("m", []), held.get("n", []), held.get("k", []),
                                                     lay, vr, mr)],
               calibration=dict(heldout=kind, problems=int(len(held))))
    # problems without both a vendor and a tile measurement give evidence to their neighbours, not a score here
    ok = np.isfinite(held["tile_lr"].to_numpy(np.float64)) & np.isfinite(vr) if len(held) else np.zeros(0, bool)
    if not (has_vendor and ok.sum() > NEIGHBORS):
        return out
    vn, mn = neighbour_stats(pts, lay, vr, mr, pts, lay, exclude_self=True)
    held, vn, mn, vr = held[ok].reset_index(drop=True), vn[ok], mn[ok], vr[ok]
    out["calibration"]["scored"] = int(ok.sum())
    src = held["source"].astype(str).to_numpy()
    logs = sorted(set(src))
    vendor_by = {s: geomean_regret(vr[src == s]) for s in logs}
    with_estimate = "estimate_log2" in held and np.isfinite(held["estimate_log2"].to_numpy(np.float64)).any()
    # With the vendor model's estimate the decision is its fixed rule (and the model's own preference for a
    # tile); the neighbours' evidence neither decides nor flags. Without it, the first floor's calibrated rules.
    grid = [(False, 0.0, None, math.inf, ESTIMATE_RULE)] if with_estimate else \
        itertools.product(OOD_FALLBACK_GRID, MARGIN_GRID, vendor_near_grid, UNSURE_GRID, (None,))
    tried = []
    for fb, mu, tau, rho, est in grid:
        r = rule_regrets(held, vn, mn, mu, tau, rho, fb, est)
        worse = max(0.0, max(geomean_regret(r[src == s]) - vendor_by[s] for s in logs))
        kept = float(np.mean(r == held["vendor_regret"].to_numpy()))
        tried.append((worse, geomean_regret(r), kept, (mu, tau, rho, fb, est, r)))
    # never worse than the vendor on any held-out log (or the least worse), then within TOLERANCE of the lowest
    # regret, then the setting that keeps the vendor most often
    least = min(t[0] for t in tried)
    safe = [t for t in tried if t[0] <= least + 1e-4]
    low = min(t[1] for t in safe)
    tol = (0.0 if len(logs) >= 2 or with_estimate else TOLERANCE) if tolerance is None else float(tolerance)
    mu, tau, rho, fb, est, r = max((t for t in safe if t[1] <= low + tol + 1e-12), key=lambda t: (t[2], -t[1]))[3]
    plain = held["model_regret"].to_numpy()
    out.update(margin_log2=mu, vendor_near_min=tau, unsure_regret=(None if math.isinf(rho) else rho),
               ood_fallback=bool(fb), estimate=None if est is None else [float(est[0]), float(est[1])])
    if with_estimate:
        u = estimate_doubt(held["estimate_log2"].to_numpy(np.float64), held["estimate_sd_log2"].to_numpy(np.float64))
        u = u[np.isfinite(u)]
        out["estimate_unsure"] = float(np.quantile(u, ESTIMATE_UNSURE_QUANTILE)) if len(u) else None
    out["calibration"].update(
        tolerance=tol, rule_geomean=geomean_regret(r), vendor_geomean=geomean_regret(vr),
        argmin_geomean=geomean_regret(plain),
        envelope_ood=int(held["envelope_ood"].sum()) if "envelope_ood" in held else 0,
        by_log={s: dict(problems=int((src == s).sum()), rule=geomean_regret(r[src == s]), vendor=vendor_by[s],
                        argmin=geomean_regret(plain[src == s])) for s in logs})
    return out


def _num(x):
    return float(x) if np.isfinite(x) else None


class VendorFloor:
    """A calibrated floor, ready for many queries.

    Parameters
    ----------
    floor : dict
        :func:`calibrate_floor`'s result (a model sidecar's ``floor``).

    Attributes
    ----------
    margin_log2, vendor_near_min : float
    unsure_regret : float
        ``inf`` where the calibration chose never to flag.
    ood_fallback : bool
        A problem outside the extent envelope falls back to the vendor.
    calibrated : bool
        Held-out evidence exists (else every decision is the plain argmin).

    Raises
    ------
    ValueError
        If the dict is not a version-1 floor or a field is malformed (the
        message names it).
    """

    def __init__(self, floor: dict):
        if not isinstance(floor, dict) or floor.get("version") != FLOOR_VERSION:
            got = floor.get("version") if isinstance(floor, dict) else type(floor).__name__
            raise ValueError(f"vendor floor version {got!r}; this code reads version {FLOOR_VERSION} "
                             "(retrain with `costlearn train`)")
        try:
            self.margin_log2 = float(floor["margin_log2"])
            v = floor["vendor_near_min"]
            self.vendor_near_min = -math.inf if v is None else float(v)
            u = floor["unsure_regret"]
            self.unsure_regret = math.inf if u is None else float(u)
            self.neighbors = int(floor["neighbors"])
            self.ood_fallback = floor.get("ood_fallback", False)
            if not isinstance(self.ood_fallback, bool):
                raise ValueError(f"ood_fallback={self.ood_fallback!r} is not a bool")
            est = floor.get("estimate")
            self.estimate = None if est is None else (float(est[0]), float(est[1]))
            u = floor.get("estimate_unsure")
            self.estimate_unsure = math.inf if u is None else float(u)
            if self.estimate is not None and (len(est) != 2 or not all(map(math.isfinite, self.estimate))
                                              or self.estimate[1] < 0):
                raise ValueError(f"estimate={est!r}; need [margin log2, z >= 0] or null")
            self.layouts = [str(x) for x in floor["layouts"]]
            p = np.array([[np.nan if v is None else v for v in row] for row in floor["problems"]], np.float64)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed vendor floor ({type(e).__name__}: {e})") from None
        if p.size and (p.ndim != 2 or p.shape[1] != 6 or not (p[:, :3] >= 1).all()
                       or not np.isin(p[:, 3], np.arange(len(self.layouts))).all()):
            raise ValueError(f"malformed vendor floor: problems of shape {p.shape}; need rows of [m, n, k, layout "
                             "index, vendor_regret, model_regret] with extents >= 1")
        if not (self.margin_log2 >= 0 and (self.vendor_near_min >= 0 or self.vendor_near_min == -math.inf)
                and self.unsure_regret >= 0
                and self.neighbors >= 1):
            raise ValueError(f"malformed vendor floor: margin_log2={self.margin_log2}, vendor_near_min="
                             f"{self.vendor_near_min}, unsure_regret={self.unsure_regret}, neighbors="
                             f"{self.neighbors}; need each >= 0 (neighbors >= 1)")
        p = p.reshape(-1, 6)
        self.floor = floor
        self.points = embed(p[:, :3].astype(np.int64)) if len(p) else np.zeros((0, 3))
        self.layout_of = np.array([self.layouts[int(i)] for i in p[:, 3]], object)
        self.vendor_regret, self.model_regret = p[:, 4].copy(), p[:, 5].copy()
        self.calibrated = len(p) > 0
        # per layout, once: the evidence a query of that layout looks at (all of it where the layout has too little)
        self._by_layout = {}
        for lay in self.layouts:
            idx = np.flatnonzero(self.layout_of == lay)
            if len(idx) < self.neighbors:
                idx = np.arange(len(p))
            self._by_layout[lay] = (self.points[idx], np.log1p(self.vendor_regret[idx]),
                                    np.log1p(self.model_regret[idx]))
        self._all = (self.points, np.log1p(self.vendor_regret), np.log1p(self.model_regret))

    def near(self, m: int, n: int, k: int, layout: str) -> tuple[float, float]:
        """Geometric-mean (vendor, model) held-out regret over the
        :attr:`neighbors` nearest evidence problems of ``layout`` (nearest
        by squared distance in the envelope's embedding, then by index; the
        vendor's over those with a finite regret), NaN, NaN without
        evidence. The rankers compute the same numbers in the same
        arithmetic (:func:`costlearn.ranker.base.nearest_evidence`, and libm's
        :func:`math.expm1`)."""
        if not self.calibrated:
            return math.nan, math.nan
        v, w = nearest_evidence(*self.evidence(layout), self.neighbors, embed_query(m, n, k))
        return math.expm1(v), math.expm1(w)

    def evidence(self, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The evidence a problem of ``layout`` looks at: its embedded
        problems (float64, shape (E, 3)), log1p of the vendor's and of the
        model's held-out regret on each (float64, shape (E,); the vendor's
        NaN where it was not measured). Those of the layout, or all where
        the layout has fewer than :attr:`neighbors`."""
        return self._by_layout.get(layout, self._all)

    def unsure_reason(self, model_near: float) -> str | None:
        """The OOD reason for a problem whose neighbours' held-out model
        regret is ``model_near``, or None."""
        if model_near > self.unsure_regret and math.isfinite(model_near):
            return (f"the model's held-out top-1 regret on the {self.neighbors} nearest training problems is "
                    f"{model_near:.1%} (above {self.unsure_regret:.1%}, calibrated on held-out logs)")
        return None

    def estimate_reason(self, estimate) -> str | None:
        """The OOD reason for a problem whose vendor-model estimate
        (:class:`~costlearn.model.vendor.VendorEstimate`, or None) is unsure of
        the decision beyond the calibrated ``estimate_unsure``, or None."""
        if estimate is None or not estimate_doubt(estimate.mean_log2, estimate.sd_log2) > self.estimate_unsure:
            return None
        return (f"the vendor model is unsure whether a tile config beats the vendor here: best tile / vendor "
                f"{2 ** estimate.mean_log2:.2f}, its members spread {estimate.sd_log2:.2f} doublings (more doubt "
                f"than {ESTIMATE_UNSURE_QUANTILE:.0%} of the held-out problems)")

    def keeps_vendor(self, tile_lr: float, vendor_near: float, estimate=None) -> bool:
        """True when the vendor stays: the best tile's predicted log2 time
        ratio to the vendor, ``tile_lr``, is not below ``-margin_log2``, the
        vendor was within ``vendor_near_min`` of the best on the neighbours,
        or (where the floor uses the vendor model's estimate) ``estimate``, a
        :class:`~costlearn.model.vendor.VendorEstimate`, does not expect a
        tile to win (:func:`estimate_wins`; a missing estimate keeps it)."""
        if not tile_lr < -self.margin_log2:
            return True
        if math.isfinite(vendor_near) and vendor_near <= self.vendor_near_min:
            return True
        if self.estimate is not None:                   # estimate_wins, on floats (NaN keeps the vendor)
            margin, z = self.estimate
            return estimate is None or not estimate.mean_log2 + z * estimate.sd_log2 < -margin
        return False

    @staticmethod
    def plain() -> "VendorFloor":
        """The uncalibrated floor: the plain argmin, nothing flagged."""
        return VendorFloor(calibrate_floor(pd.DataFrame(), False))
