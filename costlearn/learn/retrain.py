"""When a model is due for retraining: the problems it was trained on, recorded in its sidecar
(`trained_problems`), and how many problems a dataset holds that it was not trained on (`new_problems`).

A problem is (M, N, K, dtype, layout, epilogue) of a family's valid current rows, the rows
:func:`costlearn.learn.train.train` fits on. The envelope of a sidecar holds the training shapes (M, N, K) only, so
a new layout or epilogue of a trained shape would go unseen; the sidecar's ``training.problems`` records the trained
problems exactly instead: their count and the sorted set of their 64-bit hashes (:func:`problem_hashes`), base64,
about 11 characters a problem (the envelope's shapes take more), one JSON string that loading a model parses in one
step and never decodes.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.dataset import current_rows, load, rows_where, valid_rows
from costlearn.model import artifact
from costlearn.model.artifact_layout import SIDECAR, ArtifactError, model_folder, models_root

__all__ = ["PROBLEM_KEY", "PROBLEM_HASH", "problem_hashes", "trained_problems", "recorded_hashes", "NewProblems",
           "new_problems"]

PROBLEM_KEY = ["m", "n", "k", "dtype", "layout", "epilogue"]
"""The columns of a dataset row that make its problem."""
PROBLEM_HASH = "blake2b-64 of 'm,n,k,dtype,layout,epilogue', sorted, uint64 little-endian, base64"
"""How ``training.problems.hashes`` of a sidecar is written (its ``hash`` entry): a sidecar hashed another way is
read as recording no problems."""


def problem_hashes(rows: pd.DataFrame) -> np.ndarray:
    """The distinct problems of ``rows``, each hashed to 64 bits.

    Parameters
    ----------
    rows : DataFrame
        Dataset rows with the columns of :data:`PROBLEM_KEY`.

    Returns
    -------
    ndarray of uint64, shape (P,)
        Sorted, distinct: BLAKE2b (8-byte digest) of ``"m,n,k,dtype,layout,epilogue"``, little-endian. Two
        problems of a collection share a hash with a probability of about P**2 / 2**65 (1e-10 at 100,000
        problems).
    """
    keys = rows[PROBLEM_KEY].astype({c: str for c in PROBLEM_KEY[3:]}).drop_duplicates()
    out = np.fromiter((int.from_bytes(hashlib.blake2b(",".join(map(str, key)).encode(), digest_size=8).digest(),
                                      "little") for key in keys.itertuples(index=False, name=None)),
                      np.uint64, count=len(keys))
    return np.unique(out)


def trained_problems(rows: pd.DataFrame) -> dict:
    """The sidecar entry ``training.problems`` of a model fitted on ``rows``: ``count``, ``hash``
    (:data:`PROBLEM_HASH`) and ``hashes`` (:func:`problem_hashes`, base64)."""
    hashes = problem_hashes(rows)
    return dict(count=int(len(hashes)), hash=PROBLEM_HASH,
                hashes=base64.b64encode(hashes.astype("<u8").tobytes()).decode("ascii"))


def recorded_hashes(sidecar: dict) -> np.ndarray | None:
    """The problem hashes a sidecar's ``training.problems`` records (:func:`trained_problems`), sorted uint64;
    None where it records none (a sidecar written before the entry, or by ``transfer``), or another hash, or a
    damaged one (its count differs)."""
    training = sidecar.get("training") if isinstance(sidecar, dict) else None
    entry = training.get("problems") if isinstance(training, dict) else None
    if not isinstance(entry, dict) or entry.get("hash") != PROBLEM_HASH or not isinstance(entry.get("hashes"), str):
        return None
    try:
        raw = base64.b64decode(entry["hashes"], validate=True)
    except ValueError:
        return None
    if len(raw) % 8 or len(raw) // 8 != entry.get("count"):
        return None
    return np.frombuffer(raw, "<u8").astype(np.uint64)


@dataclass(frozen=True)
class NewProblems:
    """What :func:`new_problems` found.

    Attributes
    ----------
    folder : Path
        The model's folder in the store (``<models>/<device>/<family>/<dtype>``).
    problems : int
        The dataset's problems of the family and dtype (valid current rows).
    new : int
        Those the model there was not trained on: all of them where there is no model, or its sidecar records no
        trained problems.
    has_model : bool
        Whether the folder holds a model that loads (:func:`costlearn.model.artifact.load`): a damaged one (its
        sidecar's digest differs, its payload folder is gone, its sidecar is a FIFO) is no model, and is retrained.
    damaged : str
        Why the model in the folder does not load, where it holds a sidecar that does not (``""`` otherwise).
    """

    folder: Path
    problems: int
    new: int
    has_model: bool
    damaged: str = ""

    def due(self, threshold: int) -> bool:
        """Whether to train: no model yet, or at least ``threshold`` new problems."""
        return not self.has_model or self.new >= threshold


def new_problems(data_dir, models_dir=None, *, family: str, dtype: str, frame: pd.DataFrame | None = None
                 ) -> NewProblems:
    """How many problems of ``family``/``dtype`` in the dataset folder ``data_dir`` the model in the store was
    not trained on: the test of ``costlearn train --if-new-problems N``.

    Parameters
    ----------
    data_dir : path
        A device's dataset folder (``data/<device>/``).
    models_dir : path, optional
        The model store's root (default: :func:`costlearn.model.artifact_layout.models_root`'s).
    family, dtype : str
    frame : DataFrame, optional
        The folder's rows, where already read (:func:`costlearn.collect.dataset.load`); read otherwise.

    Returns
    -------
    NewProblems
        A model folder whose model does not load (missing, damaged, of an older schema) holds no model: training
        replaces it, whatever the sidecar's ``training.problems`` says.

    Raises
    ------
    ValueError
        If the folder holds no valid current rows of ``family``/``dtype``, or rows of several devices.
    """
    df = frame if frame is not None else load(Path(data_dir))[0]
    rows = valid_rows(current_rows(df[rows_where(df, family=family, dtype=dtype)])[0])
    devices = sorted(rows["device_slug"].astype(str).unique())
    if len(devices) != 1:
        raise ValueError(f"{data_dir} holds valid {family}/{dtype} rows of {len(devices)} devices {devices}; "
                         "need one")
    folder = model_folder(models_root(models_dir), devices[0], family, dtype)
    hashes = problem_hashes(rows)
    try:
        side = artifact.load(folder).sidecar          # what a process would serve: a damaged model is no model
    except (OSError, ArtifactError) as e:
        why = str(e)[:300] if (folder / SIDECAR).exists() or (folder / SIDECAR).is_symlink() else ""
        return NewProblems(folder, len(hashes), len(hashes), False, why)
    trained = recorded_hashes(side)
    new = len(hashes) if trained is None else int((~np.isin(hashes, trained, assume_unique=True)).sum())
    return NewProblems(folder, len(hashes), new, True)
