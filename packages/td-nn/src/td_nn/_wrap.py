"""Turning plain functions into td-nn modules: `WrapModule` and `as_tensordict_module`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from td_core import NestedKey, TensorDictBase
from td_nn._base import TensorDictModuleBase
from td_nn._common import TensorDictModule

__all__ = ["WrapModule", "as_tensordict_module"]


class WrapModule(TensorDictModuleBase):
    """Wrap a function from TensorDict to TensorDict as a module (e.g. a reshape in a sequence).

    Args:
        func: takes a TensorDict and returns a TensorDict.

    Keyword Args:
        inplace: write the result's entries into the input (`update`) and
            return the input, instead of returning the result.
        in_keys: what `func` reads (not checked; for `TensorDictSequential`).
        out_keys: what `func` writes (not checked).

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModule, TensorDictSequential, WrapModule
        >>> seq = TensorDictSequential(
        ...     TensorDictModule(lambda x: x * 2, in_keys=["x"], out_keys=["y"]),
        ...     WrapModule(lambda td: td.reshape(-1)),
        ... )
        >>> seq(TensorDict(x=torch.ones(3, 4, 5), batch_size=[3, 4]))["y"].shape
        torch.Size([12, 5])
    """

    _native_call = True

    def __init__(
        self,
        func: Callable[[TensorDictBase], TensorDictBase],
        *,
        inplace: bool = False,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        if not callable(func):
            raise TypeError(f"WrapModule wraps a callable, got {func!r}")
        self.func = func
        self.inplace = inplace
        self.in_keys = list(in_keys or [])
        self.out_keys = list(out_keys or [])

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        """`func(data)`, or `data` updated with it when `inplace`."""
        result = self.func(data)
        if self.inplace and result is not data:
            return data.update(result)
        return result

    def extra_repr(self) -> str:
        return f"func={getattr(self.func, '__name__', self.func)!r}, inplace={self.inplace}"


class as_tensordict_module:
    """Decorator: make a function (or method) a `TensorDictModule` reading `in_keys`.

    Called with a TensorDict it writes `out_keys` into it and returns it;
    called with tensors it follows `TensorDictModule` (positional tensors
    return tensors). On a method, one module serves every instance and the
    instance is passed as `self`.

    Keyword Args:
        in_keys: the keys passed to the function, in argument order.
        out_keys: the keys its outputs are written to.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_nn import as_tensordict_module
        >>> @as_tensordict_module(in_keys="c", out_keys="d")
        ... def plus_one(c):
        ...     return c + 1
        >>> plus_one(TensorDict(c=torch.zeros(())))["d"]
        tensor(1.)
        >>> class Model:
        ...     @as_tensordict_module(in_keys="c", out_keys="d")
        ...     def method(self, c):
        ...         return c + 2
        >>> Model().method(TensorDict(c=torch.zeros(())))["d"]
        tensor(2.)
    """

    def __init__(
        self, *, in_keys: NestedKey | Sequence[NestedKey], out_keys: NestedKey | Sequence[NestedKey]
    ) -> None:
        self.in_keys = [in_keys] if isinstance(in_keys, (str, tuple)) else list(in_keys)
        self.out_keys = [out_keys] if isinstance(out_keys, (str, tuple)) else list(out_keys)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        params = list(inspect.signature(func).parameters)
        if params and params[0] == "self":
            return self._method(func)
        module = TensorDictModule(func, in_keys=self.in_keys, out_keys=self.out_keys)
        functools.update_wrapper(module, func, updated=())
        return module

    def _method(self, func: Callable[..., Any]) -> Callable[..., Any]:
        in_keys, out_keys = self.in_keys, self.out_keys
        current: list[Any] = []  # the instance of the running call

        def call(*args: Any, **kwargs: Any) -> Any:
            return func(current[-1], *args, **kwargs)

        module = TensorDictModule(call, in_keys=in_keys, out_keys=out_keys)

        @functools.wraps(func)
        def method(self_: Any, *args: Any, **kwargs: Any) -> Any:
            current.append(self_)
            try:
                return module(*args, **kwargs)
            finally:
                current.pop()

        method.module = module  # type: ignore[attr-defined]
        return method
