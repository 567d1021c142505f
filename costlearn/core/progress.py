"""Progress of a long call, in a log as on a terminal: `ProgressLog` (the callback the command line gives a library
function's ``progress=``, which prints its lines) and `progress_bar` (a counted loop's bar, or its lines in a log).

A library function that runs long takes ``progress``: a callable taking one line of text per stage (a fold, a
dtype, a problem count), or None; it never prints. Whoever calls it decides where the lines go. On a terminal they
show with a tqdm bar whose elapsed time ticks; in a log (a stream that is not a terminal) each line is written with
the time since the start, and while a stage lasts, a line repeats it at least every :data:`EVERY_S` seconds, so a
log never goes silent for longer, however long one stage takes.
"""
from __future__ import annotations

import sys
import threading
import time

__all__ = ["EVERY_S", "ProgressLog", "LogBar", "progress_bar", "is_terminal", "elapsed_text", "say"]

EVERY_S = 20.0
"""Longest silence, seconds, of a long call's progress in a log."""


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (False for a file, a pipe, a closed or absent stream)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def elapsed_text(seconds: float) -> str:
    """``seconds`` as a log shows them: ``42s``, ``3m05s``, ``1h02m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def say(progress):
    """The callable a library function reports to: ``progress``, or one that does nothing for None."""
    return progress if progress is not None else (lambda line: None)


class ProgressLog:
    """A ``progress`` callback that prints (the command line's).

    Called with one line per stage. Off a terminal each line is written as
    ``[<time since the start>] <line>``, and a thread writes ``[<time>] still:
    <the last line>`` whenever nothing was written for ``every_s`` seconds.
    On a terminal each line is written above a tqdm bar that shows the last
    one and the time since the start, ticking. The thread and the bar run
    inside a ``with`` block; outside one the lines are written and nothing
    else.

    Parameters
    ----------
    stream : file, optional
        Where to write (default ``sys.stderr``, read when the block opens).
    every_s : float, optional
        The longest silence in a log, seconds (default :data:`EVERY_S`, read
        when the object is made).
    terminal : bool, optional
        Whether ``stream`` is a terminal (default: asked of it).
    """

    def __init__(self, stream=None, *, every_s: float | None = None, terminal: bool | None = None):
        self.stream, self.terminal = stream, terminal
        self.every_s = float(EVERY_S if every_s is None else every_s)
        self.t_start = self.last_write = time.monotonic()
        self.last = ""
        self.bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def _out(self):
        return self.stream if self.stream is not None else sys.stderr

    def _is_terminal(self) -> bool:
        return self.terminal if self.terminal is not None else is_terminal(self._out())

    def _write(self, text: str) -> None:
        """Write one line (under the lock); a closed stream loses it, never fails the call."""
        try:
            if self.bar is not None:
                self.bar.write(text, file=self._out())
            else:
                print(text, file=self._out(), flush=True)
        except (OSError, ValueError):
            pass
        self.last_write = time.monotonic()

    def __call__(self, line: str) -> None:
        line = " ".join(str(line).split())
        with self._lock:
            self.last = line
            if self.bar is not None:
                self.bar.set_description_str(line, refresh=False)       # the bar redrawn under the line shows it
                self._write(line)
            else:
                self._write(f"[{elapsed_text(time.monotonic() - self.t_start)}] {line}")

    def beat(self) -> None:
        """What the thread does each tick: tick the terminal's bar; in a log, write ``still: <last line>`` where
        nothing was written for ``every_s``."""
        with self._lock:
            now = time.monotonic()
            if self.bar is not None:
                self.bar.refresh()
            elif self.last and now - self.last_write >= self.every_s:
                self._write(f"[{elapsed_text(now - self.t_start)}] still: {self.last}")

    def _run(self) -> None:
        tick = min(1.0, self.every_s / 4)
        while not self._stop.wait(tick):
            self.beat()

    def __enter__(self):
        self.t_start = self.last_write = time.monotonic()
        if self._is_terminal():
            from tqdm.auto import tqdm                     # start-up: loaded by a command that reports progress
            self.bar = tqdm(total=None, bar_format="{desc} [{elapsed}]", file=self._out(), leave=False,
                            dynamic_ncols=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="costlearn-progress", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and remove the bar."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    def __exit__(self, *exc) -> None:
        self.close()


class LogBar(ProgressLog):
    """A counted loop's bar in a log: the part of tqdm's interface a loop
    uses (``n``, ``total``, :meth:`update`, :meth:`set_postfix_str`,
    :meth:`set_description_str`, :meth:`refresh`, :meth:`close`), written as
    ``[<time>] <desc>: <n>/<total> <unit>, <postfix>`` when refreshed at most
    every ``every_s`` seconds, by its thread where a refresh has not come for
    that long, and once when closed. Its thread starts at once.

    Parameters
    ----------
    total : int or float, optional
    desc, unit : str
    stream : file, optional
        Default ``sys.stderr``.
    every_s : float, optional
        Seconds between lines (default :data:`EVERY_S`).
    """

    def __init__(self, total=None, desc: str = "", unit: str = "it", stream=None, *, every_s: float | None = None):
        super().__init__(stream, every_s=every_s, terminal=False)
        self.total, self.desc, self.unit, self.n, self.postfix = total, desc, unit, 0, ""
        self.__enter__()

    def status(self) -> str:
        """The line the bar is now."""
        count = f"{self.n:g}" + (f"/{self.total:g}" if self.total else "") + f" {self.unit}"
        return f"{self.desc}: {count}" + (f", {self.postfix}" if self.postfix else "")

    def update(self, n=1) -> None:
        self.n += n
        self.refresh()

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = " ".join(str(s).split())
        if refresh:
            self.refresh()

    def set_description_str(self, desc: str = "", refresh: bool = True) -> None:
        self.desc = str(desc)
        if refresh:
            self.refresh()

    def refresh(self) -> None:
        with self._lock:
            self.last = self.status()
            if time.monotonic() - self.last_write >= self.every_s:
                self._write(f"[{elapsed_text(time.monotonic() - self.t_start)}] {self.last}")

    def beat(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self.last_write >= self.every_s:
                self._write(f"[{elapsed_text(now - self.t_start)}] {self.status()}")

    def close(self) -> None:
        was_open = self._thread is not None
        super().close()
        if was_open:
            with self._lock:
                self._write(f"[{elapsed_text(time.monotonic() - self.t_start)}] {self.status()}")


def progress_bar(total=None, desc: str = "", unit: str = "it", *, stream=None, **tqdm_options):
    """A counted loop's progress: a tqdm bar where ``stream`` (default ``sys.stderr``) is a terminal (``total``,
    ``desc``, ``unit`` and ``tqdm_options`` passed on), else a :class:`LogBar` writing a line at least every
    :data:`EVERY_S` seconds. Close it when the loop ends."""
    out = stream if stream is not None else sys.stderr
    if is_terminal(out):
        from tqdm.auto import tqdm                         # start-up: loaded by a loop that shows a bar
        return tqdm(total=total, desc=desc, unit=unit, file=out, dynamic_ncols=True, **tqdm_options)
    return LogBar(total, desc, unit, out)
