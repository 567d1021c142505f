"""The core helpers: argument checks (core.checks), atomic writes (core.files), the npz codec (core.npz), the
keyed cache (core.keyed_cache) and the folder lock (core.locks)."""
from __future__ import annotations

import io
import os
import struct
import zipfile

import numpy as np
import pytest

from costlearn.core.checks import check_choice, check_int, check_real
from costlearn.core.files import atomic_write, read_file
from costlearn.core.keyed_cache import KeyedCache
from costlearn.core.npz import npz_arrays, npz_bytes


def test_checks_name_the_value_and_what_is_allowed():
    assert check_int("top_k", np.int64(3), 1) == 3 and type(check_int("top_k", np.int64(3), 1)) is int
    for bad, exc in ((True, TypeError), (2.0, TypeError), ("3", TypeError), (0, ValueError)):
        with pytest.raises(exc, match=f"top_k={bad!r}"):
            check_int("top_k", bad, 1)
    assert check_real("budget_s", 5, 0, strict=True) == 5.0
    for bad in (0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="budget_s"):
            check_real("budget_s", bad, 0, strict=True)
    with pytest.raises(ValueError, match="'a', 'b'"):
        check_choice("mode", "c", ("a", "b"))


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path):
    path = atomic_write(tmp_path / "f.txt", "old")

    def boom(fh):
        fh.write(b"half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        atomic_write(path, boom)
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_a_damaged_record_is_no_record(tmp_path):
    cache = KeyedCache("thing", ".ok", folder=tmp_path / "cache")
    assert not cache.has("k")
    cache.put("k")
    assert cache.has("k") and not cache.has("other key")
    cache.path("k").write_text("0" * 64)
    assert not cache.has("k")
    cache.put("k")
    assert cache.has("k")


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners")
def test_a_record_others_can_write_counts_for_nothing(tmp_path):
    """A record lets a later process skip a check, so one in a folder another user may write, or one another user
    may write, is no record: whoever could plant it could skip the check."""
    shared = tmp_path / "shared"
    cache = KeyedCache("thing", ".ok", folder=shared)
    cache.put("k")
    assert cache.has("k")
    shared.chmod(0o777)                                                   # a folder anyone may write
    assert not cache.has("k")
    shared.chmod(0o700)
    cache.path("k").chmod(0o666)                                          # private folder, but the record is not
    assert not cache.has("k")


def test_a_ctrl_c_during_a_write_waits_for_the_write_and_its_count(python_ctrl_c):
    """The collector's Ctrl-C summary once undercounted what was saved: a
    SIGINT landing between a part's write and its count. Inside
    ``sigint_deferred`` the block finishes first, then the interrupt comes."""
    import os
    import signal

    import pytest

    from costlearn.core.locks import sigint_deferred
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("written")
            steps.append("counted")
    assert steps == ["written", "counted"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler       # the handler is put back
    with sigint_deferred():
        steps.append("quiet")                                                   # no signal: nothing raised
    assert steps[-1] == "quiet"


def test_npz_arrays_are_numpys_without_a_second_read_or_copy():
    """A model's .npz files are read once (the bytes whose sha256 was checked) and parsed from memory;
    every array must equal numpy.load's, read-only, and aligned ones share the buffer rather than copy it."""
    arrays = dict(f8=np.arange(7.0), i2=np.arange(5, dtype=np.int16), f4=np.linspace(0, 1, 9, dtype=np.float32),
                  scalar=np.float64(3.5), text=np.array(["NN", "TN"]), fortran=np.asfortranarray(np.ones((2, 3))),
                  nodes=np.zeros(4, [("value", "<f4"), ("child", "<u2"), ("feature", "u1"), ("flags", "u1")]))
    for save in (np.savez, np.savez_compressed):
        buf = io.BytesIO()
        save(buf, **arrays)
        data = bytearray(buf.getvalue())
        got = npz_arrays(data)
        with np.load(io.BytesIO(bytes(data))) as ref:
            assert sorted(got) == sorted(ref.files)
            for name in ref.files:
                assert got[name].dtype == ref[name].dtype and got[name].shape == ref[name].shape
                assert np.array_equal(got[name], ref[name]) and not got[name].flags.writeable, name
                assert got[name].flags.f_contiguous == ref[name].flags.f_contiguous
        shared = [n for n, a in got.items() if np.shares_memory(a, np.frombuffer(data, np.uint8))]
        assert (len(shared) > 0) == (save is np.savez)


def test_a_record_whose_digest_file_is_not_text_is_no_record_and_is_rebuilt(tmp_path):
    """Regression (an attack): KeyedCache.has caught OSError only, so a .sha256 file of bytes that are
    not UTF-8 (a crash mid-write, junk) raised UnicodeDecodeError from every load of a model whose forest check it
    records, instead of checking the forest again."""
    cache = KeyedCache("thing", ".ok", folder=tmp_path / "cache")
    cache.put(b"key")
    assert cache.has(b"key")
    cache.path(b"key").write_bytes(b"abc\xff")
    assert not cache.has(b"key")
    cache.put(b"key")
    assert cache.has(b"key")


def test_npz_bytes_are_numpys_npz_with_every_array_read_in_place():
    """numpy.savez starts a member's bytes anywhere in the file, so npz_arrays copied every misaligned
    array of a deep model (5-7 ms of its load); npz_bytes aligns each member, and numpy still reads the file."""
    arrays = dict(f8=np.arange(7.0), i2=np.arange(5, dtype=np.int16), f4=np.linspace(0, 1, 9, dtype=np.float32),
                  scalar=np.float64(3.5), text=np.array(["NN", "TN"]), fortran=np.asfortranarray(np.ones((2, 3))),
                  odd_name_of_some_length=np.arange(3, dtype=np.int32),
                  nodes=np.zeros(4, [("value", "<f4"), ("child", "<u2"), ("feature", "u1"), ("flags", "u1")]))
    data = bytearray(npz_bytes(arrays))
    base = np.frombuffer(data, np.uint8)
    got = npz_arrays(data)
    with np.load(io.BytesIO(bytes(data))) as ref:
        assert sorted(ref.files) == sorted(got) == sorted(arrays)
        for name, want in arrays.items():
            assert ref[name].dtype == got[name].dtype == want.dtype and np.array_equal(ref[name], want)
            assert np.array_equal(got[name], want) and got[name].flags.f_contiguous == want.flags.f_contiguous
            assert np.shares_memory(got[name], base), name                # read in place, not copied
            assert (got[name].ctypes.data - base.ctypes.data) % 64 == 0, name
    with pytest.raises(ValueError):
        npz_bytes(dict(objects=np.array([{}, None], dtype=object)))


def test_npz_arrays_refuse_truncated_and_object_members():
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(100.0))
    with pytest.raises((ValueError, zipfile.BadZipFile)):
        npz_arrays(bytearray(buf.getvalue()[:-300]))
    buf = io.BytesIO()
    np.savez(buf, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError):
        npz_arrays(bytearray(buf.getvalue()))


def _npz_of(members: dict) -> bytearray:
    """A stored .npz whose members are the given raw .npy bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    return bytearray(buf.getvalue())


def _npy(header: str, body: bytes) -> bytes:
    """Raw .npy 1.0 bytes with ``header`` (a dict literal) and ``body``."""
    text = header + " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + body


def test_npz_arrays_refuse_a_trailing_signature_a_bad_shape_encryption_and_twin_members():
    """Regressions: a local-header signature in the file's last bytes made npz_arrays raise a bare
    struct.error; a header shape of (True,) a bare TypeError; an encrypted member and two members of one name
    were accepted (numpy.load refuses the first)."""
    ok = _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", np.arange(3.0).tobytes())
    assert np.array_equal(npz_arrays(_npz_of({"a.npy": ok}))["a"], np.arange(3.0))
    data = _npz_of({"a.npy": ok})
    end = data.rfind(b"PK\x05\x06")
    tail = b"PK\x03\x04" + bytes(6)
    data[end + 20:end + 22] = struct.pack("<H", len(tail))                  # the zip comment holds the signature
    data += tail
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 42:cd + 46] = struct.pack("<I", len(data) - len(tail))        # the member's header "is" there
    with pytest.raises((ValueError, zipfile.BadZipFile)):
        npz_arrays(data)
    bool_shape = _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (True,), }", np.zeros(1).tobytes())
    with pytest.raises(ValueError, match="shape"):
        npz_arrays(_npz_of({"a.npy": bool_shape}))
    with pytest.raises(ValueError, match="second array"):
        npz_arrays(_npz_of({"a.npy": ok, "a": ok}))
    enc = _npz_of({"a.npy": ok})
    for sig, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):                # the encrypted bit, both headers
        i = enc.find(sig)
        enc[i + at] |= 1
    with pytest.raises((zipfile.BadZipFile, RuntimeError, NotImplementedError)):
        npz_arrays(enc)
    arr = npz_arrays(_npz_of({"a.npy": ok}))["a"]
    with pytest.raises(ValueError):
        arr[0] = 1.0                                                         # a model's arrays are read-only


def test_read_file_refuses_a_file_larger_than_allowed_before_taking_memory(tmp_path):
    """Regression (an attack): a sparse 1 TB payload file made the load allocate it all
    (MemoryError) where hashing it in blocks had refused it."""
    big = tmp_path / "scorer.npz"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)
    with pytest.raises(OSError, match="more than"):
        read_file(big)
    small = tmp_path / "small"
    small.write_bytes(b"abc")
    assert read_file(small) == bytearray(b"abc")
    with pytest.raises(OSError, match="more than"):
        read_file(small, max_bytes=2)


def test_read_file_without_following_links_refuses_a_link_and_reads_the_file_it_names_otherwise(tmp_path):
    """The tuning spool reads its folder's files this way (one implementation of the non-blocking read)."""
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_file(tmp_path / "link") == bytearray(b"abc")
    with pytest.raises(OSError):
        read_file(tmp_path / "link", follow_links=False)
    assert read_file(tmp_path / "f", follow_links=False) == bytearray(b"abc")


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_read_file_refuses_a_fifo_a_folder_or_a_device_without_waiting(tmp_path, kind):
    """Regression: a FIFO in place of a model's sidecar made `costlearn train` wait forever for a writer (the
    sidecar was read with open(), which blocks on a FIFO); read_file opens without blocking and refuses it."""
    import signal
    path = {"fifo": tmp_path / "model.json", "folder": tmp_path, "device": "/dev/zero"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail(f"read_file waited on a {kind}"))
    signal.alarm(10)
    try:
        with pytest.raises(OSError, match=f"is not a regular file but a {kind.replace('fifo', 'FIFO')}"):
            read_file(path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_an_output_check_creates_nothing_and_names_how_the_path_was_given(tmp_path):
    from costlearn.core.files import check_output
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert check_output(tmp_path / "a" / "b" / "r.md", "--report") == tmp_path / "a" / "b" / "r.md"
    assert check_output(tmp_path / "new", "--out", folder=True) and sorted(tmp_path.iterdir()) == [blocker]
    with pytest.raises(ValueError, match=r"^COSTLEARN_CACHE=\S+file is a file, not a folder"):
        check_output(blocker, "COSTLEARN_CACHE=", folder=True)
    with pytest.raises(ValueError, match=r"^--report \S+ is a folder; give a file name \(e\.g\. \S+report\.md\)"):
        check_output(tmp_path, "--report", example="report.md")
    with pytest.raises(ValueError, match=r"^--report \S+file/x/r\.md: \S+file is a file, not a folder$"):
        check_output(blocker / "x" / "r.md", "--report")
    with pytest.raises(ValueError, match="the folder .*no does not exist; create it"):
        check_output(tmp_path / "no" / "t.json", "--out", create=False)


@pytest.mark.parametrize("damage, why", [
    (lambda p: p.write_text('{"extra": ' + "[" * 100_000 + "]" * 100_000 + "}"), "nested too deep"),
    (lambda p: p.write_text('{"multiprocessors": ' + "9" * 5000 + "}"), "digits"),
    (lambda p: p.write_bytes(b"\xb3\xff garbage"), "utf-8"),
    (lambda p: p.write_text("[1, 2]"), "must be a JSON object"),
    (lambda p: p.write_text('{"x' + "y" * 100_000 + '": 1}'), r"unknown DeviceSpec fields \['xyyy"),
    (lambda p: p.mkdir(), "not a regular file"),
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: p.write_text(" " * ((1 << 20) + 1)), "at most"),
])
def test_a_damaged_device_json_is_named_not_a_traceback_or_a_hang(tmp_path, damage, why):
    """A device.json nested 100,000 deep was a RecursionError traceback, a FIFO hung the import into its folder
    (a folder or a FIFO was taken for no device.json by train and evaluate); every reader uses
    DeviceSpec.from_file."""
    from costlearn.core.device import DeviceFileError, DeviceSpec
    from costlearn.learn.train import read_device_json
    from costlearn.interop.common import InteropError, device_folder
    from costlearn.core.device import preset
    folder = tmp_path / "a100"
    folder.mkdir()
    damage(folder / "device.json")
    with pytest.raises(DeviceFileError, match=f"device.json: not a valid device description .*{why}") as e:
        DeviceSpec.from_file(folder / "device.json")
    assert len(str(e.value)) < 500
    with pytest.raises(DeviceFileError, match=why):
        read_device_json(folder)
    with pytest.raises(InteropError, match=why):
        device_folder(tmp_path, preset("a100"))


@pytest.mark.parametrize("value", ["abc", "-1", "1.0", "\u0663", "9" * 20, "9" * 5000])
def test_a_device_index_variable_that_is_no_index_is_named(monkeypatch, value):
    """COSTLEARN_OPENCL_DEVICE=abc said "invalid literal for int() with base 10: 'abc'", naming no variable."""
    from costlearn.core.checks import env_index
    monkeypatch.setenv("COSTLEARN_OPENCL_DEVICE", value)
    with pytest.raises(ValueError, match="COSTLEARN_OPENCL_DEVICE=.*; must be a device index, an int >= 0") as e:
        env_index("COSTLEARN_OPENCL_DEVICE")
    assert len(str(e.value)) < 200
    for ok, want in (("", None), (" 1 ", 1), ("0", 0)):
        monkeypatch.setenv("COSTLEARN_OPENCL_DEVICE", ok)
        assert env_index("COSTLEARN_OPENCL_DEVICE") == want
