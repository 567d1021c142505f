"""Argument checks: each names the value it refuses and what is allowed."""
from __future__ import annotations

import math
import numbers
import os
from pathlib import Path

__all__ = ["check_int", "check_real", "check_choice", "check_instance", "check_path", "check_pathlike", "shown",
           "env_index"]


def shown(value, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters with
    ``...`` (a hostile file's value can be as long as the file; an int over
    the interpreter's digit limit, which ``repr`` refuses, is named by its
    length).

    Parameters
    ----------
    value : object
    limit : int
        Most characters returned, >= 4.

    Returns
    -------
    str
    """
    try:
        text = repr(value)
    except ValueError:                          # int.__repr__ past sys.get_int_max_str_digits
        return "an int too long to print"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as a Python int, refusing bool, float and out-of-range values.

    Parameters
    ----------
    name : str
        How the value is called in the message (``"M"``, ``"top_k"``).
    value : int-like
        Python or numpy integer.
    lo, hi : int, optional
        Inclusive bounds.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        If ``value`` is not an integer (bool and float included).
    ValueError
        If it lies outside [lo, hi].
    """
    if type(value) is int and (lo is None or value >= lo) and (hi is None or value <= hi):
        return value
    want = "an int" + (f" >= {lo}" if lo is not None and hi is None else "") + \
        (f" in [{lo}, {hi}]" if lo is not None and hi is not None else "") + \
        (f" <= {hi}" if lo is None and hi is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={shown(value)} ({type(value).__name__}); must be {want}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name}={shown(value)}; must be {want}")
    return v


def check_real(name: str, value, lo: float | None = None, *, strict: bool = False,
               hi: float | None = None) -> float:
    """``value`` as a finite Python float >= lo (> lo if ``strict``) and <= hi.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (bool included).
    ValueError
        If it is not finite or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={shown(value)} ({type(value).__name__}); must be a finite number")
    v = float(value)
    bad = not math.isfinite(v) or (lo is not None and (v < lo or (strict and v == lo))) \
        or (hi is not None and v > hi)
    if bad:
        rng = "" if lo is None else f" {'>' if strict else '>='} {lo:g}"
        rng += "" if hi is None else f" and <= {hi:g}"
        raise ValueError(f"{name}={shown(value)}; must be a finite number{rng}")
    return v


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices`` (strings), else ValueError listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={shown(value)}; allowed: {', '.join(repr(c) for c in choices)}")
    return value


def check_instance(name: str, value, kinds, what: str):
    """``value`` if it is an instance of ``kinds``, else TypeError saying ``what`` is expected."""
    if not isinstance(value, kinds):
        raise TypeError(f"{name}={shown(value)}; must be {what}")
    return value


def check_path(name: str, value, *, optional: bool = False):
    """``value`` as a Path (None allowed with ``optional``); TypeError otherwise."""
    if value is None and optional:
        return None
    return Path(check_pathlike(name, value))


def check_pathlike(name: str, value, *, optional: bool = False):
    """``value`` itself where :func:`check_path` takes it (a str or an
    ``os.PathLike``, not empty; None with ``optional``), without making a
    Path (a few microseconds); TypeError otherwise."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)) or str(value) == "":
        raise TypeError(f"{name}={shown(value)}; must be a path (str or pathlib.Path)"
                        + (" or None" if optional else ""))
    return value


def env_index(variable: str, default: int | None = None) -> int | None:
    """The device index the environment variable ``variable`` gives.

    Parameters
    ----------
    variable : str
        Its name (``COSTLEARN_OPENCL_DEVICE``).
    default : int, optional
        Where it is unset or empty.

    Returns
    -------
    int or None

    Raises
    ------
    ValueError
        Naming the variable and its value (cut) where it is not ASCII
        digits of at most nine (an index >= 0).
    """
    text = os.environ.get(variable, "")
    if text.strip() == "":
        return default
    t = text.strip()
    if not (t.isascii() and t.isdigit() and len(t) <= 9):
        raise ValueError(f"{variable}={shown(text)}; must be a device index, an int >= 0 (0: the first device)")
    return int(t)
