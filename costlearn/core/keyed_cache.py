"""The user cache folder, folders private to this user, and records in it: that a check was done, and which
device this machine's is."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from costlearn.core.files import atomic_write, check_output, read_file

__all__ = ["cache_dir", "check_cache_dir", "private_folder", "KeyedCache", "LOCAL_DEVICE_FILE",
           "recorded_local_device"]

LOCAL_DEVICE_FILE = "local_device.json"
"""In the user cache: the device the ``auto`` backend found last
(:func:`costlearn.collect.backends.record_local_device`), so what only reads
models (``predict``, ``dispatch``, the Python API) knows this machine's
device without opening it."""

def cache_dir() -> Path:
    """The user cache: ``$COSTLEARN_CACHE``, else ``$XDG_CACHE_HOME/costlearn``,
    else ``~/.cache/costlearn``."""
    if os.environ.get("COSTLEARN_CACHE"):
        return Path(os.environ["COSTLEARN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "costlearn"


def check_cache_dir() -> Path:
    """:func:`cache_dir`, checked to be a folder a file can be created in
    (:func:`costlearn.core.files.check_output`), before a command writes there.

    Raises
    ------
    ValueError
        If it is a file, lies under one, or cannot be written; the message
        names ``COSTLEARN_CACHE`` where that variable set it.
    """
    given = "COSTLEARN_CACHE=" if os.environ.get("COSTLEARN_CACHE") else "the user cache folder"
    return check_output(cache_dir(), given, folder=True)


def private_folder(folder) -> Path:
    """``folder``, created readable and writable by this user only (mode
    0700), and checked to be writable by no one else: the place a record
    that lets a later process skip a check (:class:`KeyedCache`) may be kept.

    The trust model: whoever can write a record can make a later process
    skip that check, so only this user (and root) may be able to write it. The folder must be owned
    by this user, not a link, and writable by neither group nor others
    (every folder above it is the system's and the user's care). On a
    system without POSIX owners (Windows) nothing is checked.

    Raises
    ------
    OSError
        If the folder cannot be created, or another user owns it, or group
        or others may write it (the message names it and what to do).
    """
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not hasattr(os, "getuid"):
        return folder
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(f"{folder} is {'a link' if stat.S_ISLNK(st.st_mode) else 'writable by another user'} "
                      f"(owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); costlearn keeps compiled code "
                      "only in a folder of yours that no one else can write: chmod 700 it, or set "
                      "COSTLEARN_CACHE to such a folder")
    return folder


def _private_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a link) of this user that no
    one else may write (always where there are no POSIX owners)."""
    st = os.lstat(path)
    if not hasattr(os, "getuid"):
        return stat.S_ISREG(st.st_mode)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


class KeyedCache:
    """Records in the user cache that something was done for a key (a
    forest that passed its check): one small file per key, named by the
    key's digest and holding it, so a damaged, truncated or foreign file
    is no record. Whoever can write the folder could write a record, so
    records live only in a :func:`private_folder` and count only as this
    user's files that no one else may write.

    Parameters
    ----------
    kind : str
        Prefix of the file names (``"forest-checked"``).
    suffix : str
        File extension, with its dot (``".ok"``).
    folder : path, optional
        :func:`cache_dir` by default (read at each use, so
        ``$COSTLEARN_CACHE`` set later takes effect).
    """

    def __init__(self, kind: str, suffix: str, folder=None):
        self.kind, self.suffix, self._folder = kind, suffix, folder

    def path(self, key: bytes | str) -> Path:
        """Where the record for ``key`` lives."""
        tag = self._digest(key)[:16]
        folder = Path(self._folder) if self._folder is not None else cache_dir()
        return folder / f"{self.kind}-{tag}{self.suffix}"

    @staticmethod
    def _digest(key: bytes | str) -> str:
        return hashlib.sha256(key.encode() if isinstance(key, str) else key).hexdigest()

    def has(self, key) -> bool:
        """Whether the record for ``key`` is there and intact. A folder that
        is not private holds none."""
        path = self.path(key)
        try:
            private_folder(path.parent)
            return _private_file(path) and path.read_bytes().strip() == self._digest(key).encode()
        except OSError:                             # missing, another's: no record
            return False

    def put(self, key) -> None:
        """Record ``key`` (best effort: a cache that cannot be written keeps
        nothing, and nothing fails)."""
        path = self.path(key)
        try:
            private_folder(path.parent)
            atomic_write(path, self._digest(key) + "\n", durable=False)
            os.chmod(path, 0o600)
        except OSError:
            pass


def recorded_local_device() -> dict | None:
    """This machine's device as the user cache records it.

    Reads :data:`LOCAL_DEVICE_FILE` (at most 1 MiB, without blocking:
    :func:`costlearn.core.files.read_file`); opens no device.

    Returns
    -------
    dict or None
        ``{"slug", "name", "api", "spec"}`` as
        :func:`costlearn.collect.backends.local_record` wrote it; None where
        there is no readable record: no file, a FIFO, folder or file over
        1 MiB there, text that is not a JSON object (or nests past the
        recursion limit), or one without a text ``slug`` and ``name``.
        Never raises for what the file holds.
    """
    try:
        record = json.loads(bytes(read_file(cache_dir() / LOCAL_DEVICE_FILE, 1 << 20)))
    except (OSError, ValueError, RecursionError):         # RecursionError: arrays nested thousands deep
        return None
    ok = isinstance(record, dict) and all(isinstance(record.get(key), str) for key in ("slug", "name"))
    return record if ok else None
