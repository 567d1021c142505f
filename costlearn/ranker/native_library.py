"""Loading the C code the install built (:mod:`costlearn.ranker._build`):
the ranker's shared library (:func:`library`, called with :mod:`ctypes`).

No compiler runs here. A build is refused, with the reason kept
(:func:`library_unavailable`), where it is missing, cut short (loading it
would crash the process), compiled from another source than the one beside
it, of another struct layout, or turns subnormal floats off for the
process; numpy then ranks, with the same answers.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import os
import struct
import sys
import threading
from pathlib import Path

from costlearn.ranker._build import source_files, source_sha256
from costlearn.ranker.native_structs import C_DOUBLE, C_INT32, C_INT64, C_POINTER, RankContext, check_layout
from costlearn.core.errors import warn

__all__ = ["library", "library_unavailable"]

_HERE = Path(__file__).resolve().parent

_P, _I32, _I64, _D = C_POINTER, C_INT32, C_INT64, C_DOUBLE

def _built(name: str) -> Path | None:
    """The built extension ``name`` (:data:`costlearn.ranker._build.EXTENSIONS`)
    beside this module, or None where the install built none."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _HERE / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


_ELF = {2: dict(head="QQ", at=32, sizes=54, segment="QQ", offset=8, filesz=32),     # 64-bit
        1: dict(head="II", at=28, sizes=42, segment="II", offset=4, filesz=16)}     # 32-bit
"""Where an ELF file's header keeps its program and section header tables'
offsets and sizes, and a program header its segment's offset and size in
the file (the ELF specification, by class)."""


def _check_whole(path) -> None:
    """Refuse a built library cut short (a copy or an install killed
    midway): loading an ELF file whose segments or tables reach past its end
    crashes the process (SIGBUS) instead of failing. Other formats are left
    to the loader.

    Raises
    ------
    OSError
        Naming the file, where it is shorter than its own headers say.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:4] != b"\x7fELF" or data[4] not in _ELF or len(data) < 64:
        return
    f, order = _ELF[data[4]], "<" if data[5] == 1 else ">"
    phoff, shoff = struct.unpack_from(order + f["head"], data, f["at"])
    phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, f["sizes"])
    ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
    for at in range(phoff, min(phoff + phentsize * phnum, len(data) - phentsize + 1), max(phentsize, 1)):
        offset = struct.unpack_from(order + f["segment"][0], data, at + f["offset"])[0]
        filesz = struct.unpack_from(order + f["segment"][1], data, at + f["filesz"])[0]
        ends.append(offset + filesz)
    if max(ends) > len(data):
        raise OSError(f"{path} is cut short ({len(data)} bytes where its headers reach {max(ends)}): reinstall "
                      "(pip install -e .)")


def _subnormals_kept() -> bool:
    """Whether this process still computes subnormal floats (a library built
    with fast math flushes them to zero for the whole process when it loads)."""
    tiny = sys.float_info.min
    return tiny / 1024.0 > 0.0


def _check_subnormals(path) -> None:
    """Raise OSError where loading ``path`` turned subnormals off."""
    if not _subnormals_kept():
        raise OSError(f"loading {path} made this process flush subnormal floats to zero (it was built with fast "
                      "math); rebuild without it (pip install -e . drops such flags)")


def _check_source(name: str, built: str) -> None:
    """Refuse a build of extension ``name`` made from other sources than
    those beside it (``built``: the sha256 it reports, of every C source
    and header; an editable install whose C changed since ``pip
    install``). Where they are not all beside it, nothing is compared.

    Raises
    ------
    OSError
        Saying how to rebuild.
    """
    try:
        want = source_sha256(name)
    except OSError:
        return
    if built != want:
        raise OSError(f"the built {name} was compiled from another source than the files in {_HERE} "
                      f"({', '.join(source_files(name))}; rebuild: pip install -e . in the source tree)")


_SYMBOLS = ("costlearn_forest_predict", "costlearn_sentinel_leaves", "costlearn_shape_features", "costlearn_rank_query",
            "costlearn_rank_many", "costlearn_shortlist_build", "costlearn_layout", "costlearn_fsum",
            "costlearn_source_sha256")


def _open(path: Path):
    """Load a built library, declare its functions and check its layout."""
    _check_whole(path)
    lib = ctypes.CDLL(str(path))
    for name in _SYMBOLS:
        getattr(lib, name)                      # AttributeError if missing
    lib.costlearn_source_sha256.restype = ctypes.c_char_p
    lib.costlearn_source_sha256.argtypes = []
    _check_source("_native", lib.costlearn_source_sha256().decode())
    _check_subnormals(path)
    lib.costlearn_layout.restype = _I32
    lib.costlearn_layout.argtypes = [_P, _I32]
    check_layout(lib)
    lib.costlearn_forest_predict.restype = _I32
    lib.costlearn_forest_predict.argtypes = [_P, _P, _P, _I32, _P, _I32, _I32, _P]
    lib.costlearn_sentinel_leaves.restype = _I32
    lib.costlearn_sentinel_leaves.argtypes = [_P, _I64, _I32, _P]
    lib.costlearn_shape_features.restype = None
    lib.costlearn_shape_features.argtypes = [_I64, _I64, _I64, _P, _I32, _I32, _P, _P, _P, _P, _D, _D, _D, _D, _D,
                                             _P, _P, _I32]
    lib.costlearn_rank_query.restype = _I32
    lib.costlearn_rank_query.argtypes = None    # always given a context's byref(), passed as its pointer without
                                                # argtypes' from_param (a large share of a ranking's call:
                                                # docs/results.md, "Speed")
    lib.costlearn_rank_many.restype = _I32
    lib.costlearn_rank_many.argtypes = [_P, _I32, _I32, _I32, _I32, ctypes.POINTER(RankContext)] + [_P] * 13
    lib.costlearn_fsum.restype = _D
    lib.costlearn_fsum.argtypes = [_P, _I32]
    lib.costlearn_shortlist_build.restype = _I32
    lib.costlearn_shortlist_build.argtypes = [_P, _I32, _I32, _I32, ctypes.POINTER(RankContext), _P, _P]
    return lib


_LIB = None
_LIB_TRIED = False
_LIB_WHY = ""
_LIB_LOCK = threading.Lock()


def library():
    """The compiled ranker (a :class:`ctypes.CDLL` of the ``_native``
    extension the install built), or None (with one warning) where the
    install built none or it cannot be loaded. Set ``COSTLEARN_NO_C=1`` to
    skip it (tests of the fallback use this)."""
    global _LIB, _LIB_TRIED, _LIB_WHY
    with _LIB_LOCK:
        if _LIB_TRIED:
            return _LIB
        _LIB_TRIED = True
        if os.environ.get("COSTLEARN_NO_C"):
            _LIB_WHY = "COSTLEARN_NO_C is set"
            return None
        path = _built("_native")
        try:
            if path is None:
                raise OSError("the install built no C ranker (no C compiler worked at pip install)")
            _LIB = _open(path)
        except (OSError, AttributeError) as e:
            _LIB_WHY = str(e)
            warn(f"costlearn's C ranker is unavailable ({e}); ranking falls back to numpy (the same answers, "
                 "slower)", RuntimeWarning)
        return _LIB


def library_unavailable() -> str:
    """Why :func:`library` returned None ("" where it did not, or was not
    asked yet)."""
    return _LIB_WHY
