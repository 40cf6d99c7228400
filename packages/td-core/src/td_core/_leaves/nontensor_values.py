"""A `NonTensorStack`'s values in and out of plain Python: nested lists and pickles.

`StackValuesMixin` gives the stack `from_list` (nested lists to a stack, one batch
dim per level whose lists share a length) and its pickled state: a flat list and a
shape, or the one value of a stack that repeats it, with no numpy object, so that
`torch.load(weights_only=True)` accepts it; `_restore` sets that whole state (the
unpickler, a filled stack and in-place rewrites of the values use it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._leaves.nontensor_arrays import device_name

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["StackValuesMixin", "nested_shape"]


class StackValuesMixin:
    """`from_list` and the (pickled) state of a `NonTensorStack` (see the module docstring)."""

    __slots__ = ()

    if TYPE_CHECKING:
        batch_size: torch.Size
        device: torch.device | None
        _members: tuple[Any, ...] | None

        @property
        def _values(self) -> np.ndarray: ...

        def __init__(self, *values: Any, device: torch.device | str | None = None) -> None: ...

        def _fill_value(self) -> tuple[Any] | None: ...

    @classmethod
    def from_list(cls, values: Sequence[Any], device: torch.device | str | None = None) -> Self:
        """A stack of the given values; nested lists give one stack dim per level.

        `NonTensorData` values are unwrapped, and a `NonTensorStack` value counts
        as the nested list of its values, as upstream. Where the lists of a level
        differ in length, they are values of the stack rather than stack dims.
        """
        shape = nested_shape(values)
        arr = np.empty(shape, dtype=object)
        for index in np.ndindex(*shape):
            item: Any = values
            for i in index:
                item = _as_list(item)[i]
            arr[index] = item.data if _one_value_leaf(item) else item
        return cls(arr, device=device)

    def __getstate__(self) -> dict[str, Any]:
        # a flat list and a shape (no numpy object in the pickle: weights_only loads accept it);
        # a filled stack, its one value
        fill = self._fill_value()
        if fill is not None:
            return {
                "fill": fill[0],
                "shape": tuple(self.batch_size),
                "device": device_name(self.device),
            }
        return {
            "flat": list(self._values.flat),
            "shape": tuple(self._values.shape),
            "device": device_name(self.device),
        }

    def _restore(
        self: Any,  # the stack's slots are declared by `NonTensorStack` (the mixin has none)
        array: np.ndarray | None,
        fill: tuple[Any] | None,
        shape: torch.Size,
        device: torch.device | None,
    ) -> None:
        """Set the whole state: the values (or the one repeated value), shape and device."""
        self._array, self._fill = array, fill
        self.batch_size, self.device = shape, device
        self._members, self._member_dim = None, 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        shape = torch.Size(state["shape"])
        device = None if state["device"] is None else torch.device(state["device"])
        if "fill" in state:
            self._restore(None, (state["fill"],), shape, device)
            return
        values = np.empty(len(state["flat"]), dtype=object)
        for i, v in enumerate(state["flat"]):
            values[i] = v
        self._restore(values.reshape(shape), None, shape, device)


def _as_list(value: Any) -> Any:
    """A `NonTensorStack` as the nested list of its values; anything else as it is."""
    return value.tolist() if getattr(type(value), "_is_stack", False) else value


def _one_value_leaf(value: Any) -> bool:
    """Whether `value` is a `NonTensorData` (a non-tensor leaf of one value)."""
    cls = type(value)
    return (
        getattr(cls, "_is_non_tensor", False)
        and not getattr(cls, "_is_stack", False)
        and not isinstance(value, torch.Tensor)
    )


def nested_shape(values: Any) -> tuple[int, ...]:
    """The shape of the nested lists `values`: as deep as every list of a level has one
    length (below that, lists are values)."""
    values = _as_list(values)
    if not isinstance(values, list):
        return ()
    shapes = [nested_shape(v) for v in values]
    common: tuple[int, ...] = shapes[0] if shapes else ()
    for shape in shapes[1:]:
        n = 0
        while n < min(len(common), len(shape)) and common[n] == shape[n]:
            n += 1
        common = common[:n]
    return (len(values), *common)
