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
"""
from __future__ import annotations

import ctypes
import os
import random
import sqlite3
import stat
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from costlearn.core.errors import warn
from costlearn.core.problem import Problem
from costlearn.core.version import __version__
from costlearn.serve.fleet import (CREATE_LEASES, CREATE_MEASUREMENTS, FREE_LEASE, SELECT_ALL_MEASUREMENTS,
                                   TAKE_LEASE, Verdict, check_name, lease_seconds)
from costlearn.serve.tuning_rows import (  # noqa: F401  (re-exported: the schema and rows' old home)
    CHOSEN_BY, CREATE_BLOBS, CREATE_TABLE, KEY_COLUMNS, PUT_BLOB, SCHEMA, TABLES, TUNED_COLUMNS, UPSERT,
    TuningDBError, TuningEntry, blob_values, decode_many, decode_row, default_path, default_target, entries_from_rows,
    entry_values, is_server_url, key_args, key_values, measurement_rows, measurements_by_key, record_in, select_blobs,
    select_entry, select_many, MANY)

__all__ = ["TuningDB", "COLUMNS",
           # the schema and rows of both stores (costlearn.serve.tuning_rows), where callers have found them
           "TuningEntry", "TuningDBError", "default_path", "default_target", "is_server_url", "entry_values",
           "decode_row", "key_values", "key_args", "select_entry", "entries_from_rows", "CHOSEN_BY", "KEY_COLUMNS",
           "CREATE_TABLE", "UPSERT", "TABLES", "SCHEMA"]

_KEYS = {1: "m, n, k, dtype, 'NN', 'none', 'gemm', device, template_hash, costlearn_version",
         2: "m, n, k, dtype, layout, 'none', family, device, template_hash, costlearn_version",
         3: "m, n, k, dtype, layout, epilogue, family, device, template_hash, costlearn_version"}
_KEYS[4] = KEY_COLUMNS
"""The key columns as read from a file of each schema (older ones with the
values their entries had)."""


def _upgrade(version: int) -> list:
    """The statements that bring a schema-``version`` file to :data:`SCHEMA`
    (0: a new file)."""
    rebuild = [] if version in (0, 3) else [
        "ALTER TABLE tuned RENAME TO tuned_old", CREATE_TABLE,
        f"INSERT INTO tuned SELECT {_KEYS[version]}, config_id, how, time_us, times_json, source, updated "
        "FROM tuned_old", "DROP TABLE tuned_old"]
    return [*rebuild, CREATE_TABLE, CREATE_MEASUREMENTS, CREATE_LEASES, CREATE_BLOBS,
            f"PRAGMA user_version = {SCHEMA}"]


_V1_COLUMNS = ["m", "n", "k", "dtype", "device", "template_hash", "costlearn_version", "config_id", "how", "time_us",
               "times_json", "source", "updated"]
COLUMNS = {1: _V1_COLUMNS,
            2: _V1_COLUMNS[:4] + ["layout", "family"] + _V1_COLUMNS[4:],
            3: _V1_COLUMNS[:4] + ["layout", "epilogue", "family"] + _V1_COLUMNS[4:]}
COLUMNS[4] = TUNED_COLUMNS
"""The columns of table ``tuned`` in each schema, in order (:data:`CREATE_TABLE` for 3 and 4)."""


class TuningDB:
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
        If the file does not exist and ``create`` is False.
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
        self.read_only = bool(read_only)
        if not self.read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = float(timeout_s)
        self._version = SCHEMA
        self.set_aside: list[Path] = []
        self._generation = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conn()                              # open and check now, not at the first query

    # -- connection and corruption ----------------------------------------

    def _check_header(self) -> None:
        """Refuse a file that is not SQLite at all (it is someone's, not a
        damaged tuning database): an empty file or one with the SQLite header
        passes."""
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISDIR(mode):
            raise OSError(f"cannot use the tuning database {self.path}: it is a folder")
        if not stat.S_ISREG(mode):                   # a FIFO or a device would hang or be read forever
            raise OSError(f"cannot use the tuning database {self.path}: not a regular file")
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
        except FileNotFoundError:
            return
        if head and head != b"SQLite format 3\x00":
            raise TuningDBError(f"{self.path} is not an SQLite database (it starts with {head[:8]!r}); costlearn "
                                "leaves it alone: choose another path for the tuning database")

    def _open(self) -> sqlite3.Connection:
        """Open and check the file. Corruption raises a plain
        ``sqlite3.DatabaseError``; a file this code must not touch (not
        SQLite, a newer schema, another application's database) raises
        :class:`TuningDBError`; a file that cannot be opened raises
        ``sqlite3.OperationalError``."""
        self._check_header()
        if self.read_only:
            conn = self._open_read_only()
        else:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None,
                                   check_same_thread=True)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            conn.execute("BEGIN")           # one snapshot: another process may be creating the file right now
            try:
                version, half_made = self._check_file(conn)
            finally:
                conn.execute("COMMIT")
            if self.read_only:
                self._version = 3 if half_made else (version or SCHEMA)
                return conn
            self._wal(conn)
            if version < SCHEMA:
                self._upgrade_from(conn, 3 if half_made else version, version)
        except (sqlite3.DatabaseError, TuningDBError):
            conn.close()
            raise
        return conn

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to write-ahead logging. The switch needs the
        file alone, and SQLite answers "locked" at once, without waiting,
        where waiting could deadlock (another process creating the file at
        the same moment): retried until ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchall()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005 + 0.02 * random.random())

    def _check_file(self, conn: sqlite3.Connection) -> tuple:
        """``(user_version, half_made)`` of the file, checked (inside one
        read transaction: the version and the tables of one moment, or a
        file another process was creating reads as foreign). Corruption
        raises ``sqlite3.DatabaseError``; a file costlearn must not touch
        :class:`TuningDBError`."""
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError("quick_check: " + "; ".join(str(r[0]) for r in check[:3]))
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        objects = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
        tables = {name for kind, name in objects if kind == "table"}
        if version > SCHEMA:
            raise TuningDBError(f"{self.path} has tuning-database schema {version}, newer than this "
                                f"costlearn's {SCHEMA}: upgrade costlearn or use another file")
        # Schema 3's table at user_version 0 is what a process killed between the two statements of
        # an older costlearn's creation left: costlearn's own, half made.
        half_made = version == 0 and tables == {"tuned"} and _columns(conn) == COLUMNS[3]
        allowed = set(TABLES) if version == SCHEMA else {"tuned"}
        if tables - allowed or (version == 0 and tables and not half_made):
            raise TuningDBError(f"{self.path} is an SQLite database but not a costlearn tuning database "
                                f"(tables {sorted(tables)}); use another file")
        self._check_schema(conn, objects, 3 if half_made else version)
        return version, half_made

    def _open_read_only(self) -> sqlite3.Connection:
        """A read-only connection. A WAL file whose ``-shm`` is absent in a
        folder this user cannot write (a shared, read-only copy) cannot be
        read that way; it is then read as immutable: nobody can be writing
        it through this folder either."""
        uri = self.path.resolve().as_uri()
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=self.timeout_s, isolation_level=None,
                               check_same_thread=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
            if os.access(self.path.parent, os.W_OK):
                raise
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=self.timeout_s, isolation_level=None,
                               check_same_thread=True)

    def _check_schema(self, conn: sqlite3.Connection, objects: list, version: int) -> None:
        """Refuse (:class:`TuningDBError`) a file holding anything but
        costlearn's own schema: the tables of its ``version`` with their
        columns and the indexes SQLite makes for their keys. A trigger, view
        or extra index in a valid file would run inside every query or
        write: one trigger could rewrite each recorded prediction into a
        "measured" entry of its choosing."""
        tables = TABLES if version == SCHEMA else {"tuned": COLUMNS.get(version)}
        foreign = sorted(f"{kind} {name!r}" for kind, name in objects
                         if not (kind == "table" and name in tables)
                         and not (kind == "index" and any(name.startswith(f"sqlite_autoindex_{t}_") for t in tables)))
        if foreign:
            raise TuningDBError(f"{self.path} holds {', '.join(foreign[:5])} beside costlearn's tables: only "
                                "costlearn's own schema is accepted (a trigger or view would act on every "
                                "entry); left alone: use another file")
        if version == 0:
            return
        for table, expected in tables.items():
            cols = _columns(conn, table)
            if cols != expected:
                raise TuningDBError(f"{self.path} claims tuning-database schema {version} but its table {table} "
                                    f"has columns {cols}; left alone: use another file")

    def _upgrade_from(self, conn: sqlite3.Connection, version: int, found: int) -> None:
        """Create the tables of a new file (``version`` 0), or bring a schema
        1, 2 or 3 file to :data:`SCHEMA`, in one transaction, so no kill
        leaves a file half made: every entry of schema 1 becomes a ``gemm``
        ``NN`` entry (the only ones it could hold), every older entry an
        epilogue ``none`` one. ``found`` is the user_version read when
        opening (0 for a schema-3 table an older costlearn was killed
        creating); a file another process changed meanwhile is left as that
        process made it. A file whose rows cannot be copied is left
        untouched (TuningDBError)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == found:     # not changed by another process
                objects = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
                if version:
                    self._check_schema(conn, objects, version)
                elif objects:
                    raise TuningDBError(f"{self.path}: another program created {objects[:3]} meanwhile; left alone")
                for stmt in _upgrade(version):
                    conn.execute(stmt)
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as e:
            conn.execute("ROLLBACK")
            raise TuningDBError(f"{self.path}: its schema-{version} entries cannot be upgraded ({e}); "
                                "left untouched") from None
        except BaseException:
            conn.execute("ROLLBACK")
            raise

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

    # -- queries ------------------------------------------------------------

    def get(self, problem: Problem, family: str, device: str, template_hash: str, *, spec=None,
            costlearn_version: str = __version__) -> TuningEntry | None:
        """The entry for a problem, or None (a miss).

        Parameters
        ----------
        problem : Problem
        family : str
            Kernel family.
        device : str
            Device slug.
        template_hash : str
        spec : DeviceSpec, optional
            The device the config would launch on: a stored config that is
            infeasible in today's tile space for this problem is a miss.
        costlearn_version : str

        Raises
        ------
        TypeError
            If ``problem`` is not a Problem.
        """
        key = key_values(problem, family, device, template_hash, costlearn_version)
        sql = select_entry(_KEYS[self._version], "?")
        return decode_row(self._run(lambda c: c.execute(sql, key).fetchone()), *key_args(key), spec)

    def get_many(self, problems, family: str, device: str, template_hash: str, *, spec=None,
                 costlearn_version: str = __version__) -> list:
        """The entries of many problems of one family and device in one
        query (a graph's GEMMs at compile time): a list, an entry or None
        per problem, in order; each as :meth:`get` would answer it.

        Raises
        ------
        TypeError
            If a problem is not a Problem.
        """
        problems = list(problems)
        if self._version < 3:                       # an old file opened read-only: one by one
            return [self.get(p, family, device, template_hash, spec=spec, costlearn_version=costlearn_version)
                    for p in problems]
        out = []
        for i in range(0, len(problems), MANY):     # a statement takes a bounded number of parameters
            sql, params, keys = select_many(problems[i:i + MANY], family, device, template_hash, costlearn_version,
                                            "?")
            out += decode_many(self._run(lambda c: c.execute(sql, params).fetchall()), keys, spec)
        return out

    def put(self, entry: TuningEntry) -> bool:
        """Store an entry; a measured entry is never replaced by a predicted
        one.

        Returns
        -------
        bool
            True if the entry was written.

        Raises
        ------
        ValueError
            If ``chosen_by`` is not one of :data:`CHOSEN_BY`, the time is not finite and
            positive, or the shape or dtype is invalid.
        """
        if self.read_only:
            raise PermissionError(f"the tuning database {self.path} was opened read-only")
        values = entry_values(entry)
        return bool(self._write(lambda c: c.execute(UPSERT, values).rowcount))

    def record(self, problem: Problem, family: str, device: str, template_hash: str, measurements, *,
               source: str, costlearn_version: str = __version__) -> tuple[TuningEntry, Verdict]:
        """Store a tuning's measurements of a problem and make the key's
        entry the answer all its measurements decide
        (:func:`costlearn.serve.fleet.decide`), in one transaction: a kill
        leaves both or neither, and measurements already stored (the same
        tuning delivered again) add nothing.

        Parameters
        ----------
        problem, family, device, template_hash, costlearn_version
            The key (as :meth:`get`).
        measurements : sequence of Measurement
            Non-empty; configs of ``family``.
        source : str
            What measured (the model folder and its sha256 prefix).

        Returns
        -------
        (TuningEntry, Verdict)
            The key's entry now, and the verdict behind it.

        Raises
        ------
        TypeError, ValueError
            A bad key, measurement or an empty list.
        OSError
            Opened read-only, or the file cannot be written.
        """
        if self.read_only:
            raise PermissionError(f"the tuning database {self.path} was opened read-only")
        key, rows = measurement_rows(problem, family, device, template_hash, costlearn_version, measurements)

        def write(c):
            c.execute("BEGIN IMMEDIATE")
            try:
                out = record_in(lambda sql, params: c.execute(sql, params), key, rows, source)
                c.execute("COMMIT")
                return out
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return self._write(write)

    def measurements(self) -> dict:
        """Every stored measurement, by key (the 10 values of
        :func:`key_values`): a dict of tuple to list of Measurement; rows that
        do not decode are left out. Empty for a file of a schema before
        measurements (read-only)."""
        if self._version < 4:
            return {}
        return measurements_by_key(self._run(lambda c: c.execute(SELECT_ALL_MEASUREMENTS).fetchall()))

    def get_blobs(self, cache_key: str, filenames) -> dict:
        """The stored files of ``filenames`` under ``cache_key``, ``{name:
        bytes}`` (those not stored are absent): a compiler's remote cache
        (:mod:`costlearn.interop.triton_cache`). A file of a schema before
        blobs (read-only) holds none.

        Raises
        ------
        TypeError, ValueError
            A key or name that is not a str of 1-1024 characters.
        """
        sql, params = select_blobs(cache_key, filenames, "?")
        if not sql or self._version < SCHEMA:
            return {}
        return {name: bytes(data) for name, data in self._run(lambda c: c.execute(sql, params).fetchall())
                if isinstance(name, str) and isinstance(data, bytes)}

    def put_blob(self, cache_key: str, filename: str, data) -> None:
        """Store a file under ``cache_key`` (replacing one of that name).

        Raises
        ------
        TypeError, ValueError
            As :func:`costlearn.serve.tuning_rows.blob_values`.
        OSError
            Opened read-only, or the file cannot be written.
        """
        if self.read_only:
            raise PermissionError(f"the tuning database {self.path} was opened read-only")
        values = blob_values(cache_key, filename, data)
        self._write(lambda c: c.execute(PUT_BLOB, values))

    def take_lease(self, problem: Problem, family: str, device: str, template_hash: str, holder: str, *,
                   seconds: float, costlearn_version: str = __version__) -> bool:
        """Take the key's lease for ``seconds`` (see
        :mod:`costlearn.serve.fleet`): True if ``holder`` holds it now (free,
        expired, or already its own), False if another holder does.

        Raises
        ------
        OSError
            Opened read-only, or the file cannot be written.
        """
        if self.read_only:
            raise PermissionError(f"the tuning database {self.path} was opened read-only")
        params = (*key_values(problem, family, device, template_hash, costlearn_version), check_name("holder", holder),
                  lease_seconds(seconds))
        return bool(self._write(lambda c: c.execute(_SQLITE_TAKE_LEASE, params).rowcount))

    def free_lease(self, problem: Problem, family: str, device: str, template_hash: str, holder: str, *,
                   costlearn_version: str = __version__) -> None:
        """Free the key's lease if ``holder`` holds it."""
        if self.read_only:
            return
        params = (*key_values(problem, family, device, template_hash, costlearn_version), str(holder))
        self._write(lambda c: c.execute(FREE_LEASE, params))

    def entries(self) -> list[TuningEntry]:
        """Every stored entry (all versions), oldest first; a row that does
        not decode (:func:`decode_row`) is left out."""
        return entries_from_rows(self._run(lambda c: c.execute(     # an older file only when opened read-only
            f"SELECT {_KEYS[self._version]}, config_id, how, time_us, times_json, source, updated FROM tuned "
            "ORDER BY updated").fetchall()))


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


_SQLITE_TAKE_LEASE = TAKE_LEASE.format(now="((julianday('now') - 2440587.5) * 86400.0)")
"""The lease statement on this machine's clock (one machine shares an SQLite file)."""


def _columns(conn: sqlite3.Connection, table: str = "tuned") -> list:
    """The column names of ``table`` (one of :data:`TABLES`), in order (empty without it)."""
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
