"""``torch.stack(tds)``, ``torch.cat``, ``torch.unbind``, ... through ``__torch_function__``.

One table maps each supported torch function to its TensorDict implementation;
anything else returns ``NotImplemented`` (so torch raises its usual TypeError).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core._map import is_td, map_leaves
from td_core._stack import cat, stack

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["TORCH_FUNCTIONS", "implements"]

TORCH_FUNCTIONS: dict[Callable[..., Any], Callable[..., Any]] = {}


def implements(*funcs: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the TensorDict version of ``funcs``."""

    def register(impl: Callable[..., Any]) -> Callable[..., Any]:
        for func in funcs:
            TORCH_FUNCTIONS[func] = impl
        return impl

    return register


implements(torch.stack)(stack)
implements(torch.cat, torch.concat, torch.concatenate)(cat)


@implements(torch.unbind)
def _unbind(input: TensorDictBase, dim: int = 0) -> tuple[TensorDictBase, ...]:
    return input.unbind(dim)


@implements(torch.split)
def _split(
    input: TensorDictBase, split_size_or_sections: Any, dim: int = 0
) -> tuple[TensorDictBase, ...]:
    return input.split(split_size_or_sections, dim)


@implements(torch.chunk)
def _chunk(input: TensorDictBase, chunks: int, dim: int = 0) -> tuple[TensorDictBase, ...]:
    return input.chunk(chunks, dim)


@implements(torch.squeeze)
def _squeeze(input: TensorDictBase, dim: int | None = None) -> TensorDictBase:
    return input.squeeze(dim)


@implements(torch.unsqueeze)
def _unsqueeze(input: TensorDictBase, dim: int) -> TensorDictBase:
    return input.unsqueeze(dim)


@implements(torch.permute)
def _permute(input: TensorDictBase, dims: Any) -> TensorDictBase:
    return input.permute(dims)


@implements(torch.reshape)
def _reshape(input: TensorDictBase, shape: Any) -> TensorDictBase:
    return input.reshape(shape)


@implements(torch.flatten)
def _flatten(input: TensorDictBase, start_dim: int = 0, end_dim: int = -1) -> TensorDictBase:
    return input.flatten(start_dim, end_dim)


@implements(torch.unflatten)
def _unflatten(input: TensorDictBase, dim: int, sizes: Any) -> TensorDictBase:
    return input.unflatten(dim, sizes)


@implements(torch.transpose, torch.swapaxes, torch.swapdims)
def _transpose(input: TensorDictBase, dim0: int, dim1: int) -> TensorDictBase:
    return input.transpose(dim0, dim1)


@implements(torch.clone)
def _clone(input: TensorDictBase, *, memory_format: Any = None) -> TensorDictBase:
    return input.clone()


def _like(func: Callable[..., torch.Tensor]) -> Callable[..., TensorDictBase]:
    def impl(input: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        device = kwargs.get("device")
        return map_leaves(
            input,
            lambda t: func(t, *args, **kwargs),
            device=None if device is None else torch.device(device),
        )

    impl.__name__ = f"td_{func.__name__}"
    return impl


for _func in (
    torch.zeros_like,
    torch.ones_like,
    torch.empty_like,
    torch.full_like,
    torch.rand_like,
    torch.randn_like,
):
    TORCH_FUNCTIONS[_func] = _like(_func)


@implements(torch.where)
def _where(condition: torch.Tensor, input: Any, other: Any, *, out: Any = None) -> TensorDictBase:
    """``torch.where(cond, td, other)``; ``torch.where(cond, value, td)`` picks ``td`` where False."""
    if not is_td(input):
        return other.where(condition.logical_not(), input, out=out)  # type: ignore[no-any-return]
    return input.where(condition, other, out=out)  # type: ignore[no-any-return]


@implements(torch.gather)
def _gather(
    input: TensorDictBase,
    dim: int,
    index: torch.Tensor,
    *,
    sparse_grad: bool = False,
    out: Any = None,
) -> TensorDictBase:
    if sparse_grad:
        raise NotImplementedError(
            "torch.gather(tensordict, ..., sparse_grad=True) is not supported"
        )
    return input.gather(dim, index, out=out)


@implements(torch.masked_select)
def _masked_select(input: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
    return input.masked_select(mask)


@implements(torch.flip)
def _flip(input: TensorDictBase, dims: Any) -> TensorDictBase:
    return input.flip(dims)


@implements(torch.roll)
def _roll(input: TensorDictBase, shifts: Any, dims: Any = None) -> TensorDictBase:
    if dims is None:
        raise TypeError(
            "torch.roll of a TensorDict needs dims= (rolling the flattened batch is ambiguous)"
        )
    return input.roll(shifts, dims)
