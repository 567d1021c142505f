"""A tuning database's measurements as dataset rows (costlearn.interop.import_tuning_db, `costlearn import
tuning-db`): every host's measurement of a device class is one row with its own provenance; importing again, or a
database that grew, adds only what the folder lacks; damaged or hostile rows are skipped and counted; a kill -9
loses and doubles nothing; the database is only read."""
from __future__ import annotations

import json
import math
import sqlite3

import pytest

from costlearn import __version__
from costlearn.cli import main
from costlearn.collect.dataset import load
from costlearn.core.device import DeviceSpec, preset
from costlearn.core.problem import Problem
from costlearn.families import VENDOR_CONFIG_ID, get_family
from costlearn.families.triton_mm import TritonMMConfig
from costlearn.interop import InteropError, import_file, import_tuning_db
from costlearn.interop.tuning_db_import import source_line
from costlearn.serve.fleet import MEASUREMENT_COLUMNS, Measurement
from costlearn.serve.tuning_db import TuningDB
from inductor_fixture import write_log

FAM = get_family("triton_mm")
TILE = TritonMMConfig(64, 64, 32, 4, 3).config_id
OTHER = TritonMMConfig(128, 64, 32, 4, 4).config_id
CLOCKS = {"sm_clock_mhz": 1410.0, "mem_clock_mhz": 1593.0, "temperature_c": 51.0, "throttled": False}
ENV = {"device_name": "NVIDIA A100-SXM4-80GB", "driver_version": "550.54.15", "runtime_version": "12040",
       "library_version": "triton 3.1.0", "compute_capability": "8.0", "costlearn": __version__}


def tuning(tid: str, host: str = "gpu-01", times: dict | None = None, measured: str = "2025-03-01T10:00:00+00:00"):
    """One tuning's measurements: each config's p50 as given, p20/p80 5 % either side."""
    times = times or {TILE: 10.0, OTHER: 12.0, VENDOR_CONFIG_ID: 11.0}
    return [Measurement(c, t * 0.95, t, t * 1.05, 25, host, tid, CLOCKS, ENV, measured, 0.004)
            for c, t in times.items()]


def record(db, m: int, tid: str, *, device="a100", template_hash=FAM.template_hash, version=__version__, **kw):
    db.record(Problem(m, 256, 512, "float16"), "triton_mm", device, template_hash, tuning(tid, **kw), source="test",
              costlearn_version=version)


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "tuning.sqlite"
    db = TuningDB(path, create=True)
    record(db, 128, "t1", host="gpu-01")
    record(db, 128, "t2", host="gpu-02", measured="2025-03-02T10:00:00+00:00")
    record(db, 256, "t3")
    db.close()
    return path


def rows_of(data):
    return load(data / "a100")[0]


def test_every_measurement_becomes_a_row_with_its_own_provenance(db_path, tmp_path):
    rep = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, rep.duplicates, rep.skipped, rep.format) == (9, 0, [], "tuning-db")
    df = rows_of(tmp_path / "data").sort_values(["m", "run_id", "config_id"]).reset_index(drop=True)
    r = df[(df["run_id"] == "t2") & (df["config_id"] == TILE)].iloc[0]
    assert (r["m"], r["n"], r["k"], r["dtype"], r["layout"], r["epilogue"], r["family"]) == \
        (128, 256, 512, "float16", "NN", "none", "triton_mm")
    assert (r["time_us"], r["time_us_p20"], r["time_us_p80"], r["n_samples"], r["rse"]) == (10.0, 9.5, 10.5, 25, 0.004)
    assert (r["host"], r["timestamp"], r["run_id"], r["session_id"]) == \
        ("gpu-02", "2025-03-02T10:00:00+00:00", "t2", "t2")
    assert (r["sm_clock_mhz"], r["mem_clock_mhz"], r["temperature_c"], bool(r["throttled"])) == \
        (1410.0, 1593.0, 51.0, False)
    assert (r["driver_version"], r["runtime_version"], r["library_version"]) == ("550.54.15", "12040", "triton 3.1.0")
    assert json.loads(r["device_settings"]) == {k: v for k, v in ENV.items() if not k.endswith("_version")}
    assert (r["template_hash"], r["costlearn_version"], r["protocol_version"], r["status"]) == \
        (FAM.template_hash, __version__, 0, "ok")
    assert (r["source_format"], r["source_file"], r["source_sha256"]) == ("tuning-db", "tuning.sqlite", rep.sha256)
    key = (128, 256, 512, "float16", "NN", "none", "triton_mm", "a100", FAM.template_hash, __version__)
    assert r["source_line"] == source_line(key, "t2", TILE) and 0 < r["source_line"] < 2 ** 63
    assert df["source_line"].nunique() == 9 and (df["device_slug"] == "a100").all()
    assert "imported 9 rows" in rep.summary()


def test_importing_twice_adds_nothing(db_path, tmp_path):
    import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    again = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert (again.rows_added, again.duplicates, again.already_imported) == (0, 9, True)
    assert len(rows_of(tmp_path / "data")) == 9 and "nothing added" in again.summary()


def test_a_database_that_grew_adds_only_its_new_measurements(db_path, tmp_path):
    import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    db = TuningDB(db_path)
    record(db, 512, "t4", host="gpu-03")                   # a new problem
    record(db, 128, "t5", host="gpu-03")                   # a new tuning of a problem imported before
    db.close()
    rep = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, rep.duplicates) == (6, 9)
    df = rows_of(tmp_path / "data")
    assert len(df) == 15 and sorted(df.loc[df["host"] == "gpu-03", "run_id"].unique()) == ["t4", "t5"]


def test_another_device_class_s_measurements_are_not_imported(db_path, tmp_path):
    db = TuningDB(db_path)
    record(db, 128, "h1", device="h100")
    record(db, 128, "x1", device="a100x")                  # a slug that merely starts like it
    db.close()
    rep = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert rep.rows_added == 9 and set(rows_of(tmp_path / "data")["run_id"]) == {"t1", "t2", "t3"}
    h100 = import_tuning_db(db_path, device_class="h100", data_root=tmp_path / "data")
    assert h100.rows_added == 3 and h100.folder == tmp_path / "data" / "h100"
    assert set(load(tmp_path / "data" / "h100")[0]["device_name"]) == {preset("h100").name}
    with pytest.raises(InteropError, match="no measurement of device class 'h200'"):
        import_tuning_db(db_path, device_class="h200", data_root=tmp_path / "data")
    assert not (tmp_path / "data" / "h200").exists()


def _insert(path, rows: list) -> None:
    """Write raw rows into table measurements, past every check (a damaged file, or another program's writes)."""
    con = sqlite3.connect(path)
    with con:
        for r in rows:
            con.execute(f"INSERT INTO measurements VALUES ({', '.join('?' * len(MEASUREMENT_COLUMNS))})", r)
    con.close()


def _raw(m=128, config_id=TILE, tid="bad", **over) -> tuple:
    """A valid raw row of table measurements, with ``over`` replacing columns by name."""
    values = dict(zip(MEASUREMENT_COLUMNS, (m, 256, 512, "float16", "NN", "none", "triton_mm", "a100",
                                            FAM.template_hash, __version__, config_id, "gpu-09", tid, 9.5, 10.0,
                                            10.5, 25, 0.004, json.dumps(CLOCKS), json.dumps(ENV),
                                            "2025-03-05T10:00:00+00:00")))
    values.update(over)
    return tuple(values[c] for c in MEASUREMENT_COLUMNS)


HOSTILE = {
    "text in p50 (NaN)": dict(p50_us="NaN"),
    "infinite p80": dict(p80_us=float("inf")),
    "p20 above p50": dict(p20_us=11.0),
    "text in m": dict(m="128; DROP TABLE measurements"),
    "text in samples": dict(samples="many"),
    "rse below 0": dict(rse=-1.0),
    "huge clocks JSON": dict(clocks_json=json.dumps({"pad": "x" * (2 << 20)})),
    "deep env JSON": dict(env_json="[" * 100_000 + "]" * 100_000),
    "env not a dict": dict(env_json="[1, 2]"),
    "env value not a name": dict(env_json=json.dumps({"driver_version": 550})),
    "unknown config id": dict(config_id="m64n64k32_w4_s3_g8_extra"),
    "unknown family": dict(family="cutlass"),
    "an unknown dtype": dict(dtype="float64"),
    "a dtype the family does not run": dict(family="gemm", config_id="m16n32k8_t2x4_outer_p0_row"),
    "control characters in the host": dict(host="gpu\n01"),
    "a control character in measured": dict(measured="2025-03-05\x1b[2J"),
}


def test_damaged_or_hostile_rows_are_skipped_and_counted_never_imported(db_path, tmp_path):
    bad = [_raw(tid=f"bad{i}", **over) for i, over in enumerate(HOSTILE.values())]
    odd_clocks = _raw(tid="odd", clocks_json='{"sm_clock_mhz": NaN, "temperature_c": "hot", "throttled": 1}')
    _insert(db_path, bad + [odd_clocks])
    rep = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert rep.rows_added == 10 and rep.skipped.total == len(HOSTILE) == len(rep.skipped)
    df = rows_of(tmp_path / "data")
    assert not df["run_id"].str.startswith("bad").any()
    odd = df[df["run_id"] == "odd"].iloc[0]                 # clocks it cannot read are unknown, the time is kept
    assert math.isnan(odd["sm_clock_mhz"]) and math.isnan(odd["temperature_c"]) and not odd["throttled"]
    whys = " | ".join(why for _, why in rep.skipped)
    for words in ("malformed triton_mm config_id", "unknown kernel family 'cutlass'", "must be finite", "JSON field",
                  "recursion", "must be dicts", "dtype='float64'", "'gemm' family supports ['float32']",
                  "host='gpu\\n01'", "M='128; DROP TABLE measurements'"):
        assert words in whys, words
    assert all(why.isprintable() and len(why) < 400 for _, why in rep.skipped)
    text = rep.summary(max_lines=3)
    assert f"skipped {len(HOSTILE)} rows" in text and "  row " in text and f"and {len(HOSTILE) - 3} more" in text
    assert import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data").rows_added == 0


def test_a_database_of_only_damaged_rows_writes_nothing(tmp_path):
    path = tmp_path / "t.sqlite"
    TuningDB(path, create=True).close()
    _insert(path, [_raw(tid="b1", p50_us="NaN"), _raw(tid="b2", config_id="nope")])
    with pytest.raises(InteropError, match="no measurement found in this tuning-db file .row 1: "):
        import_tuning_db(path, device_class="a100", data_root=tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_the_read_only_open_never_creates_or_changes_the_database_file(db_path, tmp_path):
    folder = db_path.parent
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()}
    import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()}
    assert after[db_path.name] == before[db_path.name]
    side = set(after) - set(before)             # SQLite's shared-memory index of a WAL file read: no data in it
    assert side <= {f"{db_path.name}-wal", f"{db_path.name}-shm"} and after.get(f"{db_path.name}-wal", (b"",))[0] == b""
    missing = tmp_path / "nowhere" / "tuning.sqlite"
    with pytest.raises(FileNotFoundError, match="no tuning database"):
        import_tuning_db(missing, device_class="a100", data_root=tmp_path / "data")
    assert not missing.parent.exists()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(FileNotFoundError, match="empty file"):
        import_tuning_db(empty, device_class="a100", data_root=tmp_path / "data")
    assert empty.read_bytes() == b""


def test_the_default_target_is_the_tuning_database_the_tuner_records_in(db_path, tmp_path, monkeypatch):
    monkeypatch.setenv("COSTLEARN_TUNING_DB", str(db_path))
    assert import_tuning_db(device_class="a100", data_root=tmp_path / "data").rows_added == 9


def test_a_device_class_is_a_preset_or_needs_one_and_a_preset_may_not_contradict_it(db_path, tmp_path):
    with pytest.raises(InteropError, match=r"device_class='rtx-4090' is not a preset \(a100, h100, h200\)"):
        import_tuning_db(db_path, device_class="rtx-4090", data_root=tmp_path / "data")
    with pytest.raises(InteropError, match="describes h100, not the device class a100"):
        import_tuning_db(db_path, device_class="a100", preset="h100", data_root=tmp_path / "data")
    with pytest.raises(InteropError, match="device_class"):
        import_tuning_db(db_path, device_class="a100\n", data_root=tmp_path / "data")
    with pytest.raises(InteropError, match="--preset 'h300'"):
        import_tuning_db(db_path, device_class="rtx-4090", preset="h300", data_root=tmp_path / "data")
    assert import_tuning_db(db_path, device_class="a100", preset="a100", data_root=tmp_path / "data").rows_added == 9


def test_a_device_class_that_is_no_preset_takes_its_device_spec(db_path, tmp_path):
    spec = DeviceSpec.from_dict({**preset("a100").to_dict(), "name": "NVIDIA RTX 4090", "compute_capability": "8.9"})
    db = TuningDB(db_path)
    record(db, 128, "r1", device=spec.slug)
    db.close()
    rep = import_tuning_db(db_path, device_class=spec.slug, preset=spec, data_root=tmp_path / "data")
    df = load(tmp_path / "data" / spec.slug)[0]
    assert rep.rows_added == 3 and set(df["device_name"]) == {"NVIDIA RTX 4090"} and set(df["run_id"]) == {"r1"}


def test_a_vendor_measurement_is_the_vendor_row_the_inductor_importer_writes_for_extern_mm(tmp_path):
    write_log(tmp_path / "mm.txt", shapes=[(128, 256, 512)], layouts=["NN"], configs=[(64, 64, 32, 4, 3)])
    import_file("inductor", tmp_path / "mm.txt", device="a100", data_root=tmp_path / "inductor")
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    record(db, 128, "v1")
    db.close()
    import_tuning_db(tmp_path / "t.sqlite", device_class="a100", data_root=tmp_path / "fleet")
    ind, fleet = load(tmp_path / "inductor" / "a100")[0], load(tmp_path / "fleet" / "a100")[0]
    same = ["m", "n", "k", "dtype", "layout", "epilogue", "family", "config_id", "block_m", "block_n", "block_k",
            "thread_m", "thread_n", "threads", "pipeline_stages", "smem_bytes", "status", "device_slug"]
    for cid in (VENDOR_CONFIG_ID, TILE):
        a = ind.loc[ind["config_id"] == cid, same].reset_index(drop=True)
        b = fleet.loc[fleet["config_id"] == cid, same].reset_index(drop=True)
        assert len(a) == len(b) == 1 and a.equals(b), cid


def test_the_command_line_imports_a_tuning_database_and_says_what_it_added(db_path, tmp_path, capsys):
    data = str(tmp_path / "data")
    assert main(["import", "tuning-db", str(db_path), "--device-class", "a100", "--data", data]) == 0
    out = capsys.readouterr().out
    assert "imported 9 rows" in out and "[tuning-db, sha256" in out and "next: costlearn train" in out
    _insert(db_path, [_raw(tid="bad", config_id="nope")])
    assert main(["import", "tuning-db", str(db_path), "--device-class", "a100", "--data", data]) == 0
    out = capsys.readouterr().out
    assert "nothing added" in out and "left out 9 measurements" in out and "skipped 1 row " in out
    assert main(["import", "tuning-db", str(db_path), "--data", data]) == 2
    assert "--device-class is required" in capsys.readouterr().err
    assert main(["import", "tuning-db", "postgresql://u:secret@db.example/tuning", "--device-class", "a100",
                 "--data", data]) == 2
    err = capsys.readouterr().err
    assert "carries a password" in err and "secret" not in err
    assert main(["import", "inductor", str(db_path), "--device-class", "a100", "--data", data]) == 2
    assert "--device-class is tuning-db's" in capsys.readouterr().err


_KILLED_IMPORT = """
import os, signal, sys
import costlearn.collect.dataset as dataset
import costlearn.interop.common as common
from costlearn.core.files import open_temp
from costlearn.interop import import_tuning_db
common.IMPORT_CHUNK_ROWS = 3
when, at, parts = sys.argv[3], int(sys.argv[4]), [0]
real_part, real_write = common.write_part, dataset.atomic_write
def half_then_die(path, data, **kw):             # killed while the part's bytes are written
    fd, tmp = open_temp(path)
    os.write(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
def part(rows, folder):
    parts[0] += 1
    if when == "during" and parts[0] == at:
        dataset.atomic_write = half_then_die
    out = real_part(rows, folder)
    if when == "after" and parts[0] == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return out
common.write_part = part
import_tuning_db(sys.argv[1], device_class="a100", data_root=sys.argv[2])
"""


@pytest.mark.slow
@pytest.mark.parametrize("when, at", [("during", 1), ("after", 1), ("during", 2), ("after", 2)])
def test_an_import_killed_at_any_write_loses_and_doubles_nothing(db_path, tmp_path, when, at):
    import signal
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-c", _KILLED_IMPORT, str(db_path), str(tmp_path / "data"), when, str(at)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr
    written = 3 * (at - (when == "during"))
    assert len(rows_of(tmp_path / "data")) == written
    rep = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, rep.duplicates) == (9 - written, written)
    df = rows_of(tmp_path / "data")
    assert len(df) == 9 and df["source_line"].nunique() == 9
    assert import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data").already_imported


def test_a_fleet_server_s_measurements_import_and_are_the_rows_of_the_same_measurements_in_a_file(pg_url, tmp_path):
    from costlearn.serve.tuning_db_server import copy_store, open_store
    server = open_store(pg_url)
    record(server, 128, "s1", host="gpu-01")
    record(server, 256, "s2", host="gpu-02")
    record(server, 128, "h1", device="h100")
    rep = import_tuning_db(pg_url, device_class="a100", data_root=tmp_path / "data")
    df = rows_of(tmp_path / "data")
    assert rep.rows_added == 6 and set(df["run_id"]) == {"s1", "s2"} and set(df["source_file"]) == {rep.file}
    assert rep.file.startswith("postgresql://") and set(df["host"]) == {"gpu-01", "gpu-02"}
    assert import_tuning_db(pg_url, device_class="a100", data_root=tmp_path / "data").already_imported
    # the same measurements in a host's file (copied from the server) are the same rows
    copy_store(pg_url, tmp_path / "host.sqlite")
    assert import_tuning_db(tmp_path / "host.sqlite", device_class="a100",
                            data_root=tmp_path / "data").duplicates == 6
    server.close()


def test_a_fleet_server_s_hostile_rows_nan_among_them_are_skipped_and_counted(pg_url, tmp_path):
    import psycopg
    from costlearn.serve.tuning_db_server import open_store
    server = open_store(pg_url)
    record(server, 128, "s1")
    server.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        for tid, over in (("nan", dict(p50_us=float("nan"))), ("inf", dict(p80_us=float("inf"))),
                          ("cfg", dict(config_id="nope")), ("big", dict(env_json="{" * 5000))):
            con.execute(f"INSERT INTO measurements VALUES ({', '.join(['%s'] * len(MEASUREMENT_COLUMNS))})",
                        _raw(tid=tid, **over))
    rep = import_tuning_db(pg_url, device_class="a100", data_root=tmp_path / "data")
    assert rep.rows_added == 3 and rep.skipped.total == 4


@pytest.mark.parametrize("store", ["file", "server"])
def test_a_device_class_is_streamed_from_one_snapshot_each_row_read_once(store, tmp_path, request, monkeypatch):
    """Regression: the import read a device class's every measurement into one list (memory grew with the
    fleet's database). One query is streamed now, a batch of rows at a time: rows recorded while it reads are the
    next import's, none is read twice or skipped."""
    import inspect
    from costlearn.serve import tuning_db
    from costlearn.serve.tuning_db_server import open_store
    monkeypatch.setattr(tuning_db, "STREAM_ROWS", 2)
    target = request.getfixturevalue("pg_url") if store == "server" else tmp_path / "t.sqlite"
    db = open_store(target, create=True) if store == "file" else open_store(target)
    for i in range(7):                                    # 21 rows, at 3 instants
        record(db, 64 * (i + 1), f"t{i}", measured=f"2025-03-0{1 + i % 3}T10:00:00+00:00")
    rows = db.device_measurements("a100")
    assert inspect.isgenerator(rows)
    got = [next(rows) for _ in range(4)]
    record(db, 2048, "late")                              # recorded while the read is under way
    got += list(rows)
    assert len(got) == 21 and len({(r[12], r[10]) for r in got}) == 21 and "late" not in {r[12] for r in got}
    rep = import_tuning_db(target, device_class="a100", data_root=tmp_path / "data")
    again = import_tuning_db(target, device_class="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, again.rows_added, again.duplicates) == (24, 0, 24)
    db.close()


def _unkeyed(path):
    """Rebuild the file's measurements table without costlearn's NOT NULL and primary key (a damaged or hostile
    database the schema check passes)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE m2 AS SELECT * FROM measurements")
    con.execute("DROP TABLE measurements")
    con.execute("ALTER TABLE m2 RENAME TO measurements")
    con.commit()
    return con


def test_rows_a_keyless_table_holds_null_twice_or_not_utf8_are_skipped_and_counted_the_rest_imported(db_path,
                                                                                                    tmp_path):
    """Regression (an attack on the paged read): a NULL in an ordering column lost the rows tied with it, a second
    copy of a row was dropped or imported twice by where a page ended, and one host name that was not UTF-8
    stopped every import of the class at that row."""
    con = _unkeyed(db_path)
    con.execute("UPDATE measurements SET tuning_id = NULL WHERE tuning_id = 't1' AND config_id = 'vendor'")
    con.execute("INSERT INTO measurements SELECT * FROM measurements WHERE tuning_id = 't3'")     # 3 rows again
    con.execute("UPDATE measurements SET host = CAST(x'fffe' AS TEXT) WHERE tuning_id = 't2' AND config_id = ?",
                (TILE,))
    con.commit()
    con.close()
    rep = import_tuning_db(db_path, device_class="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, rep.skipped.total) == (7, 5)           # 9 + 3 rows: 1 NULL, 3 copies, 1 not UTF-8
    whys = " ".join(why for _, why in rep.skipped)
    assert "a second row of the measurement before it" in whys and "not UTF-8" in whys
    df = rows_of(tmp_path / "data")
    assert len(df) == 7 and sorted(df["run_id"].value_counts().to_dict().items()) == [("t1", 2), ("t2", 2), ("t3", 3)]


def test_a_database_renamed_over_the_path_during_an_import_is_not_mixed_in(db_path, tmp_path, monkeypatch):
    """Regression (an attack): a file renamed over the database's path part way through was read on from the
    same position, so one import held rows of two databases. The read keeps to the file it opened."""
    from costlearn.serve import tuning_db
    monkeypatch.setattr(tuning_db, "STREAM_ROWS", 2)
    other = tmp_path / "other.sqlite"
    db = TuningDB(other, create=True)
    for i in range(3):
        record(db, 1024 + i, f"b{i}")
    db.close()
    store = TuningDB(db_path, read_only=True)
    rows = store.device_measurements("a100")
    got = [next(rows)]
    import os
    os.replace(other, db_path)
    got += list(rows)
    store.close()
    assert len(got) == 9 and {r[12] for r in got} == {"t1", "t2", "t3"}


def test_a_device_that_is_no_preset_is_described_by_its_collections_device_json(db_path, tmp_path):
    """Regression: a new user's tuning database of their own (PoCL) device could not be imported at all: its
    device class is no preset, and --preset took preset names only. The device.json a collection wrote in
    <data>/<slug>/ describes it, or --preset names that file."""
    from costlearn.collect.loop import write_device_json
    spec = DeviceSpec.from_dict({**preset("a100").to_dict(), "name": "NVIDIA RTX 4090", "compute_capability": "8.9"})
    db = TuningDB(db_path)
    record(db, 128, "r1", device=spec.slug)
    db.close()
    collected = tmp_path / "collected" / spec.slug
    collected.mkdir(parents=True)
    write_device_json(spec, collected)
    rep = import_tuning_db(db_path, device_class=spec.slug, data_root=tmp_path / "collected")
    assert rep.rows_added == 3 and rep.folder == collected
    rep = import_tuning_db(db_path, device_class=spec.slug, preset=str(collected / "device.json"),
                           data_root=tmp_path / "elsewhere")
    assert rep.rows_added == 3 and set(load(tmp_path / "elsewhere" / spec.slug)[0]["device_name"]) == {spec.name}
    with pytest.raises(InteropError, match="holds no device.json of it"):
        import_tuning_db(db_path, device_class=spec.slug, data_root=tmp_path / "empty")
    write_device_json(preset("h100"), tmp_path)
    with pytest.raises(InteropError, match=f"describes h100, not the device class {spec.slug}"):
        import_tuning_db(db_path, device_class=spec.slug, preset=str(tmp_path / "device.json"),
                         data_root=tmp_path / "x")


def _bulk(pg_url, n: int) -> None:
    """``n`` more measurements of device class a100 on the server (one INSERT ... SELECT)."""
    import psycopg
    row = _raw(tid="x")
    cols = ", ".join(MEASUREMENT_COLUMNS)
    values = ", ".join("'s' || i" if c == "tuning_id" else "%s" for c in MEASUREMENT_COLUMNS)
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute(f"INSERT INTO measurements ({cols}) SELECT {values} FROM generate_series(1, {n}) AS i",
                    [v for c, v in zip(MEASUREMENT_COLUMNS, row) if c != "tuning_id"])


def _stream_backend(pg_server) -> int:
    """The server process of the streamed read in progress."""
    rows = pg_server.execute("SELECT pid FROM pg_stat_activity WHERE query ILIKE '%costlearn_stream%' "
                             "AND pid <> pg_backend_pid()")
    assert len(rows) == 1, rows
    return rows[0][0]


def test_a_server_stopped_mid_import_loses_and_doubles_nothing(pg_server, pg_url, tmp_path, monkeypatch):
    """The fleet's server dies while an import streams its rows: the import is an OSError naming the database, what
    it wrote stays, and after the restart the same import adds exactly the rest (50,000 rows: more than the
    server's socket can hold, so the stop lands mid-stream)."""
    from costlearn.interop import common
    from costlearn.serve.tuning_db_server import ServerTuningDB, open_store
    server = open_store(pg_url)
    record(server, 64, "first")                                    # costlearn's tables, and 3 rows
    server.close()
    _bulk(pg_url, 50_000)
    monkeypatch.setattr(common, "IMPORT_CHUNK_ROWS", 5000)           # parts written as the rows arrive
    stream = ServerTuningDB._stream

    def dies_part_way(self, table, sql, params=()):
        for i, r in enumerate(stream(self, table, sql, params)):
            if i == 12_000:
                pg_server.stop("immediate")
            yield r
    monkeypatch.setattr(ServerTuningDB, "_stream", dies_part_way)
    try:
        with pytest.raises(OSError, match="cannot use the tuning database"):
            import_tuning_db(pg_url, device_class="a100", data_root=tmp_path / "data")
    finally:
        pg_server.start()
    monkeypatch.setattr(ServerTuningDB, "_stream", stream)
    kept = len(rows_of(tmp_path / "data"))
    assert 10_000 <= kept < 50_003
    rep = import_tuning_db(pg_url, device_class="a100", data_root=tmp_path / "data")
    df = rows_of(tmp_path / "data")
    assert rep.rows_added == 50_003 - kept and len(df) == 50_003
    assert not df.duplicated(["run_id", "config_id", "m"]).any()


def test_a_slow_import_is_not_cancelled_by_the_statement_timeout(pg_url):
    """Regression: the streamed read of an import ran under the store's statement_timeout (5 s), which counts the
    whole stream, so an import that wrote its parts more slowly than that (CI on two contended cores, 50,003 rows)
    was cancelled by the server half way. The stream's connection has no statement timeout; the rows arrive however
    slowly they are taken."""
    import time
    from costlearn.serve.tuning_db_server import ServerTuningDB
    server = ServerTuningDB(pg_url, timeout_s=0.5)
    record(server, 64, "first")
    _bulk(pg_url, 50_000)
    rows = server.device_measurements("a100")
    first = next(rows)
    time.sleep(1.5)                                                  # three statement timeouts
    assert 1 + sum(1 for _ in rows) == 50_003 and first is not None
    server.close()


def test_a_frozen_server_ends_the_streamed_read_instead_of_hanging_it(pg_server, pg_url):
    """Regression: a server that stops answering mid-read (its process stopped: a frozen host, a cut network) sends
    no statement-timeout cancel, and the import waited for ever. A wait of over twice timeout_s plus a second now
    shuts the connection from this side: an OSError naming the database."""
    import os
    import signal
    import time
    from costlearn.serve.tuning_db_server import ServerTuningDB
    server = ServerTuningDB(pg_url, timeout_s=0.5)
    record(server, 64, "first")
    _bulk(pg_url, 5000)
    rows = server.device_measurements("a100")
    next(rows)
    backend = _stream_backend(pg_server)
    os.kill(backend, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(OSError, match="cannot use the tuning database"):
            sum(1 for _ in rows)
        waited_s = time.monotonic() - t0
    finally:
        os.kill(backend, signal.SIGCONT)
    assert waited_s < 10
    assert 64 in [e.problem.m for e in server.entries()]                 # the store itself still works
    server.close()


def test_a_suspended_import_does_not_hold_its_snapshot_for_ever(pg_url, monkeypatch):
    """Regression: the streamed read lifted the server's idle_in_transaction_session_timeout altogether, so an
    import suspended between two batches (Ctrl-Z, a cut host) held its snapshot and table locks without limit. The
    session ends after STREAM_IDLE_S idle; the read then raises OSError, and the import can be run again."""
    import time
    from costlearn.serve import tuning_db_server
    monkeypatch.setattr(tuning_db_server, "STREAM_IDLE_S", 1)
    server = tuning_db_server.ServerTuningDB(pg_url)
    record(server, 64, "first")
    _bulk(pg_url, 3000)
    rows = server.device_measurements("a100")
    next(rows)
    time.sleep(2.5)                                                  # suspended within the first batch
    with pytest.raises(OSError, match="cannot use the tuning database"):
        sum(1 for _ in rows)
    assert sum(1 for _ in server.device_measurements("a100")) == 3003
    server.close()
