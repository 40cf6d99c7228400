"""TensorDicts to trees and back, through td-core's public API only."""

from __future__ import annotations

from typing import Any

import torch

from td_core import NonTensorData, NonTensorStack, TensorDict, is_non_tensor, is_tensor_collection
from td_memmap._tree import Node, NonTensorLeaf

__all__ = ["to_tree", "from_tree", "assign_leaves"]


def to_tree(td: Any, where: tuple[str, ...] = ()) -> Node:
    """The tree of ``td``; a memory-mapped copy lives on the CPU, so a set device becomes "cpu"."""
    if not isinstance(td, TensorDict):
        what = f"entry {where!r}" if where else "the argument"
        raise TypeError(
            f"{what} is a {type(td).__name__}: td-memmap saves TensorDicts (lazy stacks and "
            "tensorclasses are not supported yet; densify with .contiguous() or .to_tensordict())"
        )
    entries: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            entries[key] = value
        elif is_non_tensor(value):
            if isinstance(value, NonTensorStack):
                entries[key] = NonTensorLeaf(
                    value.as_array(), tuple(value.batch_size), stacked=True
                )
            else:
                entries[key] = NonTensorLeaf(value.data, tuple(value.batch_size))
        elif is_tensor_collection(value):
            entries[key] = to_tree(value, (*where, key))
        else:
            raise TypeError(
                f"entry {(*where, key)!r} of type {type(value).__name__} cannot be saved"
            )
    device = None if td.device is None else "cpu"
    return Node(tuple(td.batch_size), device, entries)


def from_tree(node: Node) -> TensorDict:
    """A TensorDict holding the tree's entries (no copies)."""
    entries: dict[str, Any] = {}
    for key, value in node.entries.items():
        if isinstance(value, Node):
            entries[key] = from_tree(value)
        elif isinstance(value, NonTensorLeaf):
            if value.stacked:
                entries[key] = NonTensorStack(value.value)
            else:
                entries[key] = NonTensorData(value.value, value.batch_size)
        else:
            entries[key] = value
    return TensorDict(entries, batch_size=node.batch_size, device=node.device)


def assign_leaves(td: TensorDict, node: Node) -> None:
    """Replace ``td``'s tensor leaves, in place, by the tree's (same structure)."""
    for key, value in node.entries.items():
        if isinstance(value, Node):
            assign_leaves(td.get(key), value)
        elif isinstance(value, torch.Tensor) and td.get(key) is not value:
            td.set(key, value)
