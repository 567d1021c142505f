"""One SQLite file of the tuning database, opened and checked
(:class:`TuningFile`): what :class:`~costlearn.serve.tuning_db.TuningDB`
opens each connection through.

- A file that is not an SQLite database at all (it lacks the SQLite header:
  a user's CSV, say) is refused and left alone, as is an SQLite file holding
  anything but costlearn's own schema (another table, a trigger, a view, an
  index, a column of its own), or a newer schema than this code's.
- A schema-1 file (before kernel families) or schema-2 file (before
  epilogues) is upgraded in place when opened for writing, in one
  transaction, its entries becoming ``gemm`` / ``NN`` entries (schema 1)
  and epilogue ``none`` entries (a schema-3 file gains the measurements,
  leases and blobs); read-only, it is read as it is (:data:`KEYS_BY_SCHEMA`,
  :data:`COLUMNS`), and a file in a folder this user cannot write is read
  as immutable.
- A file opened for writing is switched to write-ahead logging and must
  pass ``PRAGMA quick_check``: corruption raises a plain
  ``sqlite3.DatabaseError``, which the database sets aside.
"""
from __future__ import annotations

import os
import random
import sqlite3
import stat
import time
from pathlib import Path

from costlearn.serve.fleet import CREATE_LEASES, CREATE_MEASUREMENTS
from costlearn.serve.tuning_rows import (CREATE_BLOBS, CREATE_TABLE, KEY_COLUMNS, SCHEMA, TABLES, TUNED_COLUMNS,
                                         TuningDBError)

__all__ = ["TuningFile", "COLUMNS", "KEYS_BY_SCHEMA"]


KEYS_BY_SCHEMA = {1: "m, n, k, dtype, 'NN', 'none', 'gemm', device, template_hash, costlearn_version",
                  2: "m, n, k, dtype, layout, 'none', family, device, template_hash, costlearn_version",
                  3: "m, n, k, dtype, layout, epilogue, family, device, template_hash, costlearn_version"}
KEYS_BY_SCHEMA[4] = KEY_COLUMNS
"""The key columns as read from a file of each schema (older ones with the
values their entries had)."""


def _upgrade(version: int) -> list:
    """The statements that bring a schema-``version`` file to :data:`SCHEMA`
    (0: a new file)."""
    rebuild = [] if version in (0, 3) else [
        "ALTER TABLE tuned RENAME TO tuned_old", CREATE_TABLE,
        f"INSERT INTO tuned SELECT {KEYS_BY_SCHEMA[version]}, config_id, how, time_us, times_json, source, updated "
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


class TuningFile:
    """The tuning database's SQLite file at ``path``, each connection to it
    opened and checked (:meth:`connect`).

    Parameters
    ----------
    path : Path
        The file.
    read_only : bool
        Open for reading only: nothing is created, upgraded or written.
    timeout_s : float
        How long a writer waits for another writer, seconds.
    """

    def __init__(self, path: Path, *, read_only: bool, timeout_s: float):
        self.path = path
        self.read_only = read_only
        self.timeout_s = timeout_s

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

    def connect(self) -> tuple[sqlite3.Connection, int]:
        """A new connection to the file, checked (and, unless read-only,
        upgraded to :data:`SCHEMA`), and the schema it reads as.

        Returns
        -------
        (sqlite3.Connection, int)
            The connection (autocommit, ``busy_timeout`` set) and the schema
            of the file it reads: :data:`SCHEMA` unless read-only.

        Raises
        ------
        sqlite3.DatabaseError
            A plain one: the file is corrupt.
        TuningDBError
            A file this code must not touch (not SQLite, a newer schema,
            another application's database).
        sqlite3.OperationalError
            The file cannot be opened.
        OSError
            The path is a folder or not a regular file.
        """
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
                return conn, 3 if half_made else (version or SCHEMA)
            self._wal(conn)
            if version < SCHEMA:
                self._upgrade_from(conn, 3 if half_made else version, version)
        except (sqlite3.DatabaseError, TuningDBError):
            conn.close()
            raise
        return conn, SCHEMA

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


def _columns(conn: sqlite3.Connection, table: str = "tuned") -> list:
    """The column names of ``table`` (one of :data:`TABLES`), in order (empty without it)."""
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
