"""Skipping modules whose outputs are already in the input: `set_skip_existing`.

The mode is a `ContextVar`: a block only changes it for the code it runs
(and the threads or tasks that code starts with a copy of the context).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextvars import Token
from typing import Any, TypeVar

from td_core import NestedKey, TensorDictBase, unravel_key, unravel_key_list
from td_core._shared.compile import SwitchVar
from td_nn._errors import SkipModeError

__all__ = ["set_skip_existing", "skip_existing", "should_skip", "skips"]

_F = TypeVar("_F", bound=Callable[..., Any])
SkipMode = bool | list[NestedKey]

_SKIP: SwitchVar[SkipMode] = SwitchVar("td_nn_skip_existing", False)


def skip_existing() -> SkipMode:
    """The mode set by the innermost `set_skip_existing`: `False` (default), `True` or keys.

    Examples:
        >>> from td_nn import set_skip_existing, skip_existing
        >>> skip_existing()
        False
        >>> with set_skip_existing(["a"]):
        ...     skip_existing()
        ['a']
    """
    return _SKIP.get()


def _normalise(mode: Any) -> SkipMode | None:
    if mode is None or isinstance(mode, bool):
        return mode
    if isinstance(mode, (str, tuple)):
        return [unravel_key(mode)]
    if isinstance(mode, Sequence):
        return unravel_key_list(mode)
    raise TypeError(f"set_skip_existing mode must be a bool, a list of keys or None, got {mode!r}")


def should_skip(
    mode: SkipMode, in_keys: Sequence[NestedKey], out_keys: Sequence[NestedKey], td: TensorDictBase
) -> bool:
    """Whether a module with these keys can skip its call on `td` under `mode`.

    It can when `mode` is on, it has output keys, every one of them is in
    `td` (and, for a list mode, in the list), and none of them is also an input.
    """
    if mode is False or not out_keys:
        return False
    keys = [k for k in out_keys if k != "_"]
    if not keys:
        return False
    if mode is not True and any(k not in mode for k in keys):
        return False
    if any(k in in_keys for k in keys):
        return False
    nested = td.keys(include_nested=True)
    return all(k in nested for k in keys)


def skips(module: Any, td: TensorDictBase) -> bool:
    """Whether `module` skips its call on `td` under the current `set_skip_existing` mode."""
    mode = _SKIP.get()
    return mode is not False and should_skip(mode, module.in_keys, module.out_keys, td)


class set_skip_existing:
    """Make modules skip their call when all their `out_keys` are already in the input.

    As a context manager it sets what `skip_existing` returns in the
    block; every td-nn module reads it. A module whose input is also one of
    its outputs always runs.

    As a decorator of a method `forward(self, tensordict, ...)` it checks the
    module's keys (read from `in_key_attr` and `out_key_attr`) before the
    method runs, and sets the mode while it runs. With `mode=None` the
    decorated method follows the enclosing block instead of setting a mode.

    Args:
        mode: `True`, `False`, or a list of keys (only modules whose
            `out_keys` are all in the list may be skipped). `None` is only
            accepted by the decorator.
        in_key_attr: the attribute holding the module's input keys (decorator).
        out_key_attr: the attribute holding the module's output keys (decorator).

    Raises:
        ValueError: if `mode=None` is used as a context manager.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModule, set_skip_existing
        >>> module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
        >>> td = TensorDict(x=torch.zeros(()), y=torch.zeros(()))
        >>> with set_skip_existing():
        ...     module(td)["y"]
        tensor(0.)
        >>> module(td)["y"]
        tensor(1.)
    """

    def __init__(
        self,
        mode: bool | Sequence[NestedKey] | None = True,
        in_key_attr: str = "in_keys",
        out_key_attr: str = "out_keys",
    ) -> None:
        self.mode = _normalise(mode)
        self.in_key_attr = in_key_attr
        self.out_key_attr = out_key_attr
        self._tokens: list[Token[SkipMode]] = []

    def __enter__(self) -> set_skip_existing:
        if self.mode is None:
            raise SkipModeError(
                "It seems you are using set_skip_existing(None) as a context manager: None only "
                "works as a decorator (follow the enclosing mode); use True, False or a list of "
                "keys in a with-block"
            )
        self._tokens.append(_SKIP.set(self.mode))
        return self

    def __exit__(self, *exc: object) -> None:
        _SKIP.reset(self._tokens.pop())

    def __call__(self, func: _F) -> _F:
        mode, in_attr, out_attr = self.mode, self.in_key_attr, self.out_key_attr

        @functools.wraps(func)
        def wrapper(_self: Any, tensordict: Any = None, *args: Any, **kwargs: Any) -> Any:
            current = _SKIP.get() if mode is None else mode
            if isinstance(tensordict, TensorDictBase) and should_skip(
                current, getattr(_self, in_attr, ()), getattr(_self, out_attr, ()), tensordict
            ):
                return tensordict
            if mode is None:
                return func(_self, tensordict, *args, **kwargs)
            token = _SKIP.set(mode)
            try:
                return func(_self, tensordict, *args, **kwargs)
            finally:
                _SKIP.reset(token)

        return wrapper  # type: ignore[return-value]
