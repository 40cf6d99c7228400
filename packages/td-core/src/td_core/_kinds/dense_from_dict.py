"""Lists read as stacks for `TensorDict.from_dict` with an inferred batch size.

Lists that would be one non-tensor value are read as stacks first, so their nesting
gives batch dims, as upstream reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from td_core._core.flags import list_to_stack
from td_core._core.traverse import is_nt, is_td
from td_core._leaves.lists import read_list
from td_core._leaves.nontensor import NonTensorStack

__all__ = ["lists_as_stacks"]


def lists_as_stacks(source: Mapping[Any, Any]) -> dict[Any, Any]:
    """`source` with each list that would be one non-tensor value made a `NonTensorStack`.

    The batch size is still to be inferred, so a list of strings (say) runs along the
    dims its nesting gives, as upstream reads it, instead of being one value shared by
    a batch of `[]`; the inferred batch size then takes those dims in.
    """
    out: dict[Any, Any] = {}
    for key, value in source.items():
        if isinstance(value, Mapping) and not is_td(value):
            value = lists_as_stacks(value)
        elif isinstance(value, list) and value and list_to_stack() and _one_value(value):
            value = NonTensorStack.from_list(value)
        out[key] = value
    return out


def _one_value(value: list[Any]) -> bool:
    """Whether the list `value` would be read as one non-tensor value in a batch of `[]`
    (lists of tensors or TensorDicts are stacked, of numbers made a tensor, instead)."""
    if any(isinstance(v, torch.Tensor) or is_td(v) for v in value):
        return False
    return is_nt(read_list(value, torch.Size(), None))
