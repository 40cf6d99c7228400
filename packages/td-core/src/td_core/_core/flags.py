"""Behaviour switches under upstream's names, each a `ContextVar`.

Every `set_*` object is a context manager and a decorator that scopes the
mode to a block, and `.set()` applies it for the rest of the current
context (upstream's "for the rest of the program"). No environment variable is
read or written: a block affects the code it runs, never another thread.

`set_lazy_legacy`/`lazy_legacy` are upstream's spelling of td's
`set_lazy_stack`/`lazy_stack_enabled`: the same switch.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar, Token
from typing import Any, TypeVar

from td_core._kinds.lazy import _LAZY

__all__ = [
    "set_lazy_legacy",
    "lazy_legacy",
    "set_list_to_stack",
    "list_to_stack",
    "set_capture_non_tensor_stack",
    "capture_non_tensor_stack",
    "set_get_defaults_to_none",
    "get_defaults_to_none",
]

_F = TypeVar("_F")

_LIST_TO_STACK: ContextVar[bool] = ContextVar("td_list_to_stack", default=True)
_CAPTURE_NON_TENSOR_STACK: ContextVar[bool] = ContextVar("td_capture_non_tensor", default=False)
# td's `get` raises for a missing key (docs/migration.md): the switch starts off
_GET_DEFAULTS_TO_NONE: ContextVar[bool] = ContextVar("td_get_defaults_to_none", default=False)


class _Switch:
    """A boolean `ContextVar` behind a context manager, a decorator and `.set()`."""

    _var: ContextVar[bool]

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._tokens: list[Token[bool]] = []

    def set(self) -> None:
        """Apply the mode for the rest of the current context."""
        self._var.set(self.mode)

    def __enter__(self) -> None:
        self._tokens.append(self._var.set(self.mode))

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._tokens.pop())

    def __call__(self, func: _F) -> _F:
        mode = self.mode
        cls = type(self)

        @functools.wraps(func)  # type: ignore[arg-type]
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with cls(mode):
                return func(*args, **kwargs)  # type: ignore[operator]

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mode})"


class set_lazy_legacy(_Switch):
    """Make `torch.stack` of TensorDicts lazy (the same switch as `set_lazy_stack`).

    Args:
        mode: `True` for lazy stacking.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, set_lazy_legacy
        >>> with set_lazy_legacy(True):
        ...     out = torch.stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(2))])
        >>> type(out).__name__
        'LazyStackedTensorDict'
    """

    _var = _LAZY


def lazy_legacy(allow_none: bool = False) -> bool:
    """Whether `torch.stack` of TensorDicts is lazy (see `set_lazy_legacy`).

    `allow_none` is accepted for upstream compatibility: the switch always
    has a value.
    """
    del allow_none
    return _LAZY.get()


class set_list_to_stack(_Switch):
    """Whether assigning a list stores one value per batch element (a `NonTensorStack`).

    Args:
        mode: `True` (the default) stacks; `False` stores the list as one value.

    Examples:
        >>> from td_core import list_to_stack, set_list_to_stack
        >>> with set_list_to_stack(False):
        ...     list_to_stack()
        False
    """

    _var = _LIST_TO_STACK


def list_to_stack(allow_none: bool = False) -> bool:
    """The mode of `set_list_to_stack` (`True` unless changed)."""
    del allow_none
    return _LIST_TO_STACK.get()


class set_capture_non_tensor_stack(_Switch):
    """Whether stacking equal non-tensor values gives one value instead of a stack.

    Args:
        mode: `True` to collapse equal values; `False` (the default) keeps
            a `NonTensorStack`.

    Examples:
        >>> from td_core import capture_non_tensor_stack, set_capture_non_tensor_stack
        >>> with set_capture_non_tensor_stack(True):
        ...     capture_non_tensor_stack()
        True
    """

    _var = _CAPTURE_NON_TENSOR_STACK


def capture_non_tensor_stack(allow_none: bool = False) -> bool:
    """The mode of `set_capture_non_tensor_stack` (`False` unless changed)."""
    del allow_none
    return _CAPTURE_NON_TENSOR_STACK.get()


class set_get_defaults_to_none(_Switch):
    """Whether `td.get(missing_key)` returns `None` instead of raising `KeyError`.

    Upstream calls it as a function that changes the mode for good; here the
    call applies the mode at once (as upstream) and the object also works as a
    context manager that restores the previous mode on exit.

    Args:
        set_to_none: `True` to return `None` for missing keys.

    Examples:
        >>> from td_core import get_defaults_to_none, set_get_defaults_to_none
        >>> with set_get_defaults_to_none(True):
        ...     get_defaults_to_none()
        True
        >>> get_defaults_to_none()
        False
    """

    _var = _GET_DEFAULTS_TO_NONE

    def __init__(self, set_to_none: bool = True) -> None:
        super().__init__(set_to_none)
        self._applied = self._var.set(self.mode)

    def __enter__(self) -> None:
        # the constructor already applied the mode: the block restores what came before it
        self._tokens.append(self._applied)


def get_defaults_to_none(set_to_none: bool = True) -> bool:
    """Whether `td.get(missing_key)` returns `None` (td's default: `False`, it raises).

    `set_to_none` is ignored, as upstream.
    """
    del set_to_none
    return _GET_DEFAULTS_TO_NONE.get()
