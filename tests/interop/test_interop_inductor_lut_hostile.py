"""PyTorch Inductor's lookup table, hostile: tables, logs and shapes files
crafted to break ``costlearn import inductor-lut`` and ``costlearn export
inductor-lut``. Each input gives rc 0 with the bad entry named,
or rc 2 with one line naming the value and what is allowed; no traceback,
no wait on a file of under a megabyte, nothing dropped unnamed."""
from __future__ import annotations

import json
import re

import pytest
from inductor_fixture import DEVICE, SHAPES, build_models, write_log

from costlearn.families.triton_mm import VENDOR, TritonMMConfig
from costlearn.interop import InteropError, import_file
from costlearn.interop.inductor import lut, lut_keys, lut_sources
from costlearn.interop.inductor.names import lut_entry
from costlearn.core.problem import Problem

A100 = "NVIDIA A100-SXM4-80GB"
KEY = A100 + "+((torch.float16, [512, 256], [256, 1]), (torch.float16, [256, 1024], [1024, 1]))+mm"
P512 = Problem(512, 1024, 256, "float16")
T1, T2 = TritonMMConfig(64, 64, 32, 4, 3), TritonMMConfig(128, 64, 32, 4, 4)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_models(tmp_path_factory.mktemp("lut"))



def _cli(*argv):
    from costlearn.cli import main
    return main([str(a) for a in argv])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_key_that_made_the_key_pattern_backtrack_is_refused_by_length_and_split_in_linear_time(
        monkeypatch, tmp_path, capsys, models):
    """The key pattern backtracked: a 40,002-character key took 2.5 s, a
    250 KB table with one such key kept `import inductor-lut` busy 100 s."""
    import time
    for key in ("+((" * 13334, "((a))+" + "=" * 40000, "((" + "+=" * 500_000 + "))+mm"):
        with pytest.raises(ValueError, match=f"a key of {len(key)} characters .*longer than the 1024"):
            lut_keys.split_key(key)
    # the parsing itself is linear: with no length limit, 1 MB keys of each shape are split at once
    monkeypatch.setattr(lut_keys, "MAX_KEY_CHARS", 10**8)
    t0 = time.perf_counter()
    for key, says in (("+((" * 333_334, "does not end in"), ("((a))+" + "=" * 10**6 + "+mm", None),
                      ("a+((" * 250_000 + "))+mm", None), ("((" + "))+" * 333_334 + "mm", None)):
        if says:
            with pytest.raises(ValueError, match=says):
                lut_keys.split_key(key)
        else:
            assert lut_keys.split_key(key).op == "mm"
    assert time.perf_counter() - t0 < 2
    monkeypatch.undo()
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({"+((" * 333_334: [{"template_id": "aten::mm", "time_us": 1.0}],
                             KEY: [{"template_id": "aten::mm", "time_us": 2.0}]}, indent=1))
    t0 = time.perf_counter()
    got = lut_sources.read_table(f)
    assert time.perf_counter() - t0 < 2
    assert [lp.problem for lp in got.problems] == [P512] and [m.time_us for m in got.measurements] == [2.0]
    assert got.skipped == [(2, "a key of 1000002 characters ('+((+((+((+((+((+((+((+((+((+((+((+((...): longer "
                               "than the 1024 a lookup-table key can be; not read")]
    f.write_text(json.dumps({"+((" * 83_334: []}))
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 2
    assert "a key of 250002 characters" in _one_line(capsys)
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-table", f,
                "--out", tmp_path / "t.json") == 2
    assert "a key of 250002 characters" in _one_line(capsys) and not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("key, value, says", [
    ("time_us", 10**400, "time_us=1" + "0" * 56 + "... is not a finite positive time"),
    ("time_us", -3, "time_us=-3 is not a finite positive time"), ("time_ms", 0, "time_ms=0 is not a finite positive"),
    ("time_us", float("nan"), "time_us=nan is not a finite"), ("time_ms", -float("inf"), "time_ms=-inf is not a"),
    ("time_ms", 1e308, "time_ms=1e+308 is not a finite"), ("time_us", True, "time_us=True is not a number"),
    ("time_us", [1], "time_us=[1] is not a number"), ("time_ms", {"a": 1}, "time_ms={'a': 1} is not a number"),
    ("time_us", "1" * 100, "time_us='" + "1" * 56 + "... is not a number"),
], ids=["10**400", "negative", "zero", "nan", "-inf", "1e308-ms", "bool", "list", "dict", "str"])
def test_a_time_of_10_to_the_400_or_of_a_wrong_kind_skips_its_entry_with_its_reason(tmp_path, capsys, key, value,
                                                                                    says):
    """`"time_us": 10**400` raised OverflowError through `import inductor-lut`."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", key: value}, {**lut_entry(T1, P512), "time_us": 5.0}]}))
    got = lut_sources.read_table(f)
    assert [(m.config, m.time_us) for m in got.measurements] == [(T1, 5.0)]
    assert len(got.skipped) == 1 and got.skipped[0][0] == 1 and got.skipped[0][1].startswith(f"entry 0: {says}")
    assert len(got.skipped[0][1]) < 120
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 0
    cap = capsys.readouterr()
    assert "imported 1 rows" in cap.out and f"line 1: entry 0: {says}" in cap.out and "Traceback" not in cap.err


def test_a_recorded_time_of_inf_is_a_failed_measurement(tmp_path):
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", "time_us": float("inf")},
                                   {**lut_entry(T1, P512), "time_ms": 1e400, "time_us": float("inf")}]}))
    got = lut_sources.read_table(f)
    assert got.skipped == [] and [(m.config, m.error) for m in got.measurements] == [
        (VENDOR, "recorded time inf (the choice failed to compile or run)"),
        (T1, "recorded time inf (the choice failed to compile or run)")]
    assert all(m.time_us != m.time_us for m in got.measurements)                  # NaN


@pytest.mark.parametrize("text, says", [
    ('{"k": [{"time_us": ' + "[" * 100_000 + "]" * 100_000 + "}]}", "JSON nested too deep to read"),
    ('{"%s": [{"template_id": "aten::mm", "time_us": 1%s}]}' % (KEY, "0" * 5000),
     "a number of more than 4300 digits; a lookup table"),
    ('{"%s": [{"template_id": "aten::mm", "time_us": 1, "x": [%s]}]}' % (KEY, "9" * 4400),
     "a number of more than 4300 digits"),
], ids=["nested-100000-deep", "a-5001-digit-time", "a-4400-digit-field"])
def test_a_table_nested_too_deep_or_with_a_number_over_the_digit_limit_is_one_clear_error(tmp_path, capsys, models,
                                                                                         text, says):
    """A 5,001-digit time was a bare `Exceeds the limit (4300 digits) for integer string conversion` naming no
    file."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(text)
    with pytest.raises(InteropError, match=re.escape(f"{f}: {says}")):
        lut_sources.read_table(f)
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 2
    assert says in _one_line(capsys) and not (tmp_path / "data").exists()
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-table", f,
                "--out", tmp_path / "t.json") == 2
    assert says in _one_line(capsys) and not (tmp_path / "t.json").exists()


def test_entries_with_a_time_but_no_valid_config_are_not_called_untimed(tmp_path, capsys):
    """A table whose entries carried time_us but an invalid config (BLOCK_M 10**400, a list, an unknown template)
    was refused with "no entry carries a time; PyTorch's recorder writes none"."""
    f = tmp_path / "inductor_lut_1.json"
    entry = {**lut_entry(T1, P512), "time_us": 5.0}
    f.write_text(json.dumps({KEY: [{**entry, "BLOCK_M": 10**400}, {**entry, "BLOCK_N": [64]},
                                   {"template_id": "triton::persistent_tma_mm", "time_us": 5.0},
                                   {**entry, "time_us": -1}, lut_entry(T2, P512)]}))
    with pytest.raises(InteropError) as e:
        import_file("inductor-lut", f, device="a100", data_root=tmp_path / "data")
    said = str(e.value)
    assert "no entry carries a time" not in said and "PyTorch's recorder" not in said
    assert said.startswith(f"{f}: 4 entries carry a time, but none is a valid measurement (a triton_mm config and a "
                           "finite positive time; line 1: entry 0: ")
    assert "must be an int in [16, 4096]; line 1: entry 1: " in said and "block_n=[64]" in said
    assert "entry 2: template_id 'triton::persistent_tma_mm' is no triton_mm template; ...)" in said
    assert len(said) < 600
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 2
    assert "4 entries carry a time, but none is a valid measurement" in _one_line(capsys)
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", "time_ms": "fast"}]}))
    with pytest.raises(InteropError, match=r"1 entry carries a time, but it is no valid.*time_ms='fast' is not a "):
        import_file("inductor-lut", f, device="a100", data_root=tmp_path / "data")


def test_a_problem_of_a_layout_or_epilogue_the_model_does_not_serve_is_left_out_by_name_not_the_whole_export(
        models, tmp_path, capsys):
    """One TT problem in a shapes file or a recorded table made `export inductor-lut` write nothing."""
    shapes, out = tmp_path / "s.txt", tmp_path / "t.json"
    shapes.write_text("512 1024 256 float16 NN\n512 1024 256 float16 TT\n64 64 64 float16 TT\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--out", out) == 0
    cap = capsys.readouterr()
    assert "wrote 1 keys for 1 problems" in cap.out and list(json.loads(out.read_text())) == [KEY]
    assert "left out the 2 float16 TT problems of the shapes file (e.g. 512x1024x256 float16 TT): the " \
           "triton_mm/float16 model of a100 serves layouts ['NN', 'NT', 'TN'], epilogues ['none']" in cap.err
    table = tmp_path / "inductor_lut_rec.json"
    tt = lut.lookup_key(lut.LutProblem.contiguous(Problem(512, 1024, 256, "float16", "TT")), A100)
    mats = "(torch.float16, [64, 32], [32, 1]), (torch.float16, [32, 128], [128, 1])"
    table.write_text(json.dumps({tt: [], KEY: [], f"{A100}+((torch.float16, [128], [1]), {mats})+addmm": []}))
    out.unlink()
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-table", table,
                "--out", out) == 0
    cap = capsys.readouterr()
    assert list(json.loads(out.read_text())) == [KEY]
    assert "left out the 1 float16 TT problems of the table" in cap.err
    assert "left out the 1 float16 NN bias-epilogue problems of the table (e.g. 64x128x32 float16 NN +bias): the " \
           "triton_mm/float16 model of a100 serves layouts ['NN', 'NT', 'TN'], epilogues ['none']" in cap.err
    shapes.write_text("512 1024 256 float16 TT\n")                          # nothing left: refused, nothing written
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--out", tmp_path / "none.json") == 2
    assert "left out the 1 float16 TT problems of the shapes file" in _one_line(capsys)
    assert not (tmp_path / "none.json").exists()


def test_keys_written_with_escapes_are_found_on_their_lines_in_one_pass(tmp_path, monkeypatch):
    """A key written with other escapes than json.dumps' was looked for through the rest of the file, once per key:
    1.7 MB of such keys took 12 s, and each was named by its position, not its line. One pass is counted here
    (the characters the string scanner is given), not timed: a timed bound failed on a loaded machine."""
    keys = [f"((torch.float16, [{i + 1}, 8], [8, 1]), (torch.float16, [8, 8], [8, 1]))+bmm" for i in range(20_000)]
    f = tmp_path / "inductor_lut_1.json"
    f.write_text('{\n"note": [{"' + keys[5].replace("b", "\\u0062") + '": []}],\n'
                 + ",\n".join('"' + k.replace("b", "\\u0062") + '"\n  : [{"x": "\\"]"}]' for k in keys) + "}")
    scanned = []

    class Counted:                                  # the module's string scanner, counting what it is given
        def finditer(self, text, pos=0):
            scanned.append(len(text) - pos)
            return real.finditer(text, pos)
    real = lut_sources._JSON_STRING
    monkeypatch.setattr(lut_sources, "_JSON_STRING", Counted())
    got = lut_sources.read_table(f)
    assert scanned == [len(f.read_text())]
    assert got.skipped.total == 20_001 and [line for line, _ in got.skipped] == [2] + [3 + 2 * i for i in range(999)]
    assert got.skipped[1][1].startswith("op 'bmm'")


def test_a_key_whose_value_is_no_list_is_left_out_by_name_not_the_whole_table(tmp_path, capsys):
    """One key with a value that is not a list refused the whole table without naming it."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", "time_us": 3.0}], "x": 5, "y": {"a": 1},
                             "z": "s" * 1000}, indent=1))
    got = lut_sources.read_table(f)
    assert len(got.measurements) == 1
    assert got.skipped == [(8, "key 'x': its value is int 5, not a list of entries"),
                           (9, "key 'y': its value is dict {'a': 1}, not a list of entries"),
                           (12, "key 'z': its value is str '" + "s" * 36 + "..., not a list of entries")]
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 0
    assert "line 8: key 'x': its value is int 5" in capsys.readouterr().out
    for text, kind in (("[1, 2]", "an array"), ("null", "null"), ('"a"', "a string"), ("7", "a number")):
        f.write_text(text)
        with pytest.raises(InteropError, match=f"the file holds {kind}; a lookup table is a JSON object"):
            lut_sources.read_table(f)


def test_a_fifo_or_a_device_as_a_source_is_refused_not_waited_on_and_an_enormous_file_by_its_size(models, tmp_path,
                                                                                                capsys):
    """`export inductor-lut --from-table FIFO` (or --shapes-file, --from-log) waited forever for a writer, and
    /dev/zero read forever."""
    import os
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for flag in ("--shapes-file", "--from-table", "--from-log"):
        for path in (fifo, "/dev/zero"):
            assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, flag, path,
                        "--out", tmp_path / "t.json") == 2
            assert f"{path}: not a regular file" in _one_line(capsys)
        assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, flag, tmp_path,
                    "--out", tmp_path / "t.json") == 2
        assert f"{tmp_path}: a folder; give the file to read" in _one_line(capsys)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate((256 << 20) + 1)                            # sparse: no disk written
    for read in (lut_sources.read_table, lut_sources.read_shapes_file):
        with pytest.raises(InteropError, match=f"{big}: 268435457 bytes; a file read whole may have at most "
                                               r"268435456 \(256 MiB\)"):
            read(big)
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("line, says", [
    ("512 1024 256 " + "f" * 1_000_000, "dtype='" + "f" * 56 + "...; allowed: "),
    ("512 1024 256 float16 " + "N" * 1_000_000, "layout='" + "N" * 56 + "...; allowed: "),
    ("x" * 1_000_000, "'" + "x" * 76 + "...; each line is 'M N K dtype [layout]'"),
], ids=["dtype", "layout", "line"])
def test_a_shapes_line_of_a_megabyte_is_named_cut_not_repeated(models, tmp_path, capsys, line, says):
    """A 1 MB token in a shapes file was repeated whole in the one-line error (a 1 MB line)."""
    f = tmp_path / "s.txt"
    f.write_text(line + "\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", f,
                "--out", tmp_path / "t.json") == 2
    err = _one_line(capsys)
    assert f"{f}:1: {says}" in err and len(err) < 400


@pytest.mark.parametrize("name", ["bad\nname", "x" * 5000, "\x01", " ", "a+b", "\ud800"],
                         ids=["newline", "5000-chars", "control", "blank", "plus", "lone-surrogate"])
def test_a_device_name_torch_could_not_report_is_refused_on_export_and_its_key_left_out_on_read(
        models, tmp_path, capsys, name):
    """`--device-name $'bad\\nname'` (or 5,000 characters) wrote keys no GPU reports and costlearn's own reader
    refuses; such a key in a recorded table named a device the import was then refused for."""
    shapes = tmp_path / "s.txt"
    shapes.write_text("512 1024 256 float16\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--device-name", name, "--out", tmp_path / "t.json") == 2
    assert "must be the GPU's name as torch reports it" in _one_line(capsys)
    assert not (tmp_path / "t.json").exists()
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({name + KEY[KEY.index("+(("):]: [{"template_id": "aten::mm", "time_us": 1.0}],
                             KEY: [{"template_id": "aten::mm", "time_us": 2.0}]}))
    got = lut_sources.read_table(f)
    assert got.devices == (A100,) and [m.time_us for m in got.measurements] == [2.0]
    why = got.skipped[0][1]
    assert len(got.skipped) == 1 and len(why) < 250
    assert ("longer than the 1024 a lookup-table key can be" if len(name) > 1024 else
            "must be the GPU's name as torch reports it") in why


def test_keys_with_digits_torch_does_not_print_are_left_out(tmp_path):
    """Key numbers matched Unicode digits (`[５１２, 256]` read as 512) and leading zeros."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY.replace("[512, 256]", "[５１２, 256]"): [],
                             KEY.replace("[512, 256]", "[0512, 256]"): [], KEY.replace("[256, 1]", "[256, 01]"): [],
                             KEY: []}))
    got = lut_sources.read_table(f)
    assert [lp.problem for lp in got.problems] == [P512]
    assert len(got.skipped) == 3 and all("is not an mm key costlearn reads" in why for _, why in got.skipped)


def test_export_from_a_log_names_the_lines_it_leaves_out(models, tmp_path, capsys):
    """`export inductor-lut --from-log` dropped a log's malformed lines without a word."""
    log = tmp_path / "log.txt"
    write_log(log, shapes=SHAPES[:1], layouts=["NN"])
    lines = log.read_text().splitlines()
    bad = lines[2].replace("256,", "1" + "0" * 5000 + ",", 1)
    log.write_text("\n".join(lines + [bad] * 7) + "\n")
    out = tmp_path / "t.json"
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-log", log,
                "--out", out) == 0
    err = capsys.readouterr().err
    first = len(lines) + 1
    assert f"{log}:{first}: left out: m=100000000000... (5001 digits) is above 2147483647" in err
    assert f"{log}:{first + 4}: left out:" in err and "... 2 more left out" in err
    assert len(json.loads(out.read_text())) == 1
    log.write_text("\n".join(lines[:2] + [bad]) + "\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-log", log,
                "--out", tmp_path / "none.json") == 2
    assert f"{log}: no measurement found; line 3: m=100000000000... (5001 digits)" in _one_line(capsys)


def test_a_key_written_twice_or_a_config_timed_twice_is_named_not_dropped_silently(tmp_path):
    """JSON keeps a repeated key's last entries: the first were dropped without a word; and a config listed twice
    for one problem (two entries, or a device and a device-agnostic key) with another time kept the first quietly."""
    agnostic = KEY[KEY.index("+((") + 1:]
    f = tmp_path / "inductor_lut_1.json"
    f.write_text('{"%s": [{"template_id": "aten::mm", "time_us": 1.0}],\n'
                 '"%s": [{"template_id": "aten::mm", "time_us": 2.0}, {"template_id": "aten::mm", "time_us": 2.01},\n'
                 '       {"template_id": "aten::mm", "time_us": 9.0}],\n'
                 '"%s": [{"template_id": "aten::mm", "time_us": 2.0}, {"template_id": "aten::mm", "time_us": 3.0}]}'
                 % (KEY, KEY, agnostic))
    got = lut_sources.read_table(f)
    assert [(m.line, m.time_us) for m in got.measurements] == [(2, 2.0)]
    assert got.skipped[1:] == [
        (2, "entry 2: vendor of 512x1024x256 float16 NN was read at line 2 with time_us 2; the first is kept, not "
            "this 9"),
        (4, "entry 1: vendor of 512x1024x256 float16 NN was read at line 2 with time_us 2; the first is kept, not "
            "this 3")]
    line, why = got.skipped[0]
    assert line == 1 and why.startswith("key 'NVIDIA A100-SXM4-80GB+((torch.float16") and \
        why.endswith("is written again at line 2: JSON keeps the last one's entries, not these")


def test_a_table_of_200000_bad_entries_keeps_a_thousand_reasons_and_counts_all(tmp_path, capsys):
    """Every skipped entry's reason was kept: memory grew with the file."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [7] * 200_000 + [{"template_id": "aten::mm", "time_us": 1.0}]}))
    got = lut_sources.read_table(f)
    assert len(got.skipped) == 1000 and got.skipped.total == 200_000 and len(got.measurements) == 1
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 0
    assert "skipped 200000 lines" in capsys.readouterr().out


def test_two_layouts_of_one_matmul_to_inductor_share_a_key_without_aborting_the_export(models, tmp_path, capsys):
    """4096x1x1 NN and NT are the same tensors to Inductor (a 1x1 operand is both row- and column-major): the
    export was refused whole, blaming float32 and tfloat32."""
    shapes, out = tmp_path / "s.txt", tmp_path / "t.json"
    shapes.write_text("4096 1 1 float16 NN\n4096 1 1 float16 NT\n512 1024 256 float16\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--out", out) == 0
    said = capsys.readouterr().out
    assert "wrote 2 keys for 2 problems" in said and "1 more with the key of another of their dtype" in said
    assert len(json.loads(out.read_text())) == 2 and "tfloat32" not in said
