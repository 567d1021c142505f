"""Small utilities several stages need, each written once: argument checks
with messages that name the value and what is allowed, an atomic file write,
a keyed on-disk cache whose entries are validated before use, and a lock
that lets one process at a time write a folder."""
from __future__ import annotations

import contextlib
import hashlib
import io
import math
import numbers
import os
import signal
import stat
import struct
import threading
import time
import uuid
import zipfile
from pathlib import Path

try:
    import fcntl
except ImportError:                            # not POSIX (Windows): FolderLock locks nothing
    fcntl = None

import numpy as np

from costlearn.core.errors import CostlearnError

__all__ = ["sigint_deferred", "check_int", "check_real", "check_choice", "check_instance", "check_path", "atomic_write",
           "fsync_dir", "sha256_file", "read_file", "npz_arrays", "npz_bytes",
           "cache_dir", "KeyedCache", "FolderLock", "FolderBusy", "private_folder"]


# -- argument checks -----------------------------------------------------------

def check_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as a Python int, refusing bool, float and out-of-range values.

    Parameters
    ----------
    name : str
        How the value is called in the message (``"M"``, ``"top_k"``).
    value : int-like
        Python or numpy integer.
    lo, hi : int, optional
        Inclusive bounds.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        If ``value`` is not an integer (bool and float included).
    ValueError
        If it lies outside [lo, hi].
    """
    if type(value) is int and (lo is None or value >= lo) and (hi is None or value <= hi):
        return value
    want = "an int" + (f" >= {lo}" if lo is not None and hi is None else "") + \
        (f" in [{lo}, {hi}]" if lo is not None and hi is not None else "") + \
        (f" <= {hi}" if lo is None and hi is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} ({type(value).__name__}); must be {want}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name}={value!r}; must be {want}")
    return v


def check_real(name: str, value, lo: float | None = None, *, strict: bool = False,
               hi: float | None = None) -> float:
    """``value`` as a finite Python float >= lo (> lo if ``strict``) and <= hi.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (bool included).
    ValueError
        If it is not finite or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} ({type(value).__name__}); must be a finite number")
    v = float(value)
    bad = not math.isfinite(v) or (lo is not None and (v < lo or (strict and v == lo))) \
        or (hi is not None and v > hi)
    if bad:
        rng = "" if lo is None else f" {'>' if strict else '>='} {lo:g}"
        rng += "" if hi is None else f" and <= {hi:g}"
        raise ValueError(f"{name}={value!r}; must be a finite number{rng}")
    return v


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices`` (strings), else ValueError listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r}; allowed: {', '.join(repr(c) for c in choices)}")
    return value


def check_instance(name: str, value, kinds, what: str):
    """``value`` if it is an instance of ``kinds``, else TypeError saying ``what`` is expected."""
    if not isinstance(value, kinds):
        raise TypeError(f"{name}={value!r}; must be {what}")
    return value


def check_path(name: str, value, *, optional: bool = False):
    """``value`` as a Path (None allowed with ``optional``); TypeError otherwise."""
    if value is None and optional:
        return None
    return Path(check_pathlike(name, value))


def check_pathlike(name: str, value, *, optional: bool = False):
    """``value`` itself where :func:`check_path` takes it (a str or an
    ``os.PathLike``, not empty; None with ``optional``), without making a
    Path (a few microseconds); TypeError otherwise."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)) or str(value) == "":
        raise TypeError(f"{name}={value!r}; must be a path (str or pathlib.Path)"
                        + (" or None" if optional else ""))
    return value


# -- files ---------------------------------------------------------------------

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
    fd, tmp = _open_temp(path)
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


def _open_temp(path: Path, suffix: str = ".tmp") -> tuple[int, str]:
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


def _process_runs(pid: int) -> bool:
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


NPY_HEADER_MAX_BYTES = 1 << 14
"""Most bytes of an ``.npy`` member :func:`npz_arrays` reads its header from
(copied out of the file's buffer for numpy's header reader): numpy writes
a header of a few hundred bytes and refuses one over 10,000
(``numpy.lib.format.read_array_header_1_0``'s ``max_header_size``). It was
1 MiB until issue 40 found that copy to cost a deep model's load 2 ms."""


class _BufferReader(io.RawIOBase):
    """A seekable read-only file over a buffer, without copying it (as
    :class:`io.BytesIO` copies a bytearray): what :mod:`zipfile` reads the
    directory of an in-memory ``.npz`` through."""

    def __init__(self, view: memoryview):
        super().__init__()
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        got = self._view[self._pos:self._pos + len(b)]
        b[:len(got)] = got
        self._pos += len(got)
        return len(got)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


def read_file(path, max_bytes: int = 1 << 30) -> bytearray:
    """A file's bytes in a writable buffer (arrays read from it with
    :func:`npz_arrays` need no copy of their own).

    Parameters
    ----------
    path : path
    max_bytes : int
        Largest file read (default 1 GiB; a model's files are tens of MB):
        a larger one is refused before any memory is taken for it.

    Raises
    ------
    OSError
        If the file cannot be read, is larger than ``max_bytes``, or changes
        size while it is read.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise OSError(f"{path} holds {size} bytes, more than the {max_bytes} a file read here may")
        buf = bytearray(size)
        if fh.readinto(buf) != size or fh.read(1):
            raise OSError(f"{path} changed size while it was read")
    return buf


NPZ_ALIGN = 64
"""Where :func:`npz_bytes` starts each member's bytes: a multiple of this in
the file. numpy's ``.npy`` header ends on a multiple of 64 (``ARRAY_ALIGN``
of :mod:`numpy.lib.format`), so each array's data is aligned in the file,
and :func:`npz_arrays` reads it in place instead of copying a misaligned
array (5-7 ms of a deep model's load on this project's VM, which
``numpy.savez``'s unaligned members cost)."""

_ALIGN_EXTRA_ID = 0xD935
"""The zip extra field that pads a local header to :data:`NPZ_ALIGN` (the
id Android's ``zipalign`` writes; a reader skips fields it does not know)."""


def npz_bytes(arrays: dict) -> bytes:
    """The bytes of an ``.npz`` file of ``arrays`` that ``numpy.load`` reads
    as it reads ``numpy.savez``'s: one stored (uncompressed) ``.npy`` member
    per array, each member's bytes starting at a multiple of
    :data:`NPZ_ALIGN` in the file (a padding extra field in its local header,
    PKWARE APPNOTE 4.5), so :func:`npz_arrays` takes every array from the
    file's buffer without a copy.

    Parameters
    ----------
    arrays : dict of str to array-like
        Member name (without ``.npy``) -> array (object arrays refused).

    Returns
    -------
    bytes
        The file's bytes.

    Raises
    ------
    ValueError
        If an array holds Python objects.
    """
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            head = 30 + len(info.filename.encode("utf-8")) + 4     # the local header and the field's own 4 bytes
            pad = -(buf.tell() + head) % NPZ_ALIGN
            info.extra = struct.pack("<HH", _ALIGN_EXTRA_ID, pad) + bytes(pad)
            zf.writestr(info, member.getbuffer())
    return buf.getvalue()


def npz_arrays(data) -> dict:
    """The arrays of an ``.npz`` file (``numpy.savez``) whose bytes are
    ``data``, read from those bytes: a caller that checked their sha256 uses
    exactly the bytes it checked, and reads the file once. A stored (not
    compressed) member's array is taken from ``data`` itself, without the
    zip CRC pass (the caller's digest covers every byte); compressed ones go
    through :func:`numpy.load`. Object arrays are refused, as
    ``numpy.load(allow_pickle=False)`` refuses them.

    Parameters
    ----------
    data : bytes or bytearray
        The file's bytes; a ``bytearray`` (:func:`read_file`) lends its
        memory to the aligned arrays (no copy), ``bytes`` are copied out.

    Returns
    -------
    dict
        Member name (without ``.npy``) -> read-only ndarray (a model's
        arrays are not changed once loaded; a loaded object may be shared by
        two loads of the same bytes).

    Raises
    ------
    zipfile.BadZipFile, ValueError
        If ``data`` is not such a file (a member is truncated, encrypted,
        named twice, not ``.npy``, of no valid shape, or holds objects).
    """
    out = {}
    view = memoryview(data)
    with zipfile.ZipFile(_BufferReader(view)) as zf:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in out:
                raise ValueError(f"member {info.filename!r}: a second array named {name!r}")
            if info.flag_bits & 0x1:
                raise zipfile.BadZipFile(f"member {info.filename!r} is encrypted")
            head = info.header_offset
            if info.compress_type != zipfile.ZIP_STORED or view[head:head + 4] != b"PK\x03\x04" \
                    or head + 30 > len(view):
                arr = np.load(io.BytesIO(zf.read(info)), allow_pickle=False)      # zipfile's own checks
            else:
                name_len, extra_len = struct.unpack_from("<HH", view, head + 26)
                start = head + 30 + name_len + extra_len
                if start + info.file_size > len(view):
                    raise zipfile.BadZipFile(f"member {info.filename!r} runs past the end of the file")
                arr = _stored_array(view, start, info)
            arr.setflags(write=False)
            out[name] = arr
    return out


def _stored_array(view: memoryview, start: int, info: zipfile.ZipInfo) -> np.ndarray:
    """The array of the stored ``.npy`` member ``info`` whose bytes begin at
    ``start`` of ``view``: over those bytes where aligned, else a copy
    (:func:`npz_arrays`)."""
    member = io.BytesIO(view[start:start + min(info.file_size, NPY_HEADER_MAX_BYTES)])
    version = np.lib.format.read_magic(member)
    if version not in ((1, 0), (2, 0)):
        return np.load(io.BytesIO(view[start:start + info.file_size]), allow_pickle=False)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(member)
    if dtype.hasobject:
        raise ValueError(f"member {info.filename!r} holds Python objects; refused")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"member {info.filename!r}: shape {shape!r:.100} is not a tuple of sizes")
    count = math.prod(shape)
    if member.tell() + count * dtype.itemsize != info.file_size:
        raise ValueError(f"member {info.filename!r}: {info.file_size} bytes do not hold {shape} {dtype}")
    arr = np.frombuffer(view, dtype, count, start + member.tell())
    if not arr.flags.aligned or not arr.flags.writeable:
        arr = arr.copy()
    return arr.reshape(shape, order="F" if fortran else "C")


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
        fd, tmp = _open_temp(path, self.suffix)
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
        (``_open_temp``'s ``.<name>.<pid>.<random><suffix>``) older than
        :attr:`STALE_TEMP_S` whose process no longer runs here."""
        now = time.time()
        for tmp in path.parent.glob(f".{path.name}.*{self.suffix}"):
            try:
                pid = int(tmp.name[len(path.name) + 2:].split(".", 1)[0])
                if now - tmp.lstat().st_mtime < self.STALE_TEMP_S or _process_runs(pid):
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


@contextlib.contextmanager
def sigint_deferred():
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block
    has finished, then deliver it as the handler in place before would have
    (a :class:`KeyboardInterrupt` by default): a file written and the count
    that records it happen together or not at all. Outside the main thread
    (where Python cannot set signal handlers) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if held:
        if callable(before):
            before(signal.SIGINT, held[0])
        elif before == signal.SIG_DFL:
            raise KeyboardInterrupt


# -- one writer per folder -----------------------------------------------------

class FolderBusy(CostlearnError, RuntimeError):
    """Another process holds the folder's lock (:class:`FolderLock`)."""


class FolderLock:
    """An exclusive lock on ``<folder>/<name>``: one holder at a time, across
    processes, and never left stuck by a holder that dies (``kill -9``
    included): it is an advisory ``flock`` on an open file, which the
    operating system releases when the file is closed or its process ends
    (Linux ``flock(2)``). The file keeps the last holder's pid and start
    time, for the message another process gets. On a system without
    ``fcntl`` (Windows) nothing is locked.

    Parameters
    ----------
    folder : path
        Created if missing.
    what : str
        What the holder does, for the message (``"a collection"``).
    name : str
        The lock file's name in ``folder``.
    wait : bool
        Wait for the holder to release it (for short critical sections,
        such as a model's swap) instead of raising FolderBusy.

    Raises
    ------
    FolderBusy
        If another process holds it (naming that process) and ``wait`` is False.
    OSError
        If the lock file cannot be created.
    """

    def __init__(self, folder, what: str, name: str = ".lock", *, wait: bool = False):
        self.path = Path(folder) / name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+")
        if fcntl is None:                      # no advisory locks here: one writer is the user's care
            return
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read(200).strip() or "another process"
            self._fh.close()
            raise FolderBusy(f"{self.path.parent}: {holder} is writing it ({what} holds {self.path.name}); "
                             "wait for it to finish, or use another folder") from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')} ({what})")
        self._fh.flush()

    def release(self) -> None:
        """Release the lock (closing the file); a second call does nothing."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
