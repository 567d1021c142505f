"""Kernel Tuner's files out: a dataset's valid rows as Kernel Tuner cache
files (:func:`export_cache`) or T4 results and metadata (:func:`export_t4`);
the formats are described in :mod:`costlearn.interop.kernel_tuner`."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.core.files import atomic_write
from costlearn.core.version import __version__
from costlearn.families import VENDOR_CONFIG_ID, get_family

__all__ = ["export_cache", "export_t4", "cache_key", "T4_SCHEMA_VERSION"]

T4_SCHEMA_VERSION = "1.0.0"
"""The T4 schema version :func:`export_t4` writes (Kernel Tuner 1.x's)."""


def cache_key(values) -> str:
    """A cache key as Kernel Tuner forms it: each value's ``str()``, joined
    by ``,`` (``runners/sequential.py``, ``runners/simulation.py``)."""
    return ",".join(str(v) for v in values)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", str(s)).strip("-").lower() or "device"


def _problems(rows):
    """Yield (stem, group info, per-config records) for each problem of
    ``rows``; a record is (config, times_ms, compile_ms, timestamp)."""
    if rows is None or len(rows) == 0:
        return
    rows = rows[rows["config_id"] != VENDOR_CONFIG_ID]
    keys = ["device_name", "family", "dtype", "layout", "m", "n", "k"]
    several_devices = rows["device_name"].nunique(dropna=False) > 1
    for key, g in rows.groupby(keys, sort=True, dropna=False):
        device_name, family, dtype, layout, m, n, k = key
        fam = get_family(family)
        configs: dict = {}
        order = [c for c in ("timestamp", "run_id", "source_line") if c in g.columns]
        g = g.sort_values(order, kind="stable") if order else g
        for cid, cg in g.groupby("config_id", sort=False):
            cfg = fam.config_from_id(cid)
            if not dataclasses.is_dataclass(cfg) or not dataclasses.fields(cfg):
                continue                             # the vendor call has no parameters to tune
            t = cg["time_us"].to_numpy(np.float64)
            keep = np.isfinite(t) & (t > 0)
            if not keep.any():
                continue
            comp = cg["compile_s"].to_numpy(np.float64)[keep]
            comp = comp[np.isfinite(comp)]
            stamps = [s for s in cg["timestamp"].astype(object).to_numpy()[keep] if isinstance(s, str) and s]
            configs[cid] = (cfg, [float(x) / 1e3 for x in t[keep]],
                            float(np.median(comp)) * 1e3 if comp.size else 0.0, max(stamps) if stamps else "")
        if not configs:
            continue
        stem = f"{family}_{dtype}_{layout}_{int(m)}x{int(n)}x{int(k)}"
        if several_devices:
            stem = f"{_slug(device_name)}_{stem}"
        fields = [f.name for f in dataclasses.fields(next(iter(configs.values()))[0])]
        first = g.iloc[0]
        info = dict(device_name=_plain(device_name, ""),
                    family=str(family), dtype=str(dtype), layout=str(layout), m=int(m), n=int(n), k=int(k),
                    fields=fields, first=first)
        yield stem, info, sorted(configs.values(), key=lambda r: r[0])


def _plain(v, default=""):
    """A pandas cell as a JSON value (missing -> ``default``)."""
    try:
        if pd.isna(v):
            return default
    except (TypeError, ValueError):
        pass
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v if isinstance(v, (int, float, str)) else str(v)


def _tune_params(fields, records) -> dict:
    return {f: sorted({getattr(c, f) for c, *_ in records}) for f in fields}


def _write(path: Path, text: str) -> Path:
    atomic_write(path, text.encode("utf-8"))
    return path


def export_cache(rows, out_dir) -> list[Path]:
    """Write valid dataset rows as Kernel Tuner cache files.

    One file per (device_name, family, dtype, layout, M, N, K), called
    ``<family>_<dtype>_<layout>_<M>x<N>x<K>.json`` (prefixed by the device
    when the rows hold several), laid out as Kernel Tuner writes a closed
    cache: ``device_name``, ``kernel_name`` (the family's name),
    ``problem_size`` [M, N, K], ``tune_params_keys`` and ``tune_params`` (the
    family config's fields, each with the values the rows hold, sorted),
    ``objective`` ``"time"``, and last ``cache``: one entry per config under
    Kernel Tuner's key (:func:`cache_key`), with the parameters, ``time``
    (ms, the median over the config's rows), ``times`` (ms, each row's),
    ``compile_time`` (ms, the median ``compile_s``, 0 where unknown),
    ``verification_time`` and ``benchmark_time`` (0: not recorded) and
    ``timestamp``. Kernel Tuner's ``read_cache`` reads it; its simulation
    mode (``tune_kernel(..., simulation_mode=True, cache=file)``) needs
    restrictions that keep the parameter combinations no row measured out of
    the search space, which ``kernel_tuner.tune_cache(file)`` infers.

    Parameters
    ----------
    rows : pandas.DataFrame
        Valid dataset rows (columns of :data:`costlearn.collect.dataset.COLUMNS`);
        ``config_id == "vendor"`` rows are left out.
    out_dir : path
        Folder to write into (created).

    Returns
    -------
    list of Path
        The files written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, info, records in _problems(rows):
        fields = info["fields"]
        head = dict(device_name=info["device_name"], kernel_name=info["family"],
                    problem_size=[info["m"], info["n"], info["k"]], tune_params_keys=fields,
                    tune_params=_tune_params(fields, records), objective="time", cache={})
        # Kernel Tuner's own layout: the header indented by "", then one entry a line (process_cache, store_cache)
        text = json.dumps(head, indent="")[:-3]
        lines = []
        for cfg, times, compile_ms, stamp in records:
            vals = [getattr(cfg, f) for f in fields]
            entry = dict(zip(fields, vals))
            entry.update(time=float(np.median(times)), times=times, compile_time=compile_ms, verification_time=0,
                         benchmark_time=0, timestamp=stamp)
            lines.append("\n" + json.dumps({cache_key(vals): entry})[1:-1])
        text += ",".join(lines) + "}\n}"
        written.append(_write(out_dir / f"{stem}.json", text))
    return written


def export_t4(rows, out_dir) -> list[Path]:
    """Write valid dataset rows as T4 results and metadata files.

    Per problem (as :func:`export_cache`) ``<stem>_results.json``: T4
    results (schema 1.0.0), one result per config with ``configuration``
    (the family config's fields), ``times`` (``compilation`` as Kernel
    Tuner writes it and ``compilation_time`` as the schema names it, ms;
    ``runtimes``, ms, each row's; the other timings 0), ``invalidity``
    ``"correct"``, ``correctness`` 1, the ``time`` measurement (ms, the
    median) and ``objectives`` ``["time"]``; top-level ``metadata`` holds
    ``timeunit`` ``"milliseconds"`` as Kernel Tuner writes it, and the
    problem (``problem_size`` [M, N, K], family, dtype, layout,
    ``tune_params_keys``, ``device_name``), which T4 has no place for and
    :func:`parse` reads back. And ``<stem>_metadata.json``: T4 metadata,
    the device (from the rows' provenance) as the hardware description and
    costlearn's version as the requirements.

    Parameters
    ----------
    rows : pandas.DataFrame
        Valid dataset rows; ``config_id == "vendor"`` rows are left out.
    out_dir : path
        Folder to write into (created).

    Returns
    -------
    list of Path
        Every file written (results then metadata, per problem).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, info, records in _problems(rows):
        fields = info["fields"]
        results = []
        for cfg, times, compile_ms, stamp in records:
            r = {}
            if stamp:
                r["timestamp"] = stamp
            r["configuration"] = {f: getattr(cfg, f) for f in fields}
            r["times"] = dict(compilation=compile_ms, compilation_time=compile_ms, benchmark=0, framework=0,
                              search_algorithm=0, validation=0, runtimes=times)
            r["invalidity"] = "correct"
            r["correctness"] = 1
            r["measurements"] = [dict(name="time", value=float(np.median(times)), unit="ms")]
            r["objectives"] = ["time"]
            results.append(r)
        meta = dict(timeunit="milliseconds", kernel_name=info["family"], device_name=info["device_name"],
                    problem_size=[info["m"], info["n"], info["k"]], family=info["family"], dtype=info["dtype"],
                    layout=info["layout"], tune_params_keys=fields)
        res_doc = dict(results=results, schema_version=T4_SCHEMA_VERSION, metadata=meta)
        first = info["first"]

        hw = {c: _plain(first[c]) for c in ("device_name", "device_slug", "api", "compute_capability",
                                            "multiprocessors", "driver_version", "runtime_version",
                                            "library_version") if c in first.index}
        meta_doc = dict(schema_version=T4_SCHEMA_VERSION, metadata=dict(
            hardware=dict(hardware_description=[hw]),
            environment=dict(device_query={}, requirements=[f"costlearn=={__version__}"])))
        written.append(_write(out_dir / f"{stem}_results.json", json.dumps(res_doc, indent=1)))
        written.append(_write(out_dir / f"{stem}_metadata.json", json.dumps(meta_doc, indent=1)))
    return written
