"""Model artifact: ``models/<device>/<family>/<dtype>/`` holding the model's
own files (XGBoost: ``model.ubj``), its compiled scorer (``scorer.npz``) and
a JSON sidecar (``model.json``) with everything prediction needs without a
device, a compiler or the training library (design.md, "Model artifact").

A model is replaced in one rename: :func:`costlearn.model.artifact_save.save` writes the new model's files
into a new folder beside the old one's (``<folder>/v-<time>-<random>/``,
the sidecar's ``payload``), then renames the new sidecar over the old. A
reader sees the old model or the new, never neither and never a mix: the
sidecar records the sha256 of each file, the previous model's files stay
until the next save, and :func:`load` reads again where the sidecar changed
under it. A save killed at any point leaves the old model served (its
unfinished folder is removed by the next save). One save at a time per
folder (a lock, :data:`~costlearn.model.artifact_layout.SAVE_LOCK`, that a
killed holder does not leave held). Artifacts written before payload
folders keep their files beside the sidecar and load as they are.

``scorer.npz`` is what is served: predictions, rankings, the shortlist table,
``evaluate`` (:meth:`Artifact.predict_rows`) all read it, and :func:`load`
checks its sha256. ``model.ubj`` is the training library's own copy of the
same trees (for XGBoost's tools, :meth:`Artifact.model`), read and checked
only when asked for: a damaged one changes no answer and is refused where it
is read.
Artifacts of schema 2 (``models/<device>/<dtype>/``, before kernel families)
are refused with the command that converts them (:func:`migrate`).

This module is the loaded artifact (:class:`Artifact`) and its loading
(:func:`load`: the sidecar's checks); where artifacts live and how a sidecar
names its files is :mod:`costlearn.model.artifact_layout` (its public names
re-exported here), the checked reading of each file
:mod:`costlearn.model.artifact_files`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is loaded where a function needs it: not to serve a prediction
    import pandas as pd

from costlearn.core.checks import shown
from costlearn.core.device import DeviceSpec
from costlearn.core.files import read_file
from costlearn.families import FAMILIES, get_family
from costlearn.features import FEATURE_SETS, CandidateFeatures, ConfigTable, feature_version, get_feature_set
from costlearn.model.artifact_files import load_scorer, load_shortlist, load_vendor
from costlearn.model.artifact_layout import (    # the layout's public names: re-exported, as before the split
    ARTIFACT_SCHEMA, PAYLOAD_PREFIX, SAVE_LOCK, SCORER_FILE, SIDECAR, SIDECAR_DIGEST, ArtifactError,
    default_models_dir, files_folder, list_models, model_folder, models_root, old_layout_folders, parse_sidecar,
    payload_folder, sidecar_digest)
from costlearn.model.base import MODELS, CostModel
from costlearn.model.envelope import Coverage, Envelope
from costlearn.model.scorer import Scorer
from costlearn.model.shortlist import Shortlist
from costlearn.model.vendor import VendorModel
from costlearn.model.vendor_floor import VendorFloor

__all__ = ["load", "Artifact", "LOAD_TRIES",
           # where artifacts live and how a sidecar names its files (costlearn.model.artifact_layout)
           "ARTIFACT_SCHEMA", "ArtifactError", "default_models_dir", "models_root", "list_models", "model_folder",
           "old_layout_folders", "SIDECAR", "SCORER_FILE", "SAVE_LOCK", "PAYLOAD_PREFIX", "files_folder",
           "sidecar_digest", "SIDECAR_DIGEST"]


LOAD_TRIES = 3
"""Times :func:`load` reads a sidecar that changes under it (a save
replacing the model meanwhile) before it gives up."""


_REQUIRED_KEYS = ("artifact_schema", "model", "model_state", "feature_set", "feature_names", "feature_version",
                  "family", "dtype", "layouts", "device", "candidates", "envelope", "scorer", "template_hash",
                  "costlearn_version")


@dataclass
class Artifact:
    """A loaded model artifact.

    Attributes
    ----------
    path : Path
        Its folder.
    sidecar : dict
    spec : DeviceSpec
        Device the model was trained on.
    family : KernelFamily
    dtype : str
    layouts : tuple of str
    configs : list
        The candidate configs, in the scorer's order.
    registers_per_thread : ndarray of float64, shape (len(configs),)
        Compiled registers per thread of each candidate, NaN where not
        recorded (the family's estimate is used).
    candidates : DataFrame
        ``config_id`` and ``registers_per_thread`` of each candidate (built
        at first use: serving never reads it, and a process's first
        DataFrame is a noticeable part of a deep model's load:
        docs/results.md, "Speed").
    envelope : costlearn.model.envelope.Envelope
    scorer : Scorer
    coverage : costlearn.model.envelope.Coverage
        Where each candidate was measured (everywhere for an artifact
        trained before coverage was recorded).
    floor : costlearn.model.vendor_floor.VendorFloor
        The calibrated vendor floor and held-out evidence (the plain argmin
        for an artifact trained before it was recorded, or without a
        hold-out).
    shortlist : costlearn.model.shortlist.Shortlist or None
        The scorer's shortlist table, where it has one.
    vendor_model : costlearn.model.vendor.VendorModel or None
        The estimate of the best tile's time over the vendor's, where the
        family has a vendor candidate and training fitted one.
    epilogues : tuple of str
        The epilogues it was trained on (``("none",)`` for an artifact
        written before epilogues were recorded).
    files : Path
        The folder its files lie in (its payload folder; :attr:`path` for
        an artifact written before payload folders).
    """

    path: Path
    sidecar: dict
    spec: DeviceSpec
    family: object
    dtype: str
    layouts: tuple
    configs: list
    registers_per_thread: np.ndarray
    envelope: Envelope
    scorer: Scorer
    coverage: Coverage = None
    floor: VendorFloor = None
    epilogues: tuple = ("none",)
    shortlist: Shortlist = None
    vendor_model: VendorModel = None
    files: Path = None
    _model: CostModel | None = field(default=None, repr=False)
    _candidates: pd.DataFrame | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.files is None:
            self.files = self.path

    @property
    def candidates(self) -> pd.DataFrame:
        """``config_id`` and ``registers_per_thread`` of each candidate, in
        the scorer's order."""
        import pandas as pd
        if self._candidates is None:
            self._candidates = pd.DataFrame({"config_id": [c.config_id for c in self.configs],
                                             "registers_per_thread": self.registers_per_thread})
        return self._candidates

    @property
    def device(self) -> str:
        """The device folder name (``ocl-pthread-amd-epyc``), from the
        folder's absolute path (``models/<device>/<family>/<dtype>``), with
        ``..`` removed but links not followed (a linked folder is named
        where it is linked, not where its target lies)."""
        return Path(os.path.abspath(self.path)).parents[1].name

    @property
    def model_sha256(self) -> str:
        """sha256 of the scorer file: the identity of what is served."""
        return self.sidecar["scorer"]["sha256"]

    @property
    def feature_set(self) -> str:
        """Name of the feature set the scorer reads."""
        return self.sidecar["feature_set"]

    def predict_rows(self, rows: pd.DataFrame) -> np.ndarray:
        """What is served for measured rows: the scorer's predicted time of
        each row's config on its problem, in microseconds (a relative score
        where the model does not predict time), the numbers ``predict_best``
        ranks by.

        Parameters
        ----------
        rows : DataFrame
            Columns ``m, n, k, layout, config_id`` and ``epilogue`` (``none``
            where absent); every ``config_id`` one of :attr:`candidates`.

        Returns
        -------
        ndarray of float64, shape (len(rows),)

        Raises
        ------
        ValueError
            If a row's config is not a candidate of this model.
        """
        import pandas as pd
        index = {c: i for i, c in enumerate(self.candidates["config_id"])}
        unknown = sorted(set(rows["config_id"]) - set(index))
        if unknown:
            raise ValueError(f"configs {unknown[:5]} are not candidates of the model in {self.path}")
        feats = self.candidate_features()
        cand = rows["config_id"].map(index).to_numpy(np.int64)
        epi = rows["epilogue"].astype(str) if "epilogue" in rows else pd.Series("none", index=rows.index)
        keys = pd.DataFrame(dict(m=rows["m"].to_numpy(np.int64), n=rows["n"].to_numpy(np.int64),
                                 k=rows["k"].to_numpy(np.int64), layout=rows["layout"].astype(str).to_numpy(),
                                 epilogue=epi.to_numpy()))
        out = np.empty(len(rows), np.float64)
        for (m, n, k, lay, e), at in keys.groupby(["m", "n", "k", "layout", "epilogue"], sort=False).indices.items():
            X = feats.numpy(int(m), int(n), int(k), cand[at], lay, e)
            out[at] = np.exp2(self.scorer.full_numpy(X, cand[at]))
        return out

    def model(self) -> CostModel:
        """The fitted CostModel, the training library's copy of what
        :attr:`scorer` serves (loaded and checked on first use; it may need
        its training library, e.g. xgboost).

        Raises
        ------
        ArtifactError
            If the model's files do not load.
        """
        if self._model is None:
            try:
                cls = MODELS.get(self.sidecar["model"])
                self._model = cls.load(self.files, self.sidecar["model_state"], self.spec)
            except (KeyError, TypeError, ValueError) as e:
                raise ArtifactError(f"{self.path / SIDECAR}: the {self.sidecar.get('model')!r} model does not "
                                    f"load ({type(e).__name__}: {e})") from e
        return self._model

    def baseline(self, name: str) -> CostModel:
        """A baseline fitted at training time (``best_fixed``), or fitted
        now where it needs no data (``roofline``).

        Raises
        ------
        ArtifactError
            If the artifact holds no state for it.
        """
        state = self.sidecar.get("baselines", {}).get(name)
        if state is None:
            raise ArtifactError(f"{self.path / SIDECAR} holds no {name!r} baseline; retrain")
        try:
            return MODELS.get(name).load(self.files, state, self.spec)
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{self.path / SIDECAR}: baseline {name!r} does not load: {e}") from e

    def candidate_features(self) -> CandidateFeatures:
        """The feature matrix builder of the candidates (per-config columns computed)."""
        table = ConfigTable(self.family, self.configs, self.dtype, self.spec, self.registers_per_thread)
        return CandidateFeatures(get_feature_set(self.feature_set), table)


def load(folder) -> Artifact:
    """Load the artifact in ``folder``.

    Where a save replaces the model while it reads (the sidecar's bytes
    change under it), it reads the new one, up to :data:`LOAD_TRIES` times.

    Raises
    ------
    ArtifactError
        If the files are missing or unreadable, the artifact is of another
        schema (an old one names the migration command), or its feature set,
        feature list or feature version do not match this code (the message
        names what differs).
    """
    folder = Path(folder)
    side_path = folder / SIDECAR
    for attempt in range(LOAD_TRIES):
        if not side_path.is_file():
            raise ArtifactError(f"no model artifact in {str(folder)!r} (need {SIDECAR})")
        try:
            text = bytes(read_file(side_path))
        except OSError as e:
            raise ArtifactError(f"unreadable model sidecar {side_path}: {e}") from e
        try:
            return _load(folder, text)
        except ArtifactError:
            try:
                changed = bytes(read_file(side_path)) != text
            except OSError:
                changed = True
            if not changed or attempt == LOAD_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _load(folder: Path, text: bytes) -> Artifact:
    """:func:`load` of the sidecar bytes ``text`` read from ``folder``."""
    side_path = folder / SIDECAR
    side = parse_sidecar(text, side_path)
    if not isinstance(side, dict):
        raise ArtifactError(f"{side_path}: not a JSON object")
    if SIDECAR_DIGEST in side or "payload" in side:    # written with payload folders: always with its digest
        if side.get(SIDECAR_DIGEST) != sidecar_digest(side):
            raise ArtifactError(f"{side_path}: its content is not what was written (sha256 differs from its "
                                f"{SIDECAR_DIGEST}): a damaged file; retrain with `costlearn train`")
    schema = side.get("artifact_schema")
    if schema != ARTIFACT_SCHEMA:
        hint = (f"convert it with `costlearn migrate-models {folder.parents[1]}` (it moves to "
                f"<device>/<family>/<dtype>/ and gains a compiled scorer)" if schema == 2
                else "retrain with `costlearn train`")
        raise ArtifactError(f"{side_path}: artifact schema {shown(schema)}, this code reads schema {ARTIFACT_SCHEMA}; "
                            + hint)
    missing = [key for key in _REQUIRED_KEYS if key not in side]
    if missing:
        raise ArtifactError(f"{side_path} lacks keys {missing}; retrain with `costlearn train`")
    wrong = [f"{key} is a {type(side[key]).__name__}, not {'an object' if kind is dict else 'a list'}"
             for key, kind in (("model_state", dict), ("scorer", dict), ("envelope", dict), ("device", dict),
                               ("candidates", list), ("layouts", list), ("feature_names", list))
             if not isinstance(side[key], kind)]
    if wrong:
        raise ArtifactError(f"{side_path}: {'; '.join(wrong)}; retrain with `costlearn train`")
    try:
        if side["family"] not in FAMILIES:
            raise ValueError(f"unknown kernel family {side['family']!r}; known: {list(FAMILIES.names())}")
        fam = get_family(side["family"])
        fs_name = side["feature_set"]
        if fs_name not in FEATURE_SETS:
            raise ValueError(f"unknown feature set {fs_name!r}; known: {list(FEATURE_SETS.names())}")
    except ValueError as e:
        raise ArtifactError(f"{side_path}: {e}") from e
    code_names = list(get_feature_set(fs_name).feature_names(fam))
    art_names = list(side.get("feature_names") or [])
    if code_names != art_names or side.get("feature_version") != feature_version(fs_name, fam):
        added = [f for f in code_names if f not in art_names]
        removed = [f for f in art_names if f not in code_names]
        what = []
        if added:
            what.append(f"code has features the model lacks: {added}")
        if removed:
            what.append(f"model has features the code lacks: {removed}")
        if not added and not removed and code_names != art_names:
            what.append("same features in a different order")
        if side.get("feature_version") != feature_version(fs_name, fam):
            what.append(f"feature version {side.get('feature_version')!r} != code's "
                        f"{feature_version(fs_name, fam)!r}")
        raise ArtifactError(f"{side_path} does not match this code's feature set {fs_name!r}: "
                            f"{'; '.join(what)}. Retrain with `costlearn train`.")
    try:
        spec = DeviceSpec.from_dict(side["device"])
        rows = side["candidates"]                   # columns, not records: far cheaper for hundreds of candidates
        ids = [r["config_id"] for r in rows]
        registers = np.array([r.get("registers_per_thread", np.nan) for r in rows], np.float64)
        configs = [fam.config_from_id(c) for c in ids]
        if side["dtype"] not in fam.dtypes:
            raise ValueError(f"dtype {side['dtype']!r} is not one of the {fam.name!r} family's {list(fam.dtypes)}")
        layouts = tuple(side["layouts"])
        if not layouts or any(lay not in fam.layouts for lay in layouts):
            raise ValueError(f"layouts {list(layouts)} not among the family's {list(fam.layouts)}")
        epilogues = tuple(side.get("epilogues") or ("none",))
        if any(e not in fam.epilogues for e in epilogues):
            raise ValueError(f"epilogues {list(epilogues)} not among the family's {list(fam.epilogues)}")
        envelope = Envelope(side["envelope"])
        if not configs:
            raise ValueError("no candidate configs")
        coverage = Coverage(side.get("coverage"), len(configs))
        floor = VendorFloor(side["floor"]) if side.get("floor") is not None else VendorFloor.plain()
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{side_path}: invalid sidecar ({type(e).__name__}: {e}); "
                            "retrain with `costlearn train`") from e
    files = payload_folder(folder, side_path, side.get("payload"))
    scorer = load_scorer(files, side_path, side["scorer"], len(configs), len(art_names))
    shortlist = load_shortlist(files, side_path, side.get("shortlist"), scorer, len(configs), layouts)
    vendor_model = load_vendor(files, side_path, side.get("vendor_model"))
    if floor.estimate is not None and vendor_model is None:
        raise ArtifactError(f"{side_path}: its vendor floor decides with the vendor model's estimate, but the "
                            "artifact has no vendor model; retrain with `costlearn train`")
    return Artifact(path=folder, sidecar=side, spec=spec, family=fam, dtype=side["dtype"], layouts=layouts,
                    configs=configs, registers_per_thread=registers, envelope=envelope, scorer=scorer,
                    coverage=coverage, floor=floor, shortlist=shortlist, epilogues=epilogues,
                    vendor_model=vendor_model, files=files)
