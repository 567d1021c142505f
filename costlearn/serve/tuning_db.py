"""Tuning database: the config chosen for each problem, how it was chosen
(predicted by the model, or measured on the device) and its times, in one
SQLite file shared by every process of a machine (design.md, "Predictor").

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
  / ``NN`` entries (schema 1) and epilogue ``none`` entries;
  ``read_only=True`` (listing) reads it as it is and changes nothing in any
  file.

- **Concurrency.** SQLite in write-ahead-log mode: readers never block,
  writers queue (``busy_timeout``); each thread gets its own connection.
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

import json
import math
import os
import sqlite3
import threading
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from costlearn.core.version import __version__
from costlearn.families import FAMILIES, get_family
from costlearn.core.problem import Problem
from costlearn.collect.space import check_config
from costlearn.core.util import cache_dir, check_instance
from costlearn.core.errors import CostlearnError

__all__ = ["TuningDB", "TuningEntry", "TuningDBError", "default_path", "default_target", "is_server_url",
           "entry_values", "decode_row", "key_values", "key_args", "select_entry", "entries_from_rows", "CHOSEN_BY",
           "COLUMNS", "KEY_COLUMNS", "CREATE_TABLE", "UPSERT"]

SCHEMA = 3
"""3 added ``epilogue``, 2 ``layout`` and ``family`` to the key (older files are upgraded on open)."""
CHOSEN_BY = ("predicted", "measured")

_KEYS = {1: "m, n, k, dtype, 'NN', 'none', 'gemm', device, template_hash, costlearn_version",
         2: "m, n, k, dtype, layout, 'none', family, device, template_hash, costlearn_version",
         3: "m, n, k, dtype, layout, epilogue, family, device, template_hash, costlearn_version"}
"""The key columns as read from a file of each schema (older ones with the
values their entries had)."""
KEY_COLUMNS = _KEYS[SCHEMA]
"""The key's columns, comma-separated (every store's primary key)."""

CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS tuned (
    m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
    dtype TEXT NOT NULL, layout TEXT NOT NULL, epilogue TEXT NOT NULL, family TEXT NOT NULL,
    device TEXT NOT NULL, template_hash TEXT NOT NULL,
    costlearn_version TEXT NOT NULL,
    config_id TEXT NOT NULL,
    how TEXT NOT NULL CHECK (how IN ('predicted', 'measured')),
    time_us REAL NOT NULL,
    times_json TEXT NOT NULL,
    source TEXT NOT NULL,
    updated TEXT NOT NULL,
    PRIMARY KEY ({KEY_COLUMNS})
)"""
"""The table, in SQLite's types (the server store maps them to PostgreSQL's)."""

UPSERT = f"""
INSERT INTO tuned VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT ({KEY_COLUMNS}) DO UPDATE SET
    config_id = excluded.config_id, how = excluded.how, time_us = excluded.time_us,
    times_json = excluded.times_json, source = excluded.source, updated = excluded.updated
WHERE excluded.how = 'measured' OR tuned.how = 'predicted'
"""
"""Store one entry: a measured entry is never replaced by a predicted one
(SQLite's placeholders; the same statement in PostgreSQL)."""


def _upgrade(version: int) -> list:
    """The statements that bring a schema-``version`` table to :data:`SCHEMA`."""
    return ["ALTER TABLE tuned RENAME TO tuned_old", CREATE_TABLE,
            f"INSERT INTO tuned SELECT {_KEYS[version]}, config_id, how, time_us, times_json, source, updated "
            "FROM tuned_old", "DROP TABLE tuned_old", f"PRAGMA user_version = {SCHEMA}"]


_V1_COLUMNS = ["m", "n", "k", "dtype", "device", "template_hash", "costlearn_version", "config_id", "how", "time_us",
               "times_json", "source", "updated"]
COLUMNS = {1: _V1_COLUMNS,
            2: _V1_COLUMNS[:4] + ["layout", "family"] + _V1_COLUMNS[4:],
            3: _V1_COLUMNS[:4] + ["layout", "epilogue", "family"] + _V1_COLUMNS[4:]}
"""The columns of table ``tuned`` in each schema, in order (:data:`CREATE_TABLE` for 3)."""


class TuningDBError(CostlearnError, OSError):
    """The file is a database costlearn must not write: a newer schema, or
    another application's. Left untouched."""


def default_path() -> Path:
    """``$COSTLEARN_TUNING_DB``, else ``tuning.sqlite`` in the user cache
    (:func:`costlearn.core.util.cache_dir`)."""
    env = os.environ.get("COSTLEARN_TUNING_DB")
    return Path(env) if env else cache_dir() / "tuning.sqlite"


def default_target():
    """The tuning database used where none is named: ``$COSTLEARN_TUNING_DB``
    when it is a ``postgresql://`` URL (a str), else :func:`default_path`."""
    env = os.environ.get("COSTLEARN_TUNING_DB")
    return env if is_server_url(env) else default_path()


def is_server_url(target) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL: a tuning
    database on a server, not a file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True)
class TuningEntry:
    """One tuned problem.

    Attributes
    ----------
    problem : Problem
    family : str
        Kernel family of the config.
    device : str
        Device slug the entry belongs to (where it was measured or which
        model predicted it).
    template_hash, costlearn_version : str
    config : a config of ``family``
        The chosen config.
    chosen_by : {"predicted", "measured"}
        How it was chosen (:attr:`costlearn.serve.prediction.Prediction.chosen_by`;
        the column ``how`` of the database file).
    time_us : float
        The chosen config's time, microseconds: measured median, or the
        model's prediction.
    times_us : dict of str to float
        Every time behind the choice, by config id (the measured top-k, or
        the predicted top-k), microseconds.
    source : str
        What chose it (the model folder and its sha256, prefix).
    updated : str
        UTC time of the write, ISO 8601.
    """

    problem: Problem
    family: str
    device: str
    template_hash: str
    costlearn_version: str
    config: object
    chosen_by: str
    time_us: float
    times_us: dict = field(default_factory=dict)
    source: str = ""
    updated: str = ""


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
            with open(self.path, "rb") as fh:
                head = fh.read(16)
        except FileNotFoundError:
            return
        except IsADirectoryError:
            raise OSError(f"cannot use the tuning database {self.path}: it is a folder") from None
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
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=self.timeout_s,
                                   isolation_level=None, check_same_thread=True)
        else:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None,
                                   check_same_thread=True)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
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
            half_made = version == 0 and tables == {"tuned"} and _columns(conn) == COLUMNS[SCHEMA]
            if tables - {"tuned"} or (version == 0 and tables and not half_made):
                raise TuningDBError(f"{self.path} is an SQLite database but not a costlearn tuning database "
                                    f"(tables {sorted(tables)}); use another file")
            self._check_schema(conn, objects, SCHEMA if half_made else version)
            if self.read_only:
                self._version = version or SCHEMA
                return conn
            conn.execute("PRAGMA journal_mode = WAL")
            if version in (1, 2):
                self._upgrade_from(conn, version)
            elif version == 0:
                self._create(conn)
        except (sqlite3.DatabaseError, TuningDBError):
            conn.close()
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection, objects: list, version: int) -> None:
        """Refuse (:class:`TuningDBError`) a file holding anything but
        costlearn's own schema: the table ``tuned`` with the columns of its
        ``version`` and the index SQLite makes for its key. A trigger, view
        or extra index in a valid file would run inside every query or
        write: one trigger could rewrite each recorded prediction into a
        "measured" entry of its choosing."""
        foreign = sorted(f"{kind} {name!r}" for kind, name in objects
                         if (kind, name) != ("table", "tuned")
                         and not (kind == "index" and name.startswith("sqlite_autoindex_tuned_")))
        if foreign:
            raise TuningDBError(f"{self.path} holds {', '.join(foreign[:5])} beside costlearn's table: only "
                                "costlearn's own schema is accepted (a trigger or view would act on every "
                                "entry); left alone: use another file")
        if version in COLUMNS:
            cols = _columns(conn)
            if cols != COLUMNS[version]:
                raise TuningDBError(f"{self.path} claims tuning-database schema {version} but its table has "
                                    f"columns {cols}; left alone: use another file")

    @staticmethod
    def _create(conn: sqlite3.Connection) -> None:
        """The table and the schema version in one transaction, so no kill
        leaves one without the other (another process creating it meanwhile
        makes this a no-op)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(CREATE_TABLE)
            conn.execute(f"PRAGMA user_version = {SCHEMA}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _upgrade_from(self, conn: sqlite3.Connection, version: int) -> None:
        """Schema 1 or 2 -> :data:`SCHEMA` in one transaction: every entry
        of schema 1 becomes a ``gemm`` ``NN`` entry (the only ones it could
        hold), every older entry an epilogue ``none`` one. A file another
        process upgraded meanwhile is left as it is; one whose rows cannot be
        copied is left untouched (TuningDBError)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == version:     # not upgraded by another process
                objects = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
                self._check_schema(conn, objects, version)
                for stmt in _upgrade(version):
                    conn.execute(stmt)
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as e:
            conn.execute("ROLLBACK")
            raise TuningDBError(f"{self.path}: its schema-1 entries cannot be upgraded ({e}); left untouched") from None
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "generation", None) != self._generation:
            conn.close()                        # another thread set the file aside: reopen
            conn = self._local.conn = None
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
            try:
                self._local.inode = os.stat(self.path).st_ino
            except OSError:
                self._local.inode = None
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
            try:
                if inode is not None and os.stat(self.path).st_ino != inode:
                    return
            except OSError:
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
                warnings.warn(f"costlearn tuning database {self.path} is corrupt ({reason}); set aside as "
                              f"{target}, starting a fresh one", RuntimeWarning, stacklevel=4)

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
            raise OSError(f"the tuning database {self.path} was opened read-only")
        values = entry_values(entry)
        return bool(self._run(lambda c: c.execute(UPSERT, values).rowcount))

    def entries(self) -> list[TuningEntry]:
        """Every stored entry (all versions), oldest first; a row that does
        not decode (:func:`decode_row`) is left out."""
        return entries_from_rows(self._run(lambda c: c.execute(     # an older file only when opened read-only
            f"SELECT {_KEYS[self._version]}, config_id, how, time_us, times_json, source, updated FROM tuned "
            "ORDER BY updated").fetchall()))



def entry_values(entry: TuningEntry) -> tuple:
    """``entry`` checked and as the 16 values of a row of ``tuned``, in
    :data:`COLUMNS` order (``updated``: now, UTC, where the entry has none).

    Raises
    ------
    TypeError, ValueError
        An entry no store may hold: not a TuningEntry, an unknown family,
        ``chosen_by`` not in :data:`CHOSEN_BY`, an empty name, a config of
        another family, or a time that is not finite and > 0.
    """
    if not isinstance(entry, TuningEntry):
        raise TypeError(f"entry={entry!r}; must be a TuningEntry")
    check_instance("problem", entry.problem, Problem, "a costlearn.Problem")
    if entry.family not in FAMILIES:
        raise ValueError(f"family={entry.family!r}; known: {list(FAMILIES.names())}")
    if entry.chosen_by not in CHOSEN_BY:
        raise ValueError(f"chosen_by={entry.chosen_by!r}; allowed: {CHOSEN_BY}")
    for name in ("device", "template_hash", "costlearn_version", "source"):
        v = getattr(entry, name)
        if not isinstance(v, str) or (not v and name != "source"):
            raise TypeError(f"{name}={v!r}; must be a non-empty str")
    if not isinstance(entry.config, get_family(entry.family).config_type):
        raise TypeError(f"config={entry.config!r}; must be a config of the {entry.family!r} family")
    try:
        _positive(entry.time_us)
        times = _times(entry.times_us)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{e} (time_us={entry.time_us!r}, times_us={entry.times_us!r})") from None
    stamp = entry.updated if isinstance(entry.updated, str) and entry.updated else \
        datetime.now(timezone.utc).isoformat(timespec="seconds")
    p = entry.problem
    return (p.m, p.n, p.k, p.dtype, p.layout, p.epilogue, entry.family, entry.device, entry.template_hash,
            entry.costlearn_version, entry.config.config_id, entry.chosen_by, float(entry.time_us),
            json.dumps(times, sort_keys=True), entry.source, stamp)


def key_values(problem: Problem, family: str, device: str, template_hash: str, costlearn_version: str) -> tuple:
    """The key's 10 values, in :data:`KEY_COLUMNS` order.

    Raises
    ------
    TypeError
        If ``problem`` is not a Problem.
    """
    check_instance("problem", problem, Problem, "a costlearn.Problem")
    p = problem
    return (p.m, p.n, p.k, p.dtype, p.layout, p.epilogue, str(family), str(device), str(template_hash),
            str(costlearn_version))


def key_args(key: tuple) -> tuple:
    """``(problem, family, device, template_hash, costlearn_version)`` of a
    key's values (:func:`key_values`), as :func:`decode_row` takes them."""
    return (Problem(*key[:6]), *key[6:])


def select_entry(key_columns: str, placeholder: str) -> str:
    """The query of one key's stored row, ``(config_id, how, time_us,
    times_json, source, updated)``: ``key_columns`` comma-separated (or the
    expressions an older schema reads them by), each bound to
    ``placeholder`` (``?`` for SQLite, ``%s`` for psycopg)."""
    where = " AND ".join(f"{expr} = {placeholder}" for expr in key_columns.split(", "))
    return f"SELECT config_id, how, time_us, times_json, source, updated FROM tuned WHERE {where}"


def entries_from_rows(rows) -> list[TuningEntry]:
    """The entries of full rows (the 10 key values, then the 6 of
    :func:`select_entry`), those that decode (:func:`decode_row`)."""
    out = []
    for r in rows:
        try:
            args = key_args(tuple(r[:10]))
        except (TypeError, ValueError):
            continue
        e = decode_row(r[10:], *args)
        if e is not None:
            out.append(e)
    return out


def decode_row(row, problem: Problem, family: str, device: str, template_hash: str, costlearn_version: str,
               spec=None) -> TuningEntry | None:
    """The entry a stored row ``(config_id, how, time_us, times_json,
    source, updated)`` of that key holds, or None (a miss): a row that does
    not decode to a config of ``family`` with finite positive times, or
    whose config is infeasible on ``spec`` for ``problem``
    (:func:`costlearn.collect.space.check_config`), is never returned for
    launch."""
    if row is None:
        return None
    config_id, how, time_us, times_json, source, updated = row
    try:
        if how not in CHOSEN_BY or not isinstance(source, str):
            raise ValueError(f"how={how!r}")
        config = get_family(family).config_from_id(config_id)
        times = _times(json.loads(times_json))
        time_us = _positive(time_us)
    except (ValueError, TypeError):
        return None                          # a damaged row is a miss
    if spec is not None and check_config(config, spec, problem=problem) is not None:
        return None
    return TuningEntry(problem, str(family), str(device), str(template_hash), str(costlearn_version), config,
                       how, float(time_us), times, source, str(updated))


def _columns(conn: sqlite3.Connection) -> list:
    """The column names of table ``tuned``, in order (empty without it)."""
    return [r[1] for r in conn.execute("PRAGMA table_info(tuned)")]


def _positive(v) -> float:
    """A finite time > 0 as float, else ValueError/TypeError."""
    if isinstance(v, bool):
        raise TypeError(f"time {v!r} is not a number")
    f = float(v)
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"time {v!r} must be finite and > 0")
    return f


def _times(d) -> dict:
    """A {config_id: time_us} dict with finite positive times, else error."""
    if not isinstance(d, dict):
        raise TypeError(f"times {d!r} must be a dict of config id to microseconds")
    return {str(a): _positive(b) for a, b in d.items()}
