"""The Importer contract, over every registered import format (costlearn.interop.IMPORTERS): a new format is
tested here for free once it has a sample below."""
from __future__ import annotations

import json
import math

import pytest
from inductor_fixture import write_log
from test_interop_kernel_tuner import TRITON_MAPPING, write_mapping, write_triton_cache

from costlearn.core.dtypes import DTYPES
from costlearn.core.problem import LAYOUTS, Problem
from costlearn.families import FAMILIES, family_of, get_family
from costlearn.families.triton_mm import TritonMMConfig
from costlearn.interop.inductor.names import lut_entry
from costlearn.interop import IMPORTERS, InteropError, import_file
from costlearn.interop.common import Importer, Measurement, resolve_device
from costlearn.interop.inductor import lut


def _inductor(tmp):
    path = tmp / "a100_mm.txt"
    write_log(path)
    return path, None, "a100"


def _inductor_lut(tmp):
    table = {}
    for m, n, k in [(512, 256, 1024), (64, 4096, 4096)]:
        p = Problem(m, n, k, "float16")
        table[lut.lookup_key(lut.LutProblem.contiguous(p), "NVIDIA H100")] = [
            {**lut_entry(TritonMMConfig(64, 64, 32, 4, 3), p), "time_ms": 0.125},
            {**lut_entry(TritonMMConfig(128, 64, 32, 4, 4), p), "time_ms": 0.25},
            {"template_id": "aten::mm", "time_us": 140.0}]
    path = tmp / "inductor_lut_1.json"
    path.write_text(json.dumps(table, indent=1))
    return path, None, "h100"


def _kernel_tuner(tmp):
    return write_triton_cache(tmp / "cache.json"), write_mapping(tmp / "mapping.json", TRITON_MAPPING), "a100"


SAMPLES = {"inductor": _inductor, "inductor-lut": _inductor_lut, "kernel-tuner": _kernel_tuner}
"""Format -> a writer of a small valid file of it: (path, mapping file or None, the device preset it was
measured on)."""


def test_every_registered_format_has_a_sample():
    assert sorted(IMPORTERS.names()) == sorted(SAMPLES), "add a sample writer for each new import format"


@pytest.mark.parametrize("fmt", sorted(IMPORTERS.names()))
def test_an_importer_parses_its_format_into_valid_measurements(fmt, tmp_path):
    cls = IMPORTERS.get(fmt)
    assert issubclass(cls, Importer) and cls.name == fmt and isinstance(cls.takes_mapping, bool)
    path, mapping, device = SAMPLES[fmt](tmp_path)
    assert (mapping is not None) == cls.takes_mapping
    got, skipped = cls().parse(path, resolve_device(device), mapping)
    assert got and all(isinstance(x, Measurement) for x in got)
    assert all(isinstance(line, int) and isinstance(why, str) and why for line, why in skipped)
    for x in got:
        assert x.family in FAMILIES.names() and family_of(x.config) is get_family(x.family)
        assert all(type(v) is int and v >= 1 for v in (x.m, x.n, x.k)) and x.line >= 1
        assert x.dtype in DTYPES and x.layout in LAYOUTS
        assert (x.time_us > 0 and not x.error) or (math.isnan(x.time_us) and x.error)


@pytest.mark.parametrize("fmt", sorted(IMPORTERS.names()))
def test_an_import_writes_rows_once(fmt, tmp_path):
    path, mapping, device = SAMPLES[fmt](tmp_path)
    first = import_file(fmt, path, device=device, data_root=tmp_path / "data", mapping=mapping)
    assert first.rows_added > 0 and not first.already_imported
    again = import_file(fmt, path, device=device, data_root=tmp_path / "data", mapping=mapping)
    assert again.rows_added == 0 and again.already_imported


@pytest.mark.parametrize("fmt", sorted(IMPORTERS.names()))
def test_an_importer_refuses_other_formats_and_junk_by_name(fmt, tmp_path):
    """Another format's file, a text of no format and a binary file each raise InteropError (never another
    exception, never rows)."""
    (tmp_path / "own").mkdir()
    _, mapping, device = SAMPLES[fmt](tmp_path / "own")
    others = []
    for other, write in SAMPLES.items():
        if other != fmt:
            (tmp_path / other).mkdir()
            others.append(write(tmp_path / other)[0])
    junk = tmp_path / "junk.txt"
    junk.write_text("not a file of measurements\n" * 3)
    binary = tmp_path / "binary.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    for path in others + [junk, binary]:
        with pytest.raises(InteropError):
            import_file(fmt, path, device=device, data_root=tmp_path / "data", mapping=mapping)
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").rglob("*.parquet"))


@pytest.mark.parametrize("fmt", sorted(IMPORTERS.names()))
def test_a_truncated_file_is_refused_or_imports_its_whole_lines(fmt, tmp_path):
    """A file cut anywhere (a copy killed midway) gives InteropError, or imports what it holds whole, with the
    cut part skipped and said; never another exception."""
    path, mapping, device = SAMPLES[fmt](tmp_path)
    whole = import_file(fmt, path, device=device, data_root=tmp_path / "whole", mapping=mapping).rows_added
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 7):
        part = tmp_path / f"cut{cut}{path.suffix}"
        part.write_bytes(data[:cut])
        try:
            rep = import_file(fmt, part, device=device, data_root=tmp_path / f"data{cut}", mapping=mapping)
        except InteropError:
            continue
        assert 0 < rep.rows_added <= whole                          # what it holds whole, never more
        assert rep.rows_added < whole or not rep.skipped            # a line cut short is skipped and said
        assert all(isinstance(line, int) and why for line, why in rep.skipped)
