"""Losses leaf by leaf: `torch.nn.functional`'s losses on a TensorDict (and a TensorDict or a
tensor), one loss per leaf, with `reduction="none"` keeping the batch size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import entries_of, is_nt, is_stack, is_td, per_member
from td_core._core.utils import NO_DEFAULT
from td_core.errors import KeyNotFoundError

__all__ = ["leafwise_loss"]

Tensor = torch.Tensor


def leafwise_loss(
    fn: Callable[..., Tensor], input: Any, target: Any, *args: Any, **kwargs: Any
) -> Any:
    """`fn(input_leaf, target_leaf, ...)` at every leaf (a TensorDict and a TensorDict or tensor).

    The batch size is kept with `reduction="none"`, `[]` otherwise.
    """
    mine, other, swap = (input, target, False) if is_td(input) else (target, input, True)
    size_average = kwargs.get("size_average", args[0] if args else None)
    reduce = kwargs.get("reduce", args[1] if len(args) > 1 else None)
    if size_average is not None or reduce is not None:
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    else:
        reduction = kwargs.get("reduction", args[2] if len(args) > 2 else "mean")
    keep = reduction == "none"
    if keep and mine._td_tensorclass and is_stack(entries_of(mine)):
        # a tensorclass over a lazy stack: zipped on the stack (ragged too), wrapped again
        inner = entries_of(other) if is_td(other) else other
        result = _zip(entries_of(mine), inner, fn, swap, keep, args, kwargs, ())
        return type(mine)._wrap(result)
    return _zip(mine, other, fn, swap, keep, args, kwargs, ())


def _zip(
    td: TensorDictContract,
    other: Any,
    fn: Callable[..., Tensor],
    swap: bool,
    keep: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    prefix: tuple[str, ...],
) -> Any:
    other_td = is_td(other)
    if keep and other_td and is_stack(td):  # zipped member by member (ragged too), as upstream
        return per_member(td, lambda m, o: _zip(m, o, fn, swap, keep, args, kwargs, prefix), other)
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if is_nt(value):
            continue
        item = other._get_str(key, NO_DEFAULT) if other_td else other
        if item is NO_DEFAULT:
            raise KeyNotFoundError(
                f"key {(*prefix, key)!r} is in the first TensorDict but not in the second"
            )
        if isinstance(value, Tensor):
            a, b = (item, value) if swap else (value, item)
            out[key] = fn(a, b, *args, **kwargs)
        else:
            out[key] = _zip(value, item, fn, swap, keep, args, kwargs, (*prefix, key))
    return td._new(out, td.batch_size if keep else torch.Size())
