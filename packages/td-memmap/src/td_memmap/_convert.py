"""TensorDicts, lazy stacks and tensorclasses to trees and back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import torch

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictParams,
    UnbatchedTensor,
    is_non_tensor,
    is_tensor_collection,
    is_tensorclass,
    lazy_stack,
)
from td_memmap._classes import class_name
from td_memmap._errors import MemmapFormatError
from td_memmap._paths import remember
from td_memmap._shared import make_shared
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import KIND_CLASS, KIND_LAZY, Node, NonTensorLeaf

__all__ = ["to_tree", "from_tree", "assign_leaves", "tensor_leaves", "move_device_to_cpu"]

_CPU = torch.device("cpu")


def to_tree(td: Any, where: tuple[str, ...] = ()) -> Node:
    """The tree of `td`; a memory-mapped copy lives on the CPU, so its device is "cpu"
    (also for a `td` with no device, as upstream)."""
    device = "cpu"
    if isinstance(td, LazyStackedTensorDict):
        node = Node(tuple(td.batch_size), device, {}, KIND_LAZY, td.stack_dim)
        node.names = _names_of(td)
        for i, member in enumerate(td.tensordicts):
            node.entries[str(i)] = to_tree(member, (*where, f"<member {i}>"))
        return node
    if is_tensorclass(td) and isinstance(td._tensordict, LazyStackedTensorDict):
        # a tensorclass over a (ragged) lazy stack: saved as a lazy stack of instances
        held = td._tensordict
        return to_tree(
            LazyStackedTensorDict(*td.unbind(held.stack_dim), stack_dim=held.stack_dim), where
        )
    if is_tensorclass(td):
        node = to_tree(td._tensordict, where)
        node.kind, node.class_name, node.cls = KIND_CLASS, class_name(type(td)), type(td)
        return node
    if not is_tensor_collection(td):
        what = f"entry {where!r}" if where else "the argument"
        raise TypeError(
            f"{what} is a {type(td).__name__}: td-memmap saves TensorDicts, lazy stacks and "
            "tensorclasses"
        )
    entries: dict[str, Any] = {}
    unbatched: set[str] = set()
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            if hasattr(value, "full_tensor"):
                # a DTensor: the whole tensor it shards, as upstream (a collective: every
                # rank calls it, in key order, as `apply` over the same TensorDict does)
                value = value.full_tensor()
            if isinstance(value, UnbatchedTensor):  # saved as a plain tensor, marked as such
                unbatched.add(key)
                source = getattr(value, _SOURCE, None)
                value = value.as_subclass(torch.Tensor) if source is None else source
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
    node = Node(tuple(td.batch_size), device, entries)
    node.unbatched = unbatched
    node.names = _names_of(td)
    return node


def _names_of(td: Any) -> tuple[str | None, ...] | None:
    """The dim names of `td`, or None when no dim is named (nothing is saved then)."""
    names = tuple(td.names)
    return names if any(name is not None for name in names) else None


def _name(td: Any, node: Node) -> Any:
    """`td` with the dim names the tree records (checked when the metadata was read)."""
    if node.names is not None:
        try:
            td.names = list(node.names)
        except (ValueError, RuntimeError) as err:  # a name also given to a sub-folder's dim
            where = node.path or "the saved TensorDict"
            raise MemmapFormatError(f"{where}: the saved dim names cannot be set: {err}") from None
    return td


# the memory-mapped tensor an `UnbatchedTensor` of a loaded or saved TensorDict views, kept
# on it so that `is_memmap` and a save into the same folder see a memory-mapped leaf
_SOURCE = "_td_memmap_source"


def _unbatched(value: torch.Tensor, batch_size: tuple[int, ...]) -> UnbatchedTensor:
    out = UnbatchedTensor(value, batch_size)
    if isinstance(value, MemoryMappedTensor):
        setattr(out, _SOURCE, value)
    return out


def _leaf(leaf: NonTensorLeaf) -> Any:
    if leaf.shared is not None:
        return make_shared(leaf.shared, leaf.batch_size, leaf.stacked)
    if leaf.stacked:
        return NonTensorStack(leaf.value)
    return NonTensorData(leaf.value, leaf.batch_size)


def from_tree(node: Node) -> Any:
    """The TensorDict, lazy stack or tensorclass instance holding the tree's entries (no copies).

    Every tree given here is valid by construction: made by `to_tree`
    from a TensorDict (its leaves possibly replaced by memory-mapped tensors of
    the same shapes), or by the loader after `parse_folder` checked that keys
    are unique strings, that every tensor's shape and every sub-folder's
    batch size start with the folder's batch size, that non-tensor batch sizes
    equal it, and that the device is None or the CPU (where mapped leaves live).
    """
    if node.kind == KIND_LAZY:
        members = [from_tree(cast(Node, member)) for member in node.entries.values()]
        # instances of one tensorclass: the class over the stack, as lazy_stack gives
        stack = (
            lazy_stack(members, node.stack_dim)
            if members
            else LazyStackedTensorDict(stack_dim=node.stack_dim)
        )
        return remember(_name(stack, node), node.path)
    entries: dict[str, Any] = {}
    for key, value in node.entries.items():
        if type(value) is Node:
            entries[key] = from_tree(value)
        elif type(value) is NonTensorLeaf:
            entries[key] = _leaf(value)
        elif key in node.unbatched:
            entries[key] = _unbatched(cast(torch.Tensor, value), node.batch_size)
        else:
            entries[key] = value
    # _new_unsafe skips td-core's per-entry checks: sound only because the tree
    # satisfies TensorDict's invariants, as established above (see the docstring).
    td = TensorDict._new_unsafe(
        entries, torch.Size(node.batch_size), None if node.device is None else _CPU
    )
    _name(td, node)
    if node.kind == KIND_CLASS and node.cls is not None:
        return remember(node.cls.from_tensordict(td), node.path)  # type: ignore[attr-defined]
    return remember(td, node.path)


def assign_leaves(td: Any, node: Node) -> None:
    """Replace `td`'s tensor leaves (and shared values), in place, by the tree's (same structure)."""
    remember(td, node.path)
    if node.kind == KIND_LAZY:
        held = td._tensordict if is_tensorclass(td) else td  # a tensorclass over a lazy stack
        for member, sub in zip(held.tensordicts, node.entries.values()):
            assign_leaves(member, sub)  # type: ignore[arg-type]
        return
    for key, value in node.entries.items():
        if isinstance(value, Node):
            assign_leaves(td.get(key), value)
        elif isinstance(value, torch.Tensor):
            if key in node.unbatched:
                td.set(key, _unbatched(value, node.batch_size))
            elif td.get(key) is not value:
                td.set(key, value)
        elif value.shared is not None:
            td.set(key, _leaf(value))


def move_device_to_cpu(td: Any) -> None:
    """Record the CPU as the device of `td` and of everything it holds (no data moves).

    `memmap_` calls it before its leaves are replaced by memory-mapped ones, which live
    on the CPU: the result says so, as the copy `memmap` makes does (and as upstream).
    """
    held = td._tensordict if is_tensorclass(td) else td
    if isinstance(held, LazyStackedTensorDict):
        for member in held.tensordicts:
            move_device_to_cpu(member)
        return
    if held.device != _CPU:
        if isinstance(held, (TensorDict, TensorDictParams)):
            held._set_device(_CPU)
        elif getattr(held, "source", None) is not None:
            # a lazy view (permute, transpose, ...), whose device is its source's: memmap_
            # replaces every leaf of the source (a sub-view refuses memmap_ before this)
            move_device_to_cpu(held.source)
            return
        elif held.device is not None:  # another view's device: forget it
            held.clear_device_()
    for sub in held._subtrees():
        move_device_to_cpu(sub)


def tensor_leaves(node: Node) -> Iterator[torch.Tensor]:
    """Every tensor of the tree, depth first."""
    for value in node.entries.values():
        if type(value) is Node:
            yield from tensor_leaves(value)
        elif isinstance(value, torch.Tensor):
            yield value
