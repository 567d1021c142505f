"""What the hosts of a fleet share beyond winners (design.md, "Predictor"):

- **Measurements.** Every timed candidate of a tuning is kept, one row per
  config per tuning: its p20/p50/p80, sample count, clocks, the host, when,
  and an environment fingerprint (:class:`Measurement`).
- **One answer per key.** :func:`decide` picks a key's config from all
  hosts' measurements of it, so every host of a device class launches the
  same config, and configs within the measurement noise of each other are a
  tie decided the same way everywhere.
- **Leases.** A host about to measure a key takes its lease (with an
  expiry), so hosts asking the same unmeasured problem at once measure it
  once; a host that dies holding one frees it when it expires.

The tables and statements here are in SQLite's dialect, with ``{now}``
standing for the store's clock in seconds since the epoch; both stores
(:mod:`costlearn.serve.tuning_db`, :mod:`costlearn.serve.tuning_db_server`)
run them, the server with its own clock, so hosts' clocks never decide a
lease.
"""
from __future__ import annotations

import json
import math
import os
import socket
import statistics
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone

from costlearn.collect.sample_stats import t_quantile_95
from costlearn.core.version import __version__
from costlearn.families import get_family
from costlearn.families.base import VENDOR_CONFIG_ID

__all__ = ["DAMAGED", "parse_json", "check_name", "Measurement", "Verdict", "decide", "host_name", "environment",
           "measurements_from_rows", "measurement_from_row", "NOISE_FLOOR", "LEASE_S", "MAX_LEASE_S", "lease_seconds",
           "MEASUREMENT_COLUMNS", "CREATE_MEASUREMENTS", "CREATE_LEASES", "INSERT_MEASUREMENT", "SELECT_MEASUREMENTS",
           "SELECT_ALL_MEASUREMENTS", "SELECT_DEVICE_MEASUREMENTS", "TAKE_LEASE", "FREE_LEASE"]

NOISE_FLOOR = 0.002
"""Relative difference under which two configs' times are always a tie:
re-timing the same configs on one device moves the best by about this much
(docs/results.md, "A fleet's tuning database")."""

LEASE_S = 300.0
"""Seconds a lease on a key lasts unless freed: longer than a tuning of a
few configs takes, short enough that a host that died holding it delays its
siblings little."""

_KEY = ("m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, dtype TEXT NOT NULL, layout TEXT NOT NULL, "
        "epilogue TEXT NOT NULL, family TEXT NOT NULL, device TEXT NOT NULL, template_hash TEXT NOT NULL, "
        "costlearn_version TEXT NOT NULL")
_KEY_NAMES = "m, n, k, dtype, layout, epilogue, family, device, template_hash, costlearn_version"
_WHERE = " AND ".join(f"{c} = ?" for c in _KEY_NAMES.split(", "))

MEASUREMENT_COLUMNS = [*_KEY_NAMES.split(", "), "config_id", "host", "tuning_id", "p20_us", "p50_us", "p80_us",
                       "samples", "rse", "clocks_json", "env_json", "measured"]
"""The columns of table ``measurements``, in order."""

CREATE_MEASUREMENTS = f"""
CREATE TABLE IF NOT EXISTS measurements (
    {_KEY},
    config_id TEXT NOT NULL, host TEXT NOT NULL, tuning_id TEXT NOT NULL,
    p20_us REAL NOT NULL, p50_us REAL NOT NULL, p80_us REAL NOT NULL, samples INTEGER NOT NULL, rse REAL NOT NULL,
    clocks_json TEXT NOT NULL, env_json TEXT NOT NULL, measured TEXT NOT NULL,
    PRIMARY KEY ({_KEY_NAMES}, tuning_id, config_id)
)"""
"""One row per timed config per tuning; ``tuning_id`` names the tuning
(unique), so delivering a tuning twice adds nothing."""

CREATE_LEASES = f"""
CREATE TABLE IF NOT EXISTS leases (
    {_KEY},
    holder TEXT NOT NULL, expires_s REAL NOT NULL,
    PRIMARY KEY ({_KEY_NAMES})
)"""
"""Who is measuring a key, and until when (the store's clock, seconds since the epoch)."""

INSERT_MEASUREMENT = (f"INSERT INTO measurements VALUES ({', '.join('?' * len(MEASUREMENT_COLUMNS))}) "
                      "ON CONFLICT DO NOTHING")
_VALUES = ", ".join(MEASUREMENT_COLUMNS[10:])
SELECT_MEASUREMENTS = f"SELECT {_VALUES} FROM measurements WHERE {_WHERE}"
"""One key's measurements (the columns after the key)."""
SELECT_ALL_MEASUREMENTS = f"SELECT {_KEY_NAMES}, {_VALUES} FROM measurements ORDER BY measured"
"""Every measurement, key columns first."""
SELECT_DEVICE_MEASUREMENTS = (f"SELECT {_KEY_NAMES}, {_VALUES} FROM measurements WHERE device = ? "
                              "ORDER BY m, n, k, dtype, layout, epilogue, family, template_hash, costlearn_version, "
                              "tuning_id, config_id")
"""Every measurement of one device class (its slug), key columns first, in the order of the primary key (its
index: no sort; rows that share the key, in a table made without it, are adjacent)."""
MAX_LEASE_S = 3600.0
"""The longest lease: one that claims to run longer (a hostile or damaged
row: a date far ahead, text, infinity, NaN) is taken over as expired."""

TAKE_LEASE = f"""
INSERT INTO leases VALUES ({', '.join('?' * 11)}, {{now}} + ?)
ON CONFLICT ({_KEY_NAMES}) DO UPDATE SET holder = excluded.holder, expires_s = excluded.expires_s
WHERE NOT (leases.expires_s >= {{now}} AND leases.expires_s <= {{now}} + {MAX_LEASE_S})
   OR leases.holder = excluded.holder
"""
"""Take a key's lease: (key values, holder, seconds); one row changed means
taken. A lease is held while its expiry is a time from now to
:data:`MAX_LEASE_S` ahead; anything else (past, too far, not a number) is
free."""
FREE_LEASE = f"DELETE FROM leases WHERE {_WHERE} AND holder = ?"


DAMAGED = (ValueError, TypeError, OverflowError, RecursionError)
"""What decoding a stored row may raise where the row is damaged or hostile
(deep or huge JSON, numbers beyond a float): the row is a miss."""

MAX_JSON_CHARS = 1 << 20
"""The longest JSON text a stored row may hold (a row holds a few configs' times)."""


def parse_json(text):
    """A stored row's JSON field, parsed; ValueError for one that is not a
    str of at most :data:`MAX_JSON_CHARS` characters (RecursionError may
    still come from nesting: callers catch :data:`DAMAGED`)."""
    if not isinstance(text, str) or len(text) > MAX_JSON_CHARS:
        raise ValueError(f"a JSON field of {type(text).__name__} of {len(text) if hasattr(text, '__len__') else '?'} "
                         f"characters; at most {MAX_JSON_CHARS} of text")
    return json.loads(text)


def check_name(name: str, value, *, empty: bool = False) -> str:
    """``value`` as a stored name (device, host, config id, source ...): a
    str of at most 1024 characters without control characters (a NUL is
    refused by PostgreSQL; a newline would forge lines of a listing).

    Raises
    ------
    TypeError, ValueError
        Naming ``name`` and what is allowed.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name}={value!r}; must be a str")
    if (not value and not empty) or len(value) > 1024 or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{name}={value[:80]!r}; must be a{'' if empty else ' non-empty'} str of at most 1024 "
                         "characters without control characters")
    return value


def lease_seconds(seconds) -> float:
    """``seconds`` checked as a lease's length: a finite number in (0,
    :data:`MAX_LEASE_S`]; ValueError naming it otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
            not 0 < _float(seconds) <= MAX_LEASE_S:
        raise ValueError(f"seconds={str(seconds)[:40]}; a lease lasts a finite time in (0, {MAX_LEASE_S:g}] s")
    return float(seconds)


def host_name() -> str:
    """This host's name in the fleet: ``$COSTLEARN_HOST``, else the
    network name (:func:`socket.gethostname`)."""
    return os.environ.get("COSTLEARN_HOST") or socket.gethostname()


def environment(provenance: dict) -> dict:
    """The environment fingerprint of a measurement: the backend's
    provenance fields that can change a kernel's time (driver, runtime,
    library, device name) and costlearn's version, with PyTorch's and
    Triton's where imported (never imported here)."""
    env = {k: str(provenance[k]) for k in ("device_name", "driver_version", "runtime_version", "library_version",
                                            "compute_capability") if provenance.get(k) not in (None, "")}
    env["costlearn"] = __version__
    for name in ("torch", "triton"):
        mod = sys.modules.get(name)
        if mod is not None and isinstance(getattr(mod, "__version__", None), str):
            env[name] = mod.__version__
    return env


@dataclass(frozen=True)
class Measurement:
    """One config timed in one tuning on one host.

    Attributes
    ----------
    config_id : str
    p20_us, p50_us, p80_us : float
        Quantiles of its samples, microseconds (finite, 0 < p20 <= p50 <= p80).
    samples : int
        How many samples (>= 1).
    host : str
        The host that measured (:func:`host_name`).
    tuning_id : str
        The tuning it belongs to (unique per tuning).
    clocks : dict
        Device clocks and throttling while it ran (``sm_clock_mhz``, ...).
    env : dict of str to str
        Environment fingerprint (:func:`environment`).
    measured : str
        UTC time, ISO 8601.
    rse : float
        Relative standard error of the median (the protocol's
        :func:`costlearn.collect.sample_stats.median_rse`; ``inf``: too few
        samples to judge), >= 0.
    """

    config_id: str
    p20_us: float
    p50_us: float
    p80_us: float
    samples: int
    host: str
    tuning_id: str
    clocks: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    measured: str = ""
    rse: float = math.inf

    def values(self) -> tuple:
        """The 11 values after the key in :data:`MEASUREMENT_COLUMNS` order,
        checked (ValueError naming the field otherwise)."""
        check(self)
        stamp = self.measured or datetime.now(timezone.utc).isoformat(timespec="seconds")
        return (self.config_id, self.host, self.tuning_id, float(self.p20_us), float(self.p50_us),
                float(self.p80_us), int(self.samples), float(self.rse),
                json.dumps(self.clocks, sort_keys=True, default=str), json.dumps(self.env, sort_keys=True, default=str),
                stamp)


def check(m: Measurement) -> None:
    """Raise ValueError/TypeError unless ``m`` is a measurement a store may
    hold: non-empty names, finite times with 0 < p20 <= p50 <= p80, samples
    >= 1, dict clocks and env."""
    if not isinstance(m, Measurement):
        raise TypeError(f"measurement={str(m)[:80]}; must be a Measurement")
    for name in ("config_id", "host", "tuning_id"):
        check_name(f"measurement {name}", getattr(m, name))
    q = []
    for name in ("p20_us", "p50_us", "p80_us", "rse"):
        v = getattr(m, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"measurement {name}={str(v)[:40]!r}; must be a number")
        q.append(_float(v))
    if not 0 < q[0] <= q[1] <= q[2] < math.inf:
        raise ValueError(f"measurement quantiles p20={q[0]}, p50={q[1]}, p80={q[2]}; must be finite, "
                         "0 < p20 <= p50 <= p80 (microseconds)")
    if not q[3] >= 0:
        raise ValueError(f"measurement rse={m.rse!r}; must be a relative standard error >= 0 (inf: unknown)")
    if isinstance(m.samples, bool) or not isinstance(m.samples, int) or not 1 <= m.samples <= 1 << 31:
        raise ValueError(f"measurement samples={str(m.samples)[:40]}; must be an int in [1, 2**31]")
    if not isinstance(m.clocks, dict) or not isinstance(m.env, dict):
        raise TypeError("measurement clocks and env must be dicts")


def _float(v) -> float:
    """``float(v)``, NaN for an int beyond a float (so it fails the range checks)."""
    try:
        return float(v)
    except OverflowError:
        return math.nan


def measurements_from_rows(rows, family: str) -> list[Measurement]:
    """The measurements of stored rows (the columns of
    :data:`SELECT_MEASUREMENTS`) whose config is one of ``family``'s and
    whose values pass :func:`check`; a damaged or hostile row is left out
    (it never decides an answer)."""
    fam = get_family(family)
    out = []
    for r in rows:
        try:
            m = measurement_from_row(r, fam)
        except DAMAGED:
            continue
        out.append(m)
    return out


def measurement_from_row(row, fam) -> Measurement:
    """The measurement of one stored row (the columns of
    :data:`SELECT_MEASUREMENTS`) of the kernel family ``fam`` (a
    :class:`~costlearn.families.base.KernelFamily`), checked.

    Raises
    ------
    ValueError, TypeError, OverflowError, RecursionError
        (:data:`DAMAGED`) Saying what is wrong where the row is damaged or
        hostile: a config id that is not one of ``fam``'s, JSON that is not
        a dict of at most :data:`MAX_JSON_CHARS` characters, a value
        :func:`check` refuses.
    """
    config_id, host, tuning_id, p20, p50, p80, samples, rse, clocks, env, measured = row
    fam.config_from_id(check_name("measurement config_id", config_id))
    m = Measurement(config_id, p20, p50, p80, samples, host, tuning_id, parse_json(clocks), parse_json(env),
                    str(measured), rse)
    check(m)
    return m


@dataclass(frozen=True)
class Verdict:
    """A key's answer from its measurements (:func:`decide`).

    Attributes
    ----------
    config_id : str
        The config every host launches.
    times_us : dict of str to float
        Each config's time: the median over its measurements of their p50,
        microseconds.
    tied : tuple of str
        The other configs within the noise of the fastest.
    hosts : tuple of str
        The hosts whose measurements decided it, sorted.
    """

    config_id: str
    times_us: dict
    tied: tuple
    hosts: tuple


def decide(measurements, vendor_id: str | None = VENDOR_CONFIG_ID) -> Verdict:
    """The one answer for a key from all hosts' measurements of it.

    Each config's time is the median over its measurements (all hosts, all
    tunings) of their medians, and its 95 % interval half-width that of
    the measurement protocol (:func:`costlearn.collect.sample_stats.t_quantile_95`
    of the samples times the median's relative standard error, times the
    median; the median over its measurements) divided by the square root of
    how many there are (independent estimates of one median). The fastest
    has the smallest time; a config ties with it when their intervals
    overlap or the times differ by at most :data:`NOISE_FLOOR`: the
    measurements do not say which is faster, as the protocol's own tie
    (``tied_best``). A tie is decided without the times: the vendor library
    where tied (the floor: no evidence a tile beats it), else the first
    config id in text order (which may have the slower median, within the
    noise). The answer is thus a function of the set of measurements
    alone, the same on every host and in every order.

    Parameters
    ----------
    measurements : iterable of Measurement
        Non-empty.
    vendor_id : str or None
        The vendor library's config id (None: the family has none).

    Raises
    ------
    ValueError
        If there are no measurements.
    """
    by_config: dict = {}
    for m in measurements:
        by_config.setdefault(m.config_id, []).append(m)
    if not by_config:
        raise ValueError("no measurements to decide from")
    time_us, half_us = {}, {}
    for c, ms in by_config.items():
        time_us[c] = statistics.median(m.p50_us for m in ms)
        half = statistics.median(t_quantile_95(m.samples) * m.rse * m.p50_us if m.rse > 0 else 0.0 for m in ms)
        half_us[c] = half / math.sqrt(len(ms)) if math.isfinite(half) else math.inf
    fastest = min(time_us, key=lambda c: (time_us[c], c))
    best, best_hi = time_us[fastest], time_us[fastest] + half_us[fastest]
    tied = sorted(c for c in time_us
                  if time_us[c] - half_us[c] <= best_hi or time_us[c] <= best * (1 + NOISE_FLOOR))
    winner = vendor_id if vendor_id in tied else tied[0]
    hosts = tuple(sorted({m.host for ms in by_config.values() for m in ms}))
    return Verdict(winner, dict(sorted(time_us.items())), tuple(c for c in tied if c != winner), hosts)
