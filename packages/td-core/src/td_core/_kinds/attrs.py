"""`TensorAttrs` and `TensorDict.attrs`: the device, dtype and shape of each leaf, as data.

`td.attrs()` describes every tensor leaf of `td` with a `TensorAttrs` in a
TensorDict of empty batch size; `other.to(attrs_td)` then moves and casts each
leaf of `other` to the device and dtype recorded at the same key. This is how
a TensorDict whose leaves live on several devices or have several dtypes is
reproduced leaf by leaf.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import provide
from td_core._core.keys import unravel_key
from td_core._core.traverse import is_nt, is_td, per_member
from td_core._kinds.tensorclass_options import TensorClass
from td_core._leaves.nontensor import NonTensorData

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract
    from td_core._kinds.base import TensorDictBase

__all__ = ["TensorAttrs", "attrs_of", "to_attrs"]

_FIELDS = ("device", "dtype", "shape")


class TensorAttrs(TensorClass):
    """The device, dtype and shape of one tensor, held by a tensorclass of empty batch size.

    The fields start with `tgt_` so that they do not hide the `device` and
    `shape` of the tensorclass itself. A field that was not recorded is `None`.

    Attributes:
        tgt_device: the device of the tensor.
        tgt_dtype: the dtype of the tensor.
        tgt_shape: the shape of the tensor (a `torch.Size`).

    Example:
        ```python
        >>> import torch
        >>> from td_core import TensorAttrs
        >>> a = TensorAttrs.from_tensor(torch.zeros(2, 3), fields=("dtype", "shape"))
        >>> a.tgt_dtype, a.tgt_shape, a.tgt_device
        (torch.float32, torch.Size([2, 3]), None)

        ```
    """

    tgt_device: Any = None
    tgt_dtype: Any = None
    tgt_shape: Any = None

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, *, fields: Sequence[str] = _FIELDS) -> TensorAttrs:
        """The attributes of `tensor` named in `fields` (the others are `None`).

        Args:
            tensor: the tensor to describe.
            fields: any of `"device"`, `"dtype"` and `"shape"`; other names are ignored.

        Returns:
            A `TensorAttrs` with an empty batch size.
        """
        values = {
            "tgt_device": tensor.device if "device" in fields else None,
            "tgt_dtype": tensor.dtype if "dtype" in fields else None,
            "tgt_shape": torch.Size(tensor.shape) if "shape" in fields else None,
        }
        # wrapped so that the tensorclass keeps them as values (a Size would become a tensor)
        build: Any = cls  # the tensorclass builder adds batch_size to the signature
        return build(
            **{k: NonTensorData(v, torch.Size()) for k, v in values.items() if v is not None},
            batch_size=torch.Size(),
        )


def attrs_of(td: TensorDictContract, fields: Sequence[str]) -> TensorDictBase:
    """See `ApplyMixin.attrs`: a tree like `td` with a `TensorAttrs` per tensor leaf."""
    out: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            out[key] = TensorAttrs.from_tensor(value, fields=fields)
        elif is_nt(value):
            out[key] = NonTensorData(value.data, torch.Size())
        else:
            out[key] = attrs_of(value, fields)
    return td._new(out, torch.Size(), None)


def _specs(attrs_td: Any, prefix: tuple[str, ...], out: dict[Any, TensorAttrs]) -> None:
    for key, value in attrs_td.items():
        if isinstance(value, TensorAttrs):
            out[unravel_key((*prefix, key))] = value
        elif is_td(value):
            _specs(value, (*prefix, key), out)


def to_attrs(
    td: TensorDictContract, attrs_td: Any, *, non_blocking: bool | None = None
) -> TensorDictBase:
    """`td.to(attrs_td)`: each leaf moved and cast as the `TensorAttrs` at its key says.

    Leaves without a `TensorAttrs` (or whose device and dtype are both
    `None`) are kept as they are; the result has no device.
    """
    spec: dict[Any, TensorAttrs] = {}
    _specs(attrs_td, (), spec)
    return _cast_tree(td, spec, (), bool(non_blocking))


def _cast_tree(
    td: TensorDictContract, spec: dict[Any, TensorAttrs], prefix: tuple[str, ...], blocking: bool
) -> TensorDictBase:
    lazy = per_member(td, lambda m: _cast_tree(m, spec, prefix, blocking))
    if lazy is not NotImplemented:
        return lazy
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, torch.Tensor):
            attrs = spec.get(unravel_key((*prefix, key)))
            if attrs is not None and (attrs.tgt_device is not None or attrs.tgt_dtype is not None):
                value = value.to(
                    device=attrs.tgt_device, dtype=attrs.tgt_dtype, non_blocking=blocking
                )
            out[key] = value
        elif value._is_non_tensor:
            out[key] = value
        else:
            out[key] = _cast_tree(value, spec, (*prefix, key), blocking)
    return td._new(out, td.batch_size, None)


provide("attrs_of", attrs_of)
provide("to_attrs", to_attrs)
