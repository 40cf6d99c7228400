"""How a list (or tuple) assigned as an entry is read, as upstream does.

- A list of tensors of one shape is stacked into one tensor; of different shapes it is
  kept as one non-tensor value (it cannot be stacked).
- A list of TensorDicts (or tensorclasses) is stacked into one.
- A list of numbers (nested lists too) becomes a tensor, through `torch.as_tensor`.
- Anything else, when the list runs along the batch dims (its nesting matches the
  batch size), becomes a `NonTensorStack`, one value per batch element; otherwise it
  is one non-tensor value.

Under `set_list_to_stack(False)` a list is always one non-tensor value.

A lazy stack given a list that would be one non-tensor value (tensors of different
shapes, for instance) whose nesting runs along its batch dims down to the stack dim
gives each member its own item (`split_list`), as upstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from td_core._core.flags import list_to_stack
from td_core._core.traverse import is_td
from td_core._leaves.nontensor import NonTensorData, NonTensorStack

__all__ = ["MemberValues", "read_list", "split_list", "stack_of_values"]


def read_list(value: Sequence[Any], batch_size: torch.Size, device: Any) -> Any:
    """The entry `value` stands for: a tensor or TensorDict to validate, or a non-tensor leaf."""
    if not list_to_stack():
        return NonTensorData(list(value), batch_size, device)
    if value and all(isinstance(v, Tensor) for v in value):
        try:
            return torch.stack(list(value))
        except RuntimeError:  # shapes differ: one value, as upstream keeps it
            return NonTensorData(list(value), batch_size, device)
    if value and all(is_td(v) for v in value):
        return torch.stack(list(value))  # TensorDicts stack through __torch_function__
    try:
        return torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError):
        pass
    if isinstance(value, list) and batch_size:
        values = _per_element(value, batch_size)
        if values is not None:
            return NonTensorStack(values, device=device)
    return NonTensorData(value, batch_size, device)


def _per_element(value: list[Any], batch_size: torch.Size) -> np.ndarray | None:
    """An object array of shape `batch_size` from nested lists, or `None` if they do not match."""
    if not _lengths_match(value, batch_size):
        return None
    out = np.empty(tuple(batch_size), dtype=object)
    for index in np.ndindex(*batch_size):
        item: Any = value
        for i in index:
            item = item[i]
        out[index] = item
    return out


def _lengths_match(value: Any, batch_size: torch.Size) -> bool:
    """Whether `value` is nested lists whose lengths are the batch dims, level by level."""
    if not batch_size:
        return True
    if not isinstance(value, list) or len(value) != batch_size[0]:
        return False
    return all(_lengths_match(v, batch_size[1:]) for v in value)


class MemberValues(list[Any]):
    """The validated values of an entry for each member of a lazy stack, in member order."""


def split_list(value: list[Any], dim: int, count: int) -> list[Any] | None:
    """The items of the nested lists `value` for each of `count` members stacked along `dim`.

    Level `dim` of the nesting is the members' level; levels above it stay lists
    around each member's item. `None` when the lengths do not match.
    """
    if not isinstance(value, list):
        return None
    if dim == 0:
        return list(value) if len(value) == count else None
    columns = [split_list(v, dim - 1, count) for v in value]
    if any(c is None for c in columns):
        return None
    return [[c[i] for c in columns if c is not None] for i in range(count)]


def stack_of_values(
    values: Sequence[Any], device: torch.device | str | None = None
) -> NonTensorStack:
    """A 1-d `NonTensorStack` with one element per item of `values`, taken as they are
    (a list item stays one value: a column of lists read from a file, for instance)."""
    arr = np.empty((len(values),), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return NonTensorStack(arr, device=device)
