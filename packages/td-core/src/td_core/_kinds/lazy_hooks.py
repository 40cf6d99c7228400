"""`LazyStackedTensorDict.hook_out` / `hook_in`: callables a lazy stack applies to its values.

Upstream's lazy stacks carry two hooks for their `torch.vmap` support:
`hook_out` is applied to every tensor the stack returns from a read (and
handed on to the lazy sub-stacks it returns), `hook_in` to values written
while the stack is being vmapped. td runs `vmap` over lazy stacks through
pytree flattening, never in a "vmapped lazy stack" state, so `hook_in` is
stored and returned but not called, as upstream outside `vmap`. Both are
deprecated upstream (removal in 0.17) and warn the same way here.

The hooks live in a table keyed by a weak reference to the stack, so that
stacks without hooks (nearly all) carry no extra slot.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from td_core._ops.dict_methods import PerObject

__all__ = ["LazyHooksMixin", "set_hooks", "with_hook_out"]

Hook = Callable[[Any], Any] | None

# stack -> (hook_out, hook_in); absent when both are None
_HOOKS = PerObject("lazy_hooks._HOOKS")


def _warn(name: str) -> None:
    warnings.warn(
        f"LazyStackedTensorDict.{name} is deprecated and will be removed in TensorDict 0.17.",
        DeprecationWarning,
        stacklevel=3,
    )


def set_hooks(stack: Any, hook_out: Hook, hook_in: Hook) -> None:
    """Record the hooks of `stack` (both `None`: forget them)."""
    if hook_out is None and hook_in is None:
        _HOOKS.pop(stack, None)
    else:
        _HOOKS.set(stack, (hook_out, hook_in))


def with_hook_out(stack: Any, value: Any) -> Any:
    """`value`, read from `stack`, passed through its `hook_out` (tensors) or given its hooks (sub-stacks)."""
    hooks = _HOOKS.get(stack)
    if hooks is None:
        return value
    if isinstance(value, torch.Tensor):
        return value if hooks[0] is None else hooks[0](value)
    if type(value) is type(stack):
        set_hooks(value, *hooks)
    return value


class LazyHooksMixin:
    """The deprecated `hook_out` / `hook_in` properties of `LazyStackedTensorDict`."""

    __slots__ = ()

    @property
    def hook_out(self) -> Hook:
        """The callable applied to every tensor this lazy stack returns (deprecated upstream).

        Setting it also hands it to the lazy sub-stacks the stack returns.
        """
        _warn("hook_out")
        return _HOOKS.get(self, (None, None))[0]

    @hook_out.setter
    def hook_out(self, value: Hook) -> None:
        _warn("hook_out")
        set_hooks(self, value, _HOOKS.get(self, (None, None))[1])

    @property
    def hook_in(self) -> Hook:
        """The callable upstream applies to values written while the stack is vmapped (deprecated).

        td stores it (and hands it to lazy sub-stacks) but never calls it: its
        `vmap` support does not go through a vmapped lazy stack.
        """
        _warn("hook_in")
        return _HOOKS.get(self, (None, None))[1]

    @hook_in.setter
    def hook_in(self, value: Hook) -> None:
        _warn("hook_in")
        set_hooks(self, _HOOKS.get(self, (None, None))[0], value)
