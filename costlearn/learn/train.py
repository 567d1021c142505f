"""Training: a dataset folder in, a model artifact out (fit the model and the
baselines, hold out problems for metrics, fit the envelope, export and
calibrate the scorer)."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.dataset import current_rows, load, noise_floor, rows_where, valid_rows
from costlearn.core.device import DeviceSpec
from costlearn.model.envelope import (COVERAGE_MARGIN_LOG2, Coverage, Envelope, fit_coverage, fit_envelope,
                                      measured_ranges, outside_rows)
from costlearn.families import KernelFamily, get_family
from costlearn.features import CandidateFeatures, ConfigTable, get_feature_set
from costlearn.learn.coverage import data_coverage
from costlearn.learn.holdout import calibrate_floor, heldout_folds, heldout_problems
from costlearn.learn.metrics import evaluate_rows, random_scores, summarize
from costlearn.learn.retrain import trained_problems
from costlearn.model import BASELINES, artifact, artifact_save, get_model
from costlearn.model.artifact_layout import SIDECAR, model_folder
from costlearn.model.base import CostModel
from costlearn.model.vendor import MIN_PROBLEMS as VENDOR_MIN_PROBLEMS
from costlearn.model.vendor import VendorModel, problem_features_table, problem_table
from costlearn.collect.noise import noise_floors
from costlearn.serve.predictor import Predictor
from costlearn.core.problem import EPILOGUES, Problem
from costlearn.ranker import make_ranker
from costlearn.ranker.cascade import calibrate_cascade, calibration_problems
from costlearn.model.shortlist import MIN_TREES, worth_a_table
from costlearn.ranker.shortlist_build import build_shortlist
from costlearn.collect.sampler import ShapeBounds
from costlearn.core.files import check_output
from costlearn.core.progress import say

__all__ = ["MIN_ROWS", "MIN_PROBLEMS", "pair_counts", "train", "TrainResult", "spec_from_rows", "holdout_report",
           "candidate_pool",
           "export_artifact", "dataset_pairs", "read_device_json"]


@dataclass
class TrainResult:
    """Outcome of :func:`train`: the artifact path, held-out summaries per
    model, row and problem counts, the device, and whether a model already in
    that folder was replaced."""

    path: Path
    holdout: dict
    rows: int
    shapes: int
    dropped: dict
    family: str
    dtype: str
    device: str = ""
    replaced: bool = False
    holdout_kind: str = ""
    floor: dict = None
    data_coverage: dict = None
    """:func:`costlearn.learn.coverage.data_coverage` of the model: per layout,
    its problems and how it answers real models' layer shapes."""


def _across(data_dir, rows) -> float:
    """The across-session noise floor of ``rows`` from ``data_dir``'s
    re-timings (:func:`costlearn.collect.noise.noise_floors`); NaN without."""
    return noise_floors(data_dir, rows).across if Path(data_dir).is_dir() else float("nan")


def _finite_or_none(x: float):
    return float(x) if np.isfinite(x) else None


def spec_from_rows(rows: pd.DataFrame, spec: DeviceSpec | None) -> DeviceSpec:
    """Check that ``spec`` describes the device the rows were measured on.

    Raises
    ------
    ValueError
        If the rows come from more than one device, ``spec`` is None, or
        ``spec`` names another device.
    """
    devs = sorted(rows["device_slug"].unique())
    if len(devs) != 1:
        raise ValueError(f"training rows come from {len(devs)} devices {devs}; train one device at a time")
    if spec is None:
        raise ValueError("no DeviceSpec: pass one, or keep the device.json that collect writes")
    if devs[0] != spec.slug:
        raise ValueError(f"the rows were measured on device {devs[0]!r} but the DeviceSpec describes "
                         f"{spec.name!r} ({spec.slug!r}); check device.json")
    return spec


def holdout_report(rows: pd.DataFrame, spec: DeviceSpec, model: CostModel,
                   seed: int = 0, progress=None) -> tuple[dict, pd.DataFrame, pd.DataFrame, str]:
    """Fit ``model`` (a fresh, unfitted one) and every baseline on the
    training side of each fold of :func:`costlearn.learn.holdout.heldout_folds`
    (leave one log out where the rows hold several logs, else a
    regions of shapes left out) and score them, and a random ranking, on the
    held-out problems' measured candidates. ``progress``: called with a line
    per fold (:mod:`costlearn.core.progress`).

    Returns
    -------
    summary : dict of str to dict
        :func:`costlearn.learn.metrics.summarize` per model, over every held-out
        problem.
    per_shape : DataFrame
        Per-problem metrics, with a ``model`` column.
    held : DataFrame
        :func:`costlearn.learn.holdout.heldout_problems` of the model's held-out
        predictions (what the vendor floor is calibrated on).
    kind : str
        How the hold-out was made.
    """
    folds, kind = heldout_folds(rows, seed, min_train_problems=MIN_PROBLEMS)
    test = np.concatenate([te for _, te in folds])
    models = {model.name: model, **{name: get_model(name) for name in BASELINES}}
    preds = {name: np.full(len(rows), np.nan) for name in models}
    outside = np.zeros(len(rows), bool)
    for i, (tr, te) in enumerate(folds, 1):
        rtr, rte = rows.iloc[tr], rows.iloc[te]
        say(progress)(f"held-out fold {i} of {len(folds)} ({kind}): fitting {', '.join(models)} on {len(tr)} rows, "
                      f"scoring {len(te)}")
        for name, mdl in models.items():
            preds[name][te] = copy.deepcopy(mdl).fit(rtr, spec).predict(rte)
        outside[te] = outside_rows(rtr, rte)
    rte = rows.iloc[test]
    preds = {name: p[test] for name, p in preds.items()}
    preds["random"] = random_scores(rte, seed)
    summary, frames = {}, []
    for name, pred in preds.items():
        per = evaluate_rows(rte, pred)
        per["model"] = name
        frames.append(per)
        summary[name] = summarize(per)
    return (summary, pd.concat(frames, ignore_index=True), heldout_problems(rte, preds[model.name], outside[test]),
            kind)


MIN_ROWS, MIN_PROBLEMS = 50, 5
"""Fewest valid rows and problems :func:`train` fits a model on."""


def heldout_estimates(rows: pd.DataFrame, held: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """``held`` with the vendor model's cross-fitted estimate of each held-out
    problem: ``estimate_log2`` and ``estimate_sd_log2``
    (:class:`~costlearn.model.vendor.VendorModel`, fitted on the training
    side of each fold of :func:`costlearn.learn.holdout.heldout_folds`, the folds the
    cost model was held out on; NaN where a fold's training side has fewer
    than :data:`costlearn.model.vendor.MIN_PROBLEMS` problems with a vendor).

    Parameters
    ----------
    rows : DataFrame
        The valid training rows of one (family, dtype).
    held : DataFrame
        :func:`costlearn.learn.holdout.heldout_problems` of the cost model's held-out
        predictions.
    """
    folds, _ = heldout_folds(rows, seed, min_train_problems=MIN_PROBLEMS)
    key = ["m", "n", "k", "layout", "epilogue"]
    parts = []
    for tr, te in folds:
        train_problems, test = problem_table(rows.iloc[tr]), rows.iloc[te][key].drop_duplicates()
        if len(train_problems) < VENDOR_MIN_PROBLEMS or test.empty:
            continue
        mean, sd = VendorModel.fit(train_problems, seed=seed).estimate(problem_features_table(test))
        parts.append(test.assign(estimate_log2=mean, estimate_sd_log2=sd))
    out = held.drop(columns=["estimate_log2", "estimate_sd_log2"], errors="ignore")
    if not parts:
        return out.assign(estimate_log2=np.nan, estimate_sd_log2=np.nan)
    est = pd.concat(parts, ignore_index=True).drop_duplicates(key, keep="first")
    merged = out.assign(epilogue=out["epilogue"] if "epilogue" in out else "none")
    for c in ("layout", "epilogue"):
        merged[c], est[c] = merged[c].astype(str), est[c].astype(str)
    return merged.merge(est, on=key, how="left")


def pair_counts(df: pd.DataFrame) -> dict:
    """(family, dtype) -> (valid current rows, problems) of a dataset's rows
    (as :func:`costlearn.collect.dataset.load` returns them)."""
    rows = valid_rows(current_rows(df)[0])
    out = {}
    for (f, d), g in rows.groupby(["family", "dtype"], observed=True):
        out[(str(f), str(d))] = (len(g), g[["m", "n", "k", "layout"]].drop_duplicates().shape[0])
    return out


def dataset_pairs(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(family, dtype) pairs of a dataset's valid rows, sorted."""
    v = valid_rows(df)
    return sorted({(str(f), str(d)) for f, d in v[["family", "dtype"]].drop_duplicates().itertuples(index=False)})


def read_device_json(data_dir: Path) -> DeviceSpec | None:
    """The DeviceSpec of a dataset folder's ``device.json`` (None without one).

    Raises
    ------
    ValueError
        If the file is not a valid device description.
    """
    dev_json = data_dir / "device.json"
    if not dev_json.exists():
        return None
    return DeviceSpec.from_file(dev_json)


def _training_rows(data_dir: Path, family, dtype, exclude_sources) -> tuple:
    """:func:`train`'s rows: ``(KernelFamily, dtype, the rows of the pair less excluded and stale ones, their valid
    rows, problems, kernel template, load report, stale rows dropped)``, the pair the only one where not given.

    Raises
    ------
    ValueError
        As :func:`train`.
    """
    df, report = load(data_dir)
    pairs = dataset_pairs(df)
    if family is None or dtype is None:
        fitting = [p for p in pairs if (family is None or p[0] == family) and (dtype is None or p[1] == dtype)]
        if len(fitting) > 1:
            raise ValueError(f"{data_dir} holds rows of {[f'{f}/{d}' for f, d in fitting]}; choose one with "
                             "family= and dtype= (CLI: --family, --dtype)")
        if not fitting and pairs:
            raise ValueError(f"{data_dir} holds no valid {family or '*'}/{dtype or '*'} rows; it holds "
                             f"{[f'{f}/{d}' for f, d in pairs]}")
        family, dtype = fitting[0] if fitting else (family or "gemm", dtype or "float32")
    fam = get_family(family)
    fam.check_dtype(dtype)
    df = df[rows_where(df, family=family, dtype=dtype)]
    if exclude_sources:
        df = df[~df["source_file"].fillna("").isin(list(exclude_sources)).to_numpy(bool)]
    df, stale = current_rows(df)
    rows = valid_rows(df).reset_index(drop=True)
    n_shapes = rows[["m", "n", "k", "layout"]].drop_duplicates().shape[0]
    templates = sorted(rows["template_hash"].unique().tolist())
    if len(templates) > 1:
        raise ValueError(f"{data_dir}'s {family}/{dtype} rows come from {len(templates)} kernel templates "
                         f"{templates} (the family's own kernel and imported logs of another tool's); train on "
                         "one: keep them in separate folders")
    if len(rows) < MIN_ROWS or n_shapes < MIN_PROBLEMS:
        others = [f"{f}/{d}" for f, d in pairs if (f, d) != (family, dtype)]
        raise ValueError(f"{data_dir} has {len(rows)} valid {family}/{dtype} rows over {n_shapes} shapes; "
                         f"need at least {MIN_ROWS} rows over {MIN_PROBLEMS} shapes (collect longer, or import "
                         "more measurements)" + (f"; it also holds {others}" if others else ""))
    return fam, dtype, df, rows, int(n_shapes), templates[0] if templates else fam.template_hash, report, stale


def _training_record(data_dir: Path, df: pd.DataFrame, rows: pd.DataFrame, n_shapes: int, report, stale: int,
                     exclude_sources) -> dict:
    """The sidecar's ``training`` entry: what :func:`train` fitted on (``df``: the pair's current rows; ``rows``:
    their valid ones; ``problems``: :func:`costlearn.learn.retrain.trained_problems`)."""
    return dict(dataset=str(data_dir), rows=int(len(rows)), shapes=n_shapes, problems=trained_problems(rows),
                rows_total=int(len(df)), status_counts=df["status"].value_counts().to_dict(),
                run_ids=sorted(rows["run_id"].unique().tolist()),
                protocol_versions=sorted(int(v) for v in rows["protocol_version"].unique()),
                template_hashes=sorted(rows["template_hash"].unique().tolist()),
                noise_floor=_finite_or_none(noise_floor(rows)),
                noise_floor_across=_finite_or_none(_across(data_dir, rows)),
                corrupt_parts=len(report.corrupt), stale_rows_dropped=stale,
                sources=sorted(rows["source_file"].fillna("").astype(str).unique().tolist()),
                source_sha256s=sorted(rows["source_sha256"].fillna("").astype(str).unique().tolist()),
                excluded_sources=sorted(str(s) for s in exclude_sources))


def train(data_dir, models_dir, *, spec: DeviceSpec | None = None, family: str | None = None,
          dtype: str | None = None, model: str = "xgboost", settings: dict | None = None,
          holdout: bool = True, exclude_sources=(), progress=None) -> TrainResult:
    """Train a cost model on a dataset folder and save the artifact to
    ``<models_dir>/<device>/<family>/<dtype>/``.

    Parameters
    ----------
    data_dir : path
        Dataset folder of one device (``data/<device>/``).
    models_dir : path
        Root of the model store (``models/``); checked before the data is
        read (:func:`costlearn.core.files.check_output`).
    spec : DeviceSpec, optional
        Device description; by default read from ``<data_dir>/device.json``.
    family, dtype : str, optional
        Which rows to train on; by default the only (family, dtype) pair in
        the dataset.
    model : str
        A name in :data:`costlearn.model.MODELS` (default ``xgboost``).
    settings : dict, optional
        Keyword settings of the model (e.g. ``feature_set="raw"``).
    holdout : bool
        Also fit on the training side of each hold-out fold
        (:func:`costlearn.learn.holdout.heldout_folds`: leave one log out where the
        folder holds several logs, else regions of shapes), store the
        held-out metrics of the model and the baselines in the sidecar and
        calibrate the vendor floor on them (:mod:`costlearn.learn.holdout`).
    exclude_sources : sequence of str
        Leave out the rows of these logs (``source_file``; ``""`` for
        collected rows): the leave-one-log-out study trains this way.
    progress : callable, optional
        Called with one line of text per stage (the rows, each hold-out
        fold, the fits, the export; :mod:`costlearn.core.progress`).

    Returns
    -------
    TrainResult

    Raises
    ------
    ValueError
        If the dataset has too few valid rows (< 50) or problems (< 5),
        mixes devices, holds several (family, dtype) pairs and none was
        chosen, has no device description, or ``models_dir`` cannot be
        written.
    """
    data_dir = Path(data_dir)
    if family is not None and dtype is not None:
        get_family(family).check_dtype(dtype)
    get_model(model, **dict(settings or {}))  # an unknown model or setting fails before the data is read
    check_output(models_dir, "models_dir", folder=True)
    fam, dtype, df, rows, n_shapes, template, report, stale = _training_rows(data_dir, family, dtype,
                                                                             exclude_sources)
    step = say(progress)
    step(f"{fam.name}/{dtype}: {len(rows)} valid rows over {n_shapes} shapes of {data_dir}")
    spec = spec_from_rows(rows, spec if spec is not None else read_device_json(data_dir))
    settings = dict(settings or {})
    summary, held, kind = {}, pd.DataFrame(), ""
    if holdout:
        summary, _, held, kind = holdout_report(rows, spec, get_model(model, **settings), seed=0,
                                                progress=lambda line: step(f"{fam.name}/{dtype}: {line}"))
    has_vendor = fam.vendor_config_id is not None and rows["config_id"].eq(fam.vendor_config_id).any()
    vendor_model = None
    if has_vendor:
        problems = problem_table(rows)
        if len(problems) >= VENDOR_MIN_PROBLEMS:
            step(f"{fam.name}/{dtype}: fitting the vendor model on {len(problems)} problems")
            vendor_model = VendorModel.fit(problems)
            if holdout:
                held = heldout_estimates(rows, held)
    floor = calibrate_floor(held, bool(has_vendor), kind)
    step(f"{fam.name}/{dtype}: fitting {model} and the baselines on all {len(rows)} rows")
    mdl = get_model(model, **settings).fit(rows, spec)
    baselines = {name: get_model(name).fit(rows, spec) for name in BASELINES}
    shapes = rows[["m", "n", "k"]].drop_duplicates().to_numpy()
    training = _training_record(data_dir, df, rows, n_shapes, report, stale, exclude_sources)
    folder = model_folder(models_dir, spec.slug, fam.name, dtype)
    replaced = (folder / SIDECAR).exists()
    cands, coverage, _ = candidate_pool(fam, rows, spec, dtype)
    path = export_artifact(mdl, folder, family=fam, dtype=dtype,
                           layouts=sorted(rows["layout"].unique().tolist()), spec=spec,
                           epilogues=[e for e in EPILOGUES if e in set(rows["epilogue"].astype(str))],
                           candidates=cands, envelope=fit_envelope(shapes),
                           metrics=dict(holdout=summary, holdout_kind=kind), training=training,
                           baselines={name: b.save(folder) for name, b in baselines.items()},
                           extra=dict(template_hash=template, floor=floor, coverage=coverage),
                           vendor_model=vendor_model, progress=lambda line: step(f"{fam.name}/{dtype}: {line}"))
    step(f"{fam.name}/{dtype}: answering real models' layer shapes (what the data covers)")
    return TrainResult(path=path, holdout=summary, rows=len(rows), shapes=n_shapes,
                       dropped=dict(report.quarantined, stale_template_or_protocol=stale), family=fam.name,
                       dtype=dtype, device=spec.slug, replaced=replaced, holdout_kind=kind, floor=floor,
                       data_coverage=data_coverage(Predictor(folder), rows))


def candidate_pool(family: KernelFamily, rows: pd.DataFrame, spec: DeviceSpec, dtype: str, *,
                   runnable_only: bool = False) -> tuple:
    """The candidates a model ranks and where each is covered: every config
    measured in ``rows``, and the variants the family's tool derives from
    them for small problems (:meth:`~costlearn.families.KernelFamily.shrunk_variants`:
    Inductor's shrunk configs), each covered where the tool derives it: from
    one parent, a shrunk extent whose next power of two is its block (or
    below the family's smallest block) and the other extents where the
    parent is covered, margin included; from several parents (most of the
    variants of a model of real logs), the smallest box holding those
    regions, since coverage keeps one box per candidate, as it does for a
    measured config's range. Variants ``spec`` cannot run for ``dtype`` are
    left out.

    Why the variants: on a log of real models, the best config of some
    problems is a shrunk one the other logs never measured, which without
    them is no candidate; with them the served regret falls both leaving
    one A100 float16 log out and from the random log alone to the real
    models' logs (docs/results.md, "Quality on real A100 measurements: leave
    one log out").

    Parameters
    ----------
    family : KernelFamily
    rows : DataFrame
        Valid training rows (``config_id``, ``m``, ``n``, ``k``, optionally
        ``registers_per_thread``).
    spec : DeviceSpec
    dtype : str
    runnable_only : bool
        Leave out measured configs ``spec`` cannot run too (a model for
        another device than the rows').

    Returns
    -------
    candidates : DataFrame
        :func:`costlearn.model.artifact_save.candidate_table`'s columns, sorted by
        ``config_id`` (a variant's registers NaN: never compiled here).
    coverage : dict
        :func:`costlearn.model.envelope.fit_coverage` of the candidates.
    dropped : int
        Measured configs left out (``runnable_only``).

    Raises
    ------
    ValueError
        If no measured config is left.
    """
    cands = artifact_save.candidate_table(rows)
    runs = np.array([not runnable_only or family.check_device(family.config_from_id(c), spec, dtype) is None
                     for c in cands["config_id"]], bool)
    dropped = int((~runs).sum())
    cands = cands[runs].reset_index(drop=True)
    if cands.empty:
        raise ValueError(f"no {family.name}/{dtype} config in the rows can run on {spec.slug}")
    measured = set(cands["config_id"])
    min_block = min(family.min_tile_caps(spec))
    lo_all, hi_all = measured_ranges(rows)
    derived = {}
    for cid in sorted(measured):
        parent = family.config_from_id(cid)
        variants = family.shrunk_variants(parent)
        if not variants:
            continue
        lo, hi = lo_all.loc[cid].to_numpy(np.float64), hi_all.loc[cid].to_numpy(np.float64)
        for variant, caps in variants:
            vid = variant.config_id
            if vid in measured or family.check_device(variant, spec, dtype) is not None:
                continue
            vlo, vhi = lo - COVERAGE_MARGIN_LOG2, hi + COVERAGE_MARGIN_LOG2
            for axis, cap in enumerate(caps):          # the tool runs it where next_pow2(extent) is its block
                if cap is not None:
                    vlo[axis] = 0.0 if cap <= min_block else float(np.log2(cap // 2 + 1))
                    vhi[axis] = float(np.log2(cap))
            if vid in derived:
                vlo, vhi = np.minimum(vlo, derived[vid][0]), np.maximum(vhi, derived[vid][1])
            derived[vid] = (vlo, vhi)
    if derived:
        extra = pd.DataFrame({"config_id": sorted(derived), "registers_per_thread": np.nan})
        cands = pd.concat([cands, extra], ignore_index=True).sort_values("config_id", ignore_index=True)
    return cands, fit_coverage(rows, cands["config_id"].tolist(), derived), dropped


def export_artifact(model: CostModel, folder, *, family: KernelFamily | str, dtype: str, layouts, spec: DeviceSpec,
                    candidates: pd.DataFrame, envelope: dict, metrics: dict, training: dict, baselines: dict,
                    extra: dict | None = None, epilogues=("none",), vendor_model=None, progress=None) -> Path:
    """Export ``model``'s scorer for ``candidates``, calibrate its cascade
    (:func:`costlearn.ranker.cascade.calibrate_cascade`), check the scorer against
    ``model.predict``, build its shortlist table where the scorer is deep
    (:func:`costlearn.model.shortlist.worth_a_table`) and save the artifact
    (:func:`costlearn.model.artifact_save.save`). ``family``: the KernelFamily
    (or its name); ``progress``: called with a line per step
    (:mod:`costlearn.core.progress`).

    Raises
    ------
    ValueError
        If the scorer disagrees with the model (more than 1e-3 in log2 time
        on the calibration problems' candidates).
    """
    fam = family if isinstance(family, KernelFamily) else get_family(family)
    family = fam.name
    configs = [fam.config_from_id(c) for c in candidates["config_id"]]
    table = ConfigTable(fam, configs, dtype, spec, candidates["registers_per_thread"].to_numpy(np.float64))
    features = CandidateFeatures(get_feature_set(model.feature_set), table)
    scorer = model.scorer(features.names, [c.config_id for c in configs])
    caps = fam.min_tile_caps(spec)
    problems = calibration_problems(envelope["shapes"], dtype, layouts[0],
                                    ShapeBounds.for_device(spec.device_type == "cpu"))
    variants = [(lay, e) for lay in layouts for e in epilogues]
    if len(variants) > 1:         # the layout and epilogue columns change the scores: calibrate on every one served
        problems = [Problem(p.m, p.n, p.k, dtype, *variants[i % len(variants)]) for i, p in enumerate(problems)]
    step = say(progress)
    step(f"checking the exported scorer and calibrating its cascade on {len(problems)} problems")
    _check_scorer(model, scorer, features, candidates, problems[::40], family, dtype)
    stages, info = calibrate_cascade(scorer, features, caps, problems)
    scorer = scorer.with_cascade(stages)
    env = Envelope(envelope)                                    # a bad envelope fails before anything is written
    shortlist, sl_info = None, None
    if worth_a_table(scorer):
        t0 = time.perf_counter()
        ids = [c.config_id for c in configs]
        extra_ = extra or {}
        ranker = make_ranker(features, scorer, env, caps, coverage=Coverage(extra_.get("coverage"), len(configs)),
                             vendor=ids.index(fam.vendor_config_id) if fam.vendor_config_id in ids else None)
        step(f"building the shortlist table of a {scorer.n_trees}-tree scorer")
        shortlist = build_shortlist(ranker, layouts, [int(envelope["max"][d]) for d in "MNK"])
        sl_info = dict(build_s=round(time.perf_counter() - t0, 1))
    return artifact_save.save(model, folder, family=family, dtype=dtype, layouts=layouts, spec=spec,
                              candidates=candidates, scorer=scorer, envelope=envelope, metrics=metrics,
                              training=training, baselines=baselines, cascade=info, extra=extra, shortlist=shortlist,
                              shortlist_info=sl_info, epilogues=epilogues, vendor_model=vendor_model)


def add_shortlist(folder, *, threads: int | None = None) -> dict:
    """Build the shortlist table of the saved artifact in ``folder`` (one
    trained before tables existed, or rebuilt) and write it into the
    artifact (:func:`costlearn.model.artifact_save.replace_shortlist`).

    Returns
    -------
    dict
        The sidecar's new ``shortlist`` entry.

    Raises
    ------
    ValueError
        If the scorer is too shallow for a table (:func:`~costlearn.model.shortlist.worth_a_table`).
    costlearn.model.artifact_layout.ArtifactError
        If ``folder`` holds no loadable artifact.
    """
    pred = Predictor(folder, shortlist=False)
    if not worth_a_table(pred.artifact.scorer):
        raise ValueError(f"{folder}: a scorer of {pred.artifact.scorer.n_trees} trees; a shortlist table is built for "
                         f"{MIN_TREES} or more")
    t0 = time.perf_counter()
    env = pred.artifact.sidecar["envelope"]
    sl = build_shortlist(pred.ranker, pred.layouts, [int(env["max"][d]) for d in "MNK"], threads=threads)
    artifact_save.replace_shortlist(folder, sl, dict(build_s=round(time.perf_counter() - t0, 1)))
    return artifact.load(folder).sidecar["shortlist"]


def _check_scorer(model, scorer, features, candidates, problems, family, dtype) -> None:
    """log2 of ``model.predict`` on every candidate of a few problems must
    equal the scorer's scores within 1e-3 (the scorer sums in float64, a
    training library may sum in float32)."""
    worst = 0.0
    for p in problems:
        X = features.numpy(p.m, p.n, p.k, None, p.layout, p.epilogue)
        rows = pd.DataFrame(dict(m=p.m, n=p.n, k=p.k, dtype=dtype, layout=p.layout, epilogue=p.epilogue, family=family,
                                 config_id=candidates["config_id"].to_numpy(),
                                 registers_per_thread=candidates["registers_per_thread"].to_numpy(np.float64)))
        want = np.log2(model.predict(rows))
        got = scorer.full_numpy(X, np.arange(len(X)))
        worst = max(worst, float(np.abs(want - got).max()))
    if not worst <= 1e-3:
        raise ValueError(f"the exported {model.name} scorer differs from the model's predictions by {worst:.3g} "
                         "in log2 time; not saving")
