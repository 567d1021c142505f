"""The predictor's hot path in C (``_native.c``): compiled once per machine,
loaded with :mod:`ctypes`, with numpy twins as the reference and fallback.

The source is compiled with ``$CC``, else the C compiler Python was built
with (``sysconfig`` ``CC``), else ``cc`` (``-O2 -ffp-contract=off``), into the
user cache (:func:`cache_dir`), under a name keyed by the source's hash, the
flags, the compilers and the platform. A build is loaded and checked for
every symbol before it is moved into place (atomically, with its sha256
beside it); a cached file whose sha256 differs is rebuilt, never loaded.
Where no compiler works, :func:`library` warns once and returns None;
callers then use numpy and XGBoost (the full model, no cascade: the same
answers up to the cascade's rare misses, about 5x slower).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
import threading
import warnings
from pathlib import Path

__all__ = ["library", "cache_dir", "RankContext"]

_SOURCE = Path(__file__).with_name("_native.c")
FLAGS = ("-O2", "-ffp-contract=off", "-shared", "-fPIC")


class RankContext(ctypes.Structure):
    """``costlearn_ctx`` of ``_native.c``: everything ``costlearn_rank``
    needs besides the shape (the predictor fills one per thread)."""

    _fields_ = [(name, kind) for name, kind in (
        ("template", ctypes.c_void_p), ("n_cands", ctypes.c_int32), ("n_features", ctypes.c_int32),
        ("block", ctypes.c_void_p), ("slots", ctypes.c_void_p), ("tile_occ", ctypes.c_void_p),
        ("s", ctypes.c_double), ("peak", ctypes.c_double), ("bw", ctypes.c_double), ("cols", ctypes.c_void_p),
        ("nodes", ctypes.c_void_p), ("leaf_value", ctypes.c_void_p), ("roots", ctypes.c_void_p),
        ("depths", ctypes.c_void_p), ("n_trees", ctypes.c_int32), ("base", ctypes.c_double),
        ("sign", ctypes.c_double),
        ("env_points", ctypes.c_void_p), ("n_env", ctypes.c_int32), ("embed", ctypes.c_double * 9),
        ("X", ctypes.c_void_p), ("Xk", ctypes.c_void_p), ("work", ctypes.c_void_p), ("part", ctypes.c_void_p),
        ("rest", ctypes.c_void_p), ("row_cand", ctypes.c_void_p),
        ("out_index", ctypes.c_void_p), ("out_score", ctypes.c_void_p), ("nearest", ctypes.c_int32),
        ("nearest_d2", ctypes.c_double))]


def cache_dir() -> Path:
    """Where compiled helpers live: ``$COSTLEARN_CACHE``, else
    ``$XDG_CACHE_HOME/costlearn``, else ``~/.cache/costlearn``."""
    if os.environ.get("COSTLEARN_CACHE"):
        return Path(os.environ["COSTLEARN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "costlearn"


_LIB = None
_LIB_TRIED = False
_LIB_LOCK = threading.Lock()


_SYMBOLS = ("costlearn_forest_predict", "costlearn_shape_features", "costlearn_rank")


def _compilers() -> list[list[str]]:
    """``$CC``, the compiler Python was built with, ``cc``: in that order,
    without repeats; a command that does not parse is skipped."""
    out = []
    for cmd in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc"):
        try:
            args = shlex.split(cmd) if cmd else []
        except ValueError:
            continue
        if args and args not in out:
            out.append(args)
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(path: Path):
    """Load a built library and check it has every symbol."""
    lib = ctypes.CDLL(str(path))
    for name in _SYMBOLS:
        getattr(lib, name)                  # AttributeError if missing
    return lib


def _compile(target: Path):
    """Build into a temporary file, load it (every symbol present), then move
    it into place with a sha256 file beside it; return the loaded library."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    errors = []
    try:
        for cc in _compilers():
            try:
                subprocess.run(cc + list(FLAGS) + ["-o", tmp, str(_SOURCE), "-lm"], check=True,
                               capture_output=True, text=True, timeout=120)
                lib = _load(Path(tmp))
            except (OSError, AttributeError, subprocess.SubprocessError) as e:
                errors.append(f"{' '.join(cc)}: {(getattr(e, 'stderr', '') or str(e)).strip()[:300]}")
                continue
            digest = _digest(Path(tmp))
            os.replace(tmp, target)         # atomic: concurrent processes see a whole file or none
            side = target.with_name(target.name + ".sha256")
            side_tmp = side.with_name(f"{side.name}.{os.getpid()}.tmp")
            side_tmp.write_text(digest)
            os.replace(side_tmp, side)
            return lib
        raise OSError("no C compiler worked: " + ("; ".join(errors) or "none found"))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def library():
    """The compiled hot path (a :class:`ctypes.CDLL`), compiling it on first
    use; None (with one warning) where it cannot be built or loaded.

    A cached library is used only if its sha256 matches the one recorded when
    it was built (a damaged file would crash the process on load); otherwise
    it is rebuilt. Set ``COSTLEARN_NO_C=1`` to skip it (tests of the fallback
    use this)."""
    global _LIB, _LIB_TRIED
    with _LIB_LOCK:
        if _LIB_TRIED:
            return _LIB
        _LIB_TRIED = True
        if os.environ.get("COSTLEARN_NO_C"):
            return None
        tag = hashlib.sha256(_SOURCE.read_bytes() + repr(FLAGS).encode() + repr(_compilers()).encode()
                             + f"{platform.system()}-{platform.machine()}".encode()).hexdigest()[:16]
        target = cache_dir() / f"native-{tag}.so"
        side = target.with_name(target.name + ".sha256")
        lib = None
        try:
            try:
                if side.read_text().strip() == _digest(target):
                    lib = _load(target)
            except (OSError, AttributeError):
                lib = None                  # missing, damaged or incomplete: build afresh
            if lib is None:
                lib = _compile(target)
        except OSError as e:
            warnings.warn(f"costlearn: could not build its C hot path into {target} ({e}); "
                          "predict_best falls back to numpy and xgboost (the full model's answers, about "
                          "5x slower)", RuntimeWarning, stacklevel=3)
            return None
        P, I32, I64, D = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_double
        lib.costlearn_forest_predict.restype = ctypes.c_int
        lib.costlearn_forest_predict.argtypes = [P, P, P, P, I32, P, I32, I32, P]
        lib.costlearn_shape_features.restype = None
        lib.costlearn_shape_features.argtypes = [I64, I64, I64, P, P, P, D, D, D, I32, P, P, I32]
        lib.costlearn_rank.restype = I32
        lib.costlearn_rank.argtypes = [I64, I64, I64, P, I32, I32, ctypes.POINTER(RankContext)]
        _LIB = lib
        return lib
