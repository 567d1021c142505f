"""Writing a model artifact: :func:`save` (a new model replaces the old in
one rename of the sidecar) and :func:`replace_shortlist` (a new table for
the model there). What the files are, and how they are read and checked, is
:mod:`costlearn.model.artifact` (the files' names and places:
:mod:`costlearn.model.artifact_layout`).
"""
from __future__ import annotations

import json
import platform
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.core.device import DeviceSpec
from costlearn.core.files import atomic_write, read_file, sha256_file
from costlearn.core.locks import FolderLock
from costlearn.core.npz import npz_bytes
from costlearn.core.version import __version__
from costlearn.families import get_family
from costlearn.features import feature_version, get_feature_set
from costlearn.model.artifact_files import verified_file
from costlearn.model.artifact_layout import (ARTIFACT_SCHEMA, LEGACY_FILES, PAYLOAD_PREFIX, SAVE_LOCK, SCORER_FILE,
                                             SIDECAR, SIDECAR_DIGEST, VENDOR_FILE, ArtifactError, current_payload,
                                             parse_sidecar, payload_folder, recorded_sha, sidecar_digest)
from costlearn.model.base import CostModel
from costlearn.model.scorer import Scorer
from costlearn.model.shortlist import SHORTLIST_FILE
from costlearn.model.vendor import FEATURES as VENDOR_FEATURES
from costlearn.model.vendor import VendorModel

__all__ = ["save", "replace_shortlist", "candidate_table"]


def candidate_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per config in ``rows``: ``config_id`` and the median compiled
    ``registers_per_thread`` (NaN where unknown), sorted by config_id."""
    import pandas as pd
    regs = rows.groupby("config_id")["registers_per_thread"].median() \
        if "registers_per_thread" in rows else None
    ids = np.sort(rows["config_id"].astype(object).unique())
    return pd.DataFrame({"config_id": ids,
                         "registers_per_thread": regs.reindex(ids).to_numpy(np.float64) if regs is not None
                         else np.full(len(ids), np.nan)})


def _versions() -> dict:
    import importlib.metadata as md      # (here: slow to import, and only a save needs it)
    import pandas as pd
    out = dict(python=platform.python_version(), numpy=np.__version__, pandas=pd.__version__, costlearn=__version__)
    for pkg in ("scikit-learn", "xgboost"):
        try:
            out[pkg.replace("-", "_")] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def save(model: CostModel, folder, *, family: str, dtype: str, layouts, spec: DeviceSpec,
         candidates: pd.DataFrame, scorer: Scorer, envelope: dict, metrics: dict, training: dict,
         baselines: dict, cascade: dict | None = None, extra: dict | None = None, shortlist=None,
         shortlist_info: dict | None = None, epilogues=("none",), vendor_model: VendorModel | None = None) -> Path:
    """Write a fitted model, its scorer and the sidecar to ``folder``.

    Parameters
    ----------
    model : CostModel
        Fitted; saved with its own :meth:`~CostModel.save`.
    folder : path
        :func:`model_folder`; created if missing.
    family, dtype : str
    layouts : sequence of str
        Layouts the model was trained on.
    spec : DeviceSpec
        The device of the training data.
    epilogues : sequence of str
        Epilogues it was trained on (:data:`costlearn.core.problem.EPILOGUES`).
    candidates : DataFrame
        :func:`candidate_table` of the configs prediction ranks.
    scorer : Scorer
        ``model.scorer(...)`` for these candidates, cascade set.
    envelope : dict
        Training envelope for the out-of-distribution check (:mod:`costlearn.model.envelope`).
    metrics, training : dict
        Held-out metrics; provenance of the training data.
    baselines : dict of str to dict
        Fitted baseline models' states (:meth:`CostModel.save` of each), for
        evaluation.
    cascade : dict, optional
        How the scorer's cascade was calibrated.
    extra : dict, optional
        More sidecar entries (e.g. ``migrated``).
    shortlist : costlearn.model.shortlist.Shortlist, optional
        The scorer's shortlist table, written to ``shortlist.npz`` (without
        one, a table left in the folder by an earlier model is removed).
    shortlist_info : dict, optional
        How it was built (recorded in the sidecar).
    vendor_model : VendorModel, optional
        Written to :data:`VENDOR_FILE` (without one, a file left by an
        earlier model is removed).

    Returns
    -------
    Path
        The sidecar's path.

    Notes
    -----
    The files go into a new payload folder and the sidecar is renamed over
    the old one last (see the module docstring); a reader never sees
    neither model. The lock :data:`SAVE_LOCK` waits for another save of
    the same folder to finish.
    """
    model.check_fitted()
    folder = Path(folder)
    fam = get_family(family)
    folder.mkdir(parents=True, exist_ok=True)
    with FolderLock(folder, "a model save", SAVE_LOCK, wait=True):
        previous = current_payload(folder)
        payload = _new_payload(folder)
        side = _write_payload(model, folder / payload, fam, dtype, layouts, spec, candidates, scorer, envelope,
                              metrics, training, baselines, cascade, shortlist, shortlist_info, epilogues,
                              vendor_model)
        side.update(extra or {})
        side["payload"] = payload
        _swap_sidecar(folder, side, previous)
    return folder / SIDECAR


def _write_payload(model, files: Path, fam, dtype, layouts, spec, candidates, scorer, envelope, metrics, training,
                   baselines, cascade, shortlist, shortlist_info, epilogues, vendor_model) -> dict:
    """Write the model's files into the new payload folder ``files``; the
    sidecar (without ``payload``) that records them."""
    state = model.save(files)
    scorer_path = atomic_write(files / SCORER_FILE, scorer.to_bytes())
    sl_entry = _write_shortlist(files, shortlist, shortlist_info)
    if vendor_model is None:
        vendor_entry = None
    else:
        path = atomic_write(files / VENDOR_FILE, npz_bytes(vendor_model.arrays()))
        vendor_entry = dict(file=VENDOR_FILE, sha256=sha256_file(path), members=len(vendor_model.bases),
                            trees=int(len(vendor_model.forest.roots)), features=list(VENDOR_FEATURES))
    names = list(get_feature_set(model.feature_set).feature_names(fam))
    side = dict(
        artifact_schema=ARTIFACT_SCHEMA, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=model.name, model_state=state, feature_set=model.feature_set,
        predicts_time=bool(model.predicts_time),
        feature_version=feature_version(model.feature_set, fam), feature_names=names,
        family=fam.name, dtype=dtype, layouts=list(layouts), epilogues=list(epilogues), device=spec.to_dict(),
        device_slug=spec.slug,
        template_hash=fam.template_hash, space_hash=fam.space_hash(), costlearn_version=__version__,
        candidates=json.loads(candidates[["config_id", "registers_per_thread"]].to_json(orient="records")),
        envelope=envelope, metrics=metrics, training=training, baselines=baselines,
        scorer=dict(file=SCORER_FILE, sha256=sha256_file(scorer_path), trees=scorer.n_trees,
                    cascade=dict(stages=[dict(trees=t, keep=k, margin=d) for t, k, d in scorer.cascade],
                                 **(cascade or {}))),
        shortlist=sl_entry, vendor_model=vendor_entry, versions=_versions())
    return side


def _new_payload(folder: Path) -> str:
    """Create and name a new payload folder in ``folder``."""
    name = f"{PAYLOAD_PREFIX}{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    (folder / name).mkdir()
    return name


def _swap_sidecar(folder: Path, side: dict, previous: str | None) -> None:
    """Rename the new sidecar over the old (the one rename that replaces the
    model), then remove what neither it nor the previous model uses: older
    payload folders, a killed save's (its folder and half-written sidecar),
    and files beside the sidecar once no sidecar names them."""
    side = json.loads(json.dumps({k: v for k, v in side.items() if k != SIDECAR_DIGEST}, default=_json_default))
    side[SIDECAR_DIGEST] = sidecar_digest(side)
    atomic_write(folder / SIDECAR, json.dumps(side, indent=1, sort_keys=True))
    keep = {side["payload"], previous}
    for p in folder.glob(f"{PAYLOAD_PREFIX}*"):
        if p.name not in keep and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
    if previous != "":
        for name in LEGACY_FILES:
            (folder / name).unlink(missing_ok=True)
    for tmp in folder.glob(f".{SIDECAR}.*.tmp"):          # a killed save's half-written sidecar (the lock is ours)
        tmp.unlink(missing_ok=True)


def _write_shortlist(folder: Path, shortlist, info: dict | None) -> dict | None:
    """Write ``shortlist`` into the payload folder ``folder`` (None: no
    table); its sidecar entry."""
    if shortlist is None:
        return None
    path = atomic_write(folder / SHORTLIST_FILE, shortlist.to_bytes())
    return dict(file=SHORTLIST_FILE, sha256=sha256_file(path), step_log2=shortlist.step, trees=shortlist.trees,
                tiles=shortlist.tiles, grid=list(shortlist.n), **(info or {}))


def replace_shortlist(folder, shortlist, info: dict | None = None) -> Path:
    """Give the artifact in ``folder`` the shortlist table ``shortlist`` (None:
    none, which also mends an artifact whose table was lost or damaged): a
    new payload folder with the model's other files copied and the table,
    swapped in by one rename as :func:`save` does.

    Raises
    ------
    ArtifactError
        If ``folder`` holds no readable sidecar, or a file it names is
        missing or damaged.
    """
    folder = Path(folder)
    with FolderLock(folder, "a model save", SAVE_LOCK, wait=True):
        try:
            side = parse_sidecar(bytes(read_file(folder / SIDECAR)), folder / SIDECAR)
        except OSError as e:
            raise ArtifactError(f"no readable model sidecar in {str(folder)!r}: {e}") from e
        if not isinstance(side, dict):
            raise ArtifactError(f"{folder / SIDECAR}: not a JSON object")
        previous = str(side.get("payload") or "")
        old = payload_folder(folder, folder / SIDECAR, side.get("payload"))
        payload = _new_payload(folder)
        names = [side.get("scorer", {}).get("file", SCORER_FILE)] + list(side.get("model_state", {}).get("files", {}))
        if side.get("vendor_model") is not None:
            names.append(VENDOR_FILE)
        for name in names:
            atomic_write(folder / payload / name, verified_file(old, name, folder / SIDECAR, recorded_sha(side, name),
                                                            "file")[1])
        side["shortlist"] = _write_shortlist(folder / payload, shortlist, info)
        side["payload"] = payload
        _swap_sidecar(folder, side, previous)
    return folder / SIDECAR
