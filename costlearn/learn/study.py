"""The honest score (design.md, "What "good" means for a user"): a model scored
the way a compiler uses it, on the problems of each log, and leave one log
out.

:func:`decision_scores` asks a :class:`~costlearn.serve.predictor.Predictor` what it
would run for each measured problem (``predict_best``, vendor floor and
coverage included, from all its candidates) and scores the answer against
the measurements: a pick that was never measured on the problem cannot be
scored, so it is counted, never dropped silently. The prune path (the
model choosing among exactly the configs measured on the problem, as
Triton's autotuner asks it) is scored beside it.

:func:`by_source` turns those per-problem scores into one row per log;
:func:`leave_one_log_out` trains on every log of a folder but one (with
:func:`costlearn.learn.train.train`, the product's path) and scores the one left
out, for each.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.dataset import current_rows, load, rows_where, valid_rows
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.learn.metrics import PROBLEM_COLUMNS, geomean_regret
from costlearn.model.artifact_layout import ArtifactError, model_folder
from costlearn.model.artifact import load as load_artifact
from costlearn.serve.predictor import Predictor
from costlearn.core.problem import Problem
from costlearn.core.progress import say
from costlearn.learn.evaluate import EvalResult, score
from costlearn.learn.train import read_device_json, train
from costlearn.model.store import has_model, resolve_model

__all__ = ["decision_scores", "by_source", "format_by_source", "flag_table", "format_flag_table", "leave_one_log_out",
           "StudyResult", "TOP_K", "FOOTNOTE", "reusable_model", "LogFold", "log_folds", "fold_model", "median_times",
           "ScoredMeasurements", "score_measurements", "answers_by_log"]

FOOTNOTE = ("Regret: measured time of the answer / best measured of all (the vendor library included) - 1, geometric "
            "mean over the scored log's problems. 'prune path': the model choosing among exactly the configs "
            "measured on the problem. 'picks never measured': answers that cannot be scored (left out of the top-1 "
            "figures). 'flagged OOD': the answer's ood flag (extent envelope or held-out evidence).")

TOP_K = 5
"""The k of "best of top-k" in these tables."""


def median_times(rows: pd.DataFrame) -> pd.DataFrame:
    """Median time per (problem, source, config): a config measured in several
    sessions counts once (as :func:`costlearn.learn.metrics.evaluate_rows`).

    Parameters
    ----------
    rows : pandas.DataFrame
        Valid dataset rows (``m, n, k, dtype, layout, config_id, time_us``,
        optionally ``source_file``).

    Returns
    -------
    pandas.DataFrame
        One row per (m, n, k, dtype, layout, source, config_id) with its
        median ``time_us`` (microseconds); ``source`` is the row's
        ``source_file`` ("" where absent).
    """
    src = rows["source_file"].astype(object).fillna("") if "source_file" in rows else ""
    return rows.assign(source=src).groupby(list(PROBLEM_COLUMNS) + ["source", "config_id"], sort=False,
                                           observed=True)["time_us"].median().reset_index()


def decision_scores(predictor, rows: pd.DataFrame, best_fixed=None) -> pd.DataFrame:
    """Score what ``predictor`` answers for every problem measured in ``rows``.

    Parameters
    ----------
    predictor : costlearn.serve.predictor.Predictor
    rows : DataFrame
        Valid measurements (any family, dtype or layout: those of the
        predictor's family, dtype and layouts are scored).
    best_fixed : CostModel, optional
        The artifact's ``best_fixed`` baseline, scored on the measured
        configs when given.

    Returns
    -------
    DataFrame
        One row per problem: the problem columns, ``source``, ``candidates``
        (measured configs), ``pick`` and ``chosen_by`` (of ``predict_best``),
        ``pick_measured``, ``top1_regret`` (pick's measured time / best of
        all measured - 1; NaN where the pick was not measured),
        ``top1_regret_tile`` (against the best measured tile config),
        ``top{TOP_K}_regret`` (the best measured of the model's top k; NaN
        where none was measured), ``top{TOP_K}_regret_tile`` (the best
        measured tile config of the top k against the best tile config), ``prune_regret`` (the pick among the
        measured configs, :meth:`~costlearn.serve.predictor.Predictor.choose_among`),
        ``model_regret`` (the plain argmin of the model's predictions among
        the measured configs, no floor: the model's own error), ``tile_lr``
        and ``tile_regret`` (log2 predicted time ratio of the best measured
        tile config to the vendor, and that tile's regret), ``vendor_near``
        and ``model_near`` (the floor's held-out evidence near the problem),
        ``estimate_log2`` and ``estimate_sd_log2`` (the vendor model's
        estimate, :meth:`~costlearn.serve.predictor.Predictor.vendor_estimate`; NaN
        without one),
        ``envelope_ood`` (outside the extent envelope),
        ``vendor_regret`` (NaN without a vendor row), ``best_fixed_regret``,
        ``ood``, ``sure`` (:attr:`~costlearn.serve.prediction.Prediction.sure`) and ``ood_reasons``.

    Raises
    ------
    ValueError
        If no row is of the predictor's family, dtype and layouts.
    """
    fam = predictor.artifact.family
    rows = rows[rows_where(rows, family=fam.name, dtype=predictor.dtype)
                & rows["layout"].isin(set(predictor.layouts)).to_numpy(bool)
                & rows["epilogue"].isin(set(predictor.epilogues)).to_numpy(bool)]
    if rows.empty:
        raise ValueError(f"no valid {fam.name}/{predictor.dtype} measurement of layouts {list(predictor.layouts)} "
                         "to score")
    med = median_times(rows)
    bf = None
    if best_fixed is not None:
        known = med[med["config_id"].isin({c.config_id for c in predictor.configs})]
        cand = known.assign(family=fam.name)
        bf = pd.Series(best_fixed.predict(cand), index=cand.index)
    out = []
    for key, g in med.groupby(list(PROBLEM_COLUMNS), sort=True, observed=True):
        m, n, k, dtype, layout, epilogue = key
        problem = Problem(int(m), int(n), int(k), str(dtype), str(layout), str(epilogue))
        times = dict(zip(g["config_id"].astype(str), g["time_us"]))
        best = min(times.values())
        tiles = [t for c, t in times.items() if c != VENDOR_CONFIG_ID]
        best_tile = min(tiles) if tiles else math.nan
        p = predictor.predict(problem, TOP_K)
        pick = p.config.config_id
        rec = dict(m=int(m), n=int(n), k=int(k), dtype=str(dtype), layout=str(layout), epilogue=str(epilogue),
                   source=str(g["source"].iloc[0]), candidates=len(times), pick=pick, chosen_by=p.chosen_by,
                   pick_measured=pick in times, ood=p.ood, sure=p.sure, ood_reasons="; ".join(p.ood_reasons))
        rec["top1_regret"] = times[pick] / best - 1.0 if pick in times else math.nan
        rec["top1_regret_tile"] = times[pick] / best_tile - 1.0 if pick in times and pick != VENDOR_CONFIG_ID \
            and tiles else math.nan
        top = [times[c.config_id] for c, _ in p.top_k if c.config_id in times]
        rec[f"top{TOP_K}_regret"] = min(top) / best - 1.0 if top else math.nan
        top_tiles = [times[c.config_id] for c, _ in p.top_k if c.config_id in times and c.config_id != VENDOR_CONFIG_ID]
        rec[f"top{TOP_K}_regret_tile"] = min(top_tiles) / best_tile - 1.0 if top_tiles else math.nan
        configs = [fam.config_from_id(c) for c in times]
        scores = predictor.score_configs(problem, configs)
        i, _, _ = predictor.choose_among(problem, configs, scores)
        rec["prune_regret"] = times[configs[i].config_id] / best - 1.0
        rec["model_regret"] = times[configs[int(np.argmin(scores))].config_id] / best - 1.0
        tile = [j for j, c in enumerate(configs) if c.config_id != VENDOR_CONFIG_ID]
        if tile and VENDOR_CONFIG_ID in times:
            j = min(tile, key=lambda j: scores[j])
            rec["tile_lr"] = float(np.log2(scores[j] / scores[[c.config_id for c in configs].index(VENDOR_CONFIG_ID)]))
            rec["tile_regret"] = times[configs[j].config_id] / best - 1.0
        rec["vendor_near"], rec["model_near"] = predictor.floor.near(problem.m, problem.n, problem.k, problem.layout)
        est = predictor.vendor_estimate(problem)
        rec["estimate_log2"], rec["estimate_sd_log2"] = (est.mean_log2, est.sd_log2) if est is not None else \
            (math.nan, math.nan)
        rec["envelope_ood"] = bool(predictor.envelope.reasons(problem.m, problem.n, problem.k))
        rec["vendor_regret"] = times[VENDOR_CONFIG_ID] / best - 1.0 if VENDOR_CONFIG_ID in times else math.nan
        if bf is not None:
            gi = g.index[g["config_id"].isin({c.config_id for c in predictor.configs})]
            rec["best_fixed_regret"] = (g.loc[gi, "time_us"].to_numpy()[np.argmin(bf.loc[gi].to_numpy())] / best
                                        - 1.0) if len(gi) else math.nan
        out.append(rec)
    return pd.DataFrame(out)


def by_source(per: pd.DataFrame) -> pd.DataFrame:
    """One row per log (and ``all``): problems, geometric-mean regrets (top-1
    vs best of all and vs best tile, best of top-k, prune path, vendor only,
    best fixed), the share flagged out of distribution, the share where the
    vendor was chosen, and the picks never measured on their problem
    (``unmeasured``: left out of the top-1 figures, counted here).

    Parameters
    ----------
    per : DataFrame
        :func:`decision_scores` (several may be concatenated).
    """
    recs = []
    groups = list(per.groupby("source", sort=True)) + ([("all", per)] if per["source"].nunique() > 1 else [])
    for src, g in groups:
        recs.append(dict(source=src, problems=len(g),
                         top1=geomean_regret(g["top1_regret"]), top1_tile=geomean_regret(g["top1_regret_tile"]),
                         **{f"top{TOP_K}": geomean_regret(g[f"top{TOP_K}_regret"]),
                            f"top{TOP_K}_tile": geomean_regret(g[f"top{TOP_K}_regret_tile"])
                            if f"top{TOP_K}_regret_tile" in g else math.nan},
                         prune=geomean_regret(g["prune_regret"]), vendor_only=geomean_regret(g["vendor_regret"]),
                         best_fixed=geomean_regret(g["best_fixed_regret"]) if "best_fixed_regret" in g else math.nan,
                         flagged=float(g["ood"].mean()), vendor_chosen=float(g["pick"].eq(VENDOR_CONFIG_ID).mean()),
                         unmeasured=int((~g["pick_measured"]).sum())))
    return pd.DataFrame(recs)


def _pct(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.2%}"


def format_by_source(table: pd.DataFrame, title: str = "") -> str:
    """:func:`by_source` as a Markdown table."""
    head = ["log", "problems", "top-1 vs best of all", f"best of top-{TOP_K}", "top-1 vs best tile (where a tile is "
            "picked)", f"best tile of top-{TOP_K} vs best tile", "prune path", "vendor only", "best fixed",
            "flagged OOD", "vendor chosen", "picks never measured"]
    lines = ([f"### {title}", ""] if title else []) + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.source} | {r.problems} | {_pct(r.top1)} | {_pct(getattr(r, f'top{TOP_K}'))} | "
                     f"{_pct(r.top1_tile)} | {_pct(getattr(r, f'top{TOP_K}_tile'))} | {_pct(r.prune)} | "
                     f"{_pct(r.vendor_only)} | {_pct(r.best_fixed)} | "
                     f"{r.flagged:.0%} | {r.vendor_chosen:.0%} | {r.unmeasured} |")
    return "\n".join(lines)


def flag_table(per: pd.DataFrame, bad: float = 0.05) -> pd.DataFrame:
    """How well the OOD flag predicts the model's own error, per log (and
    ``all``): the share flagged, the geometric-mean regret of the model's
    plain argmin (``model_regret``: no floor) on flagged and unflagged
    problems, and the flag's precision and recall for "top-1 regret >
    ``bad``".

    Parameters
    ----------
    per : DataFrame
        :func:`decision_scores`.
    bad : float
        The regret that counts as a miss (0.05: 5 %).
    """
    recs = []
    groups = list(per.groupby("source", sort=True)) + ([("all", per)] if per["source"].nunique() > 1 else [])
    for src, g in groups:
        flag, miss = g["ood"].to_numpy(bool), g["model_regret"].to_numpy() > bad
        recs.append(dict(source=src, problems=len(g), flagged=float(flag.mean()),
                         model_flagged=geomean_regret(g["model_regret"][flag]),
                         model_unflagged=geomean_regret(g["model_regret"][~flag]),
                         vendor_flagged=geomean_regret(g["vendor_regret"][flag]),
                         precision=float((flag & miss).sum() / flag.sum()) if flag.any() else math.nan,
                         recall=float((flag & miss).sum() / miss.sum()) if miss.any() else math.nan))
    return pd.DataFrame(recs)


def format_flag_table(table: pd.DataFrame, title: str = "", bad: float = 0.05) -> str:
    """:func:`flag_table` as a Markdown table."""
    head = ["log", "problems", "flagged", "model's own top-1 on flagged", "on unflagged", "vendor on flagged",
            f"precision for top-1 > {bad:.0%}", "recall"]
    lines = ([f"### {title}", ""] if title else []) + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.source} | {r.problems} | {r.flagged:.0%} | {_pct(r.model_flagged)} | "
                     f"{_pct(r.model_unflagged)} | {_pct(r.vendor_flagged)} | {_pct(r.precision)} | "
                     f"{_pct(r.recall)} |")
    return "\n".join(lines)


class StudyResult:
    """Outcome of :func:`leave_one_log_out`.

    Attributes
    ----------
    per_problem : DataFrame
        :func:`decision_scores` of every left-out log, with ``dtype``.
    table : DataFrame
        :func:`by_source` per dtype (a ``dtype`` column).
    skipped : list of str
        Why a (dtype, log) was not scored (e.g. the only log of its dtype).
    """

    def __init__(self, per_problem: pd.DataFrame, table: pd.DataFrame, skipped: list):
        self.per_problem, self.table, self.skipped = per_problem, table, skipped

    def format(self) -> str:
        """The tables, one per dtype, as Markdown."""
        parts = []
        for dt, t in self.table.groupby("dtype", sort=True):
            parts.append(format_by_source(t.drop(columns="dtype"), f"{dt}: each log scored by a model trained on "
                                          "the others"))
        for dt, per in self.per_problem.groupby("dtype", sort=True):
            parts.append(format_flag_table(flag_table(per), f"{dt}: the OOD flag against the model's own top-1 "
                                           "(plain argmin of the measured configs, no floor)"))
        parts += [f"- {s}" for s in self.skipped]
        return "\n\n".join(parts)


def reusable_model(models, data_dir, family: str, dtype: str, excluded, rows: int) -> Path | None:
    """The model folder (under the model store ``models``) an earlier run
    left, when it was trained on ``data_dir``'s rows less exactly the logs
    ``excluded`` and on ``rows`` valid rows (the count the caller has now:
    none added since); else None."""
    for dev in sorted(p.name for p in Path(models).glob("*") if p.is_dir()):
        folder = model_folder(models, dev, family, dtype)
        try:
            art = load_artifact(folder)
        except ArtifactError:
            continue
        tr = art.sidecar.get("training", {})
        if Path(tr.get("dataset", "")).resolve() == Path(data_dir).resolve() and \
                tr.get("excluded_sources") == sorted(excluded) and tr.get("rows") == int(rows):
            return folder
    return None


@dataclass(frozen=True)
class LogFold:
    """One fold of leave one log out.

    Attributes
    ----------
    data_dir : Path
        The device's dataset folder.
    family, dtype : str
    left_out : str
        The log left out (its ``source_file``; ``"collected"`` for rows
        costlearn measured).
    test : pandas.DataFrame
        Valid rows of the left-out log on problems (M, N, K, layout) that no
        other log measures.
    training_rows : int
        Valid rows of the other logs of this dtype.
    """

    data_dir: Path
    family: str
    dtype: str
    left_out: str
    test: pd.DataFrame
    training_rows: int

    @property
    def excluded(self) -> tuple:
        """The ``exclude_sources`` of the fold's training."""
        return (self.left_out,) if self.left_out != "collected" else ("",)

    def served(self, layouts, skipped: list) -> pd.DataFrame:
        """:attr:`test` in the ``layouts`` a model serves; the rest noted in
        ``skipped``."""
        test = self.test
        ok = test["layout"].isin(set(layouts)).to_numpy(bool)
        if not ok.all():
            lost = test[~ok][["m", "n", "k", "layout"]].drop_duplicates()
            skipped.append(f"{self.dtype}: {len(lost)} problem(s) of {self.left_out} in layouts "
                           f"{sorted(lost['layout'].unique())} no other log measures: not scored")
        return test[ok]


def log_folds(data_dir, family: str = "triton_mm", dtypes=None, skipped: list | None = None):
    """The folds of leave one log out over a device's dataset folder, in
    order of dtype, then log.

    Parameters
    ----------
    data_dir : path
        Rows with distinct ``source_file`` are logs (imported files;
        collected rows count as one log).
    family : str
    dtypes : sequence of str, optional
        Default: every dtype of the family the folder holds.
    skipped : list, optional
        Gets a line for each dtype with fewer than two logs and each log
        whose every problem another log measures.

    Yields
    ------
    LogFold

    Raises
    ------
    ValueError
        If the folder holds no valid rows of the family.
    """
    data_dir = Path(data_dir)
    skipped = [] if skipped is None else skipped
    df, _ = load(data_dir)
    rows = valid_rows(current_rows(df[rows_where(df, family=family)])[0])
    if rows.empty:
        have = sorted(set(valid_rows(df)["family"].astype(str))) if not df.empty else []
        raise ValueError(f"{data_dir} holds no valid {family} rows (family={family!r}, CLI: --family, whose default "
                         f"is triton_mm); it holds {have or 'none'}")
    rows = rows.assign(source_file=rows["source_file"].astype(object).fillna("")
                       .replace("", "collected") if "source_file" in rows else "collected")
    for dt in (list(dtypes) if dtypes else sorted(rows["dtype"].astype(str).unique())):
        sub = rows[rows["dtype"].astype(str) == dt]
        logs = sorted(sub["source_file"].unique())
        if len(logs) < 2:
            skipped.append(f"{dt}: {len(logs)} log(s) ({', '.join(logs) or 'none'}); leave-one-log-out needs two")
            continue
        for left in logs:
            others = sub[sub["source_file"] != left]
            seen = set(map(tuple, others[["m", "n", "k", "layout"]].drop_duplicates()
                           .itertuples(index=False, name=None)))
            test = sub[sub["source_file"] == left]
            test = test[[t not in seen for t in test[["m", "n", "k", "layout"]].itertuples(index=False, name=None)]]
            if test.empty:
                skipped.append(f"{dt}: every problem of {left} is also in another log")
                continue
            yield LogFold(data_dir, family, dt, left, test, len(others))


def fold_model(fold: LogFold, work_dir, *, settings: dict | None = None, reuse: bool = True,
               progress=None) -> Path:
    """The model folder of ``fold`` under ``<work_dir>/<dtype>/without-<log>/``:
    the one an earlier run left there when it fits (:func:`reusable_model`,
    with ``reuse``), else one trained now (``progress``: its stages,
    :func:`costlearn.learn.train.train`).

    Raises
    ------
    ValueError
        As :func:`costlearn.learn.train.train` (e.g. too few rows).
    """
    models = Path(work_dir) / fold.dtype / f"without-{Path(fold.left_out).stem}"
    folder = reusable_model(models, fold.data_dir, fold.family, fold.dtype, fold.excluded, fold.training_rows) \
        if reuse else None
    if folder is None:
        folder = train(fold.data_dir, models, family=fold.family, dtype=fold.dtype, settings=settings,
                       exclude_sources=fold.excluded, progress=progress).path.parent
    return folder


def leave_one_log_out(data_dir, work_dir, *, family: str = "triton_mm", dtypes=None, settings: dict | None = None,
                      progress=None, reuse: bool = True) -> StudyResult:
    """Train on every log of ``data_dir`` but one and score the one left out
    (its problems that no training log measured), for each log and dtype.

    Parameters
    ----------
    data_dir : path
        A device's dataset folder holding several logs (rows with distinct
        ``source_file``: imported files; collected rows count as one log).
    work_dir : path
        Where the fold's models go (``<work_dir>/<dtype>/without-<log>/``).
    family : str
    dtypes : sequence of str, optional
        Default: every dtype of the family the folder holds.
    settings : dict, optional
        Model settings for :func:`costlearn.learn.train.train`.
    progress : callable, optional
        Called with one line of text per stage: each fold (its log, dtype
        and place among the folds), its training's stages
        (:func:`costlearn.learn.train.train`), its score
        (:mod:`costlearn.core.progress`).
    reuse : bool
        Score a fold's model left in ``work_dir`` by an earlier run (trained
        on the same folder's rows less the same log, none added since)
        instead of training it again: a stopped study resumes.

    Returns
    -------
    StudyResult

    Raises
    ------
    ValueError
        If the folder holds no valid rows of the family, or no dtype has two
        logs.
    """
    data_dir, work_dir = Path(data_dir), Path(work_dir)
    frames, tables, skipped = [], [], []
    by_dtype: dict = {}
    step = say(progress)
    step(f"reading the logs of {data_dir}")
    folds = list(log_folds(data_dir, family, dtypes, skipped))
    for i, fold in enumerate(folds, 1):
        dt, left = fold.dtype, fold.left_out
        t0 = time.perf_counter()
        where = f"fold {i} of {len(folds)}, {dt} without {left}"
        step(f"{where}: the model of the other logs' {fold.training_rows} rows")
        try:
            folder = fold_model(fold, work_dir, settings=settings, reuse=reuse,
                                progress=lambda line, where=where: step(f"{where}: {line}"))
        except ValueError as e:
            skipped.append(f"{dt}: without {left}: {e}")
            continue
        pred = Predictor(folder)
        test = fold.served(pred.layouts, skipped)
        step(f"{where}: scoring what predict_best answers on {len(test)} rows of {left}")
        per = decision_scores(pred, test, best_fixed=pred.artifact.baseline("best_fixed"))
        per["source"] = left
        by_dtype.setdefault(dt, []).append(per)
        tr = pred.artifact.sidecar.get("training", {})
        step(f"{dt}: without {left} ({tr.get('rows')} rows, {tr.get('shapes')} problems): "
             f"{time.perf_counter() - t0:.0f} s; scored {len(per)} problems of {left}")
    for dt, per_dt in by_dtype.items():
        per = pd.concat(per_dt, ignore_index=True)
        frames.append(per)
        tables.append(by_source(per).assign(dtype=dt))
    if not frames:
        raise ValueError(f"{data_dir}: no dtype of {family} holds two logs to leave one out ({'; '.join(skipped)})")
    return StudyResult(pd.concat(frames, ignore_index=True), pd.concat(tables, ignore_index=True), skipped)


@dataclass(frozen=True)
class ScoredMeasurements:
    """A model scored on a dataset folder's measurements, nothing measured (``costlearn evaluate --no-measure``).

    Attributes
    ----------
    result : costlearn.learn.evaluate.EvalResult
        :func:`costlearn.learn.evaluate.score` of the folder's rows.
    artifact : costlearn.model.artifact.Artifact
        The model scored.
    rows : DataFrame
        The folder's rows as loaded.
    notes : tuple of str
        Why the scores are in-sample, where they are (the model's training folder, or logs in its training rows).
    """
    result: EvalResult
    artifact: object
    rows: pd.DataFrame
    notes: tuple


def score_measurements(folder, model, family: str, dtype: str, models_dir=None) -> ScoredMeasurements:
    """Score the ``family``/``dtype`` model of device folder ``model`` (None: the measurements' device's model where
    the store has one, else the store's only one, :func:`costlearn.model.store.resolve_model`) on the rows of the
    dataset folder ``folder``."""
    if model is None:       # the measurements' device's model, where the store has one
        spec = read_device_json(folder)
        if spec is not None and has_model(spec.slug, family, dtype, models_dir):
            model = spec.slug
    art = load_artifact(resolve_model(model, family, dtype, models_dir, cli=True))
    measured = load(folder)[0]
    res = score(art, measured, data=folder)
    training = art.sidecar.get("training", {})
    trained_on = str(training.get("dataset", ""))
    shared = set(res.rows["source_sha256"].dropna().astype(str)) & set(training.get("source_sha256s", [])) - {""}
    notes = []
    if trained_on and Path(trained_on).resolve() == Path(folder).resolve():
        notes.append(f"note: {folder} is the folder this model was trained on, so these scores are in-sample; the "
                     "held-out table `costlearn train` printed is the honest one (or score measurements the model "
                     "was not trained on, imported into another folder)")
    elif shared:
        notes.append(f"note: {len(shared)} of the logs scored here (by sha256) were in this model's training rows, "
                     "so their scores are in-sample; `costlearn study` leaves each log out")
    return ScoredMeasurements(res, art, measured, tuple(notes))


def answers_by_log(scored: ScoredMeasurements) -> str:
    """What ``predict_best`` answers on the scored rows' problems, by log (:func:`decision_scores`,
    :func:`format_by_source`), with :data:`FOOTNOTE`."""
    art = scored.artifact
    per = decision_scores(Predictor(art.path), valid_rows(current_rows(scored.rows)[0]),
                          best_fixed=art.baseline("best_fixed"))
    return format_by_source(by_source(per), "What predict_best answers (all candidates, vendor floor and coverage "
                            "included), by log") + "\n\n" + FOOTNOTE + (
        " The table above ranks the measured configs only; this one scores the answer predict_best gives.")
