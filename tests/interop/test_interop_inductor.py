"""The Inductor AutoHeuristic importer and what a user does with its rows:
import, train every (family, dtype), predict_best with the triton_mm family
and the vendor candidate, evaluate --no-measure. Small logs are written
here (test fixtures, not measurements); the real A100 random-shape log is
read from $COSTLEARN_A100_LOGS (a100_mm.txt, a folder holding it, or a zip
holding a100/a100_mm.txt: the AutoHeuristic logs of the public repository
AlnisM/autoheuristic-datasets), else from ../shared/ beside a developer's
checkout, and its test skips without it."""
from __future__ import annotations

import json
import math
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from costlearn.collect.dataset import load
from costlearn.interop import InteropError, import_file
from conftest import A100_LOGS
from inductor_fixture import COLUMNS, HEADER, build_models



def _a100_log(tmp_path) -> Path:
    """The A100 random-shape log as a file (extracted from a zip into ``tmp_path``)."""
    if A100_LOGS.is_dir():
        return A100_LOGS / "a100_mm.txt"
    if A100_LOGS.suffix == ".zip":
        with zipfile.ZipFile(A100_LOGS) as z:
            z.extract("a100/a100_mm.txt", tmp_path)
        return tmp_path / "a100" / "a100_mm.txt"
    return A100_LOGS


def _log(path, lines, header=HEADER):
    path.write_text("\n".join([json.dumps(header), COLUMNS] + lines) + "\n")
    return path


LINES = [
    # A row-major, B row-major, float16: NN
    "128,256,512,torch.float16,torch.float16,256,1,512,1,True,True,not_float_32,"
    "type=triton_BLOCK-M=64_BLOCK-K=32_BLOCK-N=64_numstages=3_numwarps=4,0.0125",
    # A column-major (first stride 1), B column-major: TT
    "128,256,512,torch.bfloat16,torch.bfloat16,1,128,1,256,False,False,not_float_32,extern_mm,0.01",
    # float32 with TF32 allowed, A row-major, B column-major: NT; inf -> failed
    "128,256,512,torch.float32,torch.float32,256,1,1,256,True,False,True,"
    "type=triton_BLOCK-M=128_BLOCK-K=32_BLOCK-N=128_numstages=4_numwarps=8,inf",
    # float32 without TF32: exact float32
    "128,256,512,torch.float32,torch.float32,256,1,512,1,True,True,False,extern_mm,0.05",
]


def test_rows_keep_units_layouts_dtypes_failures_and_provenance(tmp_path):
    log = _log(tmp_path / "log.txt", LINES)
    rep = import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, rep.failed, rep.skipped) == (4, 1, [])
    df, _ = load(tmp_path / "data" / "a100")
    df = df.sort_values("source_line").reset_index(drop=True)
    assert df["source_line"].tolist() == [3, 4, 5, 6]
    assert df["layout"].tolist() == ["NN", "TT", "NT", "NN"]
    assert df["dtype"].tolist() == ["float16", "bfloat16", "tfloat32", "float32"]
    assert df["config_id"].tolist() == ["m64n64k32_w4_s3_g8", "vendor", "m128n128k32_w8_s4_g8", "vendor"]
    assert df.loc[0, "time_us"] == pytest.approx(12.5) and df.loc[1, "time_us"] == pytest.approx(10.0)
    assert df.loc[2, "status"] == "failed" and math.isnan(df.loc[2, "time_us"]) and "inf" in df.loc[2, "error"]
    assert (df["m"].tolist(), df["n"].tolist(), df["k"].tolist()) == ([128] * 4, [512] * 4, [256] * 4)
    assert set(df["source_format"]) == {"inductor"} and set(df["source_file"]) == {"log.txt"}
    assert set(df["source_sha256"]) == {rep.sha256} and set(df["device_slug"]) == {"a100"}
    assert json.loads((tmp_path / "data" / "a100" / "device.json").read_text())["name"] == "NVIDIA A100-SXM4-80GB"


def test_importing_the_same_file_again_adds_nothing(tmp_path):
    log = _log(tmp_path / "log.txt", LINES)
    import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    again = import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert again.already_imported and again.rows_added == 0 and "nothing added" in again.summary()
    assert len(list((tmp_path / "data" / "a100").glob("part-*.parquet"))) == 1


def test_a_malformed_line_is_reported_with_its_number_and_skipped(tmp_path):
    bad = ["128,256,512,torch.float16,torch.float16,256,1,512,1,True,True,not_float_32,extern_mm,fast",
           "128,256,512,torch.int8,torch.int8,256,1,512,1,True,True,not_float_32,extern_mm,0.01",
           "128,256,512,torch.float16,torch.float16,512,2,1024,2,False,False,not_float_32,extern_mm,0.01",
           "128,256,512,torch.float16,torch.float16,256,1,512,1,True,True,not_float_32,cutlass_gemm,0.01",
           "0,256,512,torch.float16,torch.float16,256,1,512,1,True,True,not_float_32,extern_mm,0.01"]
    log = _log(tmp_path / "log.txt", LINES[:1] + bad + LINES[1:])
    rep = import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert rep.rows_added == 4
    assert [ln for ln, _ in rep.skipped] == [4, 5, 6, 7, 8]
    why = dict(rep.skipped)
    assert "feedback='fast'" in why[4] and "torch.int8" in why[5] and "neither row- nor column-major" in why[6]
    assert "cutlass_gemm" in why[7] and "m=0" in why[8]
    assert "line 4" in rep.summary()


def test_an_extent_past_int64_or_past_what_train_takes_skips_its_line_not_the_import(tmp_path):
    """m = 10**30 killed the import (OverflowError, nothing
    imported); m = 2**62 was imported and then train refused the folder."""
    row = ",256,512,torch.float16,torch.float16,256,1,512,1,True,True,not_float_32,extern_mm,0.01"
    bad = [str(10**30) + row, str(2**62) + row, str(2**31) + row,
           "128,256,512,torch.float16,torch.float16,256,1," + str(2**64) + ",1,True,True,not_float_32,extern_mm,0.01"]
    log = _log(tmp_path / "log.txt", LINES[:1] + bad + LINES[1:])
    rep = import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert rep.rows_added == 4 and [ln for ln, _ in rep.skipped] == [4, 5, 6, 7]
    why = dict(rep.skipped)
    assert all("is above 2147483647" in why[ln] for ln in (4, 5, 6)) and "mat2_stride_0" in why[7]
    df, _ = load(tmp_path / "data" / "a100")
    assert int(df["m"].max()) == 128


def test_a_header_contradicting_the_preset_is_refused_naming_both(tmp_path):
    h100 = dict(HEADER, shared_memory=232448, device_capa=[9, 0])
    log = _log(tmp_path / "log.txt", LINES, header=h100)
    with pytest.raises(InteropError, match=r"compute capability 9\.0.*8\.0"):
        import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    smem = _log(tmp_path / "smem.txt", LINES, header=dict(HEADER, shared_memory=232448))
    with pytest.raises(InteropError, match="232448 bytes.*166912"):
        import_file("inductor", smem, device="a100", data_root=tmp_path / "data")
    assert not (tmp_path / "data" / "a100").exists() or not list((tmp_path / "data" / "a100").glob("part-*"))
    rep = import_file("inductor", log, device="h100", data_root=tmp_path / "data")      # the right preset works
    assert rep.rows_added == 4 and rep.folder.name == "h100"


@pytest.mark.parametrize("content, match", [
    ("", "empty file"),
    ('{"cache": {}, "tune_params_keys": []}\n', "not an Inductor AutoHeuristic header"),
    ("m,k,n\n1,2,3\n", "not an Inductor AutoHeuristic header"),
    (json.dumps(HEADER) + "\n", "no CSV column line"),
    (json.dumps(HEADER) + "\nm,k,n,feedback\n1,2,3,0.1\n", "lacks the columns"),
    (json.dumps(HEADER) + "\n" + COLUMNS + "\n", "no measurement found"),
    (json.dumps(dict(HEADER, name="pad_mm")) + "\n" + COLUMNS + "\n", "only 'mm' logs"),
])
def test_bad_files_are_refused_and_write_nothing(tmp_path, content, match):
    f = tmp_path / "f.txt"
    f.write_text(content)
    with pytest.raises(InteropError, match=match):
        import_file("inductor", f, device="a100", data_root=tmp_path / "data")
    assert not (tmp_path / "data").exists(), "a failed import wrote " + ", ".join(
        str(p) for p in (tmp_path / "data").rglob("*"))                  # no device.json either (a new user's report)


def test_unknown_format_device_and_missing_file_are_named(tmp_path):
    log = _log(tmp_path / "log.txt", LINES)
    with pytest.raises(InteropError,
                       match=r"import format 'csv'; allowed: \['inductor', 'inductor-lut', 'kernel-tuner'\]"):
        import_file("csv", log, device="a100", data_root=tmp_path)
    with pytest.raises(InteropError, match="--preset 'v100'"):
        import_file("inductor", log, device="v100", data_root=tmp_path)
    with pytest.raises(InteropError, match="no such file"):
        import_file("inductor", tmp_path / "missing.txt", device="a100", data_root=tmp_path)
    with pytest.raises(InteropError, match="--mapping is for kernel-tuner"):
        import_file("inductor", log, device="a100", data_root=tmp_path, mapping="m.json")


def test_a_failed_import_leaves_the_dataset_as_it_was(tmp_path):
    good = _log(tmp_path / "good.txt", LINES)
    import_file("inductor", good, device="a100", data_root=tmp_path / "data")
    before = sorted(p.name for p in (tmp_path / "data" / "a100").iterdir())
    bad = _log(tmp_path / "bad.txt", LINES, header=dict(HEADER, device_capa=[9, 0]))
    with pytest.raises(InteropError):
        import_file("inductor", bad, device="a100", data_root=tmp_path / "data")
    assert sorted(p.name for p in (tmp_path / "data" / "a100").iterdir()) == before


def test_imported_rows_train_predict_and_the_vendor_is_a_candidate(tmp_path):
    from costlearn import predict_best
    from costlearn.families.triton_mm import TritonMMConfig
    models = build_models(tmp_path)
    p = predict_best(1024, 1024, 1024, dtype="float16", device="a100", family="triton_mm", layout="NN",
                     models_dir=models)
    assert p.family == "triton_mm" and p.layout == "NN" and p.time_us > 0
    ids = [c.config_id for c, _ in p.top_k]
    assert "vendor" in ids                                     # the library is ranked with the tile configs
    tile = next(c for c, _ in p.top_k if c.config_id != "vendor")
    assert isinstance(tile, TritonMMConfig)
    assert {"block_m", "block_n", "block_k", "num_warps", "num_stages"} <= set(tile.to_dict())
    # TN was trained on too; TT was not, and is refused naming the layouts it serves
    assert predict_best(512, 512, 512, dtype="float16", device="a100", family="triton_mm", layout="TN",
                        models_dir=models).layout == "TN"
    with pytest.raises(ValueError, match=r"layouts \[.NN., .NT., .TN.\]"):
        predict_best(512, 512, 512, dtype="float16", device="a100", family="triton_mm", layout="TT",
                     models_dir=models)


@pytest.mark.slow
def test_cli_import_train_every_pair_and_evaluate_no_measure(tmp_path, capsys):
    from costlearn.cli import main
    from inductor_fixture import write_log
    log = tmp_path / "mm_log.txt"
    write_log(log)
    # a second dtype with too few rows for a model: train says it skips it
    extra = _log(tmp_path / "bf16.txt", [LINES[1]])
    assert main(["import", "inductor", str(log), "--preset", "a100", "--data", str(tmp_path / "data")]) == 0
    assert main(["import", "inductor", str(extra), "--preset", "a100", "--data", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    assert "imported 108 rows" in out and "next: costlearn train" in out
    assert main(["train", "--data", str(tmp_path / "data" / "a100"), "--models", str(tmp_path / "models")]) == 0
    cap = capsys.readouterr()
    assert "skipping triton_mm/bfloat16" in cap.err and "trained xgboost on 108 triton_mm/float16 rows" in cap.out
    assert main(["evaluate", "--no-measure", "--model", "a100", "--family", "triton_mm", "--dtype", "float16",
                 "--models", str(tmp_path / "models"), "--data", str(tmp_path / "data" / "a100")]) == 0
    out = capsys.readouterr().out
    assert "vendor_only" in out and "best tile config" in out
    assert "Model: a100/triton_mm/float16 xgboost" in out              # evaluate names the model it scored
    assert main(["import", "inductor", str(tmp_path / "nope.txt"), "--preset", "a100"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.skipif(not A100_LOGS.exists(), reason="no A100 Inductor log: set COSTLEARN_A100_LOGS to a100_mm.txt "
                    "(github.com/AlnisM/autoheuristic-datasets), a folder holding it or a zip holding a100/a100_mm.txt")
@pytest.mark.slow
def test_the_real_a100_log_imports_whole(tmp_path):
    rep = import_file("inductor", _a100_log(tmp_path), device="a100", data_root=tmp_path / "data")
    df, report = load(rep.folder)
    assert rep.skipped == [] and rep.rows_added == len(df) == 238_032       # PROVENANCE.md's row count
    assert rep.failed == int((df["status"] == "failed").sum()) > 0 and not report.quarantined
    assert set(df["dtype"]) == {"float16", "bfloat16", "float32", "tfloat32"}
    assert set(df["layout"]) == {"NN", "NT", "TN", "TT"}
    ok = df[df["status"] == "ok"]
    assert np.isfinite(ok["time_us"]).all() and (ok["time_us"] > 0).all()
    assert ok["config_id"].eq("vendor").groupby([ok[c] for c in ("m", "n", "k", "dtype", "layout")]).any().mean() > 0.99


def test_a_log_that_grew_or_a_copy_with_other_bytes_adds_only_new_measurements(tmp_path):
    """Regression: the same measurements imported from an appended log, a
    CRLF copy or a renamed copy were added again (the check was on the
    file's sha256 only)."""
    log = _log(tmp_path / "log.txt", LINES[:2])
    import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    grown = _log(tmp_path / "log.txt", LINES)                      # AutoHeuristic appended two lines
    rep = import_file("inductor", grown, device="a100", data_root=tmp_path / "data")
    assert (rep.rows_added, rep.duplicates) == (2, 2) and "left out 2" in rep.summary()
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(grown.read_bytes().replace(b"\n", b"\r\n"))
    again = import_file("inductor", crlf, device="a100", data_root=tmp_path / "data")
    assert again.already_imported and again.rows_added == 0
    df, _ = load(tmp_path / "data" / "a100")
    assert len(df) == 4 and sorted(df["source_line"]) == [3, 4, 5, 6]


def test_a_predicted_time_beyond_the_devices_peak_is_flagged(tmp_path):
    """Regression: a float16 model predicted 131072^3 at 8,000 TFLOP/s on an
    A100 (peak 312) without flagging it: trees extrapolate flat."""
    from costlearn import predict_best
    models = build_models(tmp_path)
    p = predict_best(131072, 131072, 131072, dtype="float16", device="a100", family="triton_mm", models_dir=models)
    assert p.ood and any("faster than the device's peak" in r and "> its 312 TFLOP/s" in r for r in p.ood_reasons)
    q = predict_best(1024, 1024, 1024, dtype="float16", device="a100", family="triton_mm", models_dir=models)
    assert not any("peak" in r for r in q.ood_reasons)


def test_a_header_only_log_writes_no_device_folder(tmp_path):
    """Regression (fresh-user trial): a log with no measurement was refused but left DATA/<device>/device.json."""
    log = _log(tmp_path / "header_only.txt", [])
    with pytest.raises(InteropError, match="no measurement found"):
        import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_train_with_a_log_of_one_problem_trains_every_pair(tmp_path, capsys):
    """Regression: `costlearn train` on three imported A100 logs stopped with rc 2 after writing three models
    ("need rows from at least 2 problems to fit, got 1"), without naming the pair: one log held a single problem
    of a dtype, and the leave-one-log-out fold that trained on that log alone could not fit."""
    from costlearn.cli import main
    from inductor_fixture import SHAPES, write_log
    write_log(tmp_path / "big.txt")
    write_log(tmp_path / "one.txt", shapes=[(96, 80, 112)], layouts=["NN"])
    for log in ("big.txt", "one.txt"):
        assert main(["import", "inductor", str(tmp_path / log), "--preset", "a100", "--data",
                     str(tmp_path / "data")]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(tmp_path / "data"), "--models", str(tmp_path / "models")]) == 0
    cap = capsys.readouterr()
    assert f"over {len(SHAPES) + 1} shapes" in cap.out and "skipping" not in cap.err
    assert "held-out problems (5 regions of shapes)" in cap.out        # the one-problem log trains no fold


@pytest.mark.slow
def test_train_names_a_pair_it_could_not_train_and_trains_the_others(tmp_path, capsys, monkeypatch):
    """A pair whose training fails is skipped, named with the reason, and the rest are trained (rc 0); when
    none can be, train stops naming each (rc 2)."""
    import costlearn.learn.train
    from costlearn.cli import main
    from inductor_fixture import write_log
    write_log(tmp_path / "f16.txt")
    (tmp_path / "bf16.txt").write_text((tmp_path / "f16.txt").read_text().replace("torch.float16", "torch.bfloat16"))
    for log in ("f16.txt", "bf16.txt"):
        assert main(["import", "inductor", str(tmp_path / log), "--preset", "a100", "--data",
                     str(tmp_path / "data")]) == 0
    real = costlearn.learn.train.train

    def failing(folder, models, *, dtype, **kw):                 # a stand-in failure for one pair
        if dtype in failing.dtypes:
            raise ValueError(f"a {dtype} failure")
        return real(folder, models, dtype=dtype, **kw)
    failing.dtypes = {"bfloat16"}
    monkeypatch.setattr(costlearn.learn.train, "train", failing)
    capsys.readouterr()
    assert main(["train", "--data", str(tmp_path / "data"), "--models", str(tmp_path / "models")]) == 0
    cap = capsys.readouterr()
    assert "skipping triton_mm/bfloat16: a bfloat16 failure" in cap.err
    assert "trained 1 of 2 (family, dtype) pairs; skipped triton_mm/bfloat16: a bfloat16 failure" in cap.err
    assert "triton_mm/float16 rows" in cap.out
    failing.dtypes = {"bfloat16", "float16"}
    assert main(["train", "--data", str(tmp_path / "data"), "--models", str(tmp_path / "m2"),
                 "--dtype", "float16", "--dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert "no (family, dtype) pair" in err and "triton_mm/float16: a float16 failure" in err \
        and "triton_mm/bfloat16: a bfloat16 failure" in err


def test_from_log_exports_the_dtypes_the_store_serves_and_names_the_rest(tmp_path, capsys):
    """Regression: the README's `export inductor-lut --from-log` failed on a real log (it held tfloat32 rows and
    the store had no tfloat32 model)."""
    from costlearn.cli import main
    from inductor_fixture import DEVICE, write_log
    models = build_models(tmp_path / "m")
    write_log(tmp_path / "f16.txt")
    text = (tmp_path / "f16.txt").read_text().splitlines()
    tf32 = [ln.replace("torch.float16", "torch.float32").replace("not_float_32", "True") for ln in text[2:5]]
    (tmp_path / "log.txt").write_text("\n".join(text + tf32) + "\n")
    capsys.readouterr()
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--from-log",
                 str(tmp_path / "log.txt"), "--top-k", "3", "--out", str(tmp_path / "lut.json")]) == 0
    err = capsys.readouterr().err
    assert "left out the 1 tfloat32 problems of the log: the store has no triton_mm/tfloat32 model of a100" in err
    assert len(json.loads((tmp_path / "lut.json").read_text())) == 12


def test_evaluate_without_report_says_how_to_get_the_per_problem_table(tmp_path, capsys, monkeypatch):
    """Regression: `evaluate --no-measure` without --report said "the per-problem table is in the --report file"."""
    import costlearn.cli.evaluate
    from costlearn.cli import main
    from inductor_fixture import DEVICE
    models = build_models(tmp_path)
    monkeypatch.setattr(costlearn.cli.evaluate, "PER_SHAPE_PRINT_MAX", 1)
    capsys.readouterr()
    assert main(["evaluate", "--no-measure", "--family", "triton_mm", "--dtype", "float16", "--models", str(models),
                 "--data", str(tmp_path / "data" / DEVICE)]) == 0
    out = capsys.readouterr().out
    assert "the per-problem table is not printed; --report FILE writes it, with a CSV" in out
    assert "in the --report file" not in out


def test_a_file_that_is_not_a_regular_file_is_named_so(tmp_path):
    """Regression: `import inductor /dev/null` said "no such file"."""
    with pytest.raises(InteropError, match="/dev/null: not a regular file"):
        import_file("inductor", "/dev/null", device="a100", data_root=tmp_path)
    with pytest.raises(InteropError, match="no such file"):
        import_file("inductor", tmp_path / "nope.txt", device="a100", data_root=tmp_path)


_KILLED_IMPORT = """
import os, signal, sys
import costlearn.interop.common as common
from costlearn.interop import import_file
common.IMPORT_CHUNK_ROWS = 3
real, parts = common.write_part, [0]
def write_then_maybe_die(rows, folder):
    out = real(rows, folder)
    parts[0] += 1
    if parts[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return out
common.write_part = write_then_maybe_die
import_file("inductor", sys.argv[1], device="a100", data_root=sys.argv[2])
"""


@pytest.mark.parametrize("kill_after_parts", [1, 2])
def test_an_import_killed_part_way_resumes_and_holds_every_row_once(tmp_path, kill_after_parts):
    """An import held the whole log in memory (10^7 lines: MemoryError). It now writes a part per chunk
    of lines; killed (kill -9) after a part, a rerun adds the rest and no row twice."""
    import signal
    import subprocess
    import sys
    lines = [LINES[0].replace("128,256,512", f"{64 + i},256,512", 1) for i in range(8)]
    log = _log(tmp_path / "log.txt", lines)
    run = subprocess.run([sys.executable, "-c", _KILLED_IMPORT, str(log), str(tmp_path / "data"),
                          str(kill_after_parts)], capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert len(load(tmp_path / "data" / "a100")[0]) == 3 * kill_after_parts
    rep = import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    df, _ = load(tmp_path / "data" / "a100")
    assert rep.rows_added == 8 - 3 * kill_after_parts and rep.duplicates == 3 * kill_after_parts
    assert len(df) == 8 and sorted(df["m"]) == [64 + i for i in range(8)] and sorted(df["source_line"]) == \
        list(range(3, 11))
    assert import_file("inductor", log, device="a100", data_root=tmp_path / "data").already_imported


def test_a_byte_that_is_not_utf8_or_a_stray_quote_costs_its_own_line_only(tmp_path):
    """Regression (an attack): one invalid UTF-8 byte on line 1001 of a 45,002-line log lost 55 measurements, reported
    2 skipped lines at the wrong numbers and shifted 43,966 source lines (the text decoder dropped a chunk), so the
    corrected log then imported 44,017 rows again; a stray quote swallowed the lines after it."""
    lines = [LINES[0].replace("128,256,512", f"{64 + i},256,512", 1) for i in range(40)]
    body = "\n".join([json.dumps(HEADER), COLUMNS] + lines) + "\n"
    raw = bytearray(body.encode())
    at = raw.index(f"\n{64 + 10},".encode()) + 1                   # the start of the 11th record: line 13
    raw[at] = 0xFF
    body_lines = raw.split(b"\n")
    body_lines[20 + 2] = b'"' + body_lines[20 + 2]                  # a stray quote opening line 23
    (tmp_path / "bad.txt").write_bytes(b"\n".join(body_lines))
    rep = import_file("inductor", tmp_path / "bad.txt", device="a100", data_root=tmp_path / "data")
    assert [ln for ln, _ in rep.skipped] == [13, 23] and "not UTF-8" in rep.skipped[0][1]
    df, _ = load(tmp_path / "data" / "a100")
    assert rep.rows_added == 38 and sorted(df["source_line"]) == [ln for ln in range(3, 43) if ln not in (13, 23)]
    assert (df["m"] - 64 + 3 == df["source_line"]).all()            # every row at its own line
    _log(tmp_path / "good.txt", lines)
    again = import_file("inductor", tmp_path / "good.txt", device="a100", data_root=tmp_path / "data")
    assert again.rows_added == 2 and len(load(tmp_path / "data" / "a100")[0]) == 40


def test_export_from_the_tuning_database_lists_measured_winners_alone_and_the_model_s_choices_for_the_rest(
        tmp_path, capsys):
    """export inductor-lut --from-db: a problem the fleet measured lists its winner alone (the measurement timed
    the vendor beside it); one only predicted lists the model's top k and the vendor call; another device class's
    entries are not read."""
    from costlearn import __version__
    from costlearn.cli import main
    from costlearn.core.problem import Problem
    from costlearn.families import get_family
    from costlearn.interop.tool_names import to_tool
    from costlearn.serve.fleet import Measurement
    from costlearn.serve.predict import load_predictor
    from costlearn.serve.tuning_db import TuningDB, TuningEntry
    from inductor_fixture import DEVICE
    models = build_models(tmp_path)
    pred = load_predictor(DEVICE, "triton_mm", "float16", models)
    fam = get_family("triton_mm")
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    measured, asked = Problem(512, 512, 512, "float16"), Problem(640, 384, 1024, "float16")
    best = next(c for c, _ in pred.predict(measured, 5).top_k if c.config_id != "vendor")
    db.record(measured, "triton_mm", pred.spec.slug, fam.template_hash,
              [Measurement(best.config_id, 9.9, 10.0, 10.1, 5, "h1", "0123456789", rse=0.001),
               Measurement("vendor", 11.9, 12.0, 12.1, 5, "h1", "0123456789", rse=0.001)], source="fleet")
    db.put(TuningEntry(asked, "triton_mm", pred.spec.slug, fam.template_hash, __version__, best, "predicted", 3.0,
                       {}, "model"))
    db.put(TuningEntry(Problem(96, 96, 96, "float16"), "triton_mm", "another-gpu", fam.template_hash, __version__,
                       best, "measured", 1.0, {}, "other"))
    out = tmp_path / "lut.json"
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--from-db", str(db.path),
                 "--out", str(out), "--top-k", "2"]) == 0
    assert "1 measured winners from the tuning database" in capsys.readouterr().out
    table = json.loads(out.read_text())
    sizes = sorted(len(v) for v in table.values())
    assert len(table) == 2 and sizes == [1, 3]
    one = next(v for v in table.values() if len(v) == 1)[0]
    assert one == to_tool("triton_mm", "inductor", best, measured)


# -- hostile logs ---------------------------------------------------------------------

@pytest.mark.parametrize("header, says", [
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON nested too deep to read"),
    ('{"shared_memory": 1' + "0" * 5000 + ', "device_capa": [8, 0]}', "a number of more than 4300 digits"),
    (json.dumps(dict(HEADER, name="x" * 100_000)), "an AutoHeuristic log of '" + "x" * 56 + "...; only 'mm'"),
    (json.dumps(dict(HEADER, device_capa=[True, False], shared_memory=True)),
     "the header's device_capa [True, False] and shared_memory True must be [major, minor] and a number of bytes"),
    (json.dumps(dict(HEADER, device_capa="8.0")), "the header's device_capa '8.0'"),
], ids=["nested-100000-deep", "a-5001-digit-number", "a-100000-character-name", "bools", "a-string"])
def test_a_header_nested_too_deep_or_of_a_wrong_kind_is_one_clear_line(tmp_path, capsys, header, says):
    """A header nested 100,000 deep was a RecursionError traceback; a 5,001-digit shared_memory a bare
    `Exceeds the limit (4300 digits)`; a 100,000-character name a 100 KB error line; [true, false] was read as
    compute capability "True.False"."""
    from costlearn.cli import main
    log = tmp_path / "log.txt"
    log.write_text(header + "\n" + COLUMNS + "\n" + LINES[0] + "\n")
    with pytest.raises(InteropError, match=re.escape(f"{log}: {says}")):
        import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert main(["import", "inductor", str(log), "--preset", "a100", "--data", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1 and len(err) < 400
    assert not (tmp_path / "data").exists()


def test_numbers_inductor_does_not_write_skip_their_line_by_name(tmp_path):
    """A 5,001-digit m was "not an integer"; Unicode digits and "5_12" were read as numbers; a 1e400 or
    100,000-digit feedback was imported as a failed measurement (float() gives inf); a choice with a 5,001-digit
    block size was a bare `Exceeds the limit (4300 digits)`."""
    good = LINES[0]
    choice = "type=triton_BLOCK-M=64_BLOCK-K=32_BLOCK-N=64_numstages=3_numwarps=4"
    lines = [good.replace("128,", "1" + "0" * 5000 + ",", 1), good.replace("128,", "１２８,", 1),
             good.replace("128,", "1_28,", 1), good.replace("0.0125", "1e400"), good.replace("0.0125", "nan"),
             good.replace("0.0125", "1" * 100_000), good.replace("0.0125", "１"),
             good.replace(choice, choice.replace("BLOCK-M=64", "BLOCK-M=1" + "0" * 5000)),
             good.replace("0.0125", "inf")]
    log = _log(tmp_path / "log.txt", [good] + lines)
    rep = import_file("inductor", log, device="a100", data_root=tmp_path / "data")
    assert rep.rows_added == 2 and rep.failed == 1                     # the good line, and "inf": a failed config
    why = dict(rep.skipped)
    assert sorted(why) == list(range(4, 12)) and all(len(w) < 200 for w in why.values())
    assert why[4] == "m=100000000000... (5001 digits) is above 2147483647 (2**31 - 1)"
    assert why[5] == "m='１２８' is not an integer" and why[6] == "m='1_28' is not an integer"
    assert why[7] == "feedback='1e400'; a time must be finite and positive (ms) or inf"
    assert why[8] == "feedback='nan' is not a number" and why[10] == "feedback='１' is not a number"
    assert why[9].startswith("feedback='1111") and why[9].endswith("; a time must be finite and positive (ms) or inf")
    assert "a number of 5001 digits; its values are a config's block sizes, stages and warps" in why[11]
