"""Bad input on the command line, as a fresh clone's user gives it: rc 2 and one line naming the value and
what is allowed, or rc 0 with the bad entry named; never a traceback, never a silent change."""
from __future__ import annotations

import pytest

from costlearn.cli import main
from costlearn.cli.common import parse_shapes
from costlearn.interop.common import InteropError


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"costlearn {command}: error: "), err
    return err


def test_a_shapes_path_with_two_xs_is_read_as_a_file(tmp_path, monkeypatch, capsys):
    """`collect --shapes experiments/shapes.txt` said "shape 'experiments/shapes.txt': give M N K, ...": a path
    with two x's matched the MxNxK pattern before the file check (`run --shapes` too)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "shapes.txt").write_text("64 96 128 float32\n")
    (tmp_path / "experiments" / "2x3,4.txt").write_text("8 16 32 float32 NN\n")
    assert parse_shapes(["experiments/shapes.txt", "experiments/2x3,4.txt", "1x2x3"], files=True,
                        dtype="float32") == [(64, 96, 128), (8, 16, 32), (1, 2, 3)]
    (tmp_path / "1x2x3").write_text("5 5 5 float32\n")     # a shape stays a shape, whatever files lie about
    assert parse_shapes(["1x2x3"], files=True, dtype="float32") == [(1, 2, 3)]
    for command in ("collect", "run"):                      # read before any device is opened: the bad line is named
        (tmp_path / "experiments" / "shapes.txt").write_text("64 96 128 float32\n64 0 1 float32\n")
        assert main([command, "--device", "opencl", "--shapes", "experiments/shapes.txt"]) == 2
        assert "experiments/shapes.txt:2: N=0" in _one_line_error(capsys, command)


def test_a_shapes_file_line_of_another_dtype_or_layout_is_refused_naming_its_line(tmp_path, capsys):
    """`collect --shapes FILE` measured a line `64 64 64 bfloat16 TT` as float32/NN without a word."""
    f = tmp_path / "mine.txt"
    f.write_text("# my layers\n128 768 768 float32\n64 64 64 bfloat16 TT\n")
    with pytest.raises(InteropError, match=r"mine.txt:3: '64 64 64 bfloat16 TT' is bfloat16 TT; only float32 NN "
                       r"lines are taken here \(one collection measures one dtype, --dtype float32, and layout NN\)"):
        parse_shapes([str(f)], files=True, dtype="float32")
    f.write_text("128 768 768 float32 NT\n")
    with pytest.raises(InteropError, match=r"mine.txt:1: .* is float32 NT; only float32 NN"):
        parse_shapes([str(f)], files=True, dtype="float32")
    f.write_text("128 768 768 bfloat16\n64 64 64 bfloat16 NN\n")
    assert parse_shapes([str(f)], files=True, dtype="bfloat16") == [(128, 768, 768), (64, 64, 64)]
    for command in ("collect", "run"):
        assert main([command, "--device", "opencl", "--shapes", str(f)]) == 2
        assert "mine.txt:1: '128 768 768 bfloat16' is bfloat16 NN; only float32 NN" in _one_line_error(capsys,
                                                                                                         command)


def test_an_extent_of_thousands_of_digits_names_its_line_and_the_range(tmp_path, capsys):
    """A 5,000-digit extent in a shapes file was a bare `ValueError: Exceeds the limit (4300 digits)` with no
    file:line; on the command line it was the same error, or a message repeating every digit."""
    f = tmp_path / "big.txt"
    f.write_text("64 64 64 float32\n" + "1" * 5000 + " 64 64 float32\n")
    with pytest.raises(InteropError, match=r"big.txt:2: M=111111111111\.\.\. \(5000 digits\); must be an int in "
                       r"\[1, 2\*\*31 - 1\]"):
        parse_shapes([str(f)], files=True, dtype="float32")
    assert main(["collect", "--device", "opencl", "--shapes", str(f)]) == 2
    assert "big.txt:2: M=111111111111... (5000 digits)" in _one_line_error(capsys, "collect")
    assert main(["predict", "1", "9" * 5000, "64"]) == 2
    err = _one_line_error(capsys, "predict")
    assert "N=999999999999... (5000 digits); must be an int in [1, 2**31 - 1]" in err and len(err) < 300


def test_a_quoted_shape_in_one_argument_is_one_shape(capsys, model_dir):
    """`costlearn predict "1 1024 1024"` was told to "give M N K"."""
    assert parse_shapes(["1 1024 1024"]) == [(1, 1024, 1024)]
    assert parse_shapes(["1, 64, 64", "2 x 3 x 4", "8 16", "32"]) == [(1, 64, 64), (2, 3, 4), (8, 16, 32)]
    with pytest.raises(ValueError, match=r"shapes '1 2 3 4': 1 number\(s\) left over"):
        parse_shapes(["1 2 3 4"])
    assert main(["predict", "1 256 256", "--model", model_dir.parents[1].name, "--top-k", "1"]) == 0
    assert "M=1 N=256 K=256" in capsys.readouterr().out


def test_a_missing_shapes_file_is_no_such_file(tmp_path, monkeypatch, capsys):
    """`collect --shapes missing.txt` got the shape syntax's error, not "no such file"."""
    monkeypatch.chdir(tmp_path)
    assert main(["collect", "--device", "opencl", "--shapes", "missing.txt"]) == 2
    err = _one_line_error(capsys, "collect")
    assert "shapes file 'missing.txt': no such file; give a shapes file ('M N K dtype [layout]' a line) or " \
           "shapes: M N K, MxNxK or M,N,K" in err
    (tmp_path / "folder").mkdir()
    assert main(["run", "--device", "opencl", "--shapes", "folder"]) == 2
    assert "shapes file 'folder': a folder, not a file" in _one_line_error(capsys, "run")
    assert main(["collect", "--device", "opencl", "--shapes", "1x2"]) == 2     # a try at a shape: its syntax
    assert "shape '1x2': give M N K" in _one_line_error(capsys, "collect")


def test_a_shapes_fifo_or_device_is_not_a_regular_file_not_a_folder(tmp_path, monkeypatch, capsys):
    """`collect --shapes /dev/zero` (or a FIFO) said the shapes file was "a folder, not a file"."""
    import os
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    for source in ("fifo", "/dev/zero"):
        assert main(["collect", "--device", "opencl", "--shapes", source]) == 2
        assert f"shapes file '{source}': not a regular file; give a shapes file" in _one_line_error(capsys, "collect")


def test_ctrl_c_during_an_import_says_what_was_written(tmp_path, monkeypatch, capsys, python_ctrl_c):
    """SIGINT during an `import` that had written nothing said "everything measured so far is saved"; now it says
    that no row was written, or how many were and where."""
    import os
    import signal

    import costlearn.interop as interop
    import costlearn.interop.common as common
    from inductor_fixture import write_log
    log = tmp_path / "a100_mm.txt"
    write_log(log)
    argv = ["import", "inductor", str(log), "--preset", "a100", "--data", str(tmp_path / "data")]

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    real_sha, real_write = interop.sha256_file, common.write_part
    for where in ("sha256_file", "write_part"):              # before the writing began; at the first part
        monkeypatch.setattr(interop if where == "sha256_file" else common, where, interrupt)
        assert main(argv) == 130
        err = capsys.readouterr().err
        assert err == f"interrupted: no row of {log} was written; the same command imports it\n", err
        monkeypatch.setattr(interop, "sha256_file", real_sha)
        monkeypatch.setattr(common, "write_part", real_write)

    monkeypatch.setattr(common, "IMPORT_CHUNK_ROWS", 3)
    written = []

    def write_then_ctrl_c(rows, folder):                     # Ctrl-C arrives while the first part is written
        written.append(len(rows))
        os.kill(os.getpid(), signal.SIGINT)
        return real_write(rows, folder)
    monkeypatch.setattr(common, "write_part", write_then_ctrl_c)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert written == [3] and err.startswith(f"interrupted: 3 rows of {log} were written into ") and \
        err.endswith("(1 part); the same command imports the rest (the rows written are not added again)\n"), err
    monkeypatch.setattr(common, "write_part", real_write)
    assert main(argv) == 0                                   # the rerun adds the rest, not those 3 again
    assert "left out 3 measurements already in the folder" in capsys.readouterr().out


def test_compact_of_a_dataset_root_compacts_each_device_folder(tmp_path, capsys):
    """`costlearn compact out/data` (a dataset root, not a device folder) said "nothing to merge" and exited 0."""
    from conftest import dataset_row

    from costlearn.collect.dataset import load, write_part
    root = tmp_path / "data"
    for dev, parts in (("dev-a", 2), ("dev-b", 3)):
        (root / dev).mkdir(parents=True)
        (root / dev / "device.json").write_text("{}")
        for i in range(parts):
            write_part([dataset_row(m=4 + i, device_slug=dev)], root / dev)
    assert main(["compact", str(root)]) == 0
    cap = capsys.readouterr()
    assert f"{root} is a dataset root: compacting each device folder in it (dev-a, dev-b)" in cap.err
    assert cap.out == (f"{root / 'dev-a'}: merged 2 parts into one part of 2 rows\n"
                       f"{root / 'dev-b'}: merged 3 parts into one part of 3 rows\n")
    assert len(list((root / "dev-b").glob("part-*.parquet"))) == 1 and len(load(root / "dev-b")[0]) == 3
    assert main(["compact", str(root / "dev-a")]) == 0                  # a device folder: as before
    assert capsys.readouterr().out == f"{root / 'dev-a'}: nothing to merge (fewer than two readable parts)\n"
    (tmp_path / "empty").mkdir()
    assert main(["compact", str(tmp_path / "empty")]) == 2
    assert "empty: no dataset parts, and no device folder (<device>/device.json) in it; give a device's dataset " \
           "folder (e.g. data/<device>) or a dataset root" in _one_line_error(capsys, "compact")


def test_export_of_a_root_of_several_devices_names_the_device_folder_it_exports(tmp_path, monkeypatch, capsys):
    """`export kernel-tuner --data out/data` picked this machine's device folder out of several; its result
    did not say whose files it wrote."""
    import json

    from conftest import dataset_row

    from costlearn.collect.dataset import write_part
    root = tmp_path / "data"
    for dev in ("dev-a", "dev-b"):
        (root / dev).mkdir(parents=True)
        (root / dev / "device.json").write_text("{}")
        write_part([dataset_row(device_slug=dev)], root / dev)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "local_device.json").write_text(json.dumps(dict(slug="dev-b", name="Device dev-b", api="opencl")))
    monkeypatch.setenv("COSTLEARN_CACHE", str(cache))
    assert main(["export", "kernel-tuner", "--data", str(root), "--out", str(tmp_path / "kt")]) == 0
    cap = capsys.readouterr()
    assert f"holds datasets for ['dev-a', 'dev-b']; using this machine's, {root / 'dev-b'} (pass --data " \
           f"{root}/<device> for another)" in cap.err
    assert cap.out == f"wrote 1 kernel-tuner files of the dataset {root / 'dev-b'} into {tmp_path / 'kt'}\n"
    (cache / "local_device.json").write_text(json.dumps(dict(slug="dev-z", name="Device dev-z", api="opencl")))
    assert main(["export", "kernel-tuner", "--data", str(root), "--out", str(tmp_path / "kt2")]) == 2
    assert f"--data {root} holds datasets for ['dev-a', 'dev-b']; pass --data {root}/<device>" in \
        _one_line_error(capsys, "export")
