"""Model artifact: ``models/<device>/<dtype>/`` holding the XGBoost model in
its native format (``model.ubj``) and a JSON sidecar (``model.json``) with
everything prediction needs without a device or a compiler (design.md,
"Model artifact")."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from .. import __version__
from ..codegen import TEMPLATE_HASH
from ..device import DeviceSpec
from ..envelope import Envelope
from ..features import feature_version, get_feature_set
from ..space import DTYPES, TileConfig, space_hash
from .xgb import XGBCostModel, XGBParams

__all__ = ["ARTIFACT_SCHEMA", "save", "load", "Artifact", "ArtifactError", "default_models_dir",
           "list_models", "candidate_table"]

ARTIFACT_SCHEMA = 2

_REQUIRED_KEYS = ("artifact_schema", "feature_set", "feature_names", "feature_version", "device", "dtype",
                  "candidates", "envelope", "baselines", "template_hash", "costlearn_version")


class ArtifactError(ValueError):
    """A model artifact is missing, unreadable or does not match this code."""


def default_models_dir() -> Path:
    """``$COSTLEARN_MODELS`` if set, else the ``models/`` folder of the source
    tree this package was imported from, else ``./models``."""
    env = os.environ.get("COSTLEARN_MODELS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "models"
    return here if here.is_dir() else Path("models")


def list_models(models_dir=None) -> list[tuple[str, str]]:
    """(device, dtype) pairs that have an artifact under ``models_dir``."""
    root = Path(models_dir) if models_dir is not None else default_models_dir()
    if not root.is_dir():
        return []
    return sorted((p.parent.parent.name, p.parent.name) for p in root.glob("*/*/model.json"))


def candidate_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per config in ``rows``: the tile parameters, ``config_id`` and
    the median compiled ``registers_per_thread`` (NaN where unknown)."""
    cols = ["config_id", "block_m", "block_n", "block_k", "thread_m", "thread_n", "loop_order",
            "smem_pad", "raster"]
    regs = rows.groupby("config_id")["registers_per_thread"].median() \
        if "registers_per_thread" in rows else None
    out = rows[cols].drop_duplicates("config_id").sort_values("config_id").reset_index(drop=True)
    out["registers_per_thread"] = (regs.reindex(out["config_id"]).to_numpy(np.float64)
                                   if regs is not None else np.nan)
    return out


def _versions() -> dict:
    import sklearn
    import xgboost
    return dict(python=platform.python_version(), numpy=np.__version__, pandas=pd.__version__,
                scikit_learn=sklearn.__version__, xgboost=xgboost.__version__, costlearn=__version__)


def save(model: XGBCostModel, folder, *, dtype: str, candidates: pd.DataFrame, envelope: dict,
         metrics: dict, training: dict, baselines: dict) -> Path:
    """Write a fitted model and its sidecar to ``folder``.

    Parameters
    ----------
    model : XGBCostModel
        Fitted.
    folder : path
        ``models/<device>/<dtype>/``; created if missing. Files are written
        to temporary names and renamed, so a reader never sees half a model.
    dtype : str
    candidates : DataFrame
        :func:`candidate_table` of the configs prediction ranks.
    envelope : dict
        Training envelope for the out-of-distribution check
        (``costlearn.envelope``).
    metrics : dict
        Held-out metrics.
    training : dict
        Provenance of the training data (rows, shapes, dataset, run ids).
    baselines : dict
        Fitted state of the baselines (``best_fixed`` ranking).

    Returns
    -------
    Path
        The sidecar's path.
    """
    model._check_fitted()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    side = dict(
        artifact_schema=ARTIFACT_SCHEMA, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=model.name, feature_set=model.feature_set, feature_version=feature_version(model.feature_set),
        feature_names=list(model.feature_names_), params=(model.params or XGBParams()).__dict__,
        best_iteration=model.best_iteration_, validation_rmse_log2=model.validation_rmse_log2_,
        device=model.spec_.to_dict(), device_slug=model.spec_.slug, dtype=dtype,
        template_hash=TEMPLATE_HASH, space_hash=space_hash(), costlearn_version=__version__,
        candidates=json.loads(candidates.to_json(orient="records")), envelope=envelope,
        metrics=metrics, training=training, baselines=baselines, versions=_versions(),
    )
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp_model, tmp_side = folder / f".model.{tag}.tmp.ubj", folder / f".model.{tag}.tmp.json"
    model.booster_.save_model(str(tmp_model))
    # The sidecar names the model file it belongs to, so a reader between
    # the two renames sees a mismatch, not a silently wrong pair.
    side["model_sha256"] = hashlib.sha256(tmp_model.read_bytes()).hexdigest()
    tmp_side.write_text(json.dumps(side, indent=1, sort_keys=True, default=_json_default))
    os.replace(tmp_model, folder / "model.ubj")
    os.replace(tmp_side, folder / "model.json")
    return folder / "model.json"


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@dataclass
class Artifact:
    """A loaded model artifact.

    Attributes
    ----------
    model : XGBCostModel
        Fitted model, ready to predict.
    sidecar : dict
        The JSON sidecar.
    spec : DeviceSpec
        Device the model was trained on.
    candidates : DataFrame
        Candidate configs with compiled facts.
    envelope : costlearn.envelope.Envelope
        The training envelope (OOD check).
    """

    model: XGBCostModel
    sidecar: dict
    spec: DeviceSpec
    candidates: pd.DataFrame
    path: Path
    envelope: Envelope

    @property
    def dtype(self) -> str:
        return self.sidecar["dtype"]

    def candidate_configs(self) -> list[TileConfig]:
        return [TileConfig.from_id(c) for c in self.candidates["config_id"]]


def load(folder) -> Artifact:
    """Load the artifact in ``folder``.

    Raises
    ------
    ArtifactError
        If the files are missing or unreadable, or the artifact's schema,
        feature set, feature list or feature version do not match this
        code (the message names what differs).
    """
    import xgboost as xgb

    folder = Path(folder)
    side_path, model_path = folder / "model.json", folder / "model.ubj"
    if not side_path.is_file() or not model_path.is_file():
        raise ArtifactError(f"no model artifact in {str(folder)!r} (need model.json and model.ubj)")
    try:
        side = json.loads(side_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArtifactError(f"unreadable model sidecar {side_path}: {e}") from e
    if not isinstance(side, dict):
        raise ArtifactError(f"{side_path}: not a JSON object")
    missing = [key for key in _REQUIRED_KEYS if key not in side]
    if missing:
        raise ArtifactError(f"{side_path} lacks keys {missing}; retrain with `costlearn train`")
    if side.get("artifact_schema") != ARTIFACT_SCHEMA:
        raise ArtifactError(f"{side_path}: artifact schema {side.get('artifact_schema')!r}, "
                            f"this code reads schema {ARTIFACT_SCHEMA}; retrain with `costlearn train`")
    fs_name = side.get("feature_set")
    try:
        fs = get_feature_set(fs_name)
    except ValueError as e:
        raise ArtifactError(f"{side_path}: {e}") from e
    code_names, art_names = list(fs.feature_names), list(side.get("feature_names", []))
    if code_names != art_names or side.get("feature_version") != feature_version(fs_name):
        added = [f for f in code_names if f not in art_names]
        removed = [f for f in art_names if f not in code_names]
        what = []
        if added:
            what.append(f"code has features the model lacks: {added}")
        if removed:
            what.append(f"model has features the code lacks: {removed}")
        if not added and not removed and code_names != art_names:
            what.append("same features in a different order")
        if side.get("feature_version") != feature_version(fs_name):
            what.append(f"feature version {side.get('feature_version')!r} != code's "
                        f"{feature_version(fs_name)!r}")
        raise ArtifactError(f"{side_path} does not match this code's feature set "
                            f"{fs_name!r}: {'; '.join(what)}. Retrain with `costlearn train`.")
    want = side.get("model_sha256")
    if want is not None and hashlib.sha256(model_path.read_bytes()).hexdigest() != want:
        raise ArtifactError(f"{model_path} does not belong to {side_path} (sha256 differs): a training "
                            "may be writing this folder; retry, or retrain")
    try:
        booster = xgb.Booster()
        booster.load_model(str(model_path))
    except xgb.core.XGBoostError as e:
        first = str(e).replace("\x00", "").strip().splitlines()[0][:200] if str(e).strip() else "unknown"
        raise ArtifactError(f"unreadable XGBoost model {model_path}: {first}") from None
    try:
        spec = DeviceSpec.from_dict(side["device"])
        params = XGBParams(**side.get("params", {}))
        cands = pd.DataFrame(side["candidates"])
        configs = [TileConfig.from_id(c) for c in cands["config_id"]]
        if side["dtype"] not in DTYPES:
            raise ValueError(f"dtype {side['dtype']!r} is not one of {sorted(DTYPES)}")
        envelope = Envelope(side["envelope"])
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{side_path}: invalid sidecar ({type(e).__name__}: {e}); "
                            "retrain with `costlearn train`") from e
    if not configs:
        raise ArtifactError(f"{side_path}: no candidate configs")
    model = XGBCostModel(feature_set=fs_name, params=params)
    model.booster_ = booster
    model.spec_ = spec
    model.feature_names_ = tuple(art_names)
    model.best_iteration_ = side.get("best_iteration")
    model.validation_rmse_log2_ = side.get("validation_rmse_log2")
    model.fitted_ = True
    return Artifact(model=model, sidecar=side, spec=spec, candidates=cands, path=folder, envelope=envelope)
