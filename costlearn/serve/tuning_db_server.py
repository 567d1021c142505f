"""The tuning database on a PostgreSQL server, shared by every host of a
fleet: the queries and rules of :class:`~costlearn.serve.tuning_db.TuningDB`
(:class:`~costlearn.serve.tuning_store.TuningStore`'s: same key, a measured
entry never replaced by a predicted one, a damaged or infeasible row a
miss), through psycopg 3, one connection per thread (as the SQLite store: a
pool's background reconnects would hide why a server is away and make every
caller wait its full timeout).

Beside the entries (the winners), every host's measurements and the
leases of :mod:`costlearn.serve.fleet`, on the server's clock.

Needs the ``server`` extra (``pip install 'costlearn[server]'``); importing
costlearn never does.
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import re
import socket
import threading
import time
from urllib.parse import parse_qs, unquote, urlsplit

from costlearn.serve.fleet import CREATE_LEASES, CREATE_MEASUREMENTS
from costlearn.serve.tuning_db import STREAM_ROWS, TuningDB
from costlearn.serve.tuning_rows import (CREATE_BLOBS, CREATE_TABLE, TABLES, TuningDBError, default_target,
                                         is_server_url, key_args, key_values)
from costlearn.serve.tuning_store import TuningStore

__all__ = ["ServerTuningDB", "open_store", "copy_store", "redacted", "has_password", "initialize", "WRITER_ROLE",
           "READER_ROLE"]

WRITER_ROLE = "costlearn_writer"
"""The group role of tuning hosts (:func:`initialize`): reads and writes entries, measurements and leases."""
READER_ROLE = "costlearn_reader"
"""The group role of serving hosts (:func:`initialize`): reads entries and measurements, writes nothing."""



def _pg(sql: str) -> str:
    """A statement of the SQLite store in PostgreSQL's dialect: psycopg's
    placeholders, 64-bit extents, double times, the server's clock."""
    return (sql.replace("?", "%s").replace("INTEGER", "BIGINT").replace("REAL", "DOUBLE PRECISION")
            .replace("BLOB", "BYTEA")
            .replace("{now}", "extract(epoch FROM clock_timestamp())::double precision"))


_CREATE = [_pg(CREATE_TABLE), _pg(CREATE_MEASUREMENTS), _pg(CREATE_LEASES), _pg(CREATE_BLOBS)]
_COLUMN_TYPES = {table: re.findall(r"(\w+) (BIGINT|DOUBLE PRECISION|TEXT|BYTEA) NOT NULL", stmt)
                 for table, stmt in zip(TABLES, _CREATE)}
"""Each table's (column, type) pairs as PostgreSQL names them (``format_type``)."""
_COLUMN_TYPES = {t: [(c, k.lower()) for c, k in cols] for t, cols in _COLUMN_TYPES.items()}
_STATEMENTS: dict = {}
"""Each SQLite statement's translation (:func:`_pg`), once."""

_SERIAL_RETRIES = 8
"""Tries of a record that another host's record of the same key made the server roll back."""

AWAY_S = 10.0
"""Seconds a server found down or unreachable is not asked again."""

STREAM_IDLE_S = 600
"""Seconds a streamed read's session may wait between two batches (the
caller writing what it read) before the server ends it: a suspended or
cut-off reader holds its snapshot and its table locks no longer than that,
whatever the server's own ``idle_in_transaction_session_timeout``."""

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


def copy_store(source, target) -> tuple[int, int]:
    """Copy every entry and measurement of the tuning database ``source``
    into ``target`` (a host's SQLite file into a fleet's server, say; a file
    of an older schema is read as it is, unchanged): measurements by their
    tuning (:meth:`ServerTuningDB.record`: a tuning already there adds
    nothing, and the key's answer is decided again from all), entries with
    none behind them as they are (a measured entry is never replaced by a
    predicted one). Running it twice adds nothing.

    Parameters
    ----------
    source, target : path, str or tuning database
        As :func:`open_store` takes them; ``source`` is opened read-only.

    Returns
    -------
    (int, int)
        Entries written without measurements, tunings recorded.

    Raises
    ------
    OSError, FileNotFoundError, TuningDBError
        As :func:`open_store`, or the target refusing a write.
    """
    src = source if hasattr(source, "entries") else open_store(source, read_only=True)
    dst = target if hasattr(target, "record") else open_store(target, create=True)
    tunings: dict = {}
    for key, ms in src.measurements().items():
        for m in ms:
            tunings.setdefault((key, m.tuning_id), []).append(m)
    for (key, _), ms in tunings.items():
        dst.record(*key_args(key)[:4], ms, source=f"copied from {src.path}", costlearn_version=key[9])
    measured_keys = {key for key, _ in tunings}
    written = 0
    for e in src.entries():
        if key_values(e.problem, e.family, e.device, e.template_hash, e.costlearn_version) not in measured_keys:
            written += bool(dst.put(e))
    return written, len(tunings)


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


def has_password(url: str) -> bool:
    """Whether a libpq URL carries a password (``user:pw@`` or
    ``?password=``): such a URL on a command line is visible to every user
    of the machine (``ps``), so the command line refuses it."""
    try:
        parts = urlsplit(url)
        return parts.password is not None or "password" in parse_qs(parts.query)
    except ValueError:
        return True                         # unparseable: assume the worst


def initialize(url: str, *, writer: str = WRITER_ROLE, reader: str = READER_ROLE) -> list[str]:
    """Create the tuning database's tables on a server, and two group roles
    (``NOLOGIN``): ``writer`` for tuning hosts (SELECT, INSERT, UPDATE,
    DELETE on every table), ``reader`` for serving hosts (SELECT on the
    entries and measurements; a write through it is refused by the server,
    and raises PermissionError here). A host's login role is then made a
    member of one (``CREATE ROLE host LOGIN IN ROLE costlearn_writer``; its
    password set in psql, never on a command line).
    Idempotent: an existing role or table is kept.

    Parameters
    ----------
    url : str
        A role that may create tables and roles (the database's owner with
        CREATEROLE, or a superuser).
    writer, reader : str
        The group roles' names.

    Returns
    -------
    list of str
        What was done, one line each.

    Raises
    ------
    ValueError
        Two roles of one name, or an empty name.
    OSError
        The server cannot be used or refuses (PermissionError: this role
        may not create tables or roles).
    """
    if not writer or not reader or writer == reader or not all(isinstance(r, str) for r in (writer, reader)):
        raise ValueError(f"writer={writer!r}, reader={reader!r}: two different, non-empty role names")
    db = ServerTuningDB(url)
    try:
        return db.init_roles(writer, reader)
    finally:
        db.close()


class ServerTuningDB(TuningStore):
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

    The queries are :class:`~costlearn.serve.tuning_store.TuningStore`'s:
    leases on the server's clock, a tuning's record in one serializable
    transaction (:meth:`_transaction`).
    """

    PLACEHOLDER = "%s"

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
        from psycopg.conninfo import conninfo_to_dict
        try:
            conninfo_to_dict(url)
        except psycopg.Error:
            raise ValueError(f"{self.path}: libpq cannot read this URL (check its percent-escapes and parameters; "
                             "the URL is not repeated here, it may hold a password)") from None
        parts = urlsplit(url)
        self._secrets = {s for s in (parts.password, unquote(parts.password or ""),
                                     *parse_qs(parts.query).get("password", [])) if s}
        self.read_only = bool(read_only)
        self.timeout_s = float(timeout_s)
        self.set_aside: list = []               # the interface of TuningDB: a server never sets a file aside
        self._local = threading.local()         # each thread's connection
        self._away = None                       # (monotonic time to retry after, why), once the server was away
        self._tables: set = set()               # the tables found on the server
        self._prepared = False                  # the table checked (or created): at the first call that reaches it

    def _connect(self):
        """A new connection: autocommit, at most ``timeout_s`` to connect
        (or the URL's own ``connect_timeout``: a fleet whose server is
        reached within a second may set 1, so an unreachable host costs a
        compile one second, once per :data:`AWAY_S`), and each statement
        cancelled by the server after ``timeout_s`` (a server that hangs is
        a server away). The URL's own ``options`` (a ``search_path``, say)
        are kept, the statement timeout added after them."""
        from psycopg.conninfo import conninfo_to_dict
        ms = max(1, int(self.timeout_s * 1000))
        given = "connect_timeout" in parse_qs(urlsplit(self._url).query)
        wait = {} if given else {"connect_timeout": max(1, math.ceil(self.timeout_s))}
        options = f"{conninfo_to_dict(self._url).get('options', '')} -c statement_timeout={ms}".strip()
        return self._psycopg.connect(self._url, autocommit=True, options=options, **wait)

    def _prepare(self, conn) -> None:
        """Check that the tables present have costlearn's columns; create
        the missing ones (unless read-only) in one transaction under an
        advisory lock, so two hosts never race. A role that may only read
        uses the tables there are (a server made by an older costlearn has
        no measurements: none are listed)."""
        def columns():
            rows = conn.execute(            # the catalog, not information_schema: it shows tables a role may not read
                "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "JOIN pg_class c ON a.attrelid = c.oid WHERE c.relnamespace = current_schema()::regnamespace "
                "AND c.relname = ANY(%s) AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY c.relname, a.attnum", (list(TABLES),)).fetchall()
            out: dict = {}
            for table, column, kind in rows:
                out.setdefault(table, []).append((column, kind))
            return out
        cols = columns()
        if len(cols) < len(TABLES) and not self.read_only:
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                    for stmt in _CREATE:
                        conn.execute(stmt)
            except self._psycopg.errors.InsufficientPrivilege:
                pass                        # a role that may not create: it uses the tables there are
            cols = columns()
        for table, found in cols.items():
            if found != _COLUMN_TYPES[table]:
                raise TuningDBError(f"{self.path} has a table {table} with columns {found}, not costlearn's "
                                    f"{_COLUMN_TYPES[table]}: use another database or schema")
        foreign = conn.execute(         # as the SQLite store: a trigger or rule would act on every entry
            "SELECT c.relname || ' trigger ' || t.tgname FROM pg_trigger t JOIN pg_class c ON t.tgrelid = c.oid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s) AND NOT t.tgisinternal "
            "UNION ALL SELECT tablename || ' rule ' || rulename FROM pg_rules WHERE schemaname = current_schema() "
            "AND tablename = ANY(%s) UNION ALL SELECT relname || ' row security' FROM pg_class WHERE relnamespace = "
            "current_schema()::regnamespace AND relname = ANY(%s) AND relrowsecurity",
            (list(TABLES),) * 3).fetchall()
        if foreign:
            raise TuningDBError(f"{self.path}: {', '.join(r[0] for r in foreign[:5])} on costlearn's tables: only "
                                "costlearn's own schema is accepted (a trigger or rule acts on every entry); "
                                "use another database or schema")
        if "tuned" not in cols:
            raise FileNotFoundError(f"no tuning database at {self.path} (no table tuned there yet: "
                                    "`costlearn tuning-db init URL` makes it, as a role that may)")
        self._tables = set(cols)

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
            raise PermissionError(f"cannot write the tuning database {self.path}: {self._said(e)} (a serving "
                                  "host's role may only read; tuning hosts use the writer role of `costlearn "
                                  "tuning-db init`)") from None
        except psycopg.DataError as e:              # a value the server refuses: the caller's, not the server's
            raise ValueError(f"the tuning database {self.path} refused a value: {self._said(e)}") from None
        except psycopg.Error as e:                  # away, hung, or a URL libpq refuses to connect with
            self.close()
            reason = self._said(e)
            self._away = (time.monotonic() + AWAY_S, reason)
            raise OSError(f"cannot use the tuning database {self.path}: {reason}") from None

    def _said(self, e: Exception) -> str:
        """The error's first line, without the URL's password in any spelling
        (libpq's own messages never hold it; a message quoting the URL might)."""
        text = _first_line(e)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def init_roles(self, writer: str, reader: str) -> list[str]:
        """:func:`initialize` on this server (the tables, the two roles, their grants)."""
        from psycopg import sql
        done = []

        def setup(conn):
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                for role in (writer, reader):
                    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
                        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
                        done.append(f"created role {role}")
                    else:
                        done.append(f"role {role} exists: kept")
                schema = conn.execute("SELECT current_schema()").fetchone()[0]
                ident = sql.Identifier
                conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}, {}").format(ident(schema), ident(writer),
                                                                                 ident(reader)))
                tables = sql.SQL(", ").join(ident(t) for t in TABLES)
                conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(tables, ident(writer)))
                conn.execute(sql.SQL("GRANT SELECT ON tuned, measurements, blobs TO {}").format(ident(reader)))
                conn.execute(sql.SQL("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {} FROM {}").format(tables,
                                                                                                     ident(reader)))
            done.append(f"tables {', '.join(TABLES)} in schema {schema}: {writer} reads and writes them, {reader} "
                        "reads tuned, measurements and blobs")
        self._run(setup)
        return done

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            try:
                conn.close()
            except self._psycopg.Error:
                pass

    # -- the queries' statements (costlearn.serve.tuning_store) ------------

    def _statement(self, sql: str) -> str:
        """``sql`` in PostgreSQL's dialect, on the server's clock (:func:`_translated`)."""
        return _translated(sql)

    def _table_rows(self, table: str, sql: str, params=None) -> list:
        """The rows of ``sql`` on ``table``; none where the server has no
        such table (made by an older costlearn, and this role may not create
        it)."""
        return self._run(lambda conn: conn.execute(sql, params).fetchall() if table in self._tables else [])

    def _stream(self, table: str, sql: str, params=()):
        """The rows of ``sql`` on ``table``, :data:`STREAM_ROWS` at a time
        through a server-side cursor (one query, one snapshot), on a
        connection of its own (this store's stays free for other statements
        meanwhile); none where the server has no such table.

        Each ``FETCH`` is its own statement, so ``timeout_s`` bounds one
        batch, not the whole read: a caller that takes the rows slowly (an
        import writing its parts) is never cancelled, and a server that
        hangs mid-read is still a server away. The session's
        ``idle_in_transaction_session_timeout`` is :data:`STREAM_IDLE_S`
        (the cursor lives in a read-only transaction). A server that stops
        answering altogether (a frozen host, a cut network) sends no cancel:
        a wait on it of over twice ``timeout_s`` plus a second shuts the
        connection from this side (:class:`_Deadline`). A server lost part
        way raises OSError; what was read stays read."""
        self._run(lambda c: None)                           # reachable, its tables known
        if table not in self._tables:
            return
        psycopg = self._psycopg
        try:
            conn = self._connect()
            try:
                yield from self._fetched(conn, sql, params)
            finally:
                conn.close()                                # no wait for the server: a read left part way too
        except psycopg.Error as e:
            raise OSError(f"cannot use the tuning database {self.path}: {self._said(e)}") from None

    def _fetched(self, conn, sql: str, params):
        """The rows of ``sql`` through a server-side cursor on ``conn``,
        :data:`STREAM_ROWS` at a time, each wait under a :class:`_Deadline`
        (:meth:`_stream`)."""
        deadline = _Deadline(conn, 2 * self.timeout_s + 1)
        try:
            with deadline.waiting():
                conn.execute(f"SET idle_in_transaction_session_timeout = {STREAM_IDLE_S * 1000}")
                conn.autocommit = False                     # a server-side cursor lives in a transaction
                cur = conn.cursor(name="costlearn_stream")
                cur.execute(sql, params)
            while True:
                with deadline.waiting():
                    rows = cur.fetchmany(STREAM_ROWS)
                if not rows:
                    break
                yield from rows
            with deadline.waiting():
                conn.rollback()                             # it only read: the transaction ends, the cursor too
        finally:
            deadline.close()

    def _transaction(self, work):
        """``work(execute)`` in one serializable transaction: two hosts
        recording one key at once, one is rolled back by the server and
        retried (up to :data:`_SERIAL_RETRIES` times), so the last leaves
        the answer of all; no lock a read-only role could hold."""
        failure = self._psycopg.errors.SerializationFailure

        def write(conn):
            for attempt in range(_SERIAL_RETRIES):
                try:
                    with conn.transaction():
                        conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                        return work(lambda sql, params: conn.execute(_translated(sql), params))
                except failure:
                    if attempt == _SERIAL_RETRIES - 1:
                        raise
                    time.sleep(0.001 * (1 + random.random()) * 2 ** attempt)
        return self._run(write)


def _translated(sql: str) -> str:
    """:func:`_pg` of ``sql``, translated once."""
    out = _STATEMENTS.get(sql)
    if out is None:
        out = _STATEMENTS[sql] = _pg(sql)
    return out


def _first_line(e: Exception) -> str:
    """The error's first line (libpq's messages name host and user, never the password)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class _Deadline:
    """A client-side limit on one connection's waits for its server.
    ``statement_timeout`` is the server's to enforce; a server that cannot
    (its host frozen, the network cut) would keep a wait going for ever.
    Inside :meth:`waiting`, a wait of over ``limit_s`` shuts the
    connection's socket (through a duplicate of its descriptor, so the
    connection's own is still valid to close) and psycopg's wait returns
    with OperationalError. One watching thread per guard, not per wait."""

    def __init__(self, conn, limit_s: float):
        self._socket = socket.socket(fileno=os.dup(conn.fileno()))
        self._limit_s = float(limit_s)
        self._since = None                      # monotonic start of the wait in progress; None between waits
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="costlearn-tuning-db-deadline", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self._limit_s / 4)):
            since = self._since
            if since is not None and time.monotonic() - since > self._limit_s:
                try:
                    self._socket.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return

    @contextlib.contextmanager
    def waiting(self):
        """The block waits on the server: limited to ``limit_s``."""
        self._since = time.monotonic()
        try:
            yield
        finally:
            self._since = None

    def close(self) -> None:
        """Stop watching and close the duplicate descriptor."""
        self._stop.set()
        self._thread.join()
        self._socket.close()
