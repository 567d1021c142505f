"""How costlearn's C code is built: at install, never in a user's process.

The package build (``setup.py``, run by ``pip install``) compiles it.

One extension, optional (where no C compiler works the install goes on
without it, and :mod:`costlearn.ranker.native_library` falls back to numpy):
``costlearn.ranker._native``, the ranker, a plain shared library called
through :mod:`ctypes`, compiled from the C files :data:`EXTENSIONS` lists
(the scores, one problem's ranking, the shortlist table).

They include :data:`HEADERS`: ``_native.h``, what the files share, and
``costlearn_structs.h``, generated from the Python definition of the structs
(:func:`costlearn.ranker.native_structs.c_header`) and kept in the source
tree; a test holds the two equal. Each build carries the sha256 of what it
was compiled from (:func:`source_sha256`: every source and header), so a
build older than the sources beside it (an editable install whose C changed
since) is refused at load, not run.

This module uses the standard library only: ``setup.py`` loads it by path,
before costlearn or its dependencies are installed.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

HEADER = "costlearn_structs.h"
"""The header generated from the structs' Python definition."""

HEADERS = ("_native.h", HEADER)
"""Every header the C sources include (beside them; part of every
extension's :func:`source_sha256`)."""

EXTENSIONS = {"_native": ("_native_score.c", "_native_rank.c", "_native_shortlist.c")}
"""Extension name (in :mod:`costlearn.ranker`) -> the C source files compiled
and linked into it."""

FLAGS = ("-O2", "-ffp-contract=off")
"""Added after the interpreter's own compiler flags. No contraction into
fused multiply-adds: the numpy twin rounds every product, and the two must
give the same bits."""

UNSAFE_FLAGS = ("-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-fassociative-math", "-freciprocal-math",
                "-fno-signed-zeros", "-ffinite-math-only", "-fno-trapping-math", "-fcx-limited-range", "-mdaz-ftz")
"""Flags (and their ``=...`` forms) removed from the compiler and linker
commands: they let the compiler reorder or approximate floating point (the
numpy twin's bits then differ), and some link crtfastmath, which flushes
subnormals to zero for the whole process when the library loads."""


def unsafe(flag: str) -> bool:
    """Whether a compiler or linker argument is one of :data:`UNSAFE_FLAGS`
    or links gcc's ``crtfastmath.o``."""
    return flag.startswith(UNSAFE_FLAGS) or "crtfastmath" in flag


def source_files(name: str) -> tuple[str, ...]:
    """Every file extension ``name`` is built from: its C sources, then
    :data:`HEADERS` (names beside this module).

    Raises
    ------
    KeyError
        If ``name`` is not one of :data:`EXTENSIONS`.
    """
    return tuple(EXTENSIONS[name]) + HEADERS


def source_sha256(name: str, folder: Path = HERE) -> str:
    """sha256 (hex) of what extension ``name`` is compiled from: each of
    :func:`source_files` as found in ``folder``, in that order, each preceded by
    its name and length (so that text moved from one file to another
    changes the sum too).

    Raises
    ------
    KeyError
        If ``name`` is not one of :data:`EXTENSIONS`.
    OSError
        If a file is missing or unreadable.
    """
    digest = hashlib.sha256()
    for file in source_files(name):
        data = (folder / file).read_bytes()
        digest.update(f"{file}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()
