"""The fleet's tuning database in: every measurement its hosts' tunings timed on one device class, as dataset rows
(`import_tuning_db`; ``costlearn import tuning-db``) that ``costlearn train`` learns from (design.md, "Tuning
database": the measured entries are training data).

One stored measurement (a config timed in one tuning on one host: :class:`costlearn.serve.fleet.Measurement`) is
one row, written through the importers' one path (:func:`costlearn.interop.common.import_measurements`: atomic
parts, the folder lock, what the folder holds left out), carrying its own provenance: its p50 as ``time_us``, p20
and p80, samples, relative standard error, the host, when it was measured (``timestamp``), its clocks, its
environment fingerprint (driver, runtime and library versions in their columns, the rest as JSON in
``device_settings``), the tuning as ``run_id`` and ``session_id``, and the key's kernel-template hash and costlearn
version. ``source_line`` is a hash of the measurement's identity in the store (:func:`source_line`), so importing
twice adds nothing, a database that grew adds its new measurements only, and the same measurement read from a
host's file and from the fleet's server is one row.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path

from costlearn.collect.dataset import TUNED_FORMAT, device_dataset_folder
from costlearn.core.checks import shown
from costlearn.core.device import PRESETS, DeviceSpec
from costlearn.core.problem import Problem
from costlearn.families import get_family
from costlearn.interop.common import ImportReport, InteropError, Measurement, SkippedLines, import_measurements, \
    resolve_device
from costlearn.serve.fleet import DAMAGED, check_name, measurement_from_row
from costlearn.serve.tuning_db_server import open_store
from costlearn.serve.tuning_rows import default_target, is_server_url

__all__ = ["import_tuning_db", "device_spec", "source_line", "FORMAT", "ENV_COLUMNS", "MAX_SETTINGS_CHARS"]

FORMAT = TUNED_FORMAT
"""The rows' ``source_format``."""

ENV_COLUMNS = ("driver_version", "runtime_version", "library_version")
"""Fields of a measurement's environment fingerprint (:func:`costlearn.serve.fleet.environment`) that have a
dataset column of their name; the others are kept as JSON in ``device_settings``."""

MAX_SETTINGS_CHARS = 4096
"""The longest ``device_settings`` JSON a row takes (costlearn's fingerprints are a few hundred characters): a
larger fingerprint is not costlearn's, and its row is skipped."""

_CLOCKS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c")


def import_tuning_db(target=None, *, device_class: str, data_root, preset=None, progress=None) -> ImportReport:
    """Import every measurement a tuning database holds of one device class into
    ``<data_root>/<slug>/``.

    Every family, dtype, layout, epilogue, kernel-template hash and costlearn version of the class is imported;
    training keeps the rows of the current templates and leaves the others as stale, as it does any row
    (:func:`costlearn.collect.dataset.current_rows`). A vendor-library measurement (the family's
    :data:`~costlearn.families.VENDOR_CONFIG_ID`) is the family's vendor row, as the Inductor importer writes
    for ``extern_mm``. A damaged or hostile row (a value no measurement has, text where a number belongs, JSON
    too large or too deep, a config id not of its family, a problem its family does not run) is skipped and
    counted in the report, with its position among the class's rows and why.

    Parameters
    ----------
    target : path or str, optional
        An SQLite file or a ``postgresql://`` URL; None: the default
        (:func:`costlearn.serve.tuning_rows.default_target`). Opened read-only: nothing is created,
        upgraded or written there.
    device_class : str
        The device slug as the database's key holds it (``"a100"``).
    data_root : path
        Data root (or the device's dataset folder); rows go to the folder of the device's slug
        (:func:`costlearn.interop.common.device_folder`), its ``device.json`` written when absent.
    preset : str, path or DeviceSpec, optional
        The device the measurements were taken on (a preset name, a ``device.json`` file or a DeviceSpec,
        whose slug must be ``device_class``), where ``device_class`` is not a preset name
        (:data:`costlearn.core.device.PRESETS`) and ``data_root`` holds no ``device.json`` of it
        (:func:`device_spec`).
    progress : callable, optional
        Given one line per stage (reading, writing).

    Returns
    -------
    ImportReport
        ``format`` ``"tuning-db"``; ``file`` the file, or the URL with its password redacted (also the rows'
        ``source_file``: the file's name, or that URL); ``sha256`` the sha256 of ``file:<absolute path>`` or
        ``server:<redacted URL>``, the database's identity rather than its bytes, which change as it grows
        (the rows' ``source_sha256``); ``skipped`` the rows skipped, by position (1-based, in the order of
        ``measured``, ``tuning_id``, ``config_id``) and why.

    Raises
    ------
    InteropError
        A ``device_class`` that is not a name, not a preset with no ``preset`` given, or a preset that
        ``preset`` contradicts; no measurement of the class in the database, or none that could be used
        (nothing is written then); a dataset folder of another device.
    FileNotFoundError
        No database file there (or an empty one).
    OSError, TuningDBError
        A database that cannot be read (a server away, a corrupt file, another application's).
    ImportError
        A URL without psycopg (``pip install 'costlearn[server]'``).
    costlearn.core.locks.FolderBusy
        Another import into the folder is running.
    costlearn.interop.common.ImportInterrupted
        On Ctrl-C, saying what was written.

    Examples
    --------
    >>> rep = import_tuning_db("tuning.sqlite", device_class="a100", data_root="data")   # doctest: +SKIP
    >>> print(rep.summary())                                                               # doctest: +SKIP
    """
    say = progress or (lambda line: None)
    spec = device_spec(device_class, preset, data_root)
    target = default_target() if target is None else target
    server = is_server_url(target)
    store = open_store(target, read_only=True)
    rows = store.device_measurements(device_class)            # streamed: memory bounded by a batch of rows
    try:
        label = str(store.path) if server else str(Path(store.path).resolve())
        say(f"reading the measurements of device class {device_class} from {store.path}")
        first = next(rows, None)
        if first is None:
            raise InteropError(f"{store.path}: no measurement of device class {device_class!r} (`costlearn "
                               "tuning-db [TARGET] --measurements` lists what it holds)")
        sha = hashlib.sha256(f"{'server' if server else 'file'}:{label}".encode()).hexdigest()
        say(f"writing the measurements of {device_class} as rows of {spec.slug} under {data_root}")
        skipped = SkippedLines()
        return import_measurements(FORMAT, store.path, _measurements(itertools.chain([first], rows), skipped),
                                   skipped, spec, data_root, sha256=sha,
                                   source_name=str(store.path) if server else None, unit="row")
    finally:
        rows.close()
        store.close()


def device_spec(device_class: str, preset=None, data_root=None) -> DeviceSpec:
    """The device of ``device_class``'s measurements: its preset, ``preset``, or the ``device.json`` of its
    dataset folder under ``data_root``.

    Parameters
    ----------
    device_class : str
        A device slug (a key's ``device``).
    preset : str, path or DeviceSpec, optional
        A preset name, a ``device.json`` file (a collection writes one in ``<data>/<slug>/``) or a DeviceSpec;
        where ``device_class`` is a preset name, it must describe the same class.
    data_root : path, optional
        Where ``preset`` is None and ``device_class`` is not a preset name: the dataset root (or the device's
        folder) whose ``<device_class>/device.json`` describes the device, as a collection on it wrote.

    Returns
    -------
    DeviceSpec

    Raises
    ------
    InteropError
        Naming the value and what is allowed (no preset, no such file, a device.json of another device).
    """
    try:
        check_name("device_class", device_class)
    except (TypeError, ValueError) as e:
        raise InteropError(str(e)) from None
    known = device_class in PRESETS.names()
    if preset is None:
        if known:
            return resolve_device(device_class)
        found = _collected_spec(device_class, data_root)
        if found is None:
            raise InteropError(f"device_class={shown(device_class)} is not a preset ({', '.join(PRESETS.names())}) "
                               "and --data holds no device.json of it: give --preset the device.json of its "
                               "dataset folder (a collection on it writes <data>/<slug>/device.json), or a preset")
        return found
    if isinstance(preset, (str, Path)) and str(preset) not in PRESETS.names() and Path(preset).is_file():
        spec = _spec_file(Path(preset))
    else:
        spec = resolve_device(preset)
    if spec.slug != device_class:
        raise InteropError(f"--preset {shown(getattr(preset, 'name', preset))} describes {spec.slug}, not the "
                           f"device class {device_class}" + (" (itself a preset): leave --preset out" if known else ""))
    return spec


def _collected_spec(device_class: str, data_root) -> DeviceSpec | None:
    """The DeviceSpec of ``<data_root>/<device_class>/device.json`` (or of ``data_root``'s own, where it is that
    device's folder); None where there is none."""
    if data_root is None:
        return None
    try:
        path = device_dataset_folder(data_root, device_class) / "device.json"
    except ValueError:
        return None
    return _spec_file(path) if path.is_file() else None


def _spec_file(path: Path) -> DeviceSpec:
    """:meth:`DeviceSpec.from_file`, its errors as InteropError."""
    try:
        return DeviceSpec.from_file(path)
    except (OSError, ValueError) as e:
        raise InteropError(f"--preset {shown(str(path))}: {e}") from None


def source_line(key: tuple, tuning_id: str, config_id: str) -> int:
    """A measurement's ``source_line``: the first 63 bits of the sha256 of its key's 10 values (as stored), its
    tuning id and config id, as JSON; in [1, 2**63 - 1], the same in every store and every run."""
    text = json.dumps([*key, tuning_id, config_id], ensure_ascii=True)
    return (int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1) or 1


def _measurements(rows, skipped: SkippedLines):
    """The import :class:`~costlearn.interop.common.Measurement` of each stored row (10 key values, 11 columns),
    a row that does not decode added to ``skipped`` (its 1-based position, why), as is a row of the key, tuning
    and config of the row before it (a table made without costlearn's primary key; the rows come sorted by it)."""
    before = None
    for i, r in enumerate(rows, 1):
        r = tuple(r)
        key = r[:10] + r[10:13:2]                             # the primary key: the problem's, tuning, config
        try:
            if key == before:
                raise ValueError("a second row of the measurement before it (its key, tuning and config)")
            before = key
            x = _measurement(r)
        except DAMAGED as e:
            skipped.add(i, _why(r, e))
            continue
        yield x


def _measurement(r: tuple) -> Measurement:
    """One stored row as an import measurement; :data:`~costlearn.serve.fleet.DAMAGED` where it is damaged."""
    if len(r) != 21:
        raise ValueError(f"a row of {len(r)} values; a measurement has 21")
    if any(isinstance(v, (bytes, bytearray, memoryview)) for v in r):
        raise ValueError("a value that is bytes, or text that is not UTF-8")
    key = r[:10]
    for name, v in zip(("family", "device", "template_hash", "costlearn_version"), key[6:]):
        check_name(name, v)
    problem = Problem(*key[:6])
    fam = get_family(key[6])
    fam.check_problem(problem)
    m = measurement_from_row(r[10:], fam)
    stamp = check_name("measured", r[20])
    rse = float(m.rse)
    columns = dict(time_us_p20=float(m.p20_us), time_us_p80=float(m.p80_us), n_samples=int(m.samples),
                   rse=rse if math.isfinite(rse) else math.nan, host=m.host, timestamp=stamp, run_id=m.tuning_id,
                   session_id=m.tuning_id, template_hash=key[8], costlearn_version=key[9], **_clocks(m.clocks),
                   **_environment(m.env))
    return Measurement(line=source_line(key, m.tuning_id, m.config_id), m=problem.m, n=problem.n, k=problem.k,
                       dtype=problem.dtype, layout=problem.layout, family=fam.name,
                       config=fam.config_from_id(m.config_id), time_us=float(m.p50_us), epilogue=problem.epilogue,
                       columns=columns)


def _clocks(clocks: dict) -> dict:
    """The clock columns a measurement's clocks hold (a finite number each; ``throttled`` a bool); others left
    at the import's NaN and False."""
    out = {}
    for c in _CLOCKS:
        v = clocks.get(c)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            out[c] = float(v)
    if isinstance(clocks.get("throttled"), bool):
        out["throttled"] = clocks["throttled"]
    return out


def _environment(env: dict) -> dict:
    """The columns of an environment fingerprint: :data:`ENV_COLUMNS` by name, the rest as sorted JSON in
    ``device_settings``.

    Raises
    ------
    ValueError, TypeError
        A fingerprint that is not names (:func:`costlearn.serve.fleet.check_name`), or one whose rest is longer
        than :data:`MAX_SETTINGS_CHARS`.
    """
    out, rest = {}, {}
    for k, v in env.items():
        check_name("environment field", k)
        check_name(f"environment {k}", v, empty=True)
        if k in ENV_COLUMNS:
            out[k] = v
        else:
            rest[k] = v
    settings = json.dumps(rest, sort_keys=True) if rest else ""
    if len(settings) > MAX_SETTINGS_CHARS:
        raise ValueError(f"an environment fingerprint of {len(settings)} characters; at most {MAX_SETTINGS_CHARS}")
    out["device_settings"] = settings
    return out


def _why(r, e: Exception) -> str:
    """Which row, and why it was skipped, in printable characters (a hostile value neither forges a line nor
    drives the terminal)."""
    def at(i):
        try:
            return shown(r[i], 40)
        except (IndexError, TypeError):
            return "?"
    text = f"{at(6)} {at(0)}x{at(1)}x{at(2)} {at(3)} config {at(10)} of tuning {at(12)}: {str(e)[:200]}"
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)
