"""Dataset: a folder of Parquet parts, one row per (device, family, dtype,
layout, shape, config) measurement.

Each part is written to a temporary name, fsynced and renamed into place
(design.md, "Dataset"), so a killed collector leaves no partial file and
several collectors may write into one folder at once.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.core.device import DeviceSpec
from costlearn.core.dtypes import DTYPES
from costlearn.families import FAMILIES, get_family
from costlearn.collect.protocol import PROTOCOL_VERSION
from costlearn.core.problem import EPILOGUES, LAYOUTS
from costlearn.core.files import atomic_write, fsync_dir
from costlearn.core.locks import FolderLock
from costlearn.core.errors import CostlearnError, warn

__all__ = ["SCHEMA_VERSION", "COLUMNS", "ADDED_COLUMNS", "NOT_IMPORTED", "IMPORTED_PROTOCOL", "TUNED_FORMAT",
           "write_part", "load",
           "compact", "noise_floor", "LoadReport",
           "valid_rows", "measured_keys", "KEY_COLUMNS", "DatasetError", "current_rows", "rows_where",
           "device_dataset_folder", "part_columns"]

SCHEMA_VERSION = 6
"""6 added ``epilogue`` (:data:`costlearn.core.problem.EPILOGUES`; parts written
before it are read as ``"none"``: their kernels fused nothing); 5 added
``rse``, ``stop_reason``, ``tied_best``, ``samples_us`` (how a
row's sampling went, :func:`costlearn.collect.measure.measure_shape`),
``session_id`` (the measuring process) and ``device_settings`` (the
backend's settings that are part of the device's identity, JSON); 4 added
``source_format``, ``source_file``, ``source_sha256`` and
``source_line`` (where an imported row came from, :mod:`costlearn.interop`);
2 added ``repeat_time_us``, ``throttled``, ``throttle_reasons``,
``rotation_sets``; 3 added ``family``, ``layout`` and ``pipeline_stages`` and
keeps a config's own parameters only in its ``config_id`` (the columns
``loop_order``, ``smem_pad``, ``raster`` of ``gemm`` rows are gone; the
family parses the id). Parts written under schemas 1 and 2 are read with
the added columns at their defaults (:data:`ADDED_COLUMNS`)."""

KEY_COLUMNS = ("device_slug", "family", "dtype", "layout", "epilogue", "m", "n", "k", "config_id", "template_hash",
               "protocol_version", "distribution", "density")
"""Columns that identify one measurement; a restarted collection skips keys
already present."""

COLUMNS = {
    # problem
    "m": "int64", "n": "int64", "k": "int64", "dtype": "string", "layout": "string", "epilogue": "string",
    # config: its family and id, and its tile description (costlearn.families.TileDescription)
    "family": "string", "config_id": "string", "block_m": "int64", "block_n": "int64", "block_k": "int64",
    "thread_m": "int64", "thread_n": "int64", "threads": "int64", "pipeline_stages": "int64",
    "smem_bytes": "int64", "registers_per_thread": "float64",
    # outcome
    "status": "string", "error": "string", "time_us": "float64", "time_us_p20": "float64",
    "time_us_p80": "float64", "n_samples": "int64", "launches_per_sample": "int64",
    "below_overhead": "bool", "max_abs_err": "float64", "overhead_us": "float64",
    "compile_s": "float64", "repeat_time_us": "float64", "rotation_sets": "int64",
    "rse": "float64", "stop_reason": "string", "tied_best": "bool", "samples_us": "string",
    # clocks (NaN where the device does not report them)
    "sm_clock_mhz": "float64", "mem_clock_mhz": "float64", "temperature_c": "float64",
    "throttled": "bool", "throttle_reasons": "string",
    # protocol
    "protocol_version": "int64", "distribution": "string", "density": "float64", "rounds": "int64",
    # provenance
    "device_slug": "string", "device_name": "string", "api": "string",
    "compute_capability": "string", "device_version": "string", "multiprocessors": "int64",
    "driver_version": "string", "runtime_version": "string", "library_version": "string",
    "host": "string", "template_hash": "string", "costlearn_version": "string",
    "schema_version": "int64", "run_id": "string", "session_id": "string", "timestamp": "string",
    "device_settings": "string",
    # import provenance (empty, -1 for rows costlearn measured)
    "source_format": "string", "source_file": "string", "source_sha256": "string", "source_line": "int64",
}
"""Every column of a dataset row and its pandas dtype."""

NOT_IMPORTED = {"source_format": "", "source_file": "", "source_sha256": "", "source_line": -1}
"""The import-provenance columns of a row costlearn measured itself."""

IMPORTED_PROTOCOL = 0
"""``protocol_version`` of imported rows: measured by another tool's protocol
(``source_format`` names it), not :data:`costlearn.collect.protocol.PROTOCOL_VERSION`."""

TUNED_FORMAT = "tuning-db"
"""``source_format`` of rows imported from a tuning database
(:func:`costlearn.interop.import_tuning_db`): a tuning's measurements, the
configs a model chose for the problem and the vendor, not a sweep."""

ADDED_COLUMNS = {"repeat_time_us": float("nan"), "rotation_sets": 0, "throttled": False,
                 "throttle_reasons": "", "family": "gemm", "layout": "NN", "pipeline_stages": 1, **NOT_IMPORTED,
                 "rse": float("nan"), "stop_reason": "", "tied_best": False, "samples_us": "", "session_id": "",
                 "device_settings": "", "epilogue": "none"}
"""Columns added after schema 1, with the value a part written before them
is read with (schemas 1 and 2 held only ``gemm`` rows, row-major, one stage;
schemas before 4 no imported rows)."""

ADDED_IN = {"repeat_time_us": 2, "rotation_sets": 2, "throttled": 2, "throttle_reasons": 2, "family": 3, "layout": 3,
            "pipeline_stages": 3, "source_format": 4, "source_file": 4, "source_sha256": 4, "source_line": 4,
            "rse": 5, "stop_reason": 5, "tied_best": 5, "samples_us": 5, "session_id": 5, "device_settings": 5,
            "epilogue": 6}
"""The schema that added each of :data:`ADDED_COLUMNS` (:data:`SCHEMA_VERSION`'s
history): a part lacking one is read with its default only where its own
``schema_version`` is older; a newer part lacking it is damaged (a flipped
byte in its footer can rename a column)."""

ABSURD_TIME_US = (1e-3, 1e9)
"""A per-launch time outside [1 ns, ~17 min] is quarantined as
``time_absurd``: no GEMM kernel launch takes either."""


DEDUP_COLUMNS = list(KEY_COLUMNS) + ["run_id", "timestamp", "source_line"]
"""Rows equal in these are copies of one row (a killed compaction leaves such
copies); an imported file's repeated measurements differ in ``source_line``."""


class DatasetError(CostlearnError, RuntimeError):
    """A dataset folder or part cannot be used."""


def _check_folder(folder) -> Path:
    if folder is None or str(folder) == "":
        raise DatasetError("no dataset folder given")
    folder = Path(folder)
    if not folder.exists():
        raise DatasetError(f"dataset folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise DatasetError(f"{str(folder)!r} is a file, not a dataset folder")
    return folder


def device_dataset_folder(data, slug: str) -> Path:
    """The dataset folder of device ``slug`` that ``--data`` names, the same
    way in every command: ``data`` itself where it is a device's dataset
    folder (it holds a ``device.json`` or parts, or is named ``slug``), else
    ``<data>/<slug>`` (``data`` is a root of device folders).

    Parameters
    ----------
    data : path
        A dataset root or one device's dataset folder.
    slug : str
        The device's folder name (:attr:`costlearn.core.device.DeviceSpec.slug`).

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If ``data`` is the dataset folder of another device (its
        ``device.json`` names another, or it holds parts and another name).
    """
    data = Path(data)
    dev = data / "device.json"
    if not (dev.is_file() or any(data.glob("part-*.parquet"))):
        return data if data.name == slug else data / slug
    other = data.name
    if dev.is_file():
        try:
            other = DeviceSpec.from_file(dev).slug
        except ValueError:
            pass                                     # an unreadable description: its name decides
    if other != slug:
        raise ValueError(f"--data {str(data)!r} is the dataset folder of device {other!r}, not of this one "
                         f"({slug!r}); give its root ({str(data.parent)!r}) or this device's folder")
    return data


def _conform(df: pd.DataFrame, *, upgrade: bool = False) -> pd.DataFrame:
    """``df``'s columns of :data:`COLUMNS`, in order and type; ``upgrade``:
    the columns a part's older schema lacks at their defaults (:data:`ADDED_IN`).

    Raises
    ------
    DatasetError
        If a column is missing (that the part's schema has, where ``upgrade``).
    """
    if upgrade:
        if "schema_version" not in df.columns:
            raise DatasetError("rows lack the column schema_version, which every schema has")
        have = int(df["schema_version"].max()) if len(df) else SCHEMA_VERSION
        df = df.assign(**{c: v for c, v in ADDED_COLUMNS.items() if c not in df.columns and ADDED_IN[c] > have})
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"rows lack columns {missing}")
    out = df[list(COLUMNS)].copy()
    for c, t in COLUMNS.items():
        out[c] = out[c].astype(t)
    return out


def write_part(rows: list[dict] | pd.DataFrame, folder: str | os.PathLike) -> Path:
    """Write rows as one new Parquet part in ``folder``, atomically.

    The part is written to a temporary name, flushed and fsynced, then
    renamed to ``part-<UTC time>-<host>-<pid>-<random>-<digest>.parquet``
    (:func:`costlearn.core.files.atomic_write`); the folder is fsynced after the
    rename. ``<digest>`` is the first 16 hex digits of the file's sha256,
    checked by every read (:func:`_read_part`); its pages carry Parquet's
    CRC-32 checksums too, for other readers of the folder.

    Parameters
    ----------
    rows : list of dict or DataFrame
        Rows with every column of :data:`COLUMNS`.
    folder : path
        Dataset folder (created if missing).

    Returns
    -------
    Path
        The part's final path.

    Raises
    ------
    DatasetError
        If a column is missing.
    """
    df = _conform(pd.DataFrame(rows))
    buf = io.BytesIO()
    df.to_parquet(buf, index=False, engine="pyarrow", write_page_checksum=True)
    data = buf.getvalue()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    host = "".join(ch if ch.isalnum() else "-" for ch in socket.gethostname())[:32]
    digest = hashlib.sha256(data).hexdigest()[:PART_DIGEST_HEX]
    name = f"part-{stamp}-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}-{digest}.parquet"
    return atomic_write(Path(folder) / name, data)


PART_DIGEST_HEX = 16
"""Hex digits of a part's sha256 in its name."""
_DIGEST = re.compile(rf"-([0-9a-f]{{{PART_DIGEST_HEX}}})\.parquet$")


def _read_part(part: Path, columns=None) -> pd.DataFrame:
    """One part's rows, conformed to :data:`COLUMNS` (only ``columns``, as
    stored, where given), its bytes checked against the sha256 digest in its
    name (a part written before digests: its pages' CRC-32 checksums where
    it has them).

    Raises
    ------
    DatasetError
        If the part is not a regular file (a FIFO or a device, whose reading
        would wait or never end), the bytes are not those written, or a
        column is missing.
    Exception
        Whatever pyarrow raises for an unreadable part.
    """
    if part.exists() and not part.is_file():
        raise DatasetError("not a regular file" + (" but a folder" if part.is_dir() else ""))
    data = part.read_bytes()
    named = _DIGEST.search(part.name)
    if named and hashlib.sha256(data).hexdigest()[:PART_DIGEST_HEX] != named.group(1):
        raise DatasetError(f"its bytes are not those written (sha256 differs from the {named.group(1)} in its name)")
    if columns is not None:
        return pd.read_parquet(io.BytesIO(data), engine="pyarrow", page_checksum_verification=True,
                               columns=list(columns))
    return _conform(pd.read_parquet(io.BytesIO(data), engine="pyarrow", page_checksum_verification=True),
                    upgrade=True)


def part_columns(folder: str | os.PathLike, columns):
    """The values of a few ``columns`` of every readable part of ``folder``,
    one part at a time (memory bounded by the largest part's columns, not
    by the folder: for an import's duplicate check of millions of rows).
    Unreadable parts, and parts lacking a column (written before it), are
    passed over: :func:`load` reports them. Parts that appear while it reads
    (the merged part of a :func:`compact` whose parts vanished) are read too.

    Parameters
    ----------
    folder : path
        Dataset folder (nothing where it does not exist).
    columns : sequence of str
        Names in :data:`COLUMNS`.

    Yields
    ------
    DataFrame
        One per part, those columns as stored.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    seen: set = set()
    while True:
        todo = [p for p in sorted(folder.glob("part-*.parquet")) if p.name not in seen]
        if not todo:
            return
        for part in todo:
            seen.add(part.name)
            try:
                frame = _read_part(part, columns)
            except Exception:  # reported by load(), never used
                continue
            yield frame


@dataclass
class LoadReport:
    """What :func:`load` found.

    Attributes
    ----------
    parts : int
        Parts read.
    corrupt : list of (str, str)
        Parts that could not be read, with the reason; their rows are not used.
    quarantined : dict of str to int
        Rows with status ``ok`` whose time cannot be used, by reason
        (``time_not_finite``, ``time_not_positive``, ``time_absurd``,
        ``spread_inconsistent``, ``shape_invalid``, ``problem_invalid``: a
        dtype or layout costlearn does not know, or missing,
        ``problem_unsupported``: one the row's family does not run,
        ``config_invalid``: an unknown family or an id it cannot parse).
    """

    parts: int = 0
    corrupt: list = field(default_factory=list)
    quarantined: dict = field(default_factory=dict)

    def summary(self) -> str:
        """One line: parts read, corrupt parts skipped, quarantined rows by reason."""
        s = f"{self.parts} parts"
        if self.corrupt:
            s += f"; {len(self.corrupt)} corrupt parts skipped: " + "; ".join(
                f"{p}: {why}" for p, why in self.corrupt)
        if self.quarantined:
            s += "; quarantined rows: " + ", ".join(f"{k}={v}" for k, v in self.quarantined.items())
        return s


_WARNED: set = set()
"""(part, reason) pairs :func:`load` has warned of in this process."""


LOAD_TRIES = 5
"""Times :func:`load` lists and reads a folder whose parts vanish under it
(a :func:`compact` merging them meanwhile) before it gives up."""


def _read_parts(folder: Path, strict: bool):
    """(frames, report) of the parts listed in ``folder`` now, or None where
    a listed part vanished before it was read: :func:`compact` wrote their
    merged part first, so a new listing holds every row."""
    report, frames = LoadReport(), []
    for part in sorted(folder.glob("part-*.parquet")):
        try:
            frames.append(_read_part(part))
            report.parts += 1
        except Exception as e:  # any unreadable part is reported, never used
            if isinstance(e, FileNotFoundError) and not part.exists():
                return None
            reason = f"{type(e).__name__}: {e}"[:300]
            if strict:
                raise DatasetError(f"corrupt dataset part {part}: {reason}") from e
            report.corrupt.append((str(part), reason))
            if (str(part), reason) not in _WARNED:       # once a process: a command may load a folder twice
                _WARNED.add((str(part), reason))
                warn(f"costlearn: skipping corrupt dataset part {part}: {reason}")
    return frames, report


def load(folder: str | os.PathLike, *, strict: bool = False) -> tuple[pd.DataFrame, LoadReport]:
    """Read every part of a dataset folder.

    Temporary files (``.*.tmp``, left by a killed writer) are ignored. The
    rows are those of one listing of the folder: where :func:`compact`
    removes listed parts during the read, the folder is listed and read
    again (its merged part is written before any part is removed), so a
    reader never sees a fraction of the rows. A part
    that cannot be read or lacks columns is reported in the
    :class:`LoadReport` of every call and with a warning, once a process per
    part and reason, and its rows are left out.
    Rows whose status is ``ok`` but whose time is not finite and positive
    are quarantined: their status becomes ``quarantined`` with the reason in
    ``error``.

    Parameters
    ----------
    folder : path
        Dataset folder; only the parts directly in it are read (an ``eval/``
        sub-folder of fresh measurements is a separate dataset).
    strict : bool
        Raise instead of warning on a corrupt part.

    Returns
    -------
    rows : DataFrame
        All rows, columns as in :data:`COLUMNS` (empty with those columns if
        there are none).
    report : LoadReport

    Raises
    ------
    DatasetError
        If ``folder`` does not exist, ``strict`` and a part is corrupt, or
        parts vanished under :data:`LOAD_TRIES` reads in a row.
    """
    folder = _check_folder(folder)
    for _ in range(LOAD_TRIES):
        got = _read_parts(folder, strict)
        if got is not None:
            break
    else:
        raise DatasetError(f"{folder}: its parts kept vanishing while they were read ({LOAD_TRIES} times): "
                           "something other than costlearn's compact is removing them")
    frames, report = got
    if frames:
        df = pd.concat(frames, ignore_index=True)
        # A compaction killed between writing the merged part and removing
        # the old ones leaves exact copies; keep one.
        df = df.drop_duplicates(subset=DEDUP_COLUMNS, ignore_index=True)
    else:
        df = _conform(pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS.items()}))
    ok = df["status"] == "ok"
    t = df["time_us"].to_numpy(dtype=np.float64)
    reasons = np.full(len(df), "", dtype=object)
    reasons[ok & ~np.isfinite(t)] = "time_not_finite"
    reasons[ok & np.isfinite(t) & (t <= 0)] = "time_not_positive"
    lo, hi = ABSURD_TIME_US
    reasons[ok & np.isfinite(t) & (t > 0) & ((t < lo) | (t > hi))] = "time_absurd"
    p20, p80 = df["time_us_p20"].to_numpy(np.float64), df["time_us_p80"].to_numpy(np.float64)
    bad_spread = ok & np.isfinite(t) & (t > 0) & ~((p20 <= t * (1 + 1e-9)) & (t <= p80 * (1 + 1e-9)))
    reasons[bad_spread & (reasons == "")] = "spread_inconsistent"
    ext = df[["m", "n", "k"]].to_numpy(np.int64)
    reasons[(ext < 1).any(axis=1) & (reasons == "")] = "shape_invalid"
    known, supported = _problems_ok(df)
    reasons[~known & (reasons == "")] = "problem_invalid"
    reasons[~_configs_ok(df) & (reasons == "")] = "config_invalid"
    reasons[~supported & (reasons == "")] = "problem_unsupported"
    q = reasons != ""
    if q.any():
        df.loc[q, "status"] = "quarantined"
        df.loc[q, "error"] = reasons[q]
        report.quarantined = pd.Series(reasons[q]).value_counts().to_dict()
    return df, report


def compact(folder: str | os.PathLike) -> tuple[int, int]:
    """Merge every readable part of ``folder`` into one new part, then
    remove the merged parts. Corrupt parts are left in place, each named in
    a warning (:func:`costlearn.core.errors.warn`). Safe to kill at any point: the merged part is written
    atomically before anything is removed, and :func:`load` drops the exact
    copies a kill between the two steps leaves. A :func:`load` during it
    reads every row once (it lists the folder again where a part vanished).

    Returns
    -------
    (int, int)
        Parts merged, rows in the merged part.

    Raises
    ------
    DatasetError
        If ``folder`` does not exist.
    costlearn.core.locks.FolderBusy
        If another compaction of ``folder`` is running (:data:`COMPACT_LOCK`).
    """
    folder = _check_folder(folder)
    with FolderLock(folder, "a compaction", COMPACT_LOCK):
        return _compact(folder)


COMPACT_LOCK = ".compact.lock"
"""The lock file one :func:`compact` of a folder holds at a time."""


def _compact(folder: Path) -> tuple[int, int]:
    """:func:`compact`, its lock held."""
    parts, frames = [], []
    for part in sorted(folder.glob("part-*.parquet")):
        try:
            frames.append(_read_part(part))
            parts.append(part)
        except Exception as e:  # any unreadable part is left in place, named
            if part.exists():
                warn(f"costlearn: left in place a corrupt dataset part {part}: {type(e).__name__}: {e}"[:400])
    if len(parts) < 2:
        return 0, 0
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(
        subset=DEDUP_COLUMNS, ignore_index=True)
    write_part(merged, folder)
    for part in parts:
        part.unlink()
    fsync_dir(folder)
    return len(parts), len(merged)


def _config_ok(family, config_id) -> bool:
    if family not in FAMILIES:
        return False
    try:
        get_family(family).config_from_id(config_id)
        return True
    except (TypeError, ValueError):
        return False


def _problems_ok(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether its dtype, layout and epilogue are ones costlearn
    knows, and whether its family supports them (bool arrays of shape
    (len(df),))."""
    fam, dt, lay, epi = (df[c].astype(object).where(df[c].notna(), None).to_numpy()
                         for c in ("family", "dtype", "layout", "epilogue"))
    known = np.isin(dt, list(DTYPES)) & np.isin(lay, list(LAYOUTS)) & np.isin(epi, list(EPILOGUES))
    supported = np.ones(len(df), bool)
    for f in set(fam.tolist()):
        if f in FAMILIES:
            family = get_family(f)
            rows = fam == f
            supported[rows] = np.isin(dt[rows], list(family.dtypes)) & np.isin(lay[rows], list(family.layouts)) \
                & np.isin(epi[rows], list(family.epilogues))
    return known, supported


def rows_where(df: pd.DataFrame, **values) -> np.ndarray:
    """Rows whose columns equal ``values`` (e.g. ``family="gemm"``), bool of
    shape (len(df),); a missing value (NA) never matches."""
    mask = np.ones(len(df), bool)
    for col, v in values.items():
        mask &= df[col].eq(v).fillna(False).to_numpy(bool)
    return mask


def _configs_ok(df: pd.DataFrame) -> np.ndarray:
    """Whether each row's config_id parses in its family (an unknown family
    counts as invalid), bool of shape (len(df),); each distinct pair is
    parsed once."""
    if df.empty:
        return np.zeros(0, bool)
    pairs = pd.MultiIndex.from_arrays([df["family"].astype(object).where(df["family"].notna(), None),
                                       df["config_id"].astype(object).where(df["config_id"].notna(), None)])
    uniq = pairs.unique()
    ok = {p: _config_ok(*p) for p in uniq}
    return np.fromiter((ok[p] for p in pairs), bool, len(df))


def current_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Rows measured with this code's kernel template (of each row's family)
    and protocol version, or imported (:data:`IMPORTED_PROTOCOL` with a
    ``source_format``), so a changed kernel or protocol never silently reuses
    old timings; and how many other rows were dropped."""
    fams = df["family"].astype(object).where(df["family"].notna(), None)
    want = {f: get_family(f).template_hashes for f in set(fams) if f in FAMILIES}
    imported = df["protocol_version"].eq(IMPORTED_PROTOCOL).fillna(False).to_numpy(bool) \
        & (df["source_format"].fillna("").ne("").to_numpy(bool) if "source_format" in df else False)
    have = df["template_hash"].astype(object).to_numpy()
    keep = np.fromiter((h in want.get(f, ()) for f, h in zip(fams, have)), bool, count=len(have)) & \
        (df["protocol_version"].eq(PROTOCOL_VERSION).fillna(False).to_numpy(bool) | imported)
    return df[keep], int((~keep).sum())


def valid_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that may train a model: status ``ok``, a finite time within
    :data:`ABSURD_TIME_US`, extents >= 1 (rows from :func:`load` are already
    quarantined otherwise)."""
    t = df["time_us"].to_numpy(dtype=np.float64)
    ext = df[["m", "n", "k"]].to_numpy(np.int64)
    lo, hi = ABSURD_TIME_US
    return df[(df["status"] == "ok").to_numpy() & np.isfinite(t) & (t >= lo) & (t <= hi)
              & (ext >= 1).all(axis=1)]


def noise_floor(df: pd.DataFrame) -> float:
    """Dataset-level noise floor: the median, over rows whose config was
    timed twice in the same interleaved session (``repeat_time_us``), of
    |t - t_repeat| / min(t, t_repeat). NaN when no row has a repeat.

    Two timings of one config differ only by noise, so a difference between
    two configs below this is a tie (design.md, "Metrics")."""
    v = valid_rows(df)
    t = v["time_us"].to_numpy(np.float64)
    r = v["repeat_time_us"].to_numpy(np.float64)
    ok = np.isfinite(r) & (r > 0)
    if not ok.any():
        return float("nan")
    return float(np.median(np.abs(t[ok] - r[ok]) / np.minimum(t[ok], r[ok])))


def measured_keys(df: pd.DataFrame) -> set:
    """Set of :data:`KEY_COLUMNS` tuples present in ``df`` (any status)."""
    if df.empty:
        return set()
    return set(map(tuple, df[list(KEY_COLUMNS)].astype(object).itertuples(index=False, name=None)))
