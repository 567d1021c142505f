"""Measurements other tools already made, in and out (design.md, "Data
flow": imported rows join a device's dataset like measured ones).

Import formats (``costlearn import FORMAT FILE --preset PRESET --data DIR``):

- ``inductor``: PyTorch Inductor AutoHeuristic mm logs (:mod:`.inductor`).
- ``kernel-tuner``: a Kernel Tuner cache file or T4 results JSON, with a
  mapping file from the kernel's parameters to a family's (:mod:`.kernel_tuner`).

A tuning database, not a file format (``costlearn import tuning-db [TARGET]
--device-class SLUG --data DIR``): every measurement its hosts took of one
device class (:func:`import_tuning_db`, :mod:`.tuning_db_import`).

Export formats (``costlearn export FORMAT --data DIR --out FOLDER``): a
dataset as Kernel Tuner cache files (``kernel-tuner``) or T4 results and
metadata (``t4``).
"""
from __future__ import annotations

from pathlib import Path

from costlearn.collect.dataset import load, valid_rows
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.core.registry import Registry
from costlearn.core.files import sha256_file
from costlearn.interop.common import (Importer, ImportReport, InteropError, Measurement, import_measurements,
                                      resolve_device, source_file)
from costlearn.interop.tuning_db_import import import_tuning_db

__all__ = ["IMPORTERS", "EXPORTERS", "IMPORT_FORMATS", "EXPORT_FORMATS", "import_file", "export_dataset",
           "import_tuning_db", "InteropError", "ImportReport", "Importer", "Measurement"]

IMPORTERS = Registry("import format", {"inductor": "costlearn.interop.inductor.autoheuristic:InductorImporter",
                                       "inductor-lut": "costlearn.interop.inductor.lut_sources:InductorLutImporter",
                                       "kernel-tuner": "costlearn.interop.kernel_tuner.importer:KernelTunerImporter"})
"""Formats :func:`import_file` reads: name -> :class:`~costlearn.interop.common.Importer`."""

EXPORTERS = Registry("export format", {"kernel-tuner": "costlearn.interop.kernel_tuner.export:export_cache",
                                       "t4": "costlearn.interop.kernel_tuner.export:export_t4"})
"""Formats :func:`export_dataset` writes: name -> a function (valid rows, folder) -> files written."""

IMPORT_FORMATS = IMPORTERS.names()
EXPORT_FORMATS = EXPORTERS.names()


def import_file(fmt: str, path, *, device, data_root, mapping=None) -> ImportReport:
    """Import one file of measurements into ``<data_root>/<device slug>/``.

    Parameters
    ----------
    fmt : str
        One of :data:`IMPORTERS` (``inductor``, ``kernel-tuner``).
    path : path
        The file.
    device : str or DeviceSpec
        The preset the file was measured on (its header, where it has one,
        must agree).
    data_root : path
        Data root (``data/``).
    mapping : path, optional
        ``kernel-tuner`` only (required there): the mapping file of
        :func:`costlearn.interop.kernel_tuner.mapping.load_mapping`.

    Returns
    -------
    ImportReport

    Raises
    ------
    InteropError
        On an unknown format, a missing, empty or malformed file, a file of
        another format, a header that contradicts the device, or a bad
        mapping; nothing is written then.
    """
    if fmt not in IMPORT_FORMATS:
        raise InteropError(f"import format {fmt!r}; allowed: {list(IMPORT_FORMATS)}")
    path = source_file(path, verb="import")
    if path.stat().st_size == 0:
        raise InteropError(f"{path}: empty file")
    spec = resolve_device(device)
    measurements, skipped = IMPORTERS.get(fmt)().parse(path, spec, mapping)
    return import_measurements(fmt, path, measurements, skipped, spec, data_root, sha256=sha256_file(path))


def export_dataset(fmt: str, data_dir, out_dir) -> list[Path]:
    """Write a dataset folder's valid rows in another tool's format.

    Parameters
    ----------
    fmt : {"kernel-tuner", "t4"}
        ``kernel-tuner``: one Kernel Tuner cache file per problem; ``t4``:
        one T4 results file and its metadata file per problem.
    data_dir : path
        One device's dataset folder.
    out_dir : path
        Folder to write into (created).

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    InteropError
        On an unknown format or a dataset with no valid rows.
    """
    if fmt not in EXPORT_FORMATS:
        raise InteropError(f"export format {fmt!r}; allowed: {list(EXPORT_FORMATS)}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise InteropError(f"--out {out_dir}: a file; give a folder to write into")
    rows = valid_rows(load(data_dir)[0])
    rows = rows[rows["config_id"] != VENDOR_CONFIG_ID]
    if rows.empty:
        raise InteropError(f"{data_dir}: no valid rows to export")
    return EXPORTERS.get(fmt)(rows, Path(out_dir))
