"""The body of `TensorDict.from_dict`: a (nested) mapping made a TensorDict of a given class.

With an inferred batch size, lists that would be one non-tensor value are read as
stacks first, so their nesting gives batch dims, as upstream reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from td_core._core.flags import list_to_stack
from td_core._core.traverse import is_nt, is_td
from td_core._leaves.lists import read_list
from td_core._leaves.nontensor import NonTensorStack
from td_core.errors import OptionsConflictError

__all__ = ["from_mapping"]


def from_mapping(
    cls: Any,
    input_dict: Mapping[Any, Any],
    *,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    auto_batch_size: bool | None = None,
    names: Sequence[str | None] | None = None,
) -> Any:
    """The body of `TensorDict.from_dict` (see there): `cls` is the class to build."""
    if is_td(input_dict):
        if batch_size is None and not auto_batch_size and batch_dims is None:
            batch_size = input_dict.batch_size
        input_dict = input_dict.to_dict()
    if not isinstance(input_dict, Mapping):
        raise TypeError(f"from_dict expects a mapping, got {type(input_dict).__name__}")
    if batch_size is not None and batch_dims is not None:
        raise OptionsConflictError(
            f"from_dict: pass either batch_size ({batch_size!r}) or batch_dims ({batch_dims!r}), "
            "not both"
        )
    if auto_batch_size is None:
        auto_batch_size = batch_dims is not None
    if batch_size is not None:
        out = cls(input_dict, batch_size=batch_size, device=device)
    else:
        if auto_batch_size:
            input_dict = _lists_as_stacks(input_dict)
        out = cls(input_dict, device=device)
        if auto_batch_size:
            out.auto_batch_size_(batch_dims)
    if names is not None:
        out._set_names(names)
    return out


def _lists_as_stacks(source: Mapping[Any, Any]) -> dict[Any, Any]:
    """`source` with each list that would be one non-tensor value made a `NonTensorStack`.

    The batch size is still to be inferred, so a list of strings (say) runs along the
    dims its nesting gives, as upstream reads it, instead of being one value shared by
    a batch of `[]`; the inferred batch size then takes those dims in.
    """
    out: dict[Any, Any] = {}
    for key, value in source.items():
        if isinstance(value, Mapping) and not is_td(value):
            value = _lists_as_stacks(value)
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
