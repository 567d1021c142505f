"""The tuning database's schema and rows, one implementation for both
stores (:mod:`costlearn.serve.tuning_db`, SQLite; and
:mod:`costlearn.serve.tuning_db_server`, PostgreSQL): the tables and
statements (SQLite's dialect, which the server store translates), the entry
type, and checking, encoding and decoding rows, so a row one store would
refuse the other refuses too.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from costlearn.collect.space import check_config
from costlearn.core.errors import CostlearnError, warn
from costlearn.core.problem import Problem
from costlearn.core.checks import check_instance
from costlearn.core.files import check_output
from costlearn.core.keyed_cache import cache_dir, check_cache_dir
from costlearn.families import FAMILIES, get_family
from costlearn.serve.fleet import (DAMAGED, INSERT_MEASUREMENT, MEASUREMENT_COLUMNS, SELECT_MEASUREMENTS, Measurement,
                                   Verdict, check_name, decide, measurements_from_rows, parse_json)

__all__ = ["TuningEntry", "TuningDBError", "default_path", "default_target", "check_file_target", "is_server_url",
           "entry_values", "decode_row", "key_values", "key_args", "select_entry", "entries_from_rows", "CHOSEN_BY",
           "TUNED_COLUMNS", "LEASE_COLUMNS", "KEY_COLUMNS", "CREATE_TABLE", "UPSERT", "TABLES", "measurement_rows",
           "record_in", "key_verdict", "measurements_by_key", "select_many", "decode_many", "SCHEMA", "CREATE_BLOBS",
           "PUT_BLOB", "blob_values", "select_blobs", "MAX_BLOB_BYTES", "MANY"]

SCHEMA = 4
"""4 added the tables ``measurements`` and ``leases`` (:mod:`costlearn.serve.fleet`), 3 ``epilogue``, 2
``layout`` and ``family`` to the key (older files are upgraded on open)."""
CHOSEN_BY = ("predicted", "measured")

KEY_COLUMNS = "m, n, k, dtype, layout, epilogue, family, device, template_hash, costlearn_version"
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


CREATE_BLOBS = """
CREATE TABLE IF NOT EXISTS blobs (
    cache_key TEXT NOT NULL, filename TEXT NOT NULL, data BLOB NOT NULL, updated TEXT NOT NULL,
    PRIMARY KEY (cache_key, filename)
)"""
"""Files a compiler caches by key (Triton's remote cache:
:mod:`costlearn.interop.triton_cache`), shared like the entries."""
PUT_BLOB = ("INSERT INTO blobs VALUES (?, ?, ?, ?) ON CONFLICT (cache_key, filename) DO UPDATE SET "
            "data = excluded.data, updated = excluded.updated")
BLOB_COLUMNS = ["cache_key", "filename", "data", "updated"]
MAX_BLOB_BYTES = 256 << 20
"""The largest file the blob table takes (a compiled kernel is well under it)."""
LEASE_COLUMNS = [*KEY_COLUMNS.split(", "), "holder", "expires_s"]
TUNED_COLUMNS = [*KEY_COLUMNS.split(", "), "config_id", "how", "time_us", "times_json", "source", "updated"]
"""The columns of table ``tuned``, in order (:data:`CREATE_TABLE`)."""
TABLES = {"tuned": TUNED_COLUMNS, "measurements": MEASUREMENT_COLUMNS, "leases": LEASE_COLUMNS, "blobs": BLOB_COLUMNS}
"""Every table of :data:`SCHEMA` and its columns, in order: nothing else is accepted in a store."""


class TuningDBError(CostlearnError, OSError):
    """The file is a database costlearn must not write: a newer schema, or
    another application's. Left untouched."""


def default_path() -> Path:
    """``$COSTLEARN_TUNING_DB``, else ``tuning.sqlite`` in the user cache
    (:func:`costlearn.core.keyed_cache.cache_dir`)."""
    env = os.environ.get("COSTLEARN_TUNING_DB")
    return Path(env) if env else cache_dir() / "tuning.sqlite"


def check_file_target(target=None, given: str = "--tuning-db") -> None:
    """Refuse, before any work, a tuning database file that cannot be
    created (:func:`costlearn.core.files.check_output`): ``target``, named
    ``given`` in the message; None: the default (:func:`default_target`),
    named by the variable it comes from, ``COSTLEARN_TUNING_DB``, else
    ``COSTLEARN_CACHE`` (:func:`costlearn.core.keyed_cache.check_cache_dir`).
    A file that exists, a server's URL and an open store are not checked
    (a file this user may only read is opened read-only).

    Raises
    ------
    ValueError
        As :func:`costlearn.core.files.check_output`.
    """
    if target is None:
        env = os.environ.get("COSTLEARN_TUNING_DB")
        if not env:
            check_cache_dir()
            return
        target, given = env, "COSTLEARN_TUNING_DB="
    if isinstance(target, (str, os.PathLike)) and not is_server_url(target) and not Path(target).is_file():
        check_output(target, given)


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
        check_name(name, getattr(entry, name), empty=name == "source")
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


def measurement_rows(problem: Problem, family: str, device: str, template_hash: str, costlearn_version: str,
                     measurements) -> tuple:
    """The key's values and, checked, each measurement's row of
    ``measurements`` (key values, then :meth:`Measurement.values`).

    Raises
    ------
    TypeError, ValueError
        A bad key or measurement, a config not of ``family``, or none.
    """
    key = key_values(problem, family, device, template_hash, costlearn_version)
    fam = get_family(family)
    rows = []
    for m in measurements:
        if not isinstance(m, Measurement):
            raise TypeError(f"measurement={m!r}; must be a costlearn.serve.fleet.Measurement")
        values = m.values()
        fam.config_from_id(m.config_id)
        rows.append(key + values)
    if not rows:
        raise ValueError("no measurements to record")
    return key, rows


def record_in(execute, key: tuple, rows: list, source: str) -> tuple[TuningEntry, Verdict]:
    """Inside a write transaction that serialises writers of ``key``: insert
    the measurement ``rows`` (those already stored add nothing), decide the
    key's answer from all its stored measurements, and store it as the
    measured entry. ``execute(sql, params)`` runs a statement in SQLite's
    dialect (the server store translates)."""
    for r in rows:
        execute(INSERT_MEASUREMENT, r)
    family = key[6]
    fam = get_family(family)
    verdict = key_verdict(execute(SELECT_MEASUREMENTS, key).fetchall(), family)
    entry = TuningEntry(Problem(*key[:6]), family, key[7], key[8], key[9], fam.config_from_id(verdict.config_id),
                        "measured",
                        verdict.times_us[verdict.config_id], verdict.times_us, str(source))
    execute(UPSERT, entry_values(entry))
    return entry, verdict


def key_verdict(rows, family: str) -> Verdict | None:
    """What a key's stored measurements decide (:func:`costlearn.serve.fleet.decide`):
    ``rows`` are the key's (the columns of
    :data:`costlearn.serve.fleet.SELECT_MEASUREMENTS`) for the kernel family
    ``family``; None where none decodes (damaged or hostile rows decide
    nothing)."""
    found = measurements_from_rows(rows, family)
    return decide(found, get_family(family).vendor_config_id) if found else None


def measurements_by_key(rows) -> dict:
    """Rows of the 10 key values then the columns of
    :data:`costlearn.serve.fleet.SELECT_MEASUREMENTS`, as {key: [Measurement]},
    rows that do not decode left out."""
    out: dict = {}
    for r in rows:
        key = tuple(r[:10])
        try:
            key_args(key)                   # a key no Problem has is no key
            check_name("device", key[7])
            found = measurements_from_rows([r[10:]], str(key[6]))
        except DAMAGED:                     # a hostile key, an unknown family
            continue
        out.setdefault(key, []).extend(found)
    return out


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


MANY = 1000
"""Problems per query of ``get_many`` (6 parameters each: far below
PostgreSQL's 65,535 and SQLite's 32,766)."""


def select_many(problems, family: str, device: str, template_hash: str, costlearn_version: str,
                placeholder: str) -> tuple:
    """``(sql, params, keys)``: one query for the stored rows of many
    problems (their 6 problem values, then :func:`select_entry`'s 6), and
    each problem's key values (:func:`key_values`), in order. ``%s``
    placeholders (PostgreSQL) make each problem a lookup of the key's index
    (a ``LATERAL`` subquery with ``LIMIT 1``, which the planner does not
    flatten into a join it may run as a scan of the table, as it did on a
    table without statistics); SQLite joins the list to the table by its
    key."""
    keys = [key_values(p, family, device, template_hash, costlearn_version) for p in problems]
    if not keys:
        return "", (), []
    row = f"({', '.join([placeholder] * 6)})"
    values = f"WITH q (m, n, k, dtype, layout, epilogue) AS (VALUES {', '.join([row] * len(keys))}) "
    match = ("t.m = q.m AND t.n = q.n AND t.k = q.k AND t.dtype = q.dtype AND t.layout = q.layout AND "
             f"t.epilogue = q.epilogue AND t.family = {placeholder} AND t.device = {placeholder} AND "
             f"t.template_hash = {placeholder} AND t.costlearn_version = {placeholder}")
    fields = "config_id, how, time_us, times_json, source, updated"
    if placeholder == "%s":
        sql = (f"{values}SELECT q.m, q.n, q.k, q.dtype, q.layout, q.epilogue, t.* FROM q CROSS JOIN LATERAL "
               f"(SELECT {fields} FROM tuned t WHERE {match} LIMIT 1) t")     # LIMIT: not flattened into a join
    else:
        sql = f"{values}SELECT q.m, q.n, q.k, q.dtype, q.layout, q.epilogue, {fields} FROM q JOIN tuned t ON {match}"
    params = tuple(v for k in keys for v in k[:6]) + keys[0][6:]
    return sql, params, keys


def decode_many(rows, keys: list, spec) -> list:
    """Each key's entry (:func:`decode_row`) of the rows of :func:`select_many`, or None, in the keys' order."""
    found = {tuple(r[:6]): r[6:] for r in rows}
    return [decode_row(found.get(tuple(k[:6])), *key_args(k), spec) for k in keys]


def entries_from_rows(rows) -> list[TuningEntry]:
    """The entries of full rows (the 10 key values, then the 6 of
    :func:`select_entry`), those that decode (:func:`decode_row`)."""
    out = []
    for r in rows:
        try:
            args = key_args(tuple(r[:10]))
            check_name("device", args[2])
        except DAMAGED:
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
        times = _times(parse_json(times_json))
        time_us = _positive(time_us)
    except DAMAGED as e:
        warn(f"costlearn: the tuning database's entry for {problem} ({family}, {device}) is damaged or not "
             f"costlearn's ({str(e)[:120]}): a miss, never launched", RuntimeWarning)
        return None
    if spec is not None and check_config(config, spec, problem=problem) is not None:
        return None
    return TuningEntry(problem, str(family), str(device), str(template_hash), str(costlearn_version), config,
                       how, float(time_us), times, source, str(updated))


def _positive(v) -> float:
    """A finite time > 0 as float, else ValueError/TypeError (a number, not
    text or bytes that would parse as one)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"time {str(v)[:40]!r} is not a number")
    try:
        f = float(v)
    except OverflowError:
        raise ValueError(f"time {str(v)[:40]}... is too large") from None
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"time {v!r} must be finite and > 0")
    return f


def _times(d) -> dict:
    """A {config_id: time_us} dict with finite positive times, else error."""
    if not isinstance(d, dict):
        raise TypeError(f"times {d!r} must be a dict of config id to microseconds")
    return {check_name("config id", a): _positive(b) for a, b in d.items()}


def blob_values(cache_key: str, filename: str, data) -> tuple:
    """A row of ``blobs``, checked: a key and name of 1-1024 characters, and
    bytes of at most :data:`MAX_BLOB_BYTES`.

    Raises
    ------
    TypeError, ValueError
        Naming the value and what is allowed.
    """
    for name, v in (("cache_key", cache_key), ("filename", filename)):
        if not isinstance(v, str) or not 0 < len(v) <= 1024:
            raise ValueError(f"{name}={str(v)[:80]!r}; must be a str of 1-1024 characters")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data of {filename!r} is {type(data).__name__}; must be bytes")
    data = bytes(data)
    if len(data) > MAX_BLOB_BYTES:
        raise ValueError(f"{filename!r} is {len(data)} bytes; the tuning database takes at most {MAX_BLOB_BYTES}")
    return cache_key, filename, data, datetime.now(timezone.utc).isoformat(timespec="seconds")


def select_blobs(cache_key: str, filenames, placeholder: str) -> tuple:
    """``(sql, params)`` of the stored ``(filename, data)`` of ``filenames``
    (unique, each checked as :func:`blob_values`) under ``cache_key``; an
    empty sql where there are none."""
    names = list(dict.fromkeys(filenames))
    for f in names:
        blob_values(cache_key, f, b"")
    if not names:
        return "", ()
    marks = ", ".join([placeholder] * len(names))
    return (f"SELECT filename, data FROM blobs WHERE cache_key = {placeholder} AND filename IN ({marks})",
            (cache_key, *names))

