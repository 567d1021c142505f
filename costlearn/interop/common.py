"""What every importer shares: the parsed-line record, the report, and the
one path from parsed lines to dataset rows (provenance, idempotency, one
atomic part, nothing touched on failure)."""
from __future__ import annotations

import abc
import dataclasses
import itertools
import json
import math
import socket
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.loop import write_device_json
from costlearn.collect.dataset import IMPORTED_PROTOCOL, SCHEMA_VERSION, device_dataset_folder, part_columns, write_part
from costlearn.core.device import DeviceSpec, preset
from costlearn.families import get_family
from costlearn.core.files import sha256_file
from costlearn.core.checks import shown
from costlearn.core.locks import FolderLock, sigint_deferred
from costlearn.core.version import __version__
from costlearn.core.errors import CostlearnError

__all__ = ["InteropError", "ImportInterrupted", "ImportReport", "Measurement", "Importer", "import_measurements",
           "device_folder", "FAILED", "SkippedLines", "IMPORT_CHUNK_ROWS", "IMPORT_LOCK", "config_class", "load_json",
           "positive_time_us", "source_file", "MAX_READ_BYTES", "ROW_COLUMNS"]

FAILED = "failed"
"""Status of an imported row whose source recorded a failure (an ``inf``
time, an error string)."""


class InteropError(CostlearnError, ValueError):
    """A file cannot be imported (wrong format, empty, a header that
    contradicts the device, a bad mapping); nothing was written."""


class ImportInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`import_measurements`; its words say what was
    written (``report``: the import's report so far, None before its first
    part). Each part is written atomically and counted with it; the same
    import again adds only what the folder lacks."""

    def __init__(self, path, report: "ImportReport | None"):
        if report is None or not report.rows_added:
            done = f"no row of {path} was written"
        else:
            parts = f"{report.parts} part" + ("s" if report.parts != 1 else "")
            done = f"{report.rows_added} rows of {path} were written into {report.folder} ({parts})"
        super().__init__(done)
        self.report = report


@dataclass(frozen=True)
class Measurement:
    """One parsed measurement of an imported file.

    Attributes
    ----------
    line : int
        1-based line (or entry) number in the source file.
    m, n, k : int
    dtype, layout, family : str
    config : a config of ``family``
    time_us : float
        Per-launch time, microseconds; NaN for a failed measurement.
    error : str
        Why it failed ("" when it did not).
    strides : tuple of int
        ``(a0, a1, b0, b1)``: the element strides of A [M, K] and B [K, N]
        where the file records them (Inductor's logs), else empty.
    epilogue : str
        What the measured kernel computed after A @ B
        (:data:`costlearn.core.problem.EPILOGUES`): ``"bias"`` for an ``addmm``.
    columns : dict of str to value
        Dataset columns of :data:`ROW_COLUMNS` this measurement carries itself
        (its own quantiles, samples, clocks, host, time, environment), in
        place of the import's (``n_samples`` 1, the quantiles equal to
        ``time_us``, the importing host, now); empty for a file's line.
    """

    line: int
    m: int
    n: int
    k: int
    dtype: str
    layout: str
    family: str
    config: object
    time_us: float
    error: str = ""
    strides: tuple = ()
    epilogue: str = "none"
    columns: dict = field(default_factory=dict)


ROW_COLUMNS = ("time_us_p20", "time_us_p80", "n_samples", "rse", "sm_clock_mhz", "mem_clock_mhz", "temperature_c",
               "throttled", "host", "timestamp", "run_id", "session_id", "template_hash", "costlearn_version",
               "driver_version", "runtime_version", "library_version", "device_settings")
"""The dataset columns a :class:`Measurement` may set itself (``columns``):
per-row provenance, where a source (a tuning database) records it per
measurement."""


class SkippedLines(list):
    """Malformed lines of a file, (line number, reason) pairs: the first
    :attr:`KEEP` kept, every one counted in :attr:`total` (a file of
    millions of bad lines costs no memory for them)."""

    KEEP = 1000

    def __init__(self):
        super().__init__()
        self.total = 0

    def add(self, line: int, why: str) -> None:
        """Count a malformed line; keep it while fewer than :attr:`KEEP` are."""
        self.total += 1
        if len(self) < self.KEEP:
            self.append((line, why))


@dataclass
class ImportReport:
    """Outcome of one import.

    Attributes
    ----------
    format, file, sha256 : str
        The source format, the file as given, its sha256.
    folder : Path
        The device's dataset folder written to.
    rows_added : int
        Rows written (0 when the file was imported before).
    failed : int
        Of those, rows with status ``failed`` (the source recorded a failure).
    skipped : list of (int, str)
        Malformed lines, not imported: (line number, reason); a
        :class:`SkippedLines` keeps the first thousand and counts all.
    already_imported : bool
        The folder already holds this file's measurements (the same file,
        or every measurement of it at the same line); nothing added.
    duplicates : int
        Measurements left out because the folder holds them already (a log
        imported before it grew, a copy with other bytes, or the first
        parts of an import that was killed).
    part : Path or None
        The last part written.
    parts : int
        Parts written (one per :data:`IMPORT_CHUNK_ROWS` new rows at most).
    unit : str
        What ``skipped`` counts, for the summary: ``"line"`` of a file, ``"row"`` of a database.
    """

    format: str
    file: str
    sha256: str
    folder: Path
    rows_added: int = 0
    failed: int = 0
    skipped: list = field(default_factory=list)
    already_imported: bool = False
    part: Path | None = None
    duplicates: int = 0
    parts: int = 0
    unit: str = "line"

    def summary(self, max_lines: int = 5) -> str:
        """A few lines: what was added where, and the first skipped lines."""
        if self.already_imported:
            s = [f"{self.file} (sha256 {self.sha256[:12]}): its measurements are already in {self.folder}; "
                 "nothing added"]
            if self.unit == "line":
                return s[0]
        else:
            s = [f"imported {self.rows_added} rows ({self.failed} failed measurements) from {self.file} "
                 f"[{self.format}, sha256 {self.sha256[:12]}] into {self.folder}"]
        if self.duplicates:
            s.append(f"left out {self.duplicates} measurements already in the folder (the same {self.unit}s of an "
                     f"earlier import of this {'log' if self.unit == 'line' else 'source'})")
        if self.skipped:
            total = getattr(self.skipped, "total", len(self.skipped))
            s.append(f"skipped {total} {self.unit}{'s' if total != 1 else ''} (malformed, or nothing costlearn maps):")
            s += [f"  {self.unit} {ln}: {why}" for ln, why in self.skipped[:max_lines]]
            if total > max_lines:
                s.append(f"  ... and {total - max_lines} more")
        return "\n".join(s)


class Importer(abc.ABC):
    """One import format (``costlearn import FORMAT``): a file of another
    tool's measurements read as :class:`Measurement` values. Registered in
    :data:`costlearn.interop.IMPORTERS`; :func:`costlearn.interop.import_file`
    checks the file and writes the rows.

    Attributes
    ----------
    name : str
        The format's name on the command line.
    takes_mapping : bool
        Whether the format needs a mapping file from its parameters to a
        family's (``--mapping``).
    """

    name = ""
    takes_mapping = False

    @abc.abstractmethod
    def parse(self, path: Path, spec: DeviceSpec, mapping=None) -> tuple[list, list]:
        """Must read ``path``, measured on ``spec``.

        Returns
        -------
        measurements : list of Measurement
        skipped : list of (int, str)
            Malformed lines: line number, why.

        Raises
        ------
        InteropError
            On a file of another format, a header that contradicts ``spec``,
            or (``takes_mapping``) a missing or bad mapping.
        """


MAX_READ_BYTES = 256 << 20
"""The largest file read whole (a lookup table, a shapes file): hundreds of
thousands of keys or shapes. A log, read a line at a time, has no limit."""


def source_file(path, *, verb: str = "read", max_bytes: int | None = None) -> Path:
    """``path`` as a regular file to read, checked before it is opened.

    Parameters
    ----------
    path : path
    verb : str
        What is done with it, for the message (``"import"``).
    max_bytes : int, optional
        Refuse a larger file (:data:`MAX_READ_BYTES` for one read whole).

    Returns
    -------
    Path

    Raises
    ------
    InteropError
        If there is no such file, it is a folder, it is not a regular file
        (a FIFO or a device, whose reading would wait or never end), or it
        is larger than ``max_bytes`` (naming its size and the limit).
    """
    path = Path(path)
    if path.is_dir():
        raise InteropError(f"{path}: a folder; give the file to {verb}")
    if not path.is_file():
        raise InteropError(f"{path}: " + ("not a regular file" if path.exists() else "no such file"))
    size = path.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise InteropError(f"{path}: {size} bytes; a file read whole may have at most {max_bytes} "
                           f"({max_bytes >> 20} MiB)")
    return path


def load_json(text: str, path, kind: str):
    """``json.loads(text)`` of an imported file, refusing a document no
    reader should follow.

    Parameters
    ----------
    text : str
    path : path
        The file, named in the message.
    kind : str
        What the file is, in words (``"a lookup table"``), for the message.

    Raises
    ------
    InteropError
        If the document nests deeper than the interpreter's recursion limit,
        or holds an integer of more digits than its limit
        (``sys.get_int_max_str_digits``).
    json.JSONDecodeError
        On a syntax error (the caller says what the file should be, or
        repairs it).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise InteropError(f"{path}: JSON nested too deep to read; {kind} nests a few levels") from None
    except json.JSONDecodeError:
        raise
    except ValueError:                     # json's int() of a number over the digit limit
        raise InteropError(f"{path}: a number of more than {sys.get_int_max_str_digits()} digits; {kind} holds no "
                           "such number") from None


def positive_time_us(value, unit_us: float, what: str) -> float:
    """``value``, a time in units of ``unit_us`` microseconds, as
    microseconds.

    Raises
    ------
    ValueError
        Naming ``what`` and the value (cut: :func:`costlearn.core.checks.shown`)
        where it is not a number (a bool, a str, a list, an object) or not
        a finite positive time (zero, negative, NaN, infinite, an int too
        large for a float).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}={shown(value)} is not a number")
    try:
        t = float(value) * unit_us
    except OverflowError:
        t = math.inf
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"{what}={shown(value)} is not a finite positive time")
    return t


def config_class(fam):
    """The family's tile-config dataclass (the one with fields; not
    ``triton_mm``'s vendor call): how an importer builds a family's config
    from a tool's values without importing the family's own modules.

    Raises
    ------
    InteropError
        If the family has no config dataclass with parameters.
    """
    types = fam.config_type if isinstance(fam.config_type, tuple) else (fam.config_type,)
    for t in types:
        if dataclasses.is_dataclass(t) and dataclasses.fields(t):
            return t
    raise InteropError(f"family {fam.name!r} has no config dataclass with parameters")


def device_folder(data_root, spec: DeviceSpec) -> Path:
    """The dataset folder of ``spec`` that ``data_root`` names (a root, or
    that device's folder: :func:`costlearn.collect.dataset.device_dataset_folder`),
    with its ``device.json`` written when absent.

    Raises
    ------
    InteropError
        If the folder's ``device.json`` describes another device, or
        ``data_root`` is another device's dataset folder.
    """
    try:
        folder = device_dataset_folder(data_root, spec.slug)
    except ValueError as e:
        raise InteropError(str(e)) from None
    dev = folder / "device.json"
    if dev.exists():
        try:
            have = DeviceSpec.from_file(dev)
        except ValueError as e:
            raise InteropError(str(e)) from None
        if have.name != spec.name:
            raise InteropError(f"{dev} describes {have.name!r}, not {spec.name!r}")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        write_device_json(spec, folder)
    return folder


def resolve_device(device) -> DeviceSpec:
    """A preset name (or a DeviceSpec) as a DeviceSpec; InteropError naming
    the presets otherwise."""
    if isinstance(device, DeviceSpec):
        return device
    try:
        return preset(device)
    except ValueError as e:
        raise InteropError(f"--preset {shown(device)}: {e}; the file names no GPU, so the preset says which") from None


IMPORT_CHUNK_ROWS = 200_000
"""Measurements an import turns into rows and writes as one part at a time:
its memory is bounded by a chunk, not by the file."""
IMPORT_LOCK = ".import.lock"
"""The lock file one import into a dataset folder holds at a time."""
KEY_COLUMNS = ("source_line", "m", "n", "k", "dtype", "layout", "epilogue", "family", "config_id", "status",
               "time_us")
"""What makes an imported measurement the same as one the folder holds from
the same format: its line, problem, config and time (or its failure)."""


def _key_hashes(rows) -> np.ndarray:
    """A 64-bit hash per row of :data:`KEY_COLUMNS` (a failed or unusable
    time counts as one value), the same for a row as written and as read
    back: uint64, shape (len(rows),)."""
    t = rows["time_us"].to_numpy(np.float64)
    ok = rows["status"].astype(object).to_numpy() != FAILED
    ok &= np.isfinite(t) & (t > 0)
    cols = {c: rows[c].to_numpy(np.int64) for c in ("source_line", "m", "n", "k")}
    cols.update({c: rows[c].astype(str).to_numpy(object) for c in ("dtype", "layout", "epilogue", "family",
                                                                    "config_id")})
    cols["time_us"] = np.where(ok, t, -1.0)
    return pd.util.hash_pandas_object(pd.DataFrame(cols), index=False).to_numpy(np.uint64)


def _known_keys(folder: Path, fmt: str) -> np.ndarray:
    """:func:`_key_hashes` of the rows ``folder`` holds from ``fmt`` files,
    sorted, read a part at a time (uint64)."""
    known = [_key_hashes(f[f["source_format"] == fmt]) for f in part_columns(folder, ("source_format",) + KEY_COLUMNS)
             if (f["source_format"] == fmt).any()]
    return np.unique(np.concatenate(known)) if known else np.zeros(0, np.uint64)


def _chunks(measurements, size: int):
    """``measurements`` in lists of up to ``size``."""
    it = iter(measurements)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        yield chunk


def import_measurements(fmt: str, path, measurements, skipped, spec: DeviceSpec, data_root, *,
                        sha256: str | None = None, source_name: str | None = None, unit: str = "line") -> ImportReport:
    """Write parsed measurements of one source file as dataset parts, a
    chunk of :data:`IMPORT_CHUNK_ROWS` at a time (memory bounded by a chunk).

    Every row records ``source_format``, ``source_file`` (the file's name),
    ``source_sha256`` and ``source_line``; ``protocol_version`` is
    :data:`~costlearn.collect.dataset.IMPORTED_PROTOCOL`, ``run_id`` is
    ``import-<sha256[:12]>``; a measurement's own columns
    (:attr:`Measurement.columns`: a tuning database's host, clocks, tuning)
    take the place of the import's. A measurement the folder holds from the same
    format at the same line with the same problem, config and time is not
    added again (:data:`KEY_COLUMNS`): importing a file twice adds nothing,
    a log that grew by appending (or a copy with other line endings) adds
    its new lines, and an import killed part way resumes where it stopped
    (each part is written atomically). One import per folder at a time
    (:data:`IMPORT_LOCK`).

    Parameters
    ----------
    fmt : str
        The format's name.
    path : path
        The source file.
    measurements : iterable of Measurement
        Read once (a parser's lazy iterator).
    skipped : list of (int, str)
        Malformed lines found while parsing (complete once ``measurements``
        has been read).
    spec : DeviceSpec
        The device the file was measured on.
    data_root : path
        Data root; rows go to ``<data_root>/<spec.slug>/``.
    sha256 : str, optional
        The file's sha256 if already computed; required where ``source_name`` is given.
    source_name : str, optional
        The source when it is not a file (a tuning database's redacted URL):
        its rows' ``source_file`` and the name messages and the report give
        it; ``path`` is then that name, never opened. By default the file's
        name (``source_file``) and ``path`` as given.
    unit : str
        What a measurement's position in the source is, for messages and the report's summary
        (:attr:`ImportReport.unit`): ``"line"`` of a file, ``"row"`` of a database.

    Returns
    -------
    ImportReport

    Raises
    ------
    InteropError
        If no line held a measurement (the first skipped lines are named;
        nothing is written then), or the folder is another device's.
    costlearn.core.locks.FolderBusy
        If another import into the folder is running.
    ImportInterrupted
        On Ctrl-C, saying what was written.
    """
    so_far: list = []
    try:
        return _import_measurements(fmt, path, measurements, skipped, spec, data_root, sha256, so_far, source_name,
                                    unit)
    except KeyboardInterrupt:
        raise ImportInterrupted(source_name or path, so_far[0] if so_far else None) from None


def _import_measurements(fmt: str, path, measurements, skipped, spec: DeviceSpec, data_root, sha256,
                         so_far: list, source_name: str | None, unit: str) -> ImportReport:
    """:func:`import_measurements`; ``so_far`` gets its report once made."""
    path = Path(path) if source_name is None else source_name
    sha = sha256 or sha256_file(path)
    chunks = _chunks(measurements, IMPORT_CHUNK_ROWS)
    first = next(chunks, None)
    if first is None:               # before the device folder is made: a failed import writes nothing
        lines = "; ".join(f"{unit} {ln}: {why}" for ln, why in list(skipped)[:3])
        what = f"this {fmt} file" if source_name is None else "it"
        raise InteropError(f"{path}: no measurement found in {what}" + (f" ({lines})" if lines else ""))
    folder = device_folder(data_root, spec)
    rep = ImportReport(format=fmt, file=str(path), sha256=sha, folder=folder, unit=unit)
    so_far.append(rep)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prov = dict(device_slug=spec.slug, device_name=spec.name, api=spec.api, compute_capability=spec.compute_capability,
                device_version="", multiprocessors=spec.multiprocessors, driver_version="", runtime_version="",
                library_version="", host=socket.gethostname(), costlearn_version=__version__,
                schema_version=SCHEMA_VERSION, run_id=f"import-{sha[:12]}", timestamp=stamp,
                protocol_version=IMPORTED_PROTOCOL, distribution="", density=math.nan, rounds=0, source_format=fmt,
                source_file=path.name if source_name is None else source_name, source_sha256=sha,
                session_id=f"import-{sha[:12]}", device_settings="")
    described: dict = {}
    with FolderLock(folder, "an import", IMPORT_LOCK):
        known = _known_keys(folder, fmt)
        chunk, first = first, None
        while chunk is not None:
            rows = _rows(chunk, prov, described)
            chunk = None                            # one chunk's measurements alive at a time
            fresh = ~np.isin(_key_hashes(rows), known)
            rep.duplicates += int((~fresh).sum())
            if fresh.any():
                rows = rows[fresh]
                with sigint_deferred():             # a part on disk is counted in the Ctrl-C message
                    rep.part = write_part(rows, folder)
                    rep.parts += 1
                    rep.rows_added += len(rows)
                    rep.failed += int((rows["status"] == FAILED).sum())
            rows = None
            chunk = next(chunks, None)
    rep.skipped = skipped
    rep.already_imported = rep.rows_added == 0
    return rep


def _rows(chunk: list, prov: dict, described: dict) -> pd.DataFrame:
    """Dataset rows (every column of :data:`costlearn.collect.dataset.COLUMNS`)
    of a chunk of measurements with the provenance ``prov``; ``described``
    caches each (family, config, dtype)'s tile description."""
    nan = math.nan
    cols: dict = {c: [] for c in ("m", "n", "k", "dtype", "layout", "epilogue", "family", "config_id", "block_m",
                                  "block_n", "block_k", "thread_m", "thread_n", "threads", "pipeline_stages",
                                  "smem_bytes", "status", "error", "time_us", "n_samples", "template_hash",
                                  "source_line")}
    for x in chunk:
        key = (x.family, x.config, x.dtype)
        d = described.get(key)
        if d is None:
            fam = get_family(x.family)
            d = described[key] = (fam.describe(x.config, x.dtype), fam.imported_template_hash or fam.template_hash)
        desc, template = d
        ok = not x.error and math.isfinite(x.time_us) and x.time_us > 0
        for c, v in (("m", x.m), ("n", x.n), ("k", x.k), ("dtype", x.dtype), ("layout", x.layout),
                     ("epilogue", x.epilogue), ("family", x.family), ("config_id", x.config.config_id),
                     ("block_m", desc.block_m), ("block_n", desc.block_n), ("block_k", desc.block_k),
                     ("thread_m", desc.thread_m), ("thread_n", desc.thread_n), ("threads", desc.threads),
                     ("pipeline_stages", desc.pipeline_stages), ("smem_bytes", desc.smem_bytes),
                     ("status", "ok" if ok else FAILED), ("error", "" if ok else (x.error or "no time recorded")),
                     ("time_us", x.time_us if ok else nan), ("n_samples", 1 if ok else 0),
                     ("template_hash", template), ("source_line", x.line)):
            cols[c].append(v)
    rows = pd.DataFrame(cols)
    rows["time_us_p20"] = rows["time_us_p80"] = rows["time_us"]
    consts = dict(registers_per_thread=nan, launches_per_sample=1, below_overhead=False, max_abs_err=nan,
                  overhead_us=nan, compile_s=nan, repeat_time_us=nan, rotation_sets=0, rse=nan, stop_reason="",
                  tied_best=False, samples_us="", sm_clock_mhz=nan, mem_clock_mhz=nan, temperature_c=nan,
                  throttled=False, throttle_reasons="", **prov)
    return _own_columns(rows.assign(**consts), chunk)


def _own_columns(rows: pd.DataFrame, chunk: list) -> pd.DataFrame:
    """``rows`` (of the measurements ``chunk``, in order) with the columns the
    measurements carry themselves (:attr:`Measurement.columns`) in place of
    the import's; the same frame where none carries any.

    Raises
    ------
    ValueError
        Naming a column not in :data:`ROW_COLUMNS`.
    """
    own = sorted({c for x in chunk for c in x.columns})
    if not own:
        return rows
    unknown = [c for c in own if c not in ROW_COLUMNS]
    if unknown:
        raise ValueError(f"a measurement sets the columns {unknown}; it may set {list(ROW_COLUMNS)}")
    for c in own:
        rows[c] = [x.columns.get(c, v) for x, v in zip(chunk, rows[c].tolist())]
    return rows
