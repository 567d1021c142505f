"""Where model artifacts live and how a sidecar names its files: the
store's folders (``<root>/<device>/<family>/<dtype>/``), the files' names,
payload folders, the sidecar's digest, and :class:`ArtifactError`. What a
loaded artifact is, and its loading, is :mod:`costlearn.model.artifact`;
the checked reading of the files, :mod:`costlearn.model.artifact_files`;
the writing, :mod:`costlearn.model.artifact_save`.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from costlearn.core.errors import CostlearnError
from costlearn.core.files import read_file
from costlearn.families import FAMILIES

__all__ = ["ARTIFACT_SCHEMA", "ArtifactError", "default_models_dir", "models_root", "list_models", "model_folder",
           "parse_sidecar", "old_layout_folders", "todays_layout", "sidecar_schema", "SIDECAR", "SCORER_FILE",
           "VENDOR_FILE", "LEGACY_FILES", "SAVE_LOCK", "PAYLOAD_PREFIX", "files_folder", "sidecar_digest",
           "SIDECAR_DIGEST", "current_payload", "payload_folder", "recorded_sha"]


ARTIFACT_SCHEMA = 3
"""3: ``models/<device>/<family>/<dtype>/``, family and layouts in the
sidecar, the model saved through its CostModel, the compiled scorer and its
cascade in the artifact."""


SIDECAR = "model.json"


SIDECAR_DIGEST = "sidecar_sha256"
"""The sidecar's key for the sha256 of the rest of it (:func:`sidecar_digest`)."""


SAVE_LOCK = ".save.lock"
"""The lock file one :func:`~costlearn.model.artifact_save.save` of a folder holds at a time."""


PAYLOAD_PREFIX = "v-"
"""Names of the folders a model's files live in (``v-<UTC time>-<random>``)."""


LEGACY_FILES = ("model.ubj", "scorer.npz", "vendor.npz", "shortlist.npz")
"""The files an artifact kept beside its sidecar before payload folders."""


SCORER_FILE = "scorer.npz"


VENDOR_FILE = "vendor.npz"
"""The vendor model's members (:mod:`costlearn.model.vendor`), where the
family has a vendor candidate; its sha256 is in the sidecar."""


class ArtifactError(CostlearnError, ValueError):
    """A model artifact is missing, unreadable or does not match this code."""


def parse_sidecar(text: bytes, side_path) -> object:
    """The JSON document of a sidecar's bytes.

    Raises
    ------
    ArtifactError
        Naming ``side_path`` where the bytes are not UTF-8 or not JSON, nest
        deeper than the interpreter reads, or hold an integer over its digit
        limit.
    """
    try:
        return json.loads(text.decode("utf-8"))
    except RecursionError:
        why = "JSON nested too deep to read"
    except ValueError as e:                     # UTF-8, JSON, an integer over the digit limit
        why = str(e)[:200]
    raise ArtifactError(f"unreadable model sidecar {side_path}: {why}")


def default_models_dir() -> Path:
    """``$COSTLEARN_MODELS`` if set, else the ``models/`` folder of the source
    tree this package was imported from, else ``./models``."""
    env = os.environ.get("COSTLEARN_MODELS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "models"
    return here if here.is_dir() else Path("models")


def models_root(models_dir=None) -> Path:
    """The model store's root: ``models_dir`` as given, else
    :func:`default_models_dir` (the one place the default is worked out)."""
    return Path(models_dir) if models_dir is not None else default_models_dir()


def model_folder(root, device: str, family: str, dtype: str) -> Path:
    """``<root>/<device>/<family>/<dtype>``."""
    return Path(root) / device / family / dtype


def list_models(models_dir=None) -> list[tuple[str, str, str]]:
    """(device, family, dtype) triples that have an artifact under ``models_dir``."""
    root = models_root(models_dir)
    if not root.is_dir():
        return []
    return sorted((p.parents[2].name, p.parents[1].name, p.parent.name) for p in root.glob(f"*/*/*/{SIDECAR}"))


def old_layout_folders(models_dir=None) -> list[Path]:
    """Artifacts in the layout before kernel families (``<root>/<device>/<dtype>/model.json``).
    A sidecar in a folder named after a kernel family, or of a later schema
    (:func:`sidecar_schema`), is no such artifact: it is a model of today's
    layout seen from one of a store's device folders."""
    root = models_root(models_dir)
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob(f"*/*/{SIDECAR}") if not todays_layout(p))


def todays_layout(side: Path) -> bool:
    """Whether the sidecar ``side`` is a model of today's layout
    (``<device>/<family>/<dtype>/model.json``), not of the layout before
    kernel families (``<device>/<dtype>/model.json``): its folder's parent
    is named after a kernel family, or it records a later schema than 2
    (:func:`sidecar_schema`; a renamed family folder). An unreadable
    sidecar elsewhere counts as the old layout's."""
    return side.parents[1].name in FAMILIES.names() or sidecar_schema(side) not in (2, None)


def sidecar_schema(path):
    """The ``artifact_schema`` a sidecar records.

    Parameters
    ----------
    path : path
        A ``model.json``.

    Returns
    -------
    object or None
        Its ``artifact_schema`` value (2 for the layout before kernel
        families, :data:`ARTIFACT_SCHEMA` today), or None where the file
        cannot be read (missing, no regular file, over 1 GiB) or is not a
        JSON object. Never raises for what the file holds.
    """
    try:
        side = json.loads(read_file(path))
    except (OSError, ValueError, RecursionError):
        return None
    return side.get("artifact_schema") if isinstance(side, dict) else None


def files_folder(folder) -> Path:
    """The folder the artifact in ``folder`` keeps its files in now (its
    payload folder, or ``folder`` for an artifact written before payload
    folders), without checking the files.

    Raises
    ------
    ArtifactError
        If ``folder`` holds no readable sidecar or it names no such folder.
    """
    folder = Path(folder)
    payload = current_payload(folder)
    if payload is None:
        raise ArtifactError(f"no readable model sidecar in {str(folder)!r}")
    return payload_folder(folder, folder / SIDECAR, payload or None)


def sidecar_digest(side: dict) -> str:
    """sha256 of the sidecar's content less :data:`SIDECAR_DIGEST`: a flipped
    byte that renames a key or changes a value without breaking the JSON is
    found.

    Parameters
    ----------
    side : dict
        A sidecar as JSON reads it (plain types).

    Returns
    -------
    str
        64 hex digits: sha256 of ``json.dumps`` of the rest, keys sorted,
        UTF-8.
    """
    body = {k: v for k, v in side.items() if k != SIDECAR_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def current_payload(folder: Path) -> str | None:
    """The payload folder the sidecar in ``folder`` names now: its name,
    ``""`` for an artifact whose files lie beside the sidecar, None where
    there is no readable sidecar."""
    try:
        side = parse_sidecar(bytes(read_file(folder / SIDECAR)), folder / SIDECAR)
    except (OSError, ArtifactError):
        return None
    return str(side.get("payload") or "") if isinstance(side, dict) else None



def payload_folder(folder: Path, side_path: Path, payload) -> Path:
    """The folder the sidecar's files lie in: its ``payload`` folder, a bare
    name in ``folder`` (not a link), or ``folder`` itself where it names
    none (an artifact written before payload folders).

    Raises
    ------
    ArtifactError
        If ``payload`` is not such a folder's name or the folder is missing.
    """
    if payload is None:
        return folder
    name = str(payload)
    if not (isinstance(payload, str) and name.startswith(PAYLOAD_PREFIX) and Path(name).name == name
            and "\\" not in name):
        raise ArtifactError(f"{side_path}: payload {name[:100]!r} is not a folder name {PAYLOAD_PREFIX}... in the "
                            "artifact's folder")
    path = folder / name
    if path.is_symlink() or not path.is_dir():
        raise ArtifactError(f"{path} is missing or a link (the artifact's files): a training may be replacing "
                            "this model; retry, or retrain")
    return path


def recorded_sha(side: dict, name: str) -> str | None:
    """The sha256 the sidecar records for its file ``name``."""
    if name == side.get("scorer", {}).get("file", SCORER_FILE):
        return side["scorer"].get("sha256")
    if name == VENDOR_FILE and isinstance(side.get("vendor_model"), dict):
        return side["vendor_model"].get("sha256")
    return side.get("model_state", {}).get("files", {}).get(name)
