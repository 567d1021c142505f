"""Ranking metrics, with the fixed definitions of design.md ("Metrics").

For one shape with measured candidate times t(c) and a model's predicted
times p(c):

- top-k regret = min over the k configs with the lowest p of t(c), divided by
  min over all measured c of t(c), minus 1 (TpuGraphs' top-k error);
- Kendall tau between p and t (tau-b, scipy);
- APE = |p - t| / t, averaged over the shape's candidates (MAPE);
- TenSet top-k score over a set of shapes = sum_s best_s / sum_s (min t over
  the model's top-k).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from costlearn.families import VENDOR_CONFIG_ID

__all__ = ["PROBLEM_COLUMNS", "vendor_summaries", "vendor_only_scores", "topk_regret", "shape_metrics", "summarize",
           "evaluate_rows", "random_scores", "KS", "geomean_regret", "BaselineVerdict", "no_better_than"]

KS = (1, 5, 10)


def topk_regret(pred: np.ndarray, true: np.ndarray, k: int, noise_rel: float = 0.0) -> float:
    """Top-k regret of one shape.

    Parameters
    ----------
    pred, true : ndarray of float64, shape (C,)
        Predicted score (lower is better) and measured time_us of the C
        candidates measured on the shape.
    k : int
        Number of top predictions considered (k >= 1; capped at C).
    noise_rel : float
        Relative noise floor; a regret at or below it counts as 0 (a tie).

    Returns
    -------
    float
        >= 0.
    """
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    if true.size == 0 or pred.shape != true.shape:
        raise ValueError(f"need equal-length, non-empty pred and true, got {pred.shape} and {true.shape}")
    order = np.argsort(pred, kind="stable")[: max(1, int(k))]
    r = float(true[order].min() / true.min() - 1.0)
    return 0.0 if r <= noise_rel else r


def shape_metrics(pred: np.ndarray, true: np.ndarray, noise_rel: float = 0.0) -> dict:
    """All per-shape metrics: ``top{k}_regret`` for k in :data:`KS`,
    ``kendall_tau``, ``mape``, ``top{k}_time_us`` and ``best_time_us``."""
    from scipy.stats import kendalltau

    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    out = {f"top{k}_regret": topk_regret(pred, true, k, noise_rel) for k in KS}
    for k in KS:
        out[f"top{k}_time_us"] = float(true[np.argsort(pred, kind="stable")[:k]].min())
    out["best_time_us"] = float(true.min())
    tau = kendalltau(pred, true)[0] if len(true) > 1 else math.nan   # [0]: works on every scipy
    out["kendall_tau"] = float(tau) if tau is not None else math.nan
    out["mape"] = float(np.mean(np.abs(pred - true) / true))
    return out


PROBLEM_COLUMNS = ("m", "n", "k", "dtype", "layout", "epilogue")
"""What identifies one problem (its rows are one ranking)."""


def evaluate_rows(rows: pd.DataFrame, pred: np.ndarray, noise_rel: float = 0.0) -> pd.DataFrame:
    """Per-problem metrics of predictions ``pred`` (aligned with ``rows``,
    valid rows with ``time_us``).

    A problem is (m, n, k) with ``dtype``, ``layout`` and ``epilogue``
    where the rows have those columns. A config measured several times on one problem (rows
    with one ``config_id``, e.g. an imported log's repeated sessions) counts
    once, with the median of its times and the mean of its predictions.

    Returns
    -------
    DataFrame
        One row per problem: :func:`shape_metrics`, the problem columns and
        ``n_candidates``.
    """
    cols = [c for c in PROBLEM_COLUMNS if c in rows.columns]
    rows = rows.assign(_pred=np.asarray(pred, np.float64))
    if "config_id" in rows.columns and rows.duplicated(cols + ["config_id"]).any():
        rows = rows.groupby(cols + ["config_id"], sort=False, observed=True).agg(
            time_us=("time_us", "median"), _pred=("_pred", "mean")).reset_index()
    out = []
    for key, g in rows.groupby(cols, sort=True, observed=True):
        d = shape_metrics(g["_pred"].to_numpy(), g["time_us"].to_numpy(), noise_rel)
        d.update({c: (int(v) if c in ("m", "n", "k") else str(v)) for c, v in zip(cols, key)})
        d["n_candidates"] = len(g)
        out.append(d)
    return pd.DataFrame(out)


def vendor_summaries(rows: pd.DataFrame, pred: np.ndarray, noise_rel: float = 0.0) -> dict:
    """Summaries of predictions on rows that include the vendor candidate.

    Returns
    -------
    dict
        ``all``: :func:`summarize` with every candidate (regret against the
        best of all, the vendor library included); ``tile_only``: with the
        vendor rows left out (regret against the best tile config, the
        model's pick among tile configs only). Only ``all`` when the rows
        hold no vendor row.
    """
    pred = np.asarray(pred, np.float64)
    out = {"all": summarize(evaluate_rows(rows, pred, noise_rel))}
    vendor = rows["config_id"].eq(VENDOR_CONFIG_ID).to_numpy(bool)
    if vendor.any() and (~vendor).any():
        out["tile_only"] = summarize(evaluate_rows(rows[~vendor], pred[~vendor], noise_rel))
    return out


def vendor_only_scores(rows: pd.DataFrame) -> np.ndarray:
    """The "always call the vendor library" ranking: 0 for vendor rows, 1 for
    the others, float64 of shape (len(rows),)."""
    return np.where(rows["config_id"].eq(VENDOR_CONFIG_ID).to_numpy(bool), 0.0, 1.0)


def geomean_regret(regrets) -> float:
    """Geometric-mean slowdown minus 1 of per-problem regrets: exp(mean(log(1
    + r))) - 1 (design.md, "Metrics"); NaN regrets are left out, NaN if none
    is left.

    Parameters
    ----------
    regrets : array-like of float, shape (n,)
        Relative regrets (0.05 is 5 %), each >= 0.
    """
    r = np.asarray(regrets, dtype=np.float64)
    r = r[np.isfinite(r)]
    return float(np.exp(np.mean(np.log1p(r))) - 1.0) if r.size else math.nan


def summarize(per_shape: pd.DataFrame) -> dict:
    """Summary over shapes: for each k, mean top-k regret, geometric-mean
    slowdown minus 1, p90 and max; TenSet top-k score; mean Kendall tau;
    mean MAPE; shape count."""
    s = {"shapes": int(len(per_shape))}
    if per_shape.empty:
        return s
    for k in KS:
        r = per_shape[f"top{k}_regret"].to_numpy(np.float64)
        s[f"top{k}_mean"] = float(r.mean())
        s[f"top{k}_geomean"] = geomean_regret(r)
        s[f"top{k}_p90"] = float(np.quantile(r, 0.9))
        s[f"top{k}_max"] = float(r.max())
        s[f"tenset_top{k}"] = float(per_shape["best_time_us"].sum() / per_shape[f"top{k}_time_us"].sum())
    s["kendall_tau"] = float(np.nanmean(per_shape["kendall_tau"])) if per_shape["kendall_tau"].notna().any() \
        else math.nan
    s["mape"] = float(per_shape["mape"].mean())
    return s


def random_scores(rows: pd.DataFrame, seed: int = 0) -> np.ndarray:
    """A random ranking of each problem's rows, seeded per problem (M, N, K):
    the random baseline of every evaluation. float64 of shape (len(rows),),
    lower ranks first."""
    out = np.empty(len(rows))
    for key, idx in rows.groupby(["m", "n", "k"]).indices.items():
        rng = np.random.default_rng([seed, *(int(v) for v in key)])
        out[idx] = rng.random(len(idx))
    return out


class BaselineVerdict(NamedTuple):
    """A model no better than a baseline on held-out problems (:func:`no_better_than`)."""

    metric: str
    """The summary's key compared: ``top1_mean`` or ``top1_geomean`` (top-1 regret)."""
    baseline: str
    """The baseline's name (``random``, ``roofline``, ``best_fixed``)."""
    model_regret: float
    baseline_regret: float


def no_better_than(summary: dict, model: str) -> BaselineVerdict | None:
    """Whether ``model`` ranks held-out problems no better than a baseline.

    Parameters
    ----------
    summary : dict of str to dict
        :func:`summarize` by name, the model's and the baselines' (a held-out
        table, as :func:`costlearn.learn.train.holdout_report` returns it).
    model : str
        The model's name in ``summary``.

    Returns
    -------
    BaselineVerdict or None
        The first of top-1 regret mean, then geomean, on which some baseline
        is at least as good as the model (at equal regret too: the model
        learned nothing a baseline does not do), naming the best such
        baseline and both figures; None where the model beats every
        baseline on both, or ``summary`` has no figures for it.
    """
    mine = summary.get(model) or {}
    for metric in ("top1_mean", "top1_geomean"):
        own = mine.get(metric)
        others = {name: sm.get(metric) for name, sm in summary.items() if name != model}
        others = {name: v for name, v in others.items() if v is not None and np.isfinite(v)}
        if own is None or not np.isfinite(own) or not others:
            continue
        best = min(others, key=others.get)
        if own >= others[best]:
            return BaselineVerdict(metric, best, float(own), float(others[best]))
    return None
