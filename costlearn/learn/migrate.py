"""Converting model artifacts of the layout before kernel families (``costlearn migrate-models``)."""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.core.device import DeviceSpec
from costlearn.core.files import atomic_write, sha256_file
from costlearn.families import get_family
from costlearn.features import feature_version, get_feature_set
from costlearn.learn.train import export_artifact
from costlearn.model import artifact
from costlearn.model.artifact_layout import SIDECAR, ArtifactError, model_folder, old_layout_folders
from costlearn.model.baselines import BestFixedModel, RooflineModel
from costlearn.model.xgb import XGBCostModel

__all__ = ["migrate_models"]


def migrate_models(models_dir) -> list[tuple[Path, Path]]:
    """Convert every artifact of the layout before kernel families
    (``<root>/<device>/<dtype>/``, artifact schema 2) into
    ``<root>/<device>/gemm/<dtype>/`` (schema 3): the same model file
    (byte for byte), its exported scorer with a calibrated cascade, the
    baselines' states; the old folder is removed once the new one loads.

    Returns
    -------
    list of (old folder, new folder)

    Raises
    ------
    ValueError
        If ``models_dir`` is not a folder.
    costlearn.model.ArtifactError
        If an old artifact cannot be read or converted (its feature list is
        not this code's, its model file is not the sidecar's), or the new
        folder already holds a model (nothing is removed or replaced then).
    """
    root = Path(models_dir)
    if not root.is_dir():
        raise ValueError(f"{str(root)!r} is not a folder of models")
    gemm = get_family("gemm")
    done = []
    for old in old_layout_folders(root):
        side_path = old / SIDECAR
        try:
            side = json.loads(side_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ArtifactError(f"unreadable {side_path}: {e}") from e
        if not isinstance(side, dict) or side.get("artifact_schema") != 2 or side.get("model") != "xgboost":
            what = (side.get("artifact_schema"), side.get("model")) if isinstance(side, dict) else "not an object"
            raise ArtifactError(f"{side_path}: {what!r}; only schema-2 xgboost artifacts can be converted")
        missing = [key for key in ("device", "dtype", "feature_set", "feature_names", "feature_version", "candidates",
                                   "envelope", "template_hash", "costlearn_version") if key not in side]
        if missing:
            raise ArtifactError(f"{side_path} lacks keys {missing}; retrain with `costlearn train`")
        fs = side["feature_set"]
        if fs not in ("analytic", "raw", "derived") or list(get_feature_set(fs).feature_names(gemm)) != list(
                side["feature_names"]) or side["feature_version"] != feature_version(fs, gemm):
            raise ArtifactError(f"{side_path}: its features ({fs!r}, version {side['feature_version']!r}) are "
                                         "not this code's; retrain with `costlearn train` instead")
        try:
            spec = DeviceSpec.from_dict(side["device"])
        except (TypeError, ValueError) as e:
            raise ArtifactError(f"{side_path}: invalid device ({e})") from e
        new = model_folder(root, old.parent.name, "gemm", str(side["dtype"]))
        if (new / SIDECAR).exists():
            raise ArtifactError(f"{new} already holds a model; {old} was not converted (move one of them "
                                         "away, then run migrate-models again)")
        ubj = old / "model.ubj"
        if not ubj.is_file() or (side.get("model_sha256") and sha256_file(ubj) != side["model_sha256"]):
            raise ArtifactError(f"{ubj} is missing or does not belong to {side_path} (sha256 differs)")
        atomic_write(new / "model.ubj", ubj.read_bytes())
        state = dict(settings=dict(feature_set=side["feature_set"], params=side.get("params") or {}),
                     feature_names=side["feature_names"], best_iteration=side.get("best_iteration"),
                     validation_rmse_log2=side.get("validation_rmse_log2"),
                     files={"model.ubj": sha256_file(new / "model.ubj")})
        mdl = XGBCostModel.load(new, state, spec)
        cands = pd.DataFrame(side["candidates"])
        if "registers_per_thread" not in cands:
            cands["registers_per_thread"] = np.nan
        cands = cands[["config_id", "registers_per_thread"]]
        bf = side.get("baselines", {}).get("best_fixed", {})
        names = list(side["feature_names"])
        baselines = dict(roofline=RooflineModel().fit(None, spec).save(new),
                         best_fixed=dict(settings=dict(min_coverage=BestFixedModel().min_coverage),
                                         scores=bf.get("scores", {}), best_config_id=bf.get("best_config_id"),
                                         feature_names=("log2_m", "log2_n", "log2_k")
                                         + tuple(gemm.param_feature_names), files={}))
        export_artifact(mdl, new, family=gemm, dtype=side["dtype"], layouts=["NN"], spec=spec, candidates=cands,
                        envelope=side["envelope"], metrics=side.get("metrics", {}), training=side.get("training", {}),
                        baselines=baselines,
                        extra=dict(created=side.get("created"), template_hash=side["template_hash"],
                                   costlearn_version=side["costlearn_version"],
                                   migrated=dict(from_schema=2, from_folder=str(old.name), names=len(names),
                                                 at=datetime.now(timezone.utc).isoformat(timespec="seconds"))))
        artifact.load(new)
        shutil.rmtree(old)
        done.append((old, new))
    return done

