"""The ``.npz`` codec of model artifacts: aligned stored members written, and read in place from a
file's buffer without copying."""
from __future__ import annotations

import io
import math
import struct
import zipfile

import numpy as np

__all__ = ["npz_bytes", "npz_arrays", "NPZ_ALIGN", "NPY_HEADER_MAX_BYTES"]


NPY_HEADER_MAX_BYTES = 1 << 14
"""Most bytes of an ``.npy`` member :func:`npz_arrays` reads its header from
(copied out of the file's buffer for numpy's header reader): numpy writes
a header of a few hundred bytes and refuses one over 10,000
(``numpy.lib.format.read_array_header_1_0``'s ``max_header_size``). The
copy is this many bytes of every member at least this large, so the bound
stays close to numpy's: a far larger one makes the copy a cost of every
load of a deep model."""


class _BufferReader(io.RawIOBase):
    """A seekable read-only file over a buffer, without copying it (as
    :class:`io.BytesIO` copies a bytearray): what :mod:`zipfile` reads the
    directory of an in-memory ``.npz`` through."""

    def __init__(self, view: memoryview):
        super().__init__()
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        got = self._view[self._pos:self._pos + len(b)]
        b[:len(got)] = got
        self._pos += len(got)
        return len(got)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


NPZ_ALIGN = 64
"""Where :func:`npz_bytes` starts each member's bytes: a multiple of this in
the file. numpy's ``.npy`` header ends on a multiple of 64 (``ARRAY_ALIGN``
of :mod:`numpy.lib.format`), so each array's data is aligned in the file,
and :func:`npz_arrays` reads it in place instead of copying a misaligned
array (what ``numpy.savez``'s unaligned members cost at every load:
docs/results.md, "Speed")."""

_ALIGN_EXTRA_ID = 0xD935
"""The zip extra field that pads a local header to :data:`NPZ_ALIGN` (the
id Android's ``zipalign`` writes; a reader skips fields it does not know)."""


def npz_bytes(arrays: dict) -> bytes:
    """The bytes of an ``.npz`` file of ``arrays`` that ``numpy.load`` reads
    as it reads ``numpy.savez``'s: one stored (uncompressed) ``.npy`` member
    per array, each member's bytes starting at a multiple of
    :data:`NPZ_ALIGN` in the file (a padding extra field in its local header,
    PKWARE APPNOTE 4.5), so :func:`npz_arrays` takes every array from the
    file's buffer without a copy.

    Parameters
    ----------
    arrays : dict of str to array-like
        Member name (without ``.npy``) -> array (object arrays refused).

    Returns
    -------
    bytes
        The file's bytes.

    Raises
    ------
    ValueError
        If an array holds Python objects.
    """
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            head = 30 + len(info.filename.encode("utf-8")) + 4     # the local header and the field's own 4 bytes
            pad = -(buf.tell() + head) % NPZ_ALIGN
            info.extra = struct.pack("<HH", _ALIGN_EXTRA_ID, pad) + bytes(pad)
            zf.writestr(info, member.getbuffer())
    return buf.getvalue()


def npz_arrays(data) -> dict:
    """The arrays of an ``.npz`` file (``numpy.savez``) whose bytes are
    ``data``, read from those bytes: a caller that checked their sha256 uses
    exactly the bytes it checked, and reads the file once. A stored (not
    compressed) member's array is taken from ``data`` itself, without the
    zip CRC pass (the caller's digest covers every byte); compressed ones go
    through :func:`numpy.load`. Object arrays are refused, as
    ``numpy.load(allow_pickle=False)`` refuses them.

    Parameters
    ----------
    data : bytes or bytearray
        The file's bytes; a ``bytearray`` (:func:`read_file`) lends its
        memory to the aligned arrays (no copy), ``bytes`` are copied out.

    Returns
    -------
    dict
        Member name (without ``.npy``) -> read-only ndarray (a model's
        arrays are not changed once loaded; a loaded object may be shared by
        two loads of the same bytes).

    Raises
    ------
    zipfile.BadZipFile, ValueError
        If ``data`` is not such a file (a member is truncated, encrypted,
        named twice, not ``.npy``, of no valid shape, or holds objects).
    """
    out = {}
    view = memoryview(data)
    with zipfile.ZipFile(_BufferReader(view)) as zf:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in out:
                raise ValueError(f"member {info.filename!r}: a second array named {name!r}")
            if info.flag_bits & 0x1:
                raise zipfile.BadZipFile(f"member {info.filename!r} is encrypted")
            head = info.header_offset
            if info.compress_type != zipfile.ZIP_STORED or view[head:head + 4] != b"PK\x03\x04" \
                    or head + 30 > len(view):
                arr = np.load(io.BytesIO(zf.read(info)), allow_pickle=False)      # zipfile's own checks
            else:
                name_len, extra_len = struct.unpack_from("<HH", view, head + 26)
                start = head + 30 + name_len + extra_len
                if start + info.file_size > len(view):
                    raise zipfile.BadZipFile(f"member {info.filename!r} runs past the end of the file")
                arr = _stored_array(view, start, info)
            arr.setflags(write=False)
            out[name] = arr
    return out


def _stored_array(view: memoryview, start: int, info: zipfile.ZipInfo) -> np.ndarray:
    """The array of the stored ``.npy`` member ``info`` whose bytes begin at
    ``start`` of ``view``: over those bytes where aligned, else a copy
    (:func:`npz_arrays`)."""
    member = io.BytesIO(view[start:start + min(info.file_size, NPY_HEADER_MAX_BYTES)])
    version = np.lib.format.read_magic(member)
    if version not in ((1, 0), (2, 0)):
        return np.load(io.BytesIO(view[start:start + info.file_size]), allow_pickle=False)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(member)
    if dtype.hasobject:
        raise ValueError(f"member {info.filename!r} holds Python objects; refused")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"member {info.filename!r}: shape {shape!r:.100} is not a tuple of sizes")
    count = math.prod(shape)
    if member.tell() + count * dtype.itemsize != info.file_size:
        raise ValueError(f"member {info.filename!r}: {info.file_size} bytes do not hold {shape} {dtype}")
    arr = np.frombuffer(view, dtype, count, start + member.tell())
    if not arr.flags.aligned or not arr.flags.writeable:
        arr = arr.copy()
    return arr.reshape(shape, order="F" if fortran else "C")
