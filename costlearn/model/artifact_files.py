"""Reading the files a model sidecar names, checked: each file's bytes
against the sha256 the sidecar records (:func:`verified_file`), and the
compiled scorer, shortlist table and vendor model parsed from them, kept in
this process by digest (a scorer's forest check recorded across processes:
:data:`FOREST_CHECKED`). :func:`costlearn.model.artifact.load` reads an
artifact through them; :mod:`costlearn.model.artifact_save` copies files
with :func:`verified_file`.
"""
from __future__ import annotations

import collections
import hashlib
import threading
import zipfile
from pathlib import Path

from costlearn.core.files import read_file
from costlearn.core.keyed_cache import KeyedCache
from costlearn.core.npz import npz_arrays
from costlearn.model import forest as forest_module
from costlearn.model.artifact_layout import SCORER_FILE, VENDOR_FILE, ArtifactError
from costlearn.model.scorer import Scorer, ScorerError
from costlearn.model.shortlist import SHORTLIST_FILE, Shortlist, ShortlistError
from costlearn.model.vendor import FEATURES as VENDOR_FEATURES
from costlearn.model.vendor import VendorModel

__all__ = ["verified_file", "load_scorer", "load_shortlist", "load_vendor", "FOREST_CHECKED", "PARSED_KEPT"]


_PARSED: "collections.OrderedDict" = collections.OrderedDict()
"""The last :data:`PARSED_KEPT` scorers, shortlist tables and vendor models
this process read and checked, by (kind, the file's sha256, what the check
depended on): a second load of the same bytes reuses them (the file is still
read and its digest still checked). They are immutable once loaded."""


PARSED_KEPT = 8


_PARSED_LOCK = threading.Lock()


def _parsed(key: tuple, parse):
    """``parse()``, or the object it gave for ``key`` earlier in this
    process (:data:`_PARSED`)."""
    with _PARSED_LOCK:
        got = _PARSED.get(key)
        if got is not None:
            _PARSED.move_to_end(key)
            return got
    got = parse()
    with _PARSED_LOCK:
        _PARSED[key] = got
        while len(_PARSED) > PARSED_KEPT:
            _PARSED.popitem(last=False)
    return got


FOREST_CHECKED = KeyedCache("forest-checked", ".ok")
"""Records, in the user's private cache, the sha256 of each scorer file whose
forest passed :meth:`~costlearn.model.forest.FlatForest.validate` (keyed with
the source of :mod:`costlearn.model.forest`, so a changed check checks
again): a later process loading the same bytes skips the check (a large
share of a deep model's load). A record counts only in a private folder
(:func:`costlearn.core.keyed_cache.private_folder`); a damaged file has another
sha256 and is checked, and refused."""


def _checked_scorer(path: Path, n_candidates: int, data: bytearray, sha256: str) -> Scorer:
    """:meth:`Scorer.from_file` of ``data`` (the verified bytes of ``path``,
    whose sha256 is ``sha256``), its forest's check skipped where
    :data:`FOREST_CHECKED` records these bytes, and recorded once it passes."""
    try:
        key = f"{sha256}\n".encode() + Path(forest_module.__file__).read_bytes()
    except (OSError, TypeError):                # no readable source (a frozen install): check every time
        return Scorer.from_file(path, n_candidates, data)
    checked = FOREST_CHECKED.has(key)
    scorer = Scorer.from_file(path, n_candidates, data, checked)
    if not checked:
        FOREST_CHECKED.put(key)
    return scorer


def verified_file(folder: Path, name, side_path: Path, sha256, what: str) -> tuple[Path, bytearray]:
    """``folder / name`` and its bytes, a file the sidecar ``side_path``
    records with ``sha256``: a bare file name in the artifact's own folder
    (the sidecar may name no file elsewhere, nor reach out through a link).
    The file is read once: the bytes checked are the bytes the caller uses.

    Raises
    ------
    ArtifactError
        If the name is not a bare file name, the file lies outside the
        folder, is missing, or its bytes are not the recorded ones.
    """
    name = str(name)
    if not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise ArtifactError(f"{side_path}: the {what} is named {name[:100]!r}; an artifact's files are bare file "
                            "names in its own folder")
    path = folder / name
    if path.exists() and path.resolve().parent != folder.resolve():
        raise ArtifactError(f"{path} leads outside {folder} (a link); an artifact's files live in its folder")
    if not path.exists():
        raise ArtifactError(f"{path} is missing (the artifact's {what})")
    try:
        data = read_file(path)
    except OSError as e:
        raise ArtifactError(f"{path} is unreadable (the artifact's {what}: {e})") from e
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ArtifactError(f"{path} does not belong to {side_path} (sha256 differs): a training may be writing "
                            "this folder; retry, or retrain")
    return path, data



def load_scorer(folder: Path, side_path: Path, entry: dict, n_candidates: int, n_features: int) -> Scorer:
    """The compiled scorer the sidecar ``side_path`` records in ``entry``
    (its ``scorer``), read from ``folder`` and checked.

    Parameters
    ----------
    folder : Path
        The folder the artifact's files lie in.
    side_path : Path
        The sidecar (for messages).
    entry : dict
        The sidecar's ``scorer``: ``file`` (default :data:`SCORER_FILE`) and ``sha256``.
    n_candidates, n_features : int
        The candidates and features the sidecar names.

    Returns
    -------
    Scorer

    Raises
    ------
    ArtifactError
        If the file is missing, not the one the sidecar recorded,
        unreadable, does not fit ``n_candidates``, or reads another number
        of features.
    """
    sc_path, sc_data = verified_file(folder, entry.get("file", SCORER_FILE), side_path, entry.get("sha256"),
                                     "compiled scorer")
    try:
        scorer = _parsed(("scorer", entry.get("sha256"), n_candidates),
                         lambda: _checked_scorer(sc_path, n_candidates, sc_data, entry.get("sha256")))
    except ScorerError as e:
        raise ArtifactError(str(e)) from e
    if scorer.n_features != n_features:
        raise ArtifactError(f"{sc_path} reads {scorer.n_features} features, the sidecar names {n_features}")
    return scorer


def load_vendor(folder: Path, side_path: Path, entry) -> VendorModel | None:
    """The vendor model the sidecar records (None where it records none),
    read from :data:`VENDOR_FILE`.

    Raises
    ------
    ArtifactError
        If the file is missing, not the one the sidecar recorded, unreadable,
        or reads other features than this code's.
    """
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ArtifactError(f"{side_path}: vendor_model is a {type(entry).__name__}, not an object")
    if entry.get("features") != list(VENDOR_FEATURES):
        raise ArtifactError(f"{side_path}: its vendor model reads {entry.get('features')}, this code's "
                            f"{list(VENDOR_FEATURES)}; retrain with `costlearn train`")
    path, data = verified_file(folder, VENDOR_FILE, side_path, entry.get("sha256"), "vendor model")
    try:
        vm = _parsed(("vendor", entry.get("sha256")), lambda: VendorModel.from_arrays(npz_arrays(data)))
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as e:
        raise ArtifactError(f"{path}: unreadable vendor model ({type(e).__name__}: {e})") from e
    if (entry.get("members"), entry.get("trees")) != (len(vm.bases), len(vm.forest.roots)):
        raise ArtifactError(f"{path}: {len(vm.bases)} members of {len(vm.forest.roots)} trees; {side_path} "
                            f"records {entry.get('members')} of {entry.get('trees')}")
    return vm



def load_shortlist(folder: Path, side_path: Path, entry, scorer: Scorer, n_candidates: int, layouts):
    """The shortlist table the sidecar names (None where it names none).

    Raises
    ------
    ArtifactError
        If the file is missing, not the one the sidecar recorded, unreadable,
        or does not fit the scorer, candidates or layouts.
    """
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ArtifactError(f"{side_path}: shortlist is a {type(entry).__name__}, not an object")
    path, data = verified_file(folder, entry.get("file", SHORTLIST_FILE), side_path, entry.get("sha256"),
                           "shortlist table")
    try:
        sl = _parsed(("shortlist", entry.get("sha256")), lambda: Shortlist.from_file(path, data))
        sl.fits(n_candidates, scorer.n_trees, layouts)
    except ShortlistError as e:
        raise ArtifactError(f"{path}: {e}" if str(path) not in str(e) else str(e)) from e
    return sl
