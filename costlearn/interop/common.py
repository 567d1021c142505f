"""What every importer shares: the parsed-line record, the report, and the
one path from parsed lines to dataset rows (provenance, idempotency, one
atomic part, nothing touched on failure)."""
from __future__ import annotations

import abc
import json
import math
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from costlearn.collect.loop import write_device_json
from costlearn.collect.dataset import (IMPORTED_PROTOCOL, SCHEMA_VERSION, DatasetError, device_dataset_folder, load,
                                       write_part)
from costlearn.core.device import DeviceSpec, preset
from costlearn.families import get_family
from costlearn.core.util import sha256_file
from costlearn.core.version import __version__
from costlearn.core.errors import CostlearnError

__all__ = ["InteropError", "ImportReport", "Measurement", "Importer", "import_measurements", "device_folder",
           "FAILED"]

FAILED = "failed"
"""Status of an imported row whose source recorded a failure (an ``inf``
time, an error string)."""


class InteropError(CostlearnError, ValueError):
    """A file cannot be imported (wrong format, empty, a header that
    contradicts the device, a bad mapping); nothing was written."""


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
        Malformed lines, not imported: (line number, reason).
    already_imported : bool
        The folder already holds this file's measurements (the same file,
        or every measurement of it at the same line); nothing added.
    duplicates : int
        Measurements left out because the folder holds them already (a log
        imported before it grew, or a copy with other bytes).
    part : Path or None
        The part written.
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

    def summary(self, max_lines: int = 5) -> str:
        """A few lines: what was added where, and the first skipped lines."""
        if self.already_imported:
            return f"{self.file} (sha256 {self.sha256[:12]}): its measurements are already in {self.folder}; " \
                "nothing added"
        s = [f"imported {self.rows_added} rows ({self.failed} failed measurements) from {self.file} "
             f"[{self.format}, sha256 {self.sha256[:12]}] into {self.folder}"]
        if self.duplicates:
            s.append(f"left out {self.duplicates} measurements already in the folder (the same lines of an earlier "
                     "import of this log)")
        if self.skipped:
            s.append(f"skipped {len(self.skipped)} line{'s' if len(self.skipped) != 1 else ''} (malformed, or "
                     "nothing costlearn maps):")
            s += [f"  line {ln}: {why}" for ln, why in self.skipped[:max_lines]]
            if len(self.skipped) > max_lines:
                s.append(f"  ... and {len(self.skipped) - max_lines} more")
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
    if dev.is_file():
        try:
            have = DeviceSpec.from_dict(json.loads(dev.read_text()))
        except (OSError, ValueError, TypeError) as e:
            raise InteropError(f"{dev}: not a valid device description ({e})") from e
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
        raise InteropError(f"--preset {device!r}: {e}; the file names no GPU, so the preset says which") from None


def _measurement_key(x: Measurement) -> tuple:
    return (int(x.line), int(x.m), int(x.n), int(x.k), x.dtype, x.layout, x.epilogue, x.family, x.config.config_id,
            float(x.time_us) if not x.error and math.isfinite(x.time_us) and x.time_us > 0 else "failed")


def _known_measurements(have, fmt: str) -> set:
    """:func:`_measurement_key` of the rows already imported from ``fmt`` files."""
    rows = have[have["source_format"] == fmt]
    if rows.empty:
        return set()
    t = rows["time_us"].to_numpy(np.float64)
    ok = rows["status"].ne("failed").to_numpy(bool) & np.isfinite(t) & (t > 0)
    cols = [rows[c].to_numpy() for c in ("source_line", "m", "n", "k", "dtype", "layout", "epilogue", "family",
                                         "config_id")]
    return {(int(a), int(b), int(c), int(d), str(e), str(f), str(ep), str(g), str(h), float(ti) if o else "failed")
            for a, b, c, d, e, f, ep, g, h, ti, o in zip(*cols, t, ok)}


def import_measurements(fmt: str, path, measurements, skipped, spec: DeviceSpec, data_root, *,
                        sha256: str | None = None) -> ImportReport:
    """Write parsed measurements of one source file as one dataset part.

    Every row records ``source_format``, ``source_file`` (the file's name),
    ``source_sha256`` and ``source_line``; ``protocol_version`` is
    :data:`~costlearn.collect.dataset.IMPORTED_PROTOCOL`, ``run_id`` is
    ``import-<sha256[:12]>``. A file whose sha256 the folder already holds
    adds nothing, nor does a measurement the folder holds from the same
    format at the same line with the same problem, config and time (a log
    that grew by appending, a copy with other line endings). The part is written atomically after every line parsed, so
    a failed import leaves the dataset as it was.

    Parameters
    ----------
    fmt : str
        The format's name.
    path : path
        The source file.
    measurements : iterable of Measurement
    skipped : list of (int, str)
        Malformed lines found while parsing.
    spec : DeviceSpec
        The device the file was measured on.
    data_root : path
        Data root; rows go to ``<data_root>/<spec.slug>/``.
    sha256 : str, optional
        The file's sha256 if already computed.

    Returns
    -------
    ImportReport

    Raises
    ------
    InteropError
        If no line held a measurement (the first skipped lines are named), or
        the folder is another device's.
    """
    path = Path(path)
    sha = sha256 or sha256_file(path)
    skipped = list(skipped)
    ms = list(measurements)
    if not ms:                      # before the device folder is made: a failed import writes nothing
        first = "; ".join(f"line {ln}: {why}" for ln, why in skipped[:3])
        raise InteropError(f"{path}: no measurement found in this {fmt} file" + (f" ({first})" if first else ""))
    folder = device_folder(data_root, spec)
    rep = ImportReport(format=fmt, file=str(path), sha256=sha, folder=folder, skipped=skipped)
    try:
        have, _ = load(folder)
    except DatasetError as e:
        raise InteropError(f"{folder}: {e}") from e
    if (have["source_sha256"] == sha).any():
        rep.already_imported = True
        return rep
    # A log that grew since it was imported (AutoHeuristic appends), or a copy of one with other bytes
    # (line endings, name), holds the same measurements at the same lines: those are not added again.
    known = _known_measurements(have, fmt)
    fresh = [x for x in ms if _measurement_key(x) not in known]
    rep.duplicates = len(ms) - len(fresh)
    if not fresh:
        rep.already_imported = True
        return rep
    ms = fresh
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    host = socket.gethostname()
    prov = dict(device_slug=spec.slug, device_name=spec.name, api=spec.api, compute_capability=spec.compute_capability,
                device_version="", multiprocessors=spec.multiprocessors, driver_version="", runtime_version="",
                library_version="", host=host, costlearn_version=__version__, schema_version=SCHEMA_VERSION,
                run_id=f"import-{sha[:12]}", timestamp=stamp, protocol_version=IMPORTED_PROTOCOL,
                distribution="", density=math.nan, rounds=0, source_format=fmt, source_file=path.name,
                source_sha256=sha, session_id=f"import-{sha[:12]}", device_settings="")
    nan = math.nan
    described: dict = {}
    rows = []
    for ms_ in ms:
        fam = get_family(ms_.family)
        key = (ms_.family, ms_.config, ms_.dtype)
        d = described.get(key)
        if d is None:
            d = described[key] = fam.describe(ms_.config, ms_.dtype)
        ok = not ms_.error and np.isfinite(ms_.time_us) and ms_.time_us > 0
        rows.append(dict(
            m=ms_.m, n=ms_.n, k=ms_.k, dtype=ms_.dtype, layout=ms_.layout, epilogue=ms_.epilogue, family=ms_.family,
            config_id=ms_.config.config_id, block_m=d.block_m, block_n=d.block_n, block_k=d.block_k,
            thread_m=d.thread_m, thread_n=d.thread_n, threads=d.threads, pipeline_stages=d.pipeline_stages,
            smem_bytes=d.smem_bytes, registers_per_thread=nan,
            status="ok" if ok else FAILED, error="" if ok else (ms_.error or "no time recorded"),
            time_us=ms_.time_us if ok else nan, time_us_p20=ms_.time_us if ok else nan,
            time_us_p80=ms_.time_us if ok else nan, n_samples=1 if ok else 0, launches_per_sample=1,
            below_overhead=False, max_abs_err=nan, overhead_us=nan, compile_s=nan, repeat_time_us=nan,
            rotation_sets=0, rse=nan, stop_reason="", tied_best=False, samples_us="", sm_clock_mhz=nan,
            mem_clock_mhz=nan, temperature_c=nan, throttled=False,
            throttle_reasons="", template_hash=fam.imported_template_hash or fam.template_hash,
            source_line=ms_.line, **prov))
    rep.part = write_part(rows, folder)
    rep.rows_added = len(rows)
    rep.failed = sum(r["status"] == FAILED for r in rows)
    return rep
