"""The base of the errors costlearn raises on purpose, and how it warns.

Every exception class the library defines derives from
:class:`CostlearnError`, beside the builtin it has always been
(``ValueError`` for a bad file or argument, ``RuntimeError`` for a missing
device or library, ``OSError`` for a store that cannot be written), so an
``except ValueError`` written against an earlier version still catches it.
The command line prints a :class:`CostlearnError` (and a ``ValueError`` or
``OSError``: a bad argument or path) as one line and exit status 2; any
other exception is a bug and shows its traceback.

:class:`costlearn.collect.summary.CollectionInterrupted` and
:class:`costlearn.interop.common.ImportInterrupted` are the exceptions
outside it: interrupts (``KeyboardInterrupt``), not errors, so that
``except Exception`` does not swallow a user's Ctrl-C.

A diagnostic that is not an error (a corrupt dataset part skipped, a
corrupt tuning database set aside, the numpy ranker standing in for the C
one) is a warning raised by :func:`warn`, which points it at the first
line of code outside costlearn that led to it: the caller's, never a line
inside the package. The command line prints each as one line of words.
"""
from __future__ import annotations

import inspect
import os
import warnings

__all__ = ["CostlearnError", "warn"]


class CostlearnError(Exception):
    """Base of every exception class costlearn defines (see the module)."""


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The folder of the costlearn package, with a trailing separator: code whose file lies under it is costlearn's."""


def warn(message: str, category: type = UserWarning) -> None:
    """Warn with ``message`` as from the first caller outside costlearn.

    The warning's file and line (what ``python -W`` filters and the default
    display show) are those of the innermost frame whose code lies outside
    the costlearn package: a library user's own call, however deep inside
    costlearn the condition was found; where every frame is costlearn's, the
    outermost one.

    Parameters
    ----------
    message : str
        Words that stand alone (the command line prints them as one line).
    category : type
        A :class:`Warning` subclass (default :class:`UserWarning`).
    """
    frame, level, last = inspect.currentframe().f_back, 2, 2
    while frame is not None:
        if not os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE_DIR):
            break
        frame, level, last = frame.f_back, level + 1, level
    warnings.warn(message, category, stacklevel=level if frame is not None else last)
