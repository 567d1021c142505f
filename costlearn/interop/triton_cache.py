"""Triton's remote cache in the tuning database, so ``@triton.autotune``
results (``<kernel>.autotune.json``: every config's timings, Triton's own
``cache_results``) and compiled kernels of any kernel are shared by every
host of a fleet::

    export COSTLEARN_TUNING_DB=postgresql://tuner@db.example/costlearn   # password in ~/.pgpass
    export TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    export TRITON_REMOTE_CACHE_BACKEND=costlearn.interop.triton_cache:TuningDBCacheBackend
    export TRITON_CACHE_AUTOTUNING=1        # Triton >= 3.2: autotune results go through the cache

Triton's cache key hashes the compiler, the target GPU, the kernel's source
and the autotuning key and configs, so one device class's results never
serve another. The files go to the table ``blobs`` of the database
(:meth:`~costlearn.serve.tuning_db.TuningDB.put_blob`); a database that
cannot be read or written costs the cache hit or the sharing, with a
warning, never the compile (Triton then compiles or tunes as without a
cache).
"""
from __future__ import annotations

import warnings

from costlearn.serve.tuning import open_tuning_db

try:                                       # Triton checks the class it is given is one of its backends
    from triton.runtime.cache import RemoteCacheBackend as _Base
except ImportError:                        # costlearn imports without Triton; the class then stands alone
    _Base = object

__all__ = ["TuningDBCacheBackend"]


class TuningDBCacheBackend(_Base):
    """Triton's ``RemoteCacheBackend`` (``get(filenames)``, ``put(filename,
    data)``) on the tuning database ``$COSTLEARN_TUNING_DB`` (a file or a
    ``postgresql://`` URL; :func:`costlearn.serve.tuning.open_tuning_db`).

    Parameters
    ----------
    key : str
        Triton's cache key (one kernel compiled or tuned for one target).
    tuning_db : path, str or tuning database, optional
        Another database than the environment's (tests, scripts).
    """

    def __init__(self, key: str, tuning_db=None):
        if not isinstance(key, str) or not key:
            raise ValueError(f"key={key!r}; Triton's cache key, a non-empty str")
        self._key = key
        self._db = open_tuning_db(tuning_db)

    def get(self, filenames) -> dict:
        """``{filename: bytes}`` of those of ``filenames`` stored under this
        key; a database that cannot be read gives ``{}`` (a miss) and a
        warning."""
        try:
            return self._db.get_blobs(self._key, list(filenames))
        except OSError as e:
            warnings.warn(f"costlearn: Triton's cache not read from the tuning database ({e})", RuntimeWarning,
                          stacklevel=2)
            return {}

    def put(self, filename: str, data: bytes) -> None:
        """Store ``data`` as ``filename`` under this key; one the database
        will not take (cannot be written, too large) is not shared, with a
        warning."""
        try:
            self._db.put_blob(self._key, filename, data)
        except (OSError, ValueError, TypeError) as e:
            warnings.warn(f"costlearn: {filename!r} not shared through the tuning database ({e})", RuntimeWarning,
                          stacklevel=2)
