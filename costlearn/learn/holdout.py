"""The vendor floor and the held-out evidence near a problem (design.md, "What
"good" means for a user": the honest score, the floor, the coverage).

A model is trusted for a problem only as far as its held-out record near that
problem allows. At training, every training problem gets a prediction from a
model that did not see it (leave one log out where the training folder holds
several logs, else regions of shapes left out in turn: :func:`heldout_folds`); from
those predictions :func:`heldout_problems` records, per problem, the measured
regret of the vendor library, the regret of the model's own top-1 and the
predicted log2 ratio of its best tile config to the vendor.

At prediction, :class:`VendorFloor` looks up the ``NEIGHBORS`` nearest of those
problems of the same layout (log-shape and aspect distance,
:func:`costlearn.model.envelope.embed`) and:

- **flags** the problem as out of distribution when the model's held-out top-1
  regret there (geometric mean) is above ``unsure_regret``: what predicts
  error on held-out logs, not only distance from the training shapes;
- **keeps the vendor** unless the best tile config is predicted faster by more
  than ``margin_log2`` (log2 of the time ratio) *and* the vendor was not
  already within ``vendor_near_min`` of the best on the neighbours (the
  measured evidence that the library is beatable there);
- **falls back to the vendor outside the extent envelope** only where
  ``ood_fallback`` says so: on the A100's logs the envelope's flag did not
  predict error (on the problems it flags, the model's own top-1 lost less
  than the vendor: docs/results.md, "Triton's matmul on real A100
  measurements"), so whether it sends a problem to the vendor is calibrated
  like the thresholds (a hold-out without envelope-OOD problems leaves it
  off).

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
(:meth:`VendorFloor.estimate_reason`); docs/results.md, "Triton's matmul on
real A100 measurements", has the measured effect. That rule holds near the
data only: beyond :data:`~costlearn.model.vendor_floor.NEAR_LOG2` of every
training shape the
members extrapolate, and their agreement there says nothing. The held-out
problems, left out by region or log, measure what an estimate was worth on
shapes the members had not seen (:func:`fit_transfer`: the measured tile /
vendor ratio regressed on the estimate, an intercept per layout), and a
problem that far is decided by its layout's line
(:meth:`VendorFloor.keeps_vendor`).

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
from threadpoolctl import threadpool_limits

from costlearn.model.envelope import embed
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.learn.metrics import PROBLEM_COLUMNS, geomean_regret
from costlearn.collect.dataset import TUNED_FORMAT
from costlearn.model.base import shape_groups
from costlearn.model.vendor_floor import (ESTIMATE_RULE, ESTIMATE_UNSURE_QUANTILE, MIN_TRANSFER_PROBLEMS, NEAR_LOG2,
                                          NEIGHBORS, estimate_doubt, estimate_wins, plain_floor)

__all__ = ["MARGIN_GRID", "VENDOR_NEAR_GRID", "UNSURE_GRID", "OOD_FALLBACK_GRID", "TOLERANCE", "REGIONS",
           "heldout_folds", "region_folds", "fit_transfer", "heldout_problems", "calibrate_floor", "neighbour_stats",
           "rule_regrets"]

MARGIN_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
"""Candidate margins, log2 of (vendor time / tile time) a tile must be predicted to win by."""
VENDOR_NEAR_GRID = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2)
"""Candidate ``vendor_near_min``: the vendor's measured regret on the neighbours
below which it is kept."""
OOD_FALLBACK_GRID = (False, True)
"""Whether a problem outside the extent envelope falls back to the vendor."""
UNSURE_GRID = (0.03, 0.05, 0.08, 0.12, math.inf)
"""Candidate ``unsure_regret``: the model's held-out top-1 regret on the
neighbours above which a problem is flagged (and the vendor kept)."""
TOLERANCE = 0.02
"""Held-out geometric-mean regret (2 points) a calibration within one log
gives up for a more conservative floor: among the settings within it of the
best, the one that keeps the vendor most often. A hold-out of one log sees
shapes like the training rows, not the shapes the model will be asked
about, so the best setting there is too bold on real models' shapes (what
the plain calibration and this one scored, and why 0.5 and 1 point were not
enough: docs/results.md, "The vendor floor and the vendor model"). Where the
hold-out leaves whole logs out, it sees the shift itself and no tolerance is
given."""
REGIONS = 5
"""Regions of shapes a hold-out within one log leaves out in turn."""


def heldout_folds(rows: pd.DataFrame, seed: int = 0, min_train_problems: int = 2) -> tuple[list, str]:
    """Train/test row indices from which every held-out prediction comes.

    A tuning's measurements (rows of source format
    :data:`~costlearn.collect.dataset.TUNED_FORMAT`:
    a model's top k and the vendor, imported from a tuning database) are
    on the training side of every fold and never held out, unless every
    row is one: the configs of such a problem were chosen by a model, so
    a held-out model's pick is mostly unmeasured there and the best
    measured is the best of those few, not of the problem; scored, they
    would make held-out evidence of another kind than a log's, and the
    vendor floor would trust the model by it. The folds are then made over
    the other rows; where those hold fewer than 2 shapes (no fold can be
    made of them) the folds are regions of every row's shapes
    (:func:`region_folds`), or ``costlearn train`` would have no hold-out:

    Leave one log out where the rows come from two or more logs
    (``source_file``: imported files, or collected rows as ``""``) and at
    least two of those folds keep ``min_train_problems`` problems to train
    on (a log's fold whose other logs hold fewer is not made: its log is
    not held out); else leave regions out (:func:`region_folds`): the
    shapes a model is asked about at compile time are not drawn like its
    training shapes, and a random split of problems holds out shapes whose
    neighbours, often the same shape in another layout, stay in training.

    Parameters
    ----------
    rows : DataFrame
        Valid rows of one (family, dtype), with the problem columns.
    seed : int
        Of the region split.
    min_train_problems : int
        Fewest problems a leave-one-log-out fold trains on (a model fits on
        2 at least).

    Returns
    -------
    folds : list of (ndarray of int, ndarray of int)
        Positional (train, test) indices; a problem is in one test set at most.
    kind : str
        ``"leave-one-log-out (N logs)"`` (``"(N logs, H held out)"`` where
        some were not) or ``"K regions of shapes"``.
    """
    tuned = rows["source_format"].astype(object).to_numpy() == TUNED_FORMAT if "source_format" in rows else \
        np.zeros(len(rows), bool)
    logged = np.flatnonzero(~tuned)
    if tuned.any() and not tuned.all() and len(np.unique(rows[["m", "n", "k"]].to_numpy(np.int64)[logged],
                                                          axis=0)) < 2:
        return region_folds(rows, REGIONS, seed)
    if tuned.any() and not tuned.all():
        folds, kind = heldout_folds(rows.iloc[logged], seed, min_train_problems)
        groups, extra = shape_groups(rows), np.flatnonzero(tuned)
        return [(np.concatenate([logged[tr], extra[~np.isin(groups[extra], groups[logged[te]])]]), logged[te])
                for tr, te in folds], f"{kind}; {len(extra)} tuning rows trained on in every fold"
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
    return region_folds(rows, REGIONS, seed)


def region_folds(rows: pd.DataFrame, regions: int = 5, seed: int = 0) -> tuple[list, str]:
    """Leave regions of shapes out: the distinct (M, N, K) of ``rows`` are
    clustered by k-means on (log2 M, log2 N, log2 K) into
    ``min(regions, shapes)`` regions (at least 2; scikit-learn's ``KMeans``,
    ``n_init=10``, ``random_state=seed``, on one OpenMP thread: its parallel
    sums' order then does not depend on the machine's cores, and a core
    another process keeps busy does not stall it), and each region is one fold's test
    set, every layout of a shape with it.

    Returns
    -------
    folds : list of (ndarray of int, ndarray of int)
        Positional (train, test) indices of ``rows``; every row is in one
        test set.
    kind : str
        ``"K regions of shapes"``.

    Raises
    ------
    ValueError
        If ``rows`` holds fewer than 2 distinct shapes.
    """
    from sklearn.cluster import KMeans

    mnk = rows[["m", "n", "k"]].to_numpy(np.int64)
    shapes, inverse = np.unique(mnk, axis=0, return_inverse=True)
    if len(shapes) < 2:
        raise ValueError(f"a hold-out needs rows of 2 shapes at least; got {len(shapes)}")
    k = max(2, min(int(regions), len(shapes)))
    with threadpool_limits(limits=1, user_api="openmp"):
        label = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(np.log2(shapes.astype(np.float64)))
    row_label = label[np.asarray(inverse).reshape(-1)]
    folds = [(np.flatnonzero(row_label != r), np.flatnonzero(row_label == r)) for r in range(k)]
    return folds, f"{k} regions of shapes"


def fit_transfer(held: pd.DataFrame, per_layout: bool = True) -> dict:
    """How far the vendor model's estimate carried to held-out problems:
    a least-squares line of each problem's measured ``log2(chosen tile
    time / vendor time)`` (the cost model's pick among tiles, from
    ``tile_regret`` and ``vendor_regret``) on its cross-fitted
    ``estimate_log2``, over the problems with all three, with (where
    ``per_layout``) an intercept of its own for each layout of at least
    :data:`~costlearn.model.vendor_floor.MIN_TRANSFER_PROBLEMS` of them.

    Where the hold-out left regions (or logs) out, the line measures what an
    estimate is worth on shapes unlike the training ones: a slope near 1
    and a small intercept where it transfers, a slope near 0 where the
    members extrapolate a constant. The vendor library and the tile
    template each treat a layout's operands their own way (which operand
    is read along its rows, which kernels the library keeps), so where the
    pick lands against the vendor at a given estimate differs by layout:
    one slope, measured within the layouts (each centred on its own means:
    the fixed-effects estimator), and one intercept per layout (the layouts
    with fewer problems share one). :func:`calibrate_floor` asks for the
    layouts' intercepts only where the held-out problems come from two logs
    or more: there a layout's offset is measured on a kind of shape its
    model had not seen (another model zoo), the case it is used for; the
    regions of one log share that log's shapes per layout, and an offset
    measured there is the log's own, which a real model's shapes of that
    layout need not share (docs/results.md, "Where the data is thin", has
    both). A negative slope is no evidence that the estimate ranks
    problems: the line is then flat at each mean. With
    fewer than :data:`~costlearn.model.vendor_floor.MIN_TRANSFER_PROBLEMS`
    problems, intercept and slope are 0: beyond the data no tile is
    expected to win.

    Returns
    -------
    dict
        JSON-ready: ``near_log2`` (:data:`~costlearn.model.vendor_floor.NEAR_LOG2`),
        ``intercept`` (of every problem's means: a layout without its own),
        ``slope`` (>= 0), ``intercepts`` ({layout: intercept}, the layouts
        with their own), ``spread_log2`` (the residuals' standard deviation,
        one degree of freedom per fitted parameter taken; 0 where too few
        problems gave no line), ``problems``.
    """
    est = held["estimate_log2"].to_numpy(np.float64) if "estimate_log2" in held else np.zeros(0)
    y = np.log2((1.0 + held["tile_regret"].to_numpy(np.float64)) / (1.0 + held["vendor_regret"].to_numpy(np.float64))) \
        if len(est) else np.zeros(0)
    ok = np.isfinite(est) & np.isfinite(y)
    x, y = est[ok], y[ok]
    lay = held["layout"].astype(str).to_numpy(object)[ok] if len(est) and "layout" in held \
        else np.full(len(x), "", object)
    out = dict(near_log2=NEAR_LOG2, intercept=0.0, slope=0.0, intercepts={}, spread_log2=0.0, problems=int(len(x)))
    if len(x) < MIN_TRANSFER_PROBLEMS:
        return out
    names, counts = np.unique(lay, return_counts=True)
    own = [str(g) for g, c in zip(names, counts) if c >= MIN_TRANSFER_PROBLEMS] if per_layout else []
    group = np.where(np.isin(lay, own), lay, "")                       # "": the layouts that share an intercept
    xc, yc = x.copy(), y.copy()
    for g in np.unique(group):
        at = group == g
        xc[at] -= x[at].mean()
        yc[at] -= y[at].mean()
    sxx = float(np.sum(xc ** 2))
    slope = max(float(np.sum(xc * yc) / sxx) if sxx > 0 else 0.0, 0.0)
    mean_of = {g: float(np.mean(y[group == g])) - slope * float(np.mean(x[group == g])) for g in np.unique(group)}
    resid = y - (np.array([mean_of[g] for g in group]) + slope * x)      # one group: the pooled line's, bit for bit
    dof = max(len(x) - 1 - len(mean_of), 1)
    out.update(intercept=float(np.mean(y) - slope * np.mean(x)), slope=slope,
               intercepts={g: mean_of[g] for g in own}, spread_log2=float(np.sqrt(np.sum(resid ** 2) / dof)))
    return out


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
        :func:`costlearn.model.envelope.embed` of the evidence problems.
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


def _num(x):
    return float(x) if np.isfinite(x) else None


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
        rows carry the kinds of shape (:mod:`costlearn.learn.transfer`).
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
        are calibrated only without it), ``transfer`` (with the estimate:
        :func:`fit_transfer` of the held-out problems; else None),
        ``estimate_unsure`` (the doubt above
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
    out = plain_floor()
    out.update(layouts=lays,
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
        out["transfer"] = fit_transfer(held, per_layout=len(logs) >= 2)
    out["calibration"].update(
        tolerance=tol, rule_geomean=geomean_regret(r), vendor_geomean=geomean_regret(vr),
        argmin_geomean=geomean_regret(plain),
        envelope_ood=int(held["envelope_ood"].sum()) if "envelope_ood" in held else 0,
        by_log={s: dict(problems=int((src == s).sum()), rule=geomean_regret(r[src == s]), vendor=vendor_by[s],
                        argmin=geomean_regret(plain[src == s])) for s in logs})
    return out
