"""Tuning database: the config chosen for each problem, how it was chosen
(predicted by the model, or measured on the device) and its times, with
every measurement behind it and the leases of hosts measuring
(:mod:`costlearn.serve.fleet`), in one SQLite file shared by every process
of a machine (design.md, "Predictor"); the schema and rows are
:mod:`costlearn.serve.tuning_rows`', shared with the server store.

Key: (M, N, K, dtype, layout, epilogue, kernel family, device slug,
kernel-template hash, costlearn version). A change of template or version starts afresh: old
entries stay in the file but are never returned. A measured entry is never
overwritten by a predicted one.

- **Opening.** Reading a file that does not exist is an error; a database
  is created only when asked (``create=True``: recording a prediction or a
  measurement). A file that is not an SQLite database at all (it lacks the
  SQLite header: a user's CSV, say) is refused and left alone, as is an
  SQLite file holding anything but costlearn's own schema (another table, a
  trigger, a view, an index, a column of its own). A schema-1
  file (before kernel families) or schema-2 file (before epilogues) is
  upgraded in place when opened for writing, its entries becoming ``gemm``
  / ``NN`` entries (schema 1) and epilogue ``none`` entries (a schema-3
  file gains the measurements and leases);
  ``read_only=True`` (listing) reads it as it is and changes nothing in any
  file; a file in a folder this user cannot write is read as immutable.
  Each connection is opened and checked by
  :class:`~costlearn.serve.tuning_file.TuningFile`.

- **Concurrency.** SQLite in write-ahead-log mode: readers never block,
  writers queue (``busy_timeout``); each thread gets its own connection.
  Each write moves its log into the file; a process whose path now names
  another file (set aside, deleted, another renamed over it) reopens it.
- **Corruption.** An SQLite file that fails ``PRAGMA quick_check`` when
  opened for writing, or raises a corruption error later, is renamed to
  ``<name>.corrupt-<UTC time>-<pid>`` (with its ``-wal``/``-shm``), a warning
  names the new path and the reason, and a fresh database takes its place.
  Nothing else is touched; a read-only open reports corruption instead.
- **Stale configs.** :meth:`TuningDB.get` given the device's DeviceSpec
  checks the stored config against today's tile space
  (:func:`costlearn.collect.space.check_config`); a config that is no longer
  feasible is a miss, never returned for launch.

The queries are :class:`~costlearn.serve.tuning_store.TuningStore`'s, shared
with the server store; this module is the SQLite file's connections.
"""
from __future__ import annotations

import ctypes
import os
import sqlite3
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

from costlearn.core.errors import warn
from costlearn.core.version import __version__
from costlearn.serve.tuning_file import COLUMNS, KEYS_BY_SCHEMA, TuningFile
from costlearn.serve.tuning_rows import (  # the schema and rows' old home: re-exported
    CHOSEN_BY, CREATE_TABLE, KEY_COLUMNS, SCHEMA, TABLES, UPSERT, TuningDBError, TuningEntry, decode_row, default_path,
    default_target, entries_from_rows, entry_values, is_server_url, key_args, key_values, select_entry)
from costlearn.serve.tuning_store import TuningStore

__all__ = ["TuningDB", "COLUMNS",
           # the schema and rows of both stores (costlearn.serve.tuning_rows), where callers have found them
           "TuningEntry", "TuningDBError", "default_path", "default_target", "is_server_url", "entry_values",
           "decode_row", "key_values", "key_args", "select_entry", "entries_from_rows", "CHOSEN_BY", "KEY_COLUMNS",
           "CREATE_TABLE", "UPSERT", "TABLES", "SCHEMA"]


class TuningDB(TuningStore):
    """The tuning database in one SQLite file.

    Parameters
    ----------
    path : path, optional
        The file; :func:`default_path` by default.
    create : bool
        Create the file (and its folder) when it does not exist; False
        (default) makes a missing file an error.
    read_only : bool
        Open for reading only: nothing is created, upgraded, set aside or
        written (``put`` raises).
    timeout_s : float
        How long a writer waits for another writer, seconds.

    Attributes
    ----------
    set_aside : list of Path
        Corrupt files this object moved away (each also warned about).

    Raises
    ------
    TypeError
        If ``path`` is not a str or Path.
    FileNotFoundError
        If the file does not exist and ``create`` is False, or
        (``read_only``) it is empty.
    OSError
        If the folder cannot be created, or the file cannot be opened or
        written (a folder at that path, no permission, locked past
        ``timeout_s``): these leave the file alone; only corruption sets it
        aside.
    """

    def __init__(self, path=None, *, create: bool = False, read_only: bool = False, timeout_s: float = 30.0):
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path={path!r}; must be a str or pathlib.Path (or None for the default)")
        self.path = Path(path) if path is not None else default_path()
        if (read_only or not create) and not self.path.exists():
            raise FileNotFoundError(f"no tuning database at {self.path} (nothing recorded there yet; "
                                    "`costlearn predict ... --measure-top-k K` or `--tuning-db PATH` creates one)")
        if read_only and self.path.is_file() and self.path.stat().st_size == 0:
            raise FileNotFoundError(f"the tuning database {self.path} is an empty file (nothing recorded there yet; "
                                    "a read-only open creates no tables)")
        self.read_only = bool(read_only)
        if not self.read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = float(timeout_s)
        self._version = SCHEMA
        self._file = TuningFile(self.path, read_only=self.read_only, timeout_s=self.timeout_s)
        self.set_aside: list[Path] = []
        self._generation = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conn()                              # open and check now, not at the first query

    # -- connection and corruption ----------------------------------------

    def _open(self) -> sqlite3.Connection:
        """A new connection, checked (:meth:`TuningFile.connect
        <costlearn.serve.tuning_file.TuningFile.connect>`); the schema it
        reads is this object's from now."""
        conn, self._version = self._file.connect()
        return conn

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, opened anew where another thread set
        the file aside or the path no longer names the file it opened
        (deleted, set aside by another process, another file renamed over
        it): writing on would go to a file nobody reads, so it reopens,
        warning, and the stale connection is closed without touching the
        WAL that now belongs to the path's new file (:func:`_close_stale`)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            set_aside = self._local.generation != self._generation      # by another thread of this object
            moved = _identity(self.path) != self._local.inode
            if moved or set_aside:
                _close_stale(conn)
                conn = self._local.conn = None
                if moved and not set_aside:
                    warn(f"costlearn: the tuning database {self.path} is no longer the file this process "
                         "opened (removed, set aside or replaced by another program); reopening it", RuntimeWarning)
        if conn is None:
            try:
                try:
                    conn = self._open()
                except sqlite3.OperationalError:
                    raise                       # cannot open (a folder, no permission): not corruption
                except sqlite3.DatabaseError as e:
                    if type(e) is not sqlite3.DatabaseError:
                        raise TuningDBError(f"cannot use the tuning database {self.path}: {e}") from None
                    if self.read_only:
                        raise TuningDBError(f"the tuning database {self.path} is corrupt ({e}); opened read-only, "
                                            "so it is left as it is (a write sets it aside)") from None
                    self._set_aside(str(e), None)
                    conn = self._open()
            except sqlite3.OperationalError as e:
                raise OSError(f"cannot use the tuning database {self.path}: {e}") from None
            self._local.conn = conn
            self._local.generation = self._generation
            self._local.inode = _identity(self.path)
        return conn

    def _set_aside(self, reason: str, inode) -> None:
        """Move the corrupt file (and its WAL) away, keep it, warn. With
        ``inode`` (the file this thread's connection opened), do nothing if
        the path now holds another file: someone set it aside already."""
        with self._lock:
            conn = getattr(self._local, "conn", None)
            if conn is not None:
                conn.close()
                self._local.conn = None
            self._generation += 1
            if inode is not None and _identity(self.path) != inode:
                return
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{os.getpid()}")
            moved = False
            for suffix in ("", "-wal", "-shm"):
                src = Path(str(self.path) + suffix)
                try:
                    os.replace(src, Path(str(target) + suffix))
                    moved = moved or suffix == ""
                except FileNotFoundError:
                    pass                          # another process moved it first
            if moved:
                self.set_aside.append(target)
                warn(f"costlearn: the tuning database {self.path} is corrupt ({reason}); set aside as {target}, "
                     "starting a fresh one", RuntimeWarning)

    def _run(self, fn):
        """Run fn(conn); on a corruption error (a plain ``DatabaseError``),
        set the file aside and retry once on a fresh database (read-only:
        raise :class:`TuningDBError`, leaving the file as it is)."""
        try:
            return fn(self._conn())
        except sqlite3.OperationalError as e:
            # Locked past the timeout, read-only, disk full: the file is fine.
            raise OSError(f"cannot use the tuning database {self.path}: {e}") from None
        except sqlite3.DatabaseError as e:
            if type(e) is not sqlite3.DatabaseError:
                raise                               # IntegrityError etc.: a bug, not corruption
            if self.read_only:
                raise TuningDBError(f"the tuning database {self.path} is corrupt ({e}); opened read-only, "
                                    "so it is left as it is (a write sets it aside)") from None
            self._set_aside(str(e), getattr(self._local, "inode", None))
            return fn(self._conn())

    def _write(self, fn):
        """:meth:`_run` a write, then move the log into the file
        (``wal_checkpoint(TRUNCATE)``; skipped while others read): a write
        leaves no log behind under ``<path>-wal``, where another database
        renamed over the path would take it for its own and replay it."""
        out = self._run(fn)
        try:
            self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass                                    # busy or failed: the next write checkpoints
        return out

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- the queries' statements (costlearn.serve.tuning_store) ------------

    def _transaction(self, work):
        """``work(execute)`` between ``BEGIN IMMEDIATE`` and ``COMMIT``
        (rolled back where it raises), a :meth:`_write`."""
        def write(c):
            c.execute("BEGIN IMMEDIATE")
            try:
                out = work(lambda sql, params: c.execute(sql, params))
                c.execute("COMMIT")
                return out
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return self._write(write)

    def _table_rows(self, table: str, sql: str, params=None) -> list:
        """The rows of ``sql`` on ``table``; none in a file of a schema
        before :data:`SCHEMA` (opened read-only), which holds only
        ``tuned``."""
        if table != "tuned" and self._version < SCHEMA:
            return []
        return self._run(lambda c: c.execute(sql, params or ()).fetchall())

    def _stream(self, table: str, sql: str, params=()):
        """The rows of ``sql`` on ``table``, :data:`STREAM_ROWS` at a time,
        from one query on a connection of its own: one snapshot of the file
        opened, read to the end even if another file is renamed over the
        path meanwhile; a text value that is not UTF-8 as its bytes. None in
        a file of a schema before :data:`SCHEMA`."""
        try:
            conn, version = self._file.connect()
        except sqlite3.OperationalError as e:
            raise OSError(f"cannot use the tuning database {self.path}: {e}") from None
        except sqlite3.DatabaseError as e:
            raise TuningDBError(f"the tuning database {self.path} is unreadable ({e})") from None
        opened = _identity(self.path)
        try:
            if table != "tuned" and version < SCHEMA:
                return
            conn.text_factory = _text_or_bytes
            cur = conn.execute(sql, params)
            while rows := cur.fetchmany(STREAM_ROWS):
                yield from rows
        except sqlite3.Error as e:
            raise OSError(f"cannot use the tuning database {self.path}: {e}") from None
        finally:
            if _identity(self.path) == opened:
                conn.close()
            else:
                _close_stale(conn)

    def _statement(self, sql: str) -> str:
        """``sql`` on this machine's clock (one machine shares an SQLite file)."""
        return sql.replace("{now}", _SQLITE_NOW)

    def _key_columns(self) -> str:
        """The key columns as the file's schema holds them
        (:data:`~costlearn.serve.tuning_file.KEYS_BY_SCHEMA`)."""
        return KEYS_BY_SCHEMA[self._version]

    def get_many(self, problems, family: str, device: str, template_hash: str, *, spec=None,
                 costlearn_version: str = __version__) -> list:
        """As :meth:`TuningStore.get_many
        <costlearn.serve.tuning_store.TuningStore.get_many>`; a file of a
        schema before epilogues (opened read-only) is asked one problem at a
        time.

        Raises
        ------
        TypeError
            If a problem is not a Problem.
        """
        problems = list(problems)
        if self._version < 3:                       # an old file opened read-only: one by one
            return [self.get(p, family, device, template_hash, spec=spec, costlearn_version=costlearn_version)
                    for p in problems]
        return super().get_many(problems, family, device, template_hash, spec=spec,
                                costlearn_version=costlearn_version)


STREAM_ROWS = 1000
"""Rows a streamed read (:meth:`TuningDB._stream`) fetches at a time."""


def _text_or_bytes(data: bytes):
    """A stored text value as str, or as its bytes where it is not UTF-8
    (a damaged or hostile row: a reader names and skips it, where decoding
    would end the whole read)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(data)


def _identity(path: Path):
    """(device, inode) of the file at ``path``, or None where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _close_stale(conn: sqlite3.Connection) -> None:
    """Close a connection whose path may now name another database file.
    Closing the last connection to a WAL database checkpoints it and deletes
    ``<path>-wal`` by name, which may now be the new file's log (its
    committed rows lost); so the connection is first told to keep its log
    (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` on Python >= 3.12, else
    ``SQLITE_FCNTL_PERSIST_WAL`` through the SQLite library), and where
    neither can be said it is kept open, never closed, for the process's
    life."""
    try:
        if hasattr(conn, "setconfig"):
            conn.setconfig(sqlite3.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, True)
        elif not _persist_wal(conn):
            _KEPT_OPEN.append(conn)
            return
        conn.close()
    except sqlite3.Error:
        _KEPT_OPEN.append(conn)


_KEPT_OPEN: list = []
"""Stale connections that could not be closed safely (:func:`_close_stale`)."""


def _persist_wal(conn: sqlite3.Connection) -> bool:
    """Set ``SQLITE_FCNTL_PERSIST_WAL`` on ``conn``'s main database through
    the SQLite library (``sqlite3_file_control``; CPython's connection
    object holds its ``sqlite3 *`` right after the object header); False
    where that cannot be done."""
    try:
        lib = ctypes.CDLL(sys.modules["_sqlite3"].__file__)
        fcntl = lib.sqlite3_file_control
        fcntl.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
        fcntl.restype = ctypes.c_int
        handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        flag = ctypes.c_int(1)
        return bool(handle) and fcntl(handle, b"main", 10, ctypes.byref(flag)) == 0     # 10: PERSIST_WAL
    except (OSError, AttributeError, KeyError, ValueError):
        return False


_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""The time now, seconds since 1970, in SQLite's words: the lease statements' ``{now}``."""
