"""Measurements a host took while its tuning database could not be written
(a server down or unreachable, a file locked), kept on the host until they
can be delivered (design.md, "Predictor").

One file per tuning, ``<tuning id>.json`` in a folder of the user cache
named after the database, written atomically and durably
(:func:`costlearn.core.files.atomic_write`): a kill leaves the whole file or
none. Delivery records the file's measurements
(:meth:`~costlearn.serve.tuning_db.TuningDB.record`), then removes it. Each
tuning is thus delivered at least once, and exactly once in effect: its
measurements carry the tuning's id in their key, so a second delivery (a
kill between the record and the removal, two processes delivering at once)
adds nothing. A file that does not parse as a spooled tuning (damaged,
hand-made, not a regular file) is renamed ``<name>.bad-<random>`` with a
warning, never delivered and never deleted.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path

from costlearn.core.problem import Problem
from costlearn.core.files import atomic_write, read_file
from costlearn.core.keyed_cache import cache_dir
from costlearn.serve.fleet import DAMAGED, Measurement
from costlearn.core.errors import warn

__all__ = ["Spool", "FORMAT"]

FORMAT = "costlearn-tuning-spool"
_VERSION = 1
_MAX_BYTES = 4 << 20
"""A spooled tuning is a few KiB; a larger file is not one."""
_TUNING_ID = re.compile(r"[0-9a-f]{8,64}")


class Spool:
    """The measurements spooled on this host for one tuning database.

    Parameters
    ----------
    target : str
        The database's name (a file's resolved path, or a server URL with
        its password redacted): the folder is
        ``<cache>/tuning-spool/<sha256 of target, 16 hex>``, so a tuning is
        only ever delivered to the database it was meant for.
    folder : path, optional
        Another folder (tests).
    """

    def __init__(self, target: str, folder=None):
        digest = hashlib.sha256(str(target).encode()).hexdigest()[:16]
        self.target = str(target)
        self.folder = Path(folder) if folder is not None else cache_dir() / "tuning-spool" / digest
        self._maybe_pending = True          # until a delivery finds the folder empty
        self._lock = threading.Lock()
        self._stuck: set = set()            # files that could be neither delivered nor set aside

    def add(self, key: tuple, measurements, source: str) -> Path:
        """Spool one tuning: ``key`` (the 10 values of
        :func:`costlearn.serve.tuning_db.key_values`), its measurements (one
        tuning id) and what measured.

        Raises
        ------
        ValueError
            If the measurements carry no or several tuning ids, or one that
            is not 8-64 lowercase hex digits.
        OSError
            If the folder cannot be written (the measurements are then lost,
            and the caller says so).
        """
        ids = {m.tuning_id for m in measurements}
        if len(ids) != 1 or not _TUNING_ID.fullmatch(next(iter(ids))):
            raise ValueError(f"a spooled tuning has one tuning id of 8-64 hex digits; got {sorted(ids)[:3]}")
        doc = {"format": FORMAT, "version": _VERSION, "target": self.target, "key": list(key), "source": source,
               "measurements": [{f: getattr(m, f) for f in Measurement.__dataclass_fields__} for m in measurements]}
        path = atomic_write(self.folder / f"{ids.pop()}.json", json.dumps(doc, default=str))
        self._maybe_pending = True
        return path

    def pending(self) -> list[Path]:
        """The spooled tunings not yet delivered, oldest first. A temporary
        file an interrupted :meth:`add` left (``.<name>.<pid>.<random>.tmp``)
        over an hour ago is removed: it holds no tuning that was spooled."""
        try:
            entries = list(self.folder.iterdir())
        except FileNotFoundError:
            return []
        stale = time.time() - 3600
        for p in entries:
            if p.name.startswith(".") and p.name.endswith(".tmp") and _mtime(p) < stale:
                try:
                    p.unlink()
                except OSError:
                    pass
        paths = [p for p in entries if p.suffix == ".json" and not p.name.startswith(".")]
        return sorted(paths, key=lambda p: (_mtime(p), p.name))

    def deliver(self, db) -> int:
        """Record every spooled tuning in ``db`` and remove its file; stop
        at the first the database cannot take (still away). Cheap where
        nothing was spooled since the last delivery of this process.

        Returns
        -------
        int
            Tunings delivered now.
        """
        if not self._maybe_pending:
            return 0
        done = 0
        with self._lock:
            self._maybe_pending = False                      # before listing: a tuning added meanwhile sets it again
            for path in self.pending():
                if path in self._stuck:
                    continue
                try:
                    key, measurements, source = self._read(path)
                except (OSError, KeyError, *DAMAGED) as e:
                    if os.path.lexists(path):
                        self._set_aside(path, e)
                    continue
                try:
                    db.record(Problem(*key[:6]), key[6], key[7], key[8], measurements, source=source,
                              costlearn_version=key[9])
                except DAMAGED as e:                         # a key or measurement no store may hold
                    self._set_aside(path, e)
                    continue
                except PermissionError:
                    return done                              # a store that may only read never takes them
                except OSError:
                    self._maybe_pending = True
                    return done                              # still away: the rest waits
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass                                     # another process delivered it too (no double)
                done += 1
        return done

    def _read(self, path: Path) -> tuple:
        """(key, measurements, source) of a spooled file; OSError, ValueError
        etc. if it is not one. Read by :func:`costlearn.core.files.read_file`
        without following a link and without blocking (a FIFO there would
        hang the compile): only a regular file of at most ``_MAX_BYTES``."""
        data = read_file(path, _MAX_BYTES, follow_links=False)
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != _VERSION:
            raise ValueError(f"not a {FORMAT} file of version {_VERSION}")
        key, rows, source = doc["key"], doc["measurements"], doc["source"]
        if not isinstance(key, list) or len(key) != 10 or not isinstance(rows, list) or not isinstance(source, str):
            raise ValueError("key, measurements or source malformed")
        measurements = [Measurement(**r) for r in rows]
        if {m.tuning_id for m in measurements} != {path.stem}:
            raise ValueError("its measurements are not of the tuning its name says")
        return key, measurements, source

    def _set_aside(self, path: Path, reason) -> None:
        """Rename a spooled file that cannot be delivered to a new
        ``<name>.bad-<random>`` beside it (never over an earlier one), with a
        warning; one that cannot be renamed is skipped for the rest of the
        process."""
        bad = path.with_name(f"{path.name}.bad-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, bad)
        except OSError as e:
            self._stuck.add(path)
            warn(f"costlearn: spooled tuning {path} cannot be delivered ({str(reason)[:200]}) nor set aside ({e}); "
                 "skipped", RuntimeWarning)
            return
        warn(f"costlearn: spooled tuning {path} cannot be delivered ({str(reason)[:200]}); kept as {bad}",
             RuntimeWarning)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
