"""Training: dataset folder in, model artifact out."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .dataset import current_rows, load, noise_floor, valid_rows
from .device import DeviceSpec
from .envelope import fit_envelope
from .metrics import evaluate_rows, summarize
from .model import artifact
from .model.baselines import BestFixedModel, RandomModel, RooflineModel
from .model.xgb import XGBCostModel, XGBParams

__all__ = ["train", "TrainResult", "spec_from_rows", "holdout_report"]


@dataclass
class TrainResult:
    """Outcome of :func:`train`: the artifact path, held-out summaries per
    model (``xgboost``, ``roofline``, ``best_fixed``, ``random``), and row and
    shape counts."""

    path: Path
    holdout: dict
    rows: int
    shapes: int
    dropped: dict


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


def holdout_report(rows: pd.DataFrame, spec: DeviceSpec, params: XGBParams, feature_set: str,
                   test_share: float = 0.2, seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """Fit every model on a shape-grouped train split and score it on the
    held-out shapes' measured candidates.

    Returns
    -------
    summary : dict of str to dict
        :func:`costlearn.metrics.summarize` per model.
    per_shape : DataFrame
        Per-shape metrics, with a ``model`` column.
    """
    from sklearn.model_selection import GroupShuffleSplit

    from .model.xgb import shape_groups

    groups = shape_groups(rows)
    tr, te = next(GroupShuffleSplit(n_splits=1, test_size=test_share, random_state=seed)
                  .split(rows, groups=groups))
    rtr, rte = rows.iloc[tr], rows.iloc[te]
    models = {"xgboost": XGBCostModel(feature_set, params), "roofline": RooflineModel(),
              "best_fixed": BestFixedModel(), "random": RandomModel(seed)}
    summary, frames = {}, []
    for name, mdl in models.items():
        mdl.fit(rtr, spec)
        per = evaluate_rows(rte, mdl.predict(rte))
        per["model"] = name
        frames.append(per)
        summary[name] = summarize(per)
    return summary, pd.concat(frames, ignore_index=True)


def train(data_dir, models_dir, *, spec: DeviceSpec | None = None, dtype: str = "float32",
          feature_set: str = "analytic", params: XGBParams | None = None,
          holdout: bool = True) -> TrainResult:
    """Train the XGBoost cost model on a dataset folder and save the artifact
    to ``<models_dir>/<device>/<dtype>/``.

    Parameters
    ----------
    data_dir : path
        Dataset folder of one device (``data/<device>/``).
    models_dir : path
        Root of the model store (``models/``).
    spec : DeviceSpec, optional
        Device description; by default read from ``<data_dir>/device.json``.
    dtype : {"float32"}
    feature_set : {"analytic", "raw", "derived"}
    params : XGBParams, optional
    holdout : bool
        Also fit on a shape-grouped 80 % split and store the held-out
        metrics of the model and the baselines in the sidecar.

    Returns
    -------
    TrainResult

    Raises
    ------
    ValueError
        If the dataset has too few valid rows (< 50) or shapes (< 5), mixes
        devices, or has no device description.
    """
    data_dir = Path(data_dir)
    df, report = load(data_dir)
    df = df[df["dtype"] == dtype]
    df, stale = current_rows(df)
    rows = valid_rows(df).reset_index(drop=True)
    n_shapes = rows[["m", "n", "k"]].drop_duplicates().shape[0]
    if len(rows) < 50 or n_shapes < 5:
        raise ValueError(f"{data_dir} has {len(rows)} valid {dtype} rows over {n_shapes} shapes; "
                         "need at least 50 rows over 5 shapes (run `costlearn collect` longer)")
    if spec is None:
        dev_json = data_dir / "device.json"
        if dev_json.is_file():
            import json
            try:
                spec = DeviceSpec.from_dict(json.loads(dev_json.read_text()))
            except (json.JSONDecodeError, ValueError, TypeError) as e:
                raise ValueError(f"{dev_json}: not a valid device description ({e})") from e
    spec = spec_from_rows(rows, spec)
    params = params or XGBParams()
    summary = {}
    if holdout:
        summary, _ = holdout_report(rows, spec, params, feature_set, seed=params.seed)
    model = XGBCostModel(feature_set, params).fit(rows, spec)
    best_fixed = BestFixedModel().fit(rows, spec)
    shapes = rows[["m", "n", "k"]].drop_duplicates().to_numpy()
    env = fit_envelope(shapes)
    training = dict(dataset=str(data_dir), rows=int(len(rows)), shapes=int(n_shapes),
                    rows_total=int(len(df)), status_counts=df["status"].value_counts().to_dict(),
                    run_ids=sorted(rows["run_id"].unique().tolist()),
                    protocol_versions=sorted(int(v) for v in rows["protocol_version"].unique()),
                    template_hashes=sorted(rows["template_hash"].unique().tolist()),
                    noise_floor=_finite_or_none(noise_floor(rows)),
                    corrupt_parts=len(report.corrupt), stale_rows_dropped=stale)
    baselines = dict(best_fixed=dict(scores={str(k): float(v) for k, v in best_fixed.scores_.items()},
                                     best_config_id=best_fixed.best_config_id_))
    folder = Path(models_dir) / spec.slug / dtype
    path = artifact.save(model, folder, dtype=dtype, candidates=artifact.candidate_table(rows),
                         envelope=env, metrics=dict(holdout=summary), training=training,
                         baselines=baselines)
    return TrainResult(path=path, holdout=summary, rows=len(rows), shapes=int(n_shapes),
                       dropped=dict(report.quarantined, stale_template_or_protocol=stale))
