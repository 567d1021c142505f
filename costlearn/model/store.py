"""The model store: where artifacts are found, resolved and kept loaded
(design.md, "Seams": the artifacts live in ``<store>/<device>/<family>/<dtype>/``).

- :class:`ModelKey`: which model, (device, family, dtype), the key of every lookup;
- :func:`default_store`: ``$COSTLEARN_MODELS``, else the source tree's ``models/``
  (:func:`costlearn.model.artifact_layout.models_root`), worked out once;
- :func:`resolve_model` / :func:`find_model`: a ModelKey -> the artifact folder, with
  errors that list what the store holds;
- :func:`has_model`: whether the store holds one;
- :class:`LoadedModels`: the process's loaded models, keyed by the ModelKey a
  caller used (with its store) and by folder, so names of one artifact share one load.

:mod:`costlearn.serve.predictor` loads :class:`~costlearn.serve.predictor.Predictor` objects
through it; the command line asks it, and re-implements none of it.
"""
from __future__ import annotations

import os
import posixpath
import shlex
import threading
import time
from pathlib import Path
from typing import NamedTuple

from costlearn.core.device import DeviceSpec
from costlearn.core.checks import check_path, check_pathlike
from costlearn.model import artifact_layout as _artifact_layout

__all__ = ["ModelKey", "default_store", "find_model", "resolve_model", "has_model", "store_key", "store_hint",
           "LoadedModels"]

_LOCK = threading.Lock()
_DEFAULT_STORE: Path | None = None


class ModelKey(NamedTuple):
    """Which model: a store's ``<device>/<family>/<dtype>/`` folder.

    A frozen value (a named tuple: equal to the plain triple
    :func:`costlearn.model.artifact_layout.list_models` gives, so a repeated
    prediction's lookup may use a plain tuple and skip building one).

    Attributes
    ----------
    device : str or None
        A device folder name; None for the only device with a model of
        this family and dtype.
    family, dtype : str
    """

    device: str | None
    family: str
    dtype: str

    @classmethod
    def of(cls, device, family: str, dtype: str) -> "ModelKey":
        """The key of (device, family, dtype), a DeviceSpec named by its slug
        (other device types are kept, and refused where the key is resolved);
        a str subclass as its text, so that its own ``__eq__`` and
        ``__hash__`` never find another model's entry."""
        device = device.slug if isinstance(device, DeviceSpec) else device
        return cls(*(str.__str__(v) if isinstance(v, str) else v for v in (device, family, dtype)))

    def __str__(self) -> str:
        return f"{self.device}/{self.family}/{self.dtype}"


def resolve_model(device, family: str, dtype: str, models_dir=None, *, cli: bool = False) -> Path:
    """The artifact folder for (device, family, dtype) under ``models_dir``:
    :func:`find_model` of their :class:`ModelKey`.

    Parameters
    ----------
    device : str, DeviceSpec or None
        A device folder name, a DeviceSpec whose slug names it, or None for
        the only device with a model of this family and dtype.
    family, dtype : str
    models_dir : path, optional
        ``$COSTLEARN_MODELS`` or the source tree's ``models/`` by default.
    cli : bool
        Word the errors in command-line terms (``--model``, ``--models``).

    Raises
    ------
    As :func:`find_model`.
    """
    return find_model(ModelKey.of(device, family, dtype), models_dir, cli=cli)


def find_model(key: ModelKey, models_dir=None, *, cli: bool = False) -> Path:
    """The artifact folder of ``key`` under ``models_dir``.

    Parameters
    ----------
    key : ModelKey
        Its device None: the only device with a model of its family and dtype.
    models_dir : path, optional
        ``$COSTLEARN_MODELS`` or the source tree's ``models/`` by default.
    cli : bool
        Word the errors in command-line terms (``--model``, ``--models``).

    Raises
    ------
    TypeError
        If ``device`` or ``models_dir`` has the wrong type.
    ValueError
        If the store is not a folder, there is no such model, or ``device=None`` is ambiguous (the
        message lists the models present); an artifact in the layout before
        kernel families names the migration command.
    """
    check_path("models_dir", models_dir, optional=True)
    device, family, dtype = key
    root = _artifact_layout.models_root(models_dir)
    if not root.is_dir():
        # the store given, or the default one (None, or default_store()'s own object, which LoadedModels.load
        # passes): an explicit folder equal to the variable's is named as given
        given = models_dir is not None and models_dir is not _DEFAULT_STORE
        named = ("--models" if cli else "models_dir") if given \
            else "$COSTLEARN_MODELS" if os.environ.get("COSTLEARN_MODELS") else "the default model store"
        raise ValueError(f"{named} {str(root)!r} is not a folder" + (" (it does not exist)" if not root.exists()
                                                                       else "") + "; train a model into it with "
                         "`costlearn train --models DIR`, or point models_dir / --models / $COSTLEARN_MODELS at "
                         "a model store")
    have = _artifact_layout.list_models(root)
    present = [f"{d}/{f}/{t}" for d, f, t in have] or "none"
    old = _artifact_layout.old_layout_folders(root)
    hint = (f"; {len(old)} artifact(s) in the layout before kernel families ({old[0]}): convert them with "
            f"`costlearn migrate-models {root}`" if old else "") + ("" if have else store_hint(root, cli))
    if device is None:
        devs = sorted({d for d, f, t in have if (f, t) == (family, dtype)})
        if len(devs) != 1:
            raise ValueError((f"no --model given and {family}/{dtype} models exist for {devs} in {str(root)!r}; "
                              f"choose one with --model {devs[0]} (or --models another store)" if devs and cli else
                              f"device=None is ambiguous: {family}/{dtype} models exist for {devs} in "
                              f"{str(root)!r}; pass device=<one of them>" if devs else
                              f"no {family}/{dtype} model in {str(root)!r}; collect (`costlearn collect`) or "
                              "import (`costlearn import`) measurements and train one (`costlearn train`) "
                              f"(models present: {present})") + hint)
        device = devs[0]
    if not isinstance(device, str):
        raise TypeError(f"device={device!r} ({type(device).__name__}); must be a str or DeviceSpec")
    if ModelKey(device, family, dtype) not in have:
        raise ValueError(f"no model for device={device!r}, family={family!r}, dtype={dtype!r} in {str(root)!r}; "
                         f"models present: {present}" + hint)
    return _artifact_layout.model_folder(root, device, family, dtype)


def store_hint(root: Path, cli: bool, device_flag: str = "--model") -> str:
    """The words that name the store where ``root``, a folder holding no
    model, is a folder off one: a model's own folder, its family's, its
    device's, or the folder that holds the store.

    A model of today's layout is a sidecar in ``<family>/<dtype>/`` (a
    known family's name, or a sidecar of today's schema where the folder is
    renamed); one of the layout before kernel families is not.

    Parameters
    ----------
    root : Path
        The folder given as the store (relative to the working folder or
        absolute).
    cli : bool
        Word it in the command line's flags (``--models`` and
        ``device_flag``), else in the Python API's (``models_dir``,
        ``device``).
    device_flag : str
        The command's flag that names a device's models.

    Returns
    -------
    str
        ``"; <what to give instead>"``, or empty where ``root`` is none of
        these folders.
    """
    flag = "--models" if cli else "models_dir"
    layout, root = _artifact_layout, Path(os.path.abspath(root))
    for pattern in (layout.SIDECAR, f"*/{layout.SIDECAR}", f"*/*/{layout.SIDECAR}"):
        for side in root.glob(pattern):
            if len(side.parents) > 3 and layout.todays_layout(side):
                store, device = side.parents[3], side.parents[2].name
                return (f"; {str(root)!r} is inside the model store {str(store)!r} (the {device} model's folders): "
                        f"{flag} names the store (" + (f"--models {shlex.quote(str(store))} {device_flag} "
                                                      f"{shlex.quote(device)})" if cli else
                                                      f"models_dir={str(store)!r}, device={device!r})"))
    below = sorted({p.parents[3] for p in root.glob(f"*/*/*/*/{layout.SIDECAR}") if layout.todays_layout(p)})
    return f"; {str(below[0])!r} holds models: {flag} names that folder" if below else ""


def has_model(device: str, family: str, dtype: str, models_dir=None) -> bool:
    """Whether the store (``models_dir``, else :func:`default_store`) holds
    a model for (device, family, dtype)."""
    root = _artifact_layout.models_root(models_dir)
    return root.is_dir() and ModelKey.of(device, family, dtype) in _artifact_layout.list_models(root)


def store_key(models_dir):
    """How a model store is keyed in the process cache: None for the default
    store (:func:`default_store`); else an absolute path as given, or
    (working folder, relative path), so a relative path names another store
    after a chdir; a str always (a str subclass's text). What
    :meth:`LoadedModels.load` registers a loaded model under, and what a
    caller that holds ``models_dir`` looks it (or an answer made with it)
    up by. No file system call but getcwd.

    Raises
    ------
    TypeError
        If ``models_dir`` is not None, a str or an ``os.PathLike`` (or is
        empty, or its ``__fspath__`` gives bytes).
    OSError
        If the working folder is gone (a relative path then names no store).
    """
    if models_dir is None:
        return None
    if type(models_dir) is str and _POSIX and models_dir.startswith("/"):
        return models_dir                       # posixpath.isabs, without its os.fspath: the hot path
    path = os.fspath(check_pathlike("models_dir", models_dir))
    if not isinstance(path, str):
        raise TypeError(f"models_dir={models_dir!r} names a path of bytes; must be a str path (or a pathlib.Path)")
    if type(path) is not str:
        path = str.__str__(path)                # a str subclass's own __eq__ and __hash__ must not key a store
    return path if os.path.isabs(path) else (os.getcwd(), path)


_POSIX = os.path is posixpath


def default_store() -> Path:
    """The model store used when no ``models_dir`` is given: ``$COSTLEARN_MODELS``
    if set, else the source tree's ``models/``, else ``./models``, as an
    absolute path.

    It is read once, at the first call, and again after
    :meth:`LoadedModels.clear` (``costlearn.serve.predictor.clear_cache``):
    reading the environment on every call would cost most of the microsecond
    a repeated :func:`predict_best` is allowed. Set ``$COSTLEARN_MODELS``
    before the first prediction, or call ``costlearn.serve.predictor.clear_cache()`` after changing it.
    """
    global _DEFAULT_STORE
    store = _DEFAULT_STORE
    if store is None:
        with _LOCK:
            if _DEFAULT_STORE is None:
                _DEFAULT_STORE = _artifact_layout.models_root(None).absolute()
            store = _DEFAULT_STORE
    return store


def _sidecar_identity(folder) -> tuple | None:
    """What tells one sidecar file of ``folder`` from the next: a save
    renames a new file over the old one (:func:`costlearn.model.artifact_save.save`),
    so its device, inode, size and modification time change, and a file
    rewritten in place (an archive extracted over it, keeping size and
    mtime) changes its status-change time, which no user can set. None
    where there is none."""
    try:
        st = os.stat(os.path.join(folder, _artifact_layout.SIDECAR))
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class LoadedModels:
    """The process's loaded models: each artifact folder loaded once, found
    again by the names a caller used ((:class:`ModelKey`, :func:`store_key`)) or
    by its folder, and dropped once its folder holds another model.
    Thread-safe; :meth:`clear` forgets them and the default store (a load
    that began before it does not cache).

    The staleness rule: each model's sidecar is looked at (one ``stat``) by
    :meth:`watch`, which its callers run at most every :attr:`WATCH_EVERY_S`
    seconds (:meth:`watch_due`); a model whose sidecar is another file than
    when it was loaded (a retrain replaced it, or it was removed) is dropped,
    so the next call loads the model the folder
    holds now (its answers, kept by the model, go with it). A model is one
    loaded object: an answer made with it is made with it alone.

    Attributes
    ----------
    get : callable
        ``get(names)``: the model loaded under ``names`` ((:class:`ModelKey`,
        :func:`store_key`); a plain (device, family, dtype) triple is the
        same key), or None. The hot path of a repeated prediction: the
        lookup dict's own ``get``, without a Python frame (:meth:`clear`
        empties that dict in place, so it stays the one looked in).
    next_watch_s : float
        The :func:`time.monotonic` after which :meth:`watch_due` looks again.
    """

    WATCH_EVERY_S = 1.0
    """Seconds between two looks at the loaded models' sidecars."""

    def __init__(self):
        self._by_key: dict = {}
        self._sidecars: dict = {}               # folder key -> (folder, its sidecar's identity before the load)
        self._generation = 0
        self.get = self._by_key.get
        self.next_watch_s = 0.0

    def load(self, key: ModelKey, models_dir, loader):
        """The model of ``key`` in ``models_dir`` (default: :func:`default_store`),
        loaded with ``loader(folder)`` the first time (and again once the
        folder holds another model: :meth:`watch_due` runs first).

        Raises
        ------
        As :func:`resolve_model` and ``loader``.
        """
        self.watch_due()
        store = store_key(models_dir)           # the path read once: the folder below is the one the key names,
        names = (key, store)                    # whatever another thread's chdir (or a path object) does next
        where = os.path.join(*store) if isinstance(store, tuple) else store
        cacheable = isinstance(key.device, (str, type(None)))
        model = self._by_key.get(names) if cacheable else None
        while model is None:
            generation = self._generation
            folder = resolve_model(*key, default_store() if models_dir is None else where)
            folder_key = ("folder", os.path.abspath(folder))
            with _LOCK:
                if generation != self._generation:
                    continue                # cleared meanwhile: resolve again in the store it names
                model = self._by_key.get(key) or self._by_key.get(folder_key)
                if model is None:
                    identity = _sidecar_identity(folder)     # before the load: a replace during it is seen later
                    model = self._by_key[folder_key] = loader(folder)
                    self._sidecars[folder_key] = (folder, identity)
                if cacheable:
                    self._by_key[names] = model
        return model

    def watch_due(self) -> None:
        """:meth:`watch`, where :attr:`next_watch_s` has passed."""
        if time.monotonic() >= self.next_watch_s:
            self.watch()

    def watch(self) -> None:
        """Drop every model whose folder's sidecar is another file than when
        it was loaded (one ``stat`` per loaded model)."""
        self.next_watch_s = time.monotonic() + self.WATCH_EVERY_S
        changed = [key for key, (folder, identity) in list(self._sidecars.items())
                   if _sidecar_identity(folder) != identity]
        if not changed:
            return
        with _LOCK:
            for key in changed:
                model = self._by_key.pop(key, None)
                self._sidecars.pop(key, None)
                for names in [n for n, m in self._by_key.items() if m is model]:
                    del self._by_key[names]
            self._generation += 1

    def clear(self) -> None:
        """Forget every loaded model and the default store (read
        ``$COSTLEARN_MODELS`` again)."""
        global _DEFAULT_STORE
        with _LOCK:
            self._by_key.clear()
            self._sidecars.clear()
            _DEFAULT_STORE = None
            self._generation += 1

