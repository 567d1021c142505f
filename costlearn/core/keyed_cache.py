"""The user cache folder, folders private to this user, and a keyed on-disk cache whose entries are
validated before use."""
from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path


from costlearn.core.files import atomic_write, open_temp, process_runs, sha256_file

__all__ = ["cache_dir", "private_folder", "KeyedCache"]

def cache_dir() -> Path:
    """The user cache: ``$COSTLEARN_CACHE``, else ``$XDG_CACHE_HOME/costlearn``,
    else ``~/.cache/costlearn``."""
    if os.environ.get("COSTLEARN_CACHE"):
        return Path(os.environ["COSTLEARN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "costlearn"


def private_folder(folder) -> Path:
    """``folder``, created readable and writable by this user only (mode
    0700), and checked to be writable by no one else: the place code that
    is loaded later (a compiled library) may be kept.

    The trust model: a file loaded from here runs as this user, so only
    this user (and root) may be able to write it. The folder must be owned
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
    """Files in the user cache keyed by a digest of what they were made from,
    each with a sha256 beside it; an entry is returned only when its bytes
    still have that sha256 and the caller's ``load`` accepts them, so a
    truncated, damaged or foreign file is rebuilt, never used. The sha256
    finds damage, not intent: whoever can write the folder could write both,
    so entries live only in a :func:`private_folder` and an entry is loaded
    only where it is this user's file that no one else may write.

    Parameters
    ----------
    kind : str
        Prefix of the file names (``"native"``).
    suffix : str
        File extension, with its dot (``".so"``).
    folder : path, optional
        :func:`cache_dir` by default (read when an entry is looked up, so
        ``$COSTLEARN_CACHE`` set later takes effect).
    """

    def __init__(self, kind: str, suffix: str, folder=None):
        self.kind, self.suffix, self._folder = kind, suffix, folder

    def path(self, key: bytes | str) -> Path:
        """Where the entry for ``key`` lives."""
        key = key.encode() if isinstance(key, str) else key
        tag = hashlib.sha256(key).hexdigest()[:16]
        folder = Path(self._folder) if self._folder is not None else cache_dir()
        return folder / f"{self.kind}-{tag}{self.suffix}"

    def get_or_build(self, key, build, load):
        """The loaded entry for ``key``, building it when absent or invalid.

        Parameters
        ----------
        key : bytes or str
            Everything the entry depends on.
        build : callable
            ``build(tmp_path)`` writes a new entry to ``tmp_path``.
        load : callable
            ``load(path)`` returns the usable object or raises (OSError,
            ValueError, AttributeError) if the file is not acceptable.

        Returns
        -------
        object
            What ``load`` returned.

        Raises
        ------
        OSError
            If a fresh build cannot be written or loaded, or the folder is
            not private (:func:`private_folder`): nothing is loaded from it.
        """
        path = self.path(key)
        private_folder(path.parent)
        try:
            if self._intact(path):
                return load(path)
        except (OSError, ValueError, AttributeError):
            pass                                  # missing, damaged, another's or unacceptable: build afresh
        self._sweep(path)
        fd, tmp = open_temp(path, self.suffix)
        os.close(fd)
        try:
            build(Path(tmp))
            os.chmod(tmp, 0o700)                  # this user's alone, whatever the umask
            obj = load(Path(tmp))                 # a build must load before it is cached
            digest = sha256_file(tmp)
            os.replace(tmp, path)
            side = path.with_name(path.name + ".sha256")
            atomic_write(side, digest, durable=False)
            os.chmod(side, 0o600)
            return obj
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    STALE_TEMP_S = 3600.0
    """Age (seconds) after which a build's temporary file beside an entry,
    left by a process that no longer runs here (killed mid-build), is
    removed before the next build of that entry; younger ones may be a
    build still running on another machine sharing the folder."""

    def _sweep(self, path: Path) -> None:
        """Remove the temporary files of earlier builds of ``path``
        (``open_temp``'s ``.<name>.<pid>.<random><suffix>``) older than
        :attr:`STALE_TEMP_S` whose process no longer runs here."""
        now = time.time()
        for tmp in path.parent.glob(f".{path.name}.*{self.suffix}"):
            try:
                pid = int(tmp.name[len(path.name) + 2:].split(".", 1)[0])
                if now - tmp.lstat().st_mtime < self.STALE_TEMP_S or process_runs(pid):
                    continue
                tmp.unlink()
            except (ValueError, OSError):
                continue                              # not one of ours, or gone meanwhile

    @staticmethod
    def _intact(path: Path) -> bool:
        """Whether the entry at ``path`` is this user's private file whose
        bytes still have the sha256 beside it."""
        side = path.with_name(path.name + ".sha256")
        return _private_file(path) and _private_file(side) and side.read_text().strip() == sha256_file(path)

    def has(self, key) -> bool:
        """Whether an intact entry for ``key`` is there (a record that
        something was done, whose presence is all that is read). A folder
        that is not private holds none."""
        path = self.path(key)
        try:
            private_folder(path.parent)
            return self._intact(path)
        except (OSError, ValueError):          # missing, another's, or a digest that is not text: no record
            return False

    def put(self, key, data: bytes) -> None:
        """Record ``data`` as the entry for ``key`` (best effort: a cache that
        cannot be written keeps nothing, and nothing fails)."""
        try:
            self.get_or_build(key, lambda tmp: tmp.write_bytes(data), lambda p: None)
        except OSError:
            pass
