"""The base of the errors costlearn raises on purpose.

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
"""
from __future__ import annotations

__all__ = ["CostlearnError"]


class CostlearnError(Exception):
    """Base of every exception class costlearn defines (see the module)."""
