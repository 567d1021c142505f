"""Files written so that a reader sees the old or the whole new content (atomic, durable writes),
and read whole; a file's sha256."""
from __future__ import annotations

import hashlib
import os
import stat
import uuid
from pathlib import Path

__all__ = ["fsync_dir", "atomic_write", "open_temp", "process_runs", "sha256_file", "read_file", "check_output"]


def fsync_dir(path) -> None:
    """fsync a folder so a rename inside it is durable (a no-op where the OS
    does not allow opening folders)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, data, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` so that a reader sees the old file or the
    whole new one, never a part: written to a temporary file in the same
    folder, flushed (and fsynced when ``durable``), then renamed over ``path``.

    Parameters
    ----------
    path : path
        Destination; its folder is created.
    data : bytes, str, or callable
        The content; a callable is called with the open binary file and
        writes it (e.g. ``lambda fh: df.to_parquet(fh)``).
    durable : bool
        fsync the file and its folder (datasets, models); caches skip it.

    Returns
    -------
    Path

    Raises
    ------
    OSError
        If the folder cannot be created or written; the temporary file is
        removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = open_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)
    return path


def open_temp(path: Path, suffix: str = ".tmp") -> tuple[int, str]:
    """A new file beside ``path`` (``.<name>.<pid>.<random><suffix>``),
    opened for writing with the permissions the umask gives (not mkstemp's
    0600, so datasets and models stay readable by others)."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{suffix}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file beside {path}")


def check_output(path, given: str, *, folder: bool = False, create: bool = True, example: str = "") -> Path:
    """Refuse, before any work, a path a command will write that cannot be written.

    Nothing is created: the nearest folder that exists on the way to
    ``path`` is checked to be a folder in which a file can be created (a
    file is created there and removed at once).

    Parameters
    ----------
    path : path
        The file (with ``folder``, the folder) to be written.
    given : str
        How the user gave it, which the message names: a flag (``"--report"``),
        or a variable with its equals sign (``"COSTLEARN_CACHE="``).
    folder : bool
        ``path`` is a folder (made with its parents where missing), else a
        file (written atomically, :func:`atomic_write`).
    create : bool
        A file's missing folders are made when it is written; with False a
        missing folder is refused (a mistyped folder is not created).
    example : str
        A file name shown in the message where a file was asked for and a
        folder given.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        One line naming ``given`` and ``path``: a folder where a file is
        asked for, a file where a folder is, a path through a file, a
        missing folder (``create`` False), or a folder nothing can be
        created in (with the system's reason).
    """
    path = Path(path)
    shown = f"{given}{path}" if given.endswith("=") else f"{given} {path}"
    if folder and path.exists() and not path.is_dir():
        raise ValueError(f"{shown} is a file, not a folder; give a folder")
    if not folder and (path.is_dir() or not path.name):
        raise ValueError(f"{shown} is a folder; give a file name (e.g. {path / (example or 'out.txt')})")
    there = path if folder else path.parent
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise ValueError(f"{shown}: {there} is a file, not a folder")
    if not create and not folder and there != path.parent:
        raise ValueError(f"{shown}: the folder {path.parent} does not exist; create it, or give a file path in an "
                         "existing folder")
    try:
        fd, probe = open_temp(there / ".costlearn-write-check")
    except OSError as e:
        raise ValueError(f"{shown}: nothing can be written in {there} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)
    return path


def process_runs(pid: int) -> bool:
    """Whether a process of id ``pid`` runs on this machine (any user's);
    True on Windows, where ``os.kill`` would end it."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                                   # another user's: it runs
        return True
    return True


def sha256_file(path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_file(path, max_bytes: int = 1 << 30, *, follow_links: bool = True) -> bytearray:
    """A file's bytes in a writable buffer (arrays read from it with
    :func:`npz_arrays` need no copy of their own).

    Parameters
    ----------
    path : path
    max_bytes : int
        Largest file read (default 1 GiB; a model's files are tens of MB):
        a larger one is refused before any memory is taken for it.
    follow_links : bool
        False: a symbolic link at ``path`` is refused (``O_NOFOLLOW``, where
        the OS has it), for a folder other processes may write into.

    Raises
    ------
    OSError
        If the file cannot be read, is no regular file (a FIFO, whose opening
        would wait for a writer, or a device or folder; opened without
        blocking and refused), is a link and ``follow_links`` is False, is
        larger than ``max_bytes``, or changes size while it is read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags if follow_links else flags | getattr(os, "O_NOFOLLOW", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"{path} is not a regular file but a "
                          f"{'folder' if stat.S_ISDIR(mode) else 'FIFO' if stat.S_ISFIFO(mode) else 'device'}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise OSError(f"{path} holds {size} bytes, more than the {max_bytes} a file read here may")
        buf = bytearray(size)
        if fh.readinto(buf) != size or fh.read(1):
            raise OSError(f"{path} changed size while it was read")
    return buf
