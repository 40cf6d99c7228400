"""Behaviour switches under upstream's names, each a `ContextVar`.

Every `set_*` object is a context manager and a decorator that scopes the
mode to a block, and `.set()` applies it for the rest of the current
context (upstream's "for the rest of the program"). No environment variable is
read or written: a block affects the code it runs, never another thread.

`set_lazy_legacy(True)` is upstream's legacy mode: `torch.stack` is lazy (as
under td's `set_lazy_stack(True)`) and `permute`, `transpose`, `squeeze`,
`unsqueeze` and `view` return lazy write-through views (`lazy_legacy()` tells).
`set_lazy_stack` switches the stacking alone. `Switch` is the one
mechanism behind every such switch in td-core, including the ones td-nn and
td-distributions share (`set_interaction_type`, `set_composite_lp_aggregate`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, ClassVar, Generic, Literal, TypeVar, overload

import torch
from torch.compiler import is_compiling

from td_core._core.versions import _at_least, _release

__all__ = [
    "OLD_DYNAMO",
    "SwitchVar",
    "is_tracing",
    "Switch",
    "set_lazy_stack",
    "lazy_stack_enabled",
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

_V = TypeVar("_V")

#: Whether torch.compile is older than torch 2.15's, which traces what td's eager paths use: a
#: ContextVar's `get` (guarding on its value), `torch._C._is_tracing`, a dict view's `mapping`.
#: torch 2.13's refuses them (checked; 2.14 is treated as 2.13).
OLD_DYNAMO = not _at_least(_release(torch.__version__), (2, 15))

#: Whether a `torch.jit.trace` is running: torch's C check where torch.compile traces it, else
#: `torch.jit.is_tracing` (a Python function, which older torch.compile versions trace).
is_tracing: Callable[[], bool] = torch._C._is_tracing if not OLD_DYNAMO else torch.jit.is_tracing


class SwitchVar(Generic[_V]):
    """A `ContextVar` that code compiled by `torch.compile` can read on every torch version.

    Eager code reads the `ContextVar` (per thread and per async task). Where torch.compile
    cannot trace a `ContextVar` (before torch 2.15), code being compiled reads the value set
    most recently in any thread instead, a plain attribute torch.compile guards on.
    """

    __slots__ = ("_var", "_last", "get")

    get: Callable[[], _V]  # the current value (the `ContextVar`'s own `get` where it can be)

    def __init__(self, name: str, default: _V) -> None:
        self._var: ContextVar[_V] = ContextVar(name, default=default)
        self._last = default
        self.get = self._var.get if not OLD_DYNAMO else self._get

    def _get(self) -> _V:
        if is_compiling():
            return self._last
        return self._var.get()

    def explicit(self) -> _V | None:
        """The value set in the current context, or `None` where none was (the default applies)."""
        return self._var.get(None)  # the argument, not the variable's default, where unset

    def set(self, value: _V) -> Token[_V]:
        """Set the value for the current context; returns the token `reset` takes."""
        self._last = value
        return self._var.set(value)

    def reset(self, token: Token[_V]) -> None:
        """Restore the value `token` was set over."""
        self._var.reset(token)
        self._last = self._var.get()


_LAZY: SwitchVar[bool] = SwitchVar("td_lazy_stack", False)
_LEGACY_VIEWS: SwitchVar[bool] = SwitchVar("td_lazy_legacy_views", False)
_LIST_TO_STACK: SwitchVar[bool] = SwitchVar("td_list_to_stack", True)
_CAPTURE_NON_TENSOR_STACK: SwitchVar[bool] = SwitchVar("td_capture_non_tensor", False)
# `get` of a missing key returns None, as upstream since v0.7 and as `dict.get`;
# `set_get_defaults_to_none(False)` makes it raise `KeyError` instead
_GET_DEFAULTS_TO_NONE: SwitchVar[bool] = SwitchVar("td_get_defaults_to_none", True)


class Switch(Generic[_V]):
    """A `ContextVar` behind a context manager, a decorator and `.set()`.

    A subclass names its variable (`_var`) and may check the mode it is given
    (`_parse`); the mode is kept in `.mode`.
    """

    _var: ClassVar[SwitchVar[Any]]

    def __init__(self, mode: Any) -> None:
        self.mode: _V = self._parse(mode)
        self._tokens: list[Token[_V]] = []

    def _parse(self, mode: Any) -> _V:
        return bool(mode)  # type: ignore[return-value]

    def set(self) -> None:
        """Apply the mode for the rest of the current context."""
        self._var.set(self.mode)

    def __enter__(self) -> Any:
        self._tokens.append(self._var.set(self.mode))
        return self

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


def lazy_stack_enabled() -> bool:
    """Whether `torch.stack` of TensorDicts currently builds a lazy stack."""
    return _LAZY.get()


class set_lazy_stack(Switch[bool]):
    """Context manager and decorator: within it, `torch.stack` of TensorDicts is lazy.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, set_lazy_stack
        >>> tds = [TensorDict({"a": torch.rand(10)}, [10]) for _ in range(3)]
        >>> with set_lazy_stack(True):
        ...     stacked = torch.stack(tds, 0)  # no stacking happens here
        >>> stacked["a"] = torch.zeros(3, 10)
        >>> bool((tds[0]["a"] == 0).all())
        True
    """

    _var = _LAZY

    def __init__(self, mode: bool = True) -> None:
        super().__init__(mode)


class set_lazy_legacy(Switch[bool]):
    """Upstream's legacy mode: lazy stacking and lazy write-through shape views.

    Within it, `torch.stack` of TensorDicts is lazy (as under `set_lazy_stack`)
    and `permute`, `transpose`, `squeeze`, `unsqueeze` and `view` return a
    lazy view of the TensorDict: reads apply the op to its entries on each
    access, and writes (new keys included) go into the TensorDict through the
    inverse op. Applying the inverse op to such a view gives the TensorDict
    itself (`td.permute(1, 0).permute(1, 0) is td`).

    Args:
        mode: `True` for the legacy behaviour.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, set_lazy_legacy
        >>> td = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
        >>> with set_lazy_legacy(True):
        ...     tdt = td.transpose(0, 1)
        ...     tdt["b"] = torch.ones(3, 2)
        ...     same = tdt.transpose(0, 1) is td
        >>> td["b"].shape, same
        (torch.Size([2, 3]), True)
    """

    _var = _LEGACY_VIEWS

    def __init__(self, mode: bool = True) -> None:
        super().__init__(mode)
        self._stack_tokens: list[Token[bool]] = []

    def set(self) -> None:
        """Apply the mode (views and stacking) for the rest of the current context."""
        super().set()
        _LAZY.set(self.mode)

    def __enter__(self) -> Any:
        self._stack_tokens.append(_LAZY.set(self.mode))
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        _LAZY.reset(self._stack_tokens.pop())


@overload
def lazy_legacy(allow_none: Literal[False] = False) -> bool: ...
@overload
def lazy_legacy(allow_none: bool) -> bool | None: ...
def lazy_legacy(allow_none: bool = False) -> bool | None:
    """Whether shape ops return lazy write-through views (see `set_lazy_legacy`).

    With `allow_none=True`, `None` while the switch was never set in this context.
    """
    return _LEGACY_VIEWS.explicit() if allow_none else _LEGACY_VIEWS.get()


class set_list_to_stack(Switch[bool]):
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


@overload
def list_to_stack(allow_none: Literal[False] = False) -> bool: ...
@overload
def list_to_stack(allow_none: bool) -> bool | None: ...
def list_to_stack(allow_none: bool = False) -> bool | None:
    """The mode of `set_list_to_stack` (`True` unless changed; with `allow_none=True`, `None`
    while it was never set in this context)."""
    return _LIST_TO_STACK.explicit() if allow_none else _LIST_TO_STACK.get()


class set_capture_non_tensor_stack(Switch[bool]):
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


@overload
def capture_non_tensor_stack(allow_none: Literal[False] = False) -> bool: ...
@overload
def capture_non_tensor_stack(allow_none: bool) -> bool | None: ...
def capture_non_tensor_stack(allow_none: bool = False) -> bool | None:
    """The mode of `set_capture_non_tensor_stack` (`False` unless changed; with
    `allow_none=True`, `None` while it was never set in this context)."""
    return _CAPTURE_NON_TENSOR_STACK.explicit() if allow_none else _CAPTURE_NON_TENSOR_STACK.get()


class set_get_defaults_to_none(Switch[bool]):
    """Whether `td.get(missing_key)` returns `None` (the default) or raises `KeyError`.

    `td[key]` raises `KeyError` for a missing key whatever the mode. Upstream calls it as a function that changes the mode for good; here the
    call applies the mode at once (as upstream) and the object also works as a
    context manager that restores the previous mode on exit.

    Args:
        set_to_none: `True` to return `None` for missing keys; `False` to
            raise `KeyError` naming the key (`None` counts as `False`, as upstream).

    Examples:
        >>> from td_core import TensorDict, get_defaults_to_none, set_get_defaults_to_none
        >>> td = TensorDict({"a": 0})
        >>> td.get("b") is None
        True
        >>> with set_get_defaults_to_none(False):
        ...     td.get("b")
        Traceback (most recent call last):
        ...
        td_core.errors.KeyNotFoundError: key 'b' not found in TensorDict with keys ['a']
        >>> get_defaults_to_none()
        True
    """

    _var = _GET_DEFAULTS_TO_NONE

    def __init__(self, set_to_none: bool = True) -> None:
        super().__init__(set_to_none)
        self._applied = self._var.set(self.mode)

    def __enter__(self) -> None:
        # the constructor already applied the mode: the block restores what came before it
        self._tokens.append(self._applied)


def get_defaults_to_none(set_to_none: bool = True) -> bool:
    """Whether `td.get(missing_key)` returns `None` (the default: `True`) or raises `KeyError`.

    `set_to_none` is ignored, as upstream.
    """
    del set_to_none
    return _GET_DEFAULTS_TO_NONE.get()
