"""Carry a model to another device: ``costlearn transfer --from SRC --to DST``.

For every (family, dtype) the source device has a model of, fit one
:class:`~costlearn.model.transfer.MultiDeviceXGBModel` on the source model's
training rows (each with its own device's features) and whatever rows of the
destination there are, and save it as the destination's artifact, served by
``predict_best(..., device=DST)`` like any other.

- **Feasibility is the destination's**: candidates are the configs measured
  on either device that pass the family's rules on the destination's
  :class:`~costlearn.core.device.DeviceSpec` (shared memory, threads, registers,
  Hopper's pipeline copies); no other config can be predicted.
- **Held-out figures and the vendor floor come from destination problems**
  (:func:`costlearn.learn.holdout.calibrate_floor`): with at least
  :data:`MIN_CALIBRATION_PROBLEMS` of them, each is predicted by a model fit
  without it (grouped k-fold over destination problems; the source rows are in
  every fold). The floor is never worse than the vendor on them, then of
  the lowest regret (no tolerance towards keeping the vendor: that guards a
  one-log calibration against kinds of shape it never saw, which the source's
  rows carry here; with it, a calibration on 32 H100 bfloat16 problems kept
  cuBLAS on every problem, at cuBLAS alone's regret, well above the transfer's:
  docs/results.md, "A new GPU: carry a model across devices"), and it may leave the
  neighbours' vendor regret unchecked (:func:`~costlearn.learn.holdout.calibrate_floor`'s
  ``vendor_near_grid``). The source's held-out evidence is not reused: the vendor's
  standing differs between devices (cuBLAS beats every Triton config on the
  H100's float32 and TF32 problems, not on the A100's).
- **Zero-shot** (fewer destination problems than that): the floor keeps the
  vendor unless the best tile is predicted :data:`ZERO_SHOT_MARGIN_LOG2`
  doublings faster; and until :data:`MIN_DESTINATION_PROBLEMS` destination
  problems were seen, every prediction is flagged OOD with a reason naming
  the source device.
- The source's artifacts are only read.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold

from costlearn.collect.dataset import current_rows, load, rows_where, valid_rows
from costlearn.collect.active_shapes import ActiveSettings
from costlearn.collect.strategy import choose_problems
from costlearn.core.device import PRESETS, DeviceSpec, preset
from costlearn.model.envelope import fit_envelope, outside_rows
from costlearn.model.store import store_hint
from costlearn.families import get_family
from costlearn.learn.active import EnsembleDisagreement, member_params
from costlearn.learn.holdout import VENDOR_NEAR_GRID, calibrate_floor, heldout_problems
from costlearn.model.vendor_floor import FLOOR_VERSION, NEIGHBORS
from costlearn.learn.metrics import evaluate_rows, summarize
from costlearn.model import artifact, artifact_layout, get_model
from costlearn.model.transfer import MIN_DESTINATION_PROBLEMS, MultiDeviceXGBModel, zero_shot_reason
from costlearn.learn.train import candidate_pool, export_artifact, read_device_json

__all__ = ["transfer", "TransferResult", "transfer_rows", "zero_shot_floor", "zero_shot_reason",
           "MIN_DESTINATION_PROBLEMS", "MIN_CALIBRATION_PROBLEMS", "ZERO_SHOT_MARGIN_LOG2", "FOLDS"]

MIN_CALIBRATION_PROBLEMS = 8
"""Destination problems from which the held-out figures and the vendor floor
are computed on the destination (fewer: :func:`zero_shot_floor`)."""

FOLDS = 5
"""Folds over the destination problems (at most; one per problem below it)."""

ZERO_SHOT_MARGIN_LOG2 = 0.5
"""Without destination evidence, a tile config replaces the vendor library
only where it is predicted faster by this many doublings (2**0.5 = 1.41x).
It is the smallest margin of the floor's grid at which no dtype's zero-shot
answer was worse than cuBLAS's from A100 to H100, chosen on the H100 random
log (so that log's zero-shot figures are in-sample for this one constant);
a small source does not carry at any margin (docs/results.md, "A new GPU:
carry a model across devices")."""


@dataclass
class TransferResult:
    """One transferred (family, dtype): the artifact's sidecar path, the
    destination rows and problems it saw, whether it is zero-shot, the
    held-out summary on destination problems (empty without), the floor,
    and the destination problems (M, N, K, layout) chosen from the pool
    (``problems=``; empty where every one was used)."""

    path: Path
    family: str
    dtype: str
    source: str
    destination: str
    source_rows: int
    destination_rows: int
    destination_problems: int
    zero_shot: bool
    holdout: dict = field(default_factory=dict)
    floor: dict = field(default_factory=dict)
    chosen: list = field(default_factory=list)


def zero_shot_floor() -> dict:
    """The vendor floor of a model without destination evidence
    (:class:`costlearn.model.vendor_floor.VendorFloor` reads it): margin
    :data:`ZERO_SHOT_MARGIN_LOG2`, no held-out problems, nothing flagged."""
    return dict(version=FLOOR_VERSION, margin_log2=ZERO_SHOT_MARGIN_LOG2, vendor_near_min=0.0, unsure_regret=None,
                ood_fallback=False, neighbors=NEIGHBORS, layouts=[], problems=[],
                calibration=dict(heldout="none: zero-shot transfer (no destination problems held out)",
                                 problems=0))


def transfer_rows(data_dir, family: str, dtype: str, template_hash: str, exclude_sources=()) -> pd.DataFrame:
    """Valid current rows of one (family, dtype) and kernel template in a
    dataset folder (empty when the folder holds none).

    Raises
    ------
    ValueError
        If the folder does not exist, or its rows of that pair were measured
        with another kernel template (another kernel's times).
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ValueError(f"{str(data_dir)!r} is not a dataset folder")
    df, _ = load(data_dir)
    if df.empty:
        return df
    df = df[rows_where(df, family=family, dtype=dtype)]
    if exclude_sources:
        df = df[~df["source_file"].fillna("").isin(list(exclude_sources)).to_numpy(bool)]
    rows = valid_rows(current_rows(df)[0]).reset_index(drop=True)
    other = sorted(set(rows["template_hash"].astype(str)) - {template_hash})
    if other:
        raise ValueError(f"{data_dir}'s {family}/{dtype} rows were measured with kernel template(s) {other}, the "
                         f"source model with {template_hash}: another kernel; keep them in another folder")
    return rows


def _destination_spec(destination: str, data_dir) -> DeviceSpec:
    spec = read_device_json(Path(data_dir)) if data_dir is not None else None
    if spec is None:
        try:
            spec = preset(destination)
        except ValueError:
            raise ValueError(f"no description of device {destination!r}: it is not a preset ({sorted(PRESETS)}) and "
                             "--data names no folder with a device.json (collect or import a few measurements "
                             "there)") from None
    if spec.slug != destination:
        raise ValueError(f"the destination device description is {spec.name!r} ({spec.slug!r}), not {destination!r}")
    return spec


def _say_unused(data_dir, pairs, source: str, family, dtypes, say) -> None:
    """Say which (family, dtype) rows of the destination folder no transfer
    uses, because the source has no such model (or they were not asked for)."""
    df, _ = load(data_dir)
    if df.empty:
        return
    rows = valid_rows(current_rows(df)[0])
    for (f, d), g in rows.groupby(["family", "dtype"], observed=True):
        f, d = str(f), str(d)
        if (f, d) in pairs:
            continue
        asked = (family is None or f == family) and (dtypes is None or d in dtypes)
        why = (f"the {source} store has no {f}/{d} model to carry (train one on {source}'s rows first)" if asked
               else "not asked for (--family / --dtype)")
        say(f"{f}/{d}: {len(g)} rows of {data_dir} not used: {why}")


def _problem_ids(rows: pd.DataFrame) -> np.ndarray:
    return rows.groupby(["m", "n", "k", "layout"], sort=True).ngroup().to_numpy()


def _heldout(src: pd.DataFrame, dst: pd.DataFrame, spec, make, seed: int, say) -> tuple[dict, pd.DataFrame, str]:
    """Predict every destination problem with a model fit without it
    (grouped k-fold; all source rows in every fold), saying each fold."""
    groups = _problem_ids(dst)
    n = len(np.unique(groups))
    k = min(FOLDS, n)
    pred = np.full(len(dst), np.nan)
    outside = np.zeros(len(dst), bool)
    for i, (tr, te) in enumerate(GroupKFold(n_splits=k, shuffle=True, random_state=seed).split(dst, groups=groups), 1):
        train_rows = pd.concat([src, dst.iloc[tr]], ignore_index=True)
        say(f"held-out fold {i} of {k}: fitting on {len(train_rows)} rows, predicting {len(te)}")
        pred[te] = make().fit(train_rows, spec).predict(dst.iloc[te])
        outside[te] = outside_rows(train_rows, dst.iloc[te])
    summary = {MultiDeviceXGBModel.name: summarize(evaluate_rows(dst, pred))}
    return summary, heldout_problems(dst, pred, outside), f"{k}-fold over {n} destination problems"


def transfer(models_dir, source: str, destination: str, *, data_dir=None, source_data=None,
             family: str | None = None, dtype=None, destination_share: float = 0.2,
             params=None, replace: bool = False, seed: int = 0, progress=None, problems: int | None = None,
             strategy: str = "random", active=None) -> list[TransferResult]:
    """Transfer every model of device ``source`` in ``models_dir`` to device
    ``destination`` (``<models_dir>/<destination>/<family>/<dtype>/``).

    Parameters
    ----------
    models_dir : path
        Model store root holding ``<source>/``.
    source, destination : str
        Device folder names (``a100``, ``h100``); different.
    data_dir : path, optional
        The destination's dataset folder (``data/<destination>/``): its rows
        of each (family, dtype) and kernel template are learned from; none,
        or a folder without such rows: zero-shot. Its ``device.json``
        describes the destination (else the preset of that name).
    source_data : path, optional
        The source's dataset folder; default the folder the source model's
        sidecar names (``training.dataset``).
    family : str, optional
        Transfer only this family.
    dtype : str or sequence of str, optional
        Transfer only these dtypes.
    destination_share : float
        Weight of the destination's rows relative to the source's, in (0, 1].
    params : XGBParams, optional
        Default :data:`costlearn.model.transfer.TRANSFER_PARAMS`.
    replace : bool
        Replace a destination model trained on its own rows (a transferred
        one is always replaced).
    seed : int
        Of the destination folds.
    progress : callable, optional
        Called with one line of text per step.
    problems : int, optional
        Learn from only this many of ``data_dir``'s problems (of each
        family and dtype), a pool to choose from (a destination log), by
        ``strategy`` (:func:`costlearn.collect.strategy.choose_problems`);
        default: all of them.
    strategy : {"random", "prior", "active"}
        How ``problems`` are chosen: ``active`` scores the pool with a
        bootstrap ensemble of multi-device models fit on the source's rows
        and the problems chosen so far, and takes those where its pick is
        least sure (:class:`~costlearn.learn.active.EnsembleDisagreement`).
    active : ActiveSettings, optional
        Settings of ``active`` (default: 4 members of 120 trees, each on
        600 problems, rounds of a quarter of ``problems``).

    Returns
    -------
    list of TransferResult

    Raises
    ------
    ValueError
        If ``source`` equals ``destination``, ``destination_share`` is not in
        (0, 1], ``models_dir`` or a given ``data_dir`` is not a folder,
        ``source`` has no models (of ``family``/``dtype``), the source rows
        are missing, a destination
        folder holds a model of its own (without ``replace``), the
        destination is not described, or rows of another kernel template
        are given.
    costlearn.model.artifact_layout.ArtifactError
        If a source artifact does not load.
    """
    say = progress or (lambda line: None)
    source, destination = str(source).lower(), str(destination).lower()     # device folders are lower-case
    if source == destination:
        raise ValueError(f"--from and --to are both {source!r}; transfer goes to another device")
    if not (isinstance(destination_share, (int, float)) and 0 < destination_share <= 1):
        raise ValueError(f"destination_share={destination_share!r} (CLI: --destination-share); must be in (0, 1]")
    if data_dir is not None and not Path(data_dir).is_dir():
        raise ValueError(f"data_dir {str(data_dir)!r} (CLI: --data) is not a folder; omit it for a zero-shot "
                         "transfer")
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise ValueError(f"--models {str(models_dir)!r} is not a folder (the model store holding {source}/)")
    dtypes = None if dtype is None else ([dtype] if isinstance(dtype, str) else list(dtype))
    pairs = [(f, d) for dev, f, d in artifact_layout.list_models(models_dir) if dev == source
             and (family is None or f == family) and (dtypes is None or d in dtypes)]
    if not pairs:
        have = sorted({dev for dev, _, _ in artifact_layout.list_models(models_dir)}) if models_dir.is_dir() else []
        which = "/".join(x for x in (family, "|".join(dtypes or [])) if x)
        raise ValueError(f"{models_dir} holds no {which + ' ' if which else ''}model of device {source!r}; it holds "
                         f"models of {have}" + ("" if have else store_hint(models_dir, cli=True, device_flag="--from")))
    spec = _destination_spec(destination, data_dir)
    if data_dir is not None:
        _say_unused(data_dir, pairs, source, family, dtypes, say)
    results = []
    for fam_name, dt in pairs:
        fam = get_family(fam_name)
        src_art = artifact.load(artifact_layout.model_folder(models_dir, source, fam_name, dt))
        side = src_art.sidecar
        if side.get("transfer"):
            raise ValueError(f"{src_art.path} is itself a transferred model; transfer from the device whose own rows "
                             "trained it")
        out_folder = _out_folder(models_dir, destination, fam_name, dt, replace, say)
        src_dir, template, src = _source_rows(src_art, fam, dt, source_data)
        src_spec = src_art.spec
        dst = pd.DataFrame() if data_dir is None else _destination_rows(data_dir, fam_name, dt, template, spec)
        n_dst = 0 if dst.empty else int(_problem_ids(dst).max() + 1)
        chosen = []
        if problems is not None and n_dst > problems:
            chosen = _choose_destination(src, src_spec, dst, spec, problems, strategy, destination_share, active,
                                         seed, say)
            keep = pd.MultiIndex.from_frame(dst[["m", "n", "k", "layout"]].astype({"layout": str})).isin(chosen)
            say(f"{fam_name}/{dt}: chose {len(chosen)} of the {n_dst} {destination} problems ({strategy})")
            dst, n_dst = dst[keep].reset_index(drop=True), len(chosen)
        say(f"{fam_name}/{dt}: {len(src)} {source} rows, {len(dst)} {destination} rows over {n_dst} problems")

        def make():
            return get_model(MultiDeviceXGBModel.name, params=params, device_specs={src_spec.slug: src_spec},
                             destination_share=destination_share)
        try:
            cands, coverage, dropped = candidate_pool(fam, pd.concat([src, dst], ignore_index=True), spec, dt,
                                                      runnable_only=True)
        except ValueError:
            raise ValueError(f"no {fam_name}/{dt} config measured on {source} can run on {destination}") from None
        has_vendor = fam.vendor_config_id is not None and cands["config_id"].eq(fam.vendor_config_id).any()
        summary, kind = {}, "none (zero-shot)"
        if n_dst >= MIN_CALIBRATION_PROBLEMS:
            say(f"{fam_name}/{dt}: held-out predictions of {n_dst} {destination} problems")
            summary, held, kind = _heldout(src, dst, spec, make, seed,
                                           lambda line, pair=f"{fam_name}/{dt}": say(f"{pair}: {line}"))
            floor = calibrate_floor(held, bool(has_vendor), kind, tolerance=0.0,
                                    vendor_near_grid=(None,) + VENDOR_NEAR_GRID)
        else:
            floor = zero_shot_floor()
        rows = pd.concat([src, dst], ignore_index=True)
        say(f"{fam_name}/{dt}: fitting on all rows")
        mdl = make().fit(rows, spec)
        base_rows = dst if n_dst >= MIN_CALIBRATION_PROBLEMS else rows
        baselines = {name: get_model(name).fit(base_rows, spec).save(out_folder) for name in ("roofline",
                                                                                              "best_fixed")}
        zero_shot = n_dst < MIN_DESTINATION_PROBLEMS
        info = dict(source_device=source, destination_device=destination, source_model_sha256=src_art.model_sha256,
                    source_folder=str(src_art.path), source_rows=int(len(src)),
                    source_problems=int(_problem_ids(src).max() + 1), destination_rows=int(len(dst)),
                    destination_problems=n_dst, zero_shot=zero_shot,
                    min_destination_problems=MIN_DESTINATION_PROBLEMS, destination_share=destination_share,
                    infeasible_on_destination=dropped,
                    at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        record = dict(dataset=str(data_dir) if data_dir is not None else "", source_dataset=str(src_dir),
                      rows=int(len(rows)), shapes=int(rows[["m", "n", "k", "layout"]].drop_duplicates().shape[0]),
                      sources=sorted(rows["source_file"].fillna("").astype(str).unique().tolist()),
                      template_hashes=[template])
        path = export_artifact(mdl, out_folder, family=fam_name, dtype=dt,
                               layouts=sorted(rows["layout"].unique().tolist()), spec=spec, candidates=cands,
                               envelope=fit_envelope(rows[["m", "n", "k"]].drop_duplicates().to_numpy()),
                               metrics=dict(holdout=summary, holdout_kind=kind), training=record,
                               baselines=baselines,
                               extra=dict(template_hash=template, floor=floor, transfer=info,
                                          coverage=coverage),
                               progress=lambda line, pair=f"{fam_name}/{dt}": say(f"{pair}: {line}"))
        say(f"{fam_name}/{dt}: wrote {path.parent}" + (" (zero-shot)" if zero_shot else ""))
        results.append(TransferResult(path=path, family=fam_name, dtype=dt, source=source, destination=destination,
                                      source_rows=int(len(src)), destination_rows=int(len(dst)),
                                      destination_problems=n_dst, zero_shot=zero_shot, holdout=summary,
                                      floor=floor, chosen=chosen))
    return results



def _out_folder(models_dir: Path, destination: str, fam_name: str, dt: str, replace: bool, say) -> Path:
    """The destination model's folder; a model there not made by transfer
    is replaced only with ``replace``.

    Raises
    ------
    ValueError
        If the folder holds a model of the destination's own rows (or an
        unreadable one) and ``replace`` is False.
    """
    out_folder = artifact_layout.model_folder(models_dir, destination, fam_name, dt)
    if (out_folder / artifact_layout.SIDECAR).exists() and not replace:
        try:
            own = not json.loads((out_folder / artifact_layout.SIDECAR).read_text()).get("transfer")
        except (OSError, ValueError, AttributeError):
            own = True
        if own:
            raise ValueError(f"{out_folder} holds a model not made by transfer (or an unreadable one); pass "
                             "--replace (Python: replace=True) to overwrite it")
    if (out_folder / artifact_layout.SIDECAR).exists():
        say(f"{fam_name}/{dt}: replacing the model in {out_folder}")
    return out_folder


def _source_rows(src_art, fam, dt: str, source_data) -> tuple:
    """``(dataset folder, template hash, rows)``: the rows the source model
    ``src_art`` was trained on (its sidecar's dataset, or ``source_data``),
    of its template and without the sources it excluded, tagged with its
    device's slug.

    Raises
    ------
    ValueError
        If the folder is not there or holds no such valid row.
    """
    side = src_art.sidecar
    training = side.get("training", {})
    src_dir = Path(source_data) if source_data is not None else Path(str(training.get("dataset", "")))
    if not str(training.get("dataset", "")) and source_data is None or not src_dir.is_dir():
        raise ValueError(f"the rows {src_art.path} was trained on are not at {str(src_dir)!r}; pass the source's "
                         "dataset folder (CLI: --source-data)")
    template = side.get("template_hash", fam.template_hash)
    src = transfer_rows(src_dir, fam.name, dt, template, training.get("excluded_sources", ()))
    if src.empty:
        raise ValueError(f"{src_dir} holds no valid {fam.name}/{dt} rows of template {template}")
    return src_dir, template, src.assign(device_slug=src_art.spec.slug)


def _destination_rows(data_dir, fam_name: str, dt: str, template: str, spec):
    """The destination's valid rows of ``template`` in ``data_dir``.

    Raises
    ------
    ValueError
        If any row was measured on another device than ``spec``.
    """
    dst = transfer_rows(data_dir, fam_name, dt, template)
    if not dst.empty:
        bad = sorted(set(dst["device_slug"].astype(str)) - {spec.slug})
        if bad:
            raise ValueError(f"{data_dir} holds rows of device(s) {bad}; the destination is {spec.slug!r}")
    return dst

def _choose_destination(src, src_spec, dst, spec, k: int, strategy: str, destination_share: float, active, seed: int,
                        say) -> list:
    """``k`` problems of the destination rows ``dst`` (:func:`costlearn.collect.strategy.choose_problems`;
    ``active``: members are multi-device models on the source's rows and those chosen)."""
    settings = active or ActiveSettings(member_problems=600)

    def member(j: int):
        return get_model(MultiDeviceXGBModel.name, params=member_params(settings, j),
                         device_specs={src_spec.slug: src_spec}, destination_share=destination_share)

    def ensemble(spec_, settings_, seed_):
        return EnsembleDisagreement(spec_, settings_, seed_, member)
    return choose_problems(dst, k, strategy, seed=seed, spec=spec, known=src,
                           settings=dataclasses.replace(settings, ensemble=ensemble), say=say)
