"""Exceptions of td-nn.

Like `td_core.errors`, each class also subclasses the builtin that upstream
tensordict raises for the same mistake, so existing `except` clauses keep
working.
"""

from __future__ import annotations

from td_core.errors import KeyNotFoundError, TDError

__all__ = [
    "OutputMismatchError",
    "KeySpecError",
    "UnknownKeyError",
    "DuplicateInputError",
    "NotCallableError",
    "SkipModeError",
]


class OutputMismatchError(TDError, ValueError, RuntimeError):
    """A module returned a different number of outputs than it has `out_keys`."""


class KeySpecError(TDError, TypeError, ValueError):
    """`in_keys` or `out_keys` are not keys (upstream raises `ValueError` here)."""


class UnknownKeyError(KeyNotFoundError, ValueError):
    """A key asked for is not among a module's keys (upstream raises `ValueError` here)."""


class DuplicateInputError(TDError, TypeError, RuntimeError):
    """An input was given both positionally and by keyword (upstream raises `RuntimeError`)."""


class NotCallableError(TDError, TypeError, ValueError):
    """A module was given something it cannot call (upstream raises `ValueError`)."""


class SkipModeError(TDError, ValueError, RuntimeError):
    """`set_skip_existing(None)` entered as a context manager (upstream raises `RuntimeError`)."""
