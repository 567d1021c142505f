"""Ctrl-C deferred across a write, and a lock that lets one process at a time write a folder."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:                            # not POSIX (Windows): FolderLock locks nothing
    fcntl = None


from costlearn.core.errors import CostlearnError

__all__ = ["sigint_deferred", "FolderBusy", "FolderLock"]

@contextlib.contextmanager
def sigint_deferred():
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block
    has finished, then deliver it as the handler in place before would have
    (a :class:`KeyboardInterrupt` by default): a file written and the count
    that records it happen together or not at all. Outside the main thread
    (where Python cannot set signal handlers) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if held:
        if callable(before):
            before(signal.SIGINT, held[0])
        elif before == signal.SIG_DFL:
            raise KeyboardInterrupt


# -- one writer per folder -----------------------------------------------------

class FolderBusy(CostlearnError, RuntimeError):
    """Another process holds the folder's lock (:class:`FolderLock`)."""


class FolderLock:
    """An exclusive lock on ``<folder>/<name>``: one holder at a time, across
    processes, and never left stuck by a holder that dies (``kill -9``
    included): it is an advisory ``flock`` on an open file, which the
    operating system releases when the file is closed or its process ends
    (Linux ``flock(2)``). The file keeps the last holder's pid and start
    time, for the message another process gets. On a system without
    ``fcntl`` (Windows) nothing is locked.

    Parameters
    ----------
    folder : path
        Created if missing.
    what : str
        What the holder does, for the message (``"a collection"``).
    name : str
        The lock file's name in ``folder``.
    wait : bool
        Wait for the holder to release it (for short critical sections,
        such as a model's swap) instead of raising FolderBusy.

    Raises
    ------
    FolderBusy
        If another process holds it (naming that process) and ``wait`` is False.
    OSError
        If the lock file cannot be created.
    """

    def __init__(self, folder, what: str, name: str = ".lock", *, wait: bool = False):
        self.path = Path(folder) / name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+")
        if fcntl is None:                      # no advisory locks here: one writer is the user's care
            return
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read(200).strip() or "another process"
            self._fh.close()
            raise FolderBusy(f"{self.path.parent}: {holder} is writing it ({what} holds {self.path.name}); "
                             "wait for it to finish, or use another folder") from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')} ({what})")
        self._fh.flush()

    def release(self) -> None:
        """Release the lock (closing the file); a second call does nothing."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
