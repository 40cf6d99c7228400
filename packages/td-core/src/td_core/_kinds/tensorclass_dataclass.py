"""`from_dataclass`: a dataclass type or instance made a tensorclass, as upstream's free function.

`TensorDict.from_dataclass` gives a TensorDict; this one gives a tensorclass (a type
for a type, an instance for an instance), with the options of `@tensorclass`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from td_core._kinds.tensorclass_options import tensorclass

__all__ = ["from_dataclass"]


def from_dataclass(
    obj: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: torch.Size | None = None,
    frozen: bool = False,
    autocast: bool = False,
    nocast: bool = False,
    inplace: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    device: torch.device | str | None = None,
) -> Any:
    """A tensorclass made from a dataclass type, or an instance of one from a dataclass instance.

    Args:
        obj: a dataclass type (a new tensorclass type with its fields is returned)
            or a dataclass instance (an instance of that tensorclass, or of
            `dest_cls`, holding its field values).
        dest_cls: the tensorclass to build the instance as.
        auto_batch_size: give the instance the largest batch size its entries share.
        batch_dims: with `auto_batch_size`, at most this many batch dims.
        batch_size: the batch size of the instance (default `[]`).
        frozen: the `@tensorclass` option of that name.
        autocast: the `@tensorclass` option of that name.
        nocast: the `@tensorclass` option of that name.
        shadow: the `@tensorclass` option of that name.
        tensor_only: the `@tensorclass` option of that name.
        inplace: not supported: td never changes the dataclass given (a new class is built).
        device: the device of the instance.

    Raises:
        TypeError: `obj` is not a dataclass type or instance.
        ValueError: `inplace=True`.

    Examples:
        >>> import dataclasses
        >>> import torch
        >>> from td_core import from_dataclass
        >>> @dataclasses.dataclass
        ... class Point:
        ...     x: int
        ...     y: torch.Tensor
        >>> Tc = from_dataclass(Point, autocast=True)
        >>> type(Tc(x=1, y=2).x).__name__, type(Tc(x=1, y=2).y).__name__
        ('int', 'Tensor')
        >>> type(from_dataclass(Point(1, torch.zeros(2))).x).__name__
        'Tensor'
    """
    if inplace:
        raise ValueError(
            "from_dataclass(inplace=True) is not supported: td builds a new tensorclass and "
            "leaves the dataclass as it is; use the returned class"
        )
    options: dict[str, Any] = {
        "frozen": frozen,
        "autocast": autocast,
        "nocast": nocast,
        "shadow": shadow,
        "tensor_only": tensor_only,
    }
    if isinstance(obj, type):
        if getattr(obj, "_td_tensorclass", False):
            return obj
        if not dataclasses.is_dataclass(obj):
            raise TypeError(f"from_dataclass expects a dataclass type or instance, got {obj!r}")
        return tensorclass(type(f"{obj.__name__}_tc", (obj,), {}), **options)
    if getattr(type(obj), "_td_tensorclass", False) and dest_cls is None:
        return obj
    if not dataclasses.is_dataclass(obj):
        raise TypeError(
            f"from_dataclass expects a dataclass type or instance, got {type(obj).__name__}"
        )
    cls: Any = dest_cls if dest_cls is not None else from_dataclass(type(obj), **options)
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    out = cls(**values, batch_size=[] if batch_size is None else batch_size, device=device)
    if auto_batch_size:
        out.auto_batch_size_(batch_dims)
    return out
