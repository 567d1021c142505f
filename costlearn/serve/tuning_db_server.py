"""The tuning database on a PostgreSQL server, shared by every host of a
fleet: the interface and rules of :class:`~costlearn.serve.tuning_db.TuningDB`
(same key, a measured entry never replaced by a predicted one, a damaged or
infeasible row a miss), through psycopg 3, one connection per thread (as
the SQLite store: a pool's background reconnects would hide why a server is
away and make every caller wait its full timeout).

Only the entries (winners) for now; the per-host measurement records,
leases, spooling and roles of the fleet design are not here yet.

Needs the ``server`` extra (``pip install 'costlearn[server]'``); importing
costlearn never does.
"""
from __future__ import annotations

import math
import threading
import time

from costlearn.core.problem import Problem
from costlearn.core.version import __version__
from costlearn.serve.tuning_db import (COLUMNS, CREATE_TABLE, KEY_COLUMNS, SCHEMA, UPSERT, TuningDB, TuningDBError,
                                      TuningEntry, decode_row, default_target, entries_from_rows, entry_values,
                                      is_server_url, key_args, key_values, select_entry)

__all__ = ["ServerTuningDB", "open_store", "redacted"]

_CREATE = CREATE_TABLE.replace("INTEGER", "BIGINT").replace("REAL", "DOUBLE PRECISION")
"""The SQLite store's table in PostgreSQL's types (64-bit extents, double times)."""
_UPSERT = UPSERT.replace("?", "%s")
_SELECT = select_entry(KEY_COLUMNS, "%s")
"""The SQLite store's upsert (a measured entry never replaced by a predicted one), psycopg's placeholders."""

AWAY_S = 10.0
"""Seconds a server found down or unreachable is not asked again."""

_LOCK_ID = 0x636F73746C6561  # "costlea": the advisory lock creation holds, so two hosts never race CREATE TABLE


def open_store(target=None, *, create: bool = False, read_only: bool = False):
    """The tuning database ``target`` names: a
    :class:`~costlearn.serve.tuning_db_server.ServerTuningDB` for a
    ``postgresql://`` URL, else a :class:`TuningDB` file; None:
    :func:`costlearn.serve.tuning_db.default_target`.

    Raises
    ------
    As :class:`TuningDB` or ``ServerTuningDB`` (a server is always created
    on when writable: ``create`` concerns files).
    """
    if target is None:
        target = default_target()
    if is_server_url(target):
        return ServerTuningDB(target, read_only=read_only)
    return TuningDB(target, create=create, read_only=read_only)


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages: a
    password never appears in an error, a log or a report."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    try:
        params = conninfo_to_dict(url)
    except Exception:                       # unparseable: say nothing of what it holds
        return "postgresql://(unparseable URL)"
    if "password" not in params:
        return url
    params["password"] = "***"
    return make_conninfo(**params)


class ServerTuningDB:
    """The tuning database on a PostgreSQL server.

    Parameters
    ----------
    url : str
        libpq connection URL, ``postgresql://user[:password]@host[:port]/db``
        (``?sslmode=require`` etc. as libpq takes them).
    read_only : bool
        Never create or write (``put`` raises OSError).
    timeout_s : float
        The longest wait to connect and for one statement, seconds: a
        server down, unreachable or hung costs at most this, then OSError.

    Attributes
    ----------
    path : str
        The URL, password redacted (:func:`redacted`): what messages name.

    Raises
    ------
    ImportError
        Without psycopg (the ``server`` extra).
    TypeError
        ``url`` not a postgresql:// URL.

    Nothing is asked of the server until the first call (a compile starting
    while it is away still answers). From then on each call raises OSError
    where the server cannot be reached within ``timeout_s`` or refuses,
    :class:`~costlearn.serve.tuning_db.TuningDBError` where the database
    holds a ``tuned`` table that is not costlearn's, FileNotFoundError where
    a read-only store finds no table.
    """

    def __init__(self, url: str, *, read_only: bool = False, timeout_s: float = 5.0):
        if not is_server_url(url):
            raise TypeError(f"url={url!r}; must be a postgresql:// URL" if not isinstance(url, str) else
                            "url must start with postgresql:// or postgres://")
        try:
            import psycopg
        except ImportError as e:
            raise ImportError(f"a tuning database on a PostgreSQL server needs psycopg 3 ({e}): "
                              "pip install 'costlearn[server]'") from e
        self._psycopg = psycopg
        self._url = url
        self.path = redacted(url)
        self.read_only = bool(read_only)
        self.timeout_s = float(timeout_s)
        self.set_aside: list = []               # the interface of TuningDB: a server never sets a file aside
        self._local = threading.local()         # each thread's connection
        self._away = None                       # (monotonic time to retry after, why), once the server was away
        self._prepared = False                  # the table checked (or created): at the first call that reaches it

    def _connect(self):
        """A new connection: autocommit, at most ``timeout_s`` to connect,
        and each statement cancelled by the server after ``timeout_s``
        (a server that hangs is a server away)."""
        ms = max(1, int(self.timeout_s * 1000))
        return self._psycopg.connect(self._url, autocommit=True, connect_timeout=max(1, math.ceil(self.timeout_s)),
                                     options=f"-c statement_timeout={ms}")

    def _prepare(self, conn) -> None:
        """Check that an existing table has costlearn's columns; create a
        missing one (unless read-only) under an advisory lock, so two hosts
        never race. A role that may only read uses an existing table."""
        def columns():
            return [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'tuned' "
                "AND table_schema = current_schema() ORDER BY ordinal_position").fetchall()]
        cols = columns()
        if not cols and not self.read_only:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                conn.execute(_CREATE)
            cols = columns()
        if cols and cols != COLUMNS[SCHEMA]:
            raise TuningDBError(f"{self.path} has a table tuned with columns {cols}, not costlearn's "
                                f"{COLUMNS[SCHEMA]}: use another database or schema")
        if not cols and self.read_only:
            raise FileNotFoundError(f"no tuning database at {self.path} (no table tuned there yet)")

    def _run(self, fn):
        """fn(connection) on this thread's connection; a connection the
        server dropped (a restart) is replaced once. A server down,
        unreachable or refusing raises OSError naming the redacted URL; one
        found away is not asked again for :data:`AWAY_S` seconds (each call
        meanwhile raises at once), so a compile pays the wait once, not per
        problem. Every statement here is idempotent (a lookup, an upsert), so
        the one retry cannot write twice."""
        psycopg = self._psycopg
        away = self._away
        if away is not None and time.monotonic() < away[0]:
            raise OSError(f"cannot use the tuning database {self.path}: {away[1]} (not retried for "
                          f"{AWAY_S:g} s)")
        try:
            conn = getattr(self._local, "conn", None)
            for fresh in ((False, True) if conn is not None else (True,)):
                if fresh:
                    self.close()
                    conn = self._local.conn = self._connect()
                try:
                    if not self._prepared:
                        self._prepare(conn)
                        self._prepared = True
                    result = fn(conn)
                    self._away = None
                    return result
                except psycopg.OperationalError:
                    if fresh:
                        raise
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as e:
            raise OSError(f"cannot use the tuning database {self.path}: {_first_line(e)}") from None
        except psycopg.OperationalError as e:
            self.close()
            reason = _first_line(e)
            self._away = (time.monotonic() + AWAY_S, reason)
            raise OSError(f"cannot use the tuning database {self.path}: {reason}") from None

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            try:
                conn.close()
            except self._psycopg.Error:
                pass

    def get(self, problem: Problem, family: str, device: str, template_hash: str, *, spec=None,
            costlearn_version: str = __version__) -> TuningEntry | None:
        """The entry for a problem, or None (a miss): as
        :meth:`costlearn.serve.tuning_db.TuningDB.get`.

        Raises
        ------
        TypeError
            If ``problem`` is not a Problem.
        OSError
            The server cannot be used (:meth:`_run`).
        """
        key = key_values(problem, family, device, template_hash, costlearn_version)
        return decode_row(self._run(lambda c: c.execute(_SELECT, key).fetchone()), *key_args(key), spec)

    def put(self, entry: TuningEntry) -> bool:
        """Store an entry (a measured one is never replaced by a predicted
        one): as :meth:`costlearn.serve.tuning_db.TuningDB.put`.

        Returns
        -------
        bool
            True if the entry was written.

        Raises
        ------
        TypeError, ValueError
            A bad entry (:func:`costlearn.serve.tuning_db.entry_values`).
        OSError
            Opened read-only, or the server cannot be used or refuses the
            write (a read-only role).
        """
        if self.read_only:
            raise OSError(f"the tuning database {self.path} was opened read-only")
        values = entry_values(entry)
        return bool(self._run(lambda c: c.execute(_UPSERT, values).rowcount))

    def entries(self) -> list[TuningEntry]:
        """Every stored entry (all versions), oldest first; a row that does
        not decode is left out."""
        return entries_from_rows(self._run(lambda c: c.execute(
            f"SELECT {KEY_COLUMNS}, config_id, how, time_us, times_json, source, updated FROM tuned "
            "ORDER BY updated").fetchall()))


def _first_line(e: Exception) -> str:
    """The error's first line (libpq's messages name host and user, never the password)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
