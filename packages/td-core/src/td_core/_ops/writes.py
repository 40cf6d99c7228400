"""In-place writes that reach the storage, validated before the first one is made.

A lazy stack's reads are copies (its leaves are stacked on demand), so an
in-place write must go to its members: these helpers find the tensors that
hold the data, whatever the kind, and write there. The `plan_*` functions
check a whole multi-leaf write (keys present, shapes fit) and return what to
write, so a failure leaves the TensorDict unchanged. Used by the masked and
indexed family (`td_core._ops.masked`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch.compiler import is_compiling

from td_core._core.keys import unravel_key
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT, broadcast_shape, stand_in
from td_core._leaves.nontensor import NonTensorData
from td_core._leaves.nontensor_arrays import same_value
from td_core.errors import BatchSizeError, DTypeError, KeyNotFoundError

__all__ = [
    "is_lazy",
    "lazy_parts",
    "storage_leaves",
    "slot_shape",
    "set_at",
    "no_grad_for",
    "zero_all",
    "plan_copy",
    "copy_all",
    "copy_at_dense",
    "plan_copy_dense",
    "as_tuple",
    "plan_at",
    "fill",
    "write_plan",
    "set_into",
    "copy_into",
    "rebind",
]

Tensor = torch.Tensor


_LAZY: dict[type, bool] = {}


def is_lazy(cls: type) -> bool:
    """Whether instances of `cls` are lazy stacks (hold members; reads are stacked copies)."""
    lazy = _LAZY.get(cls)
    if lazy is None:
        lazy = _LAZY[cls] = hasattr(cls, "tensordicts") and hasattr(cls, "stack_dim")
    return lazy


def lazy_parts(td: Any) -> tuple[list[Any], int] | None:
    """`(members, stack_dim)` of a lazy stack; `None` for kinds whose reads are views."""
    return (td.tensordicts, td.stack_dim) if is_lazy(type(td)) else None


def storage_leaves(
    td: Any, out: list[Tensor] | None = None, params: list[Tensor] | None = None
) -> list[Tensor]:
    """The tensors holding `td`'s data (a lazy stack's: its members'); writing them writes `td`.

    With `params`, the leaves of a nested kind whose writes run under `no_grad`
    (a `TensorDictParams` inside a TensorDict) go there instead of `out`.
    """
    if out is None:
        out = []
    parts = lazy_parts(td)
    if parts is not None:
        for member in parts[0]:
            storage_leaves(member, out, params)
        return out
    for value in td._values_str():
        if isinstance(value, Tensor):
            out.append(value)
        elif not value._is_non_tensor:
            if params is not None and no_grad_for(value):
                storage_leaves(value, params)
            else:
                storage_leaves(value, out, params)
    return out


def slot_shape(shape: torch.Size, index: Any) -> torch.Size:
    """The shape of `t[index]` for a tensor `t` of `shape` (no data read or copied)."""
    return stand_in(shape, index)[index].shape


def set_at(td: Any, key: str, value: Any, index: Any, full_key: Any) -> None:
    """`td[key][index] = value` in place, through lazy stacks to their members.

    A failed write leaves `td` unchanged (torch checks a tensor write's shape
    before it writes, and a TensorDict write is planned before it is made).
    """
    parts = lazy_parts(td)
    if parts is not None:
        _set_at_lazy(td, parts, key, value, index, full_key)
        return
    dest = td._get_str(key, NO_DEFAULT)
    if isinstance(dest, Tensor):
        if not isinstance(value, (Tensor, int, float, bool)):
            value = torch.as_tensor(value, device=dest.device)
        try:
            dest[index] = value
        except RuntimeError as err:
            shape = list(value.shape) if isinstance(value, Tensor) else []
            raise BatchSizeError(
                f"cannot write a value of shape {shape} into entry {full_key!r} of shape "
                f"{list(dest.shape)} at index {index!r}: {err}"
            ) from None
    elif dest is NO_DEFAULT:
        raise KeyNotFoundError(
            f"key {full_key!r} not found: set_at_ writes into an existing entry "
            f"(keys here: {sorted(td._keys_str())}); use td[index] = value or set() to add one"
        )
    elif is_nt(dest):
        _set_non_tensor_at(td, key, dest, dest._set_at(index, value), full_key)
    else:
        dest[index] = value


def _set_non_tensor_at(td: Any, key: str, dest: Any, new: Any, full_key: Any) -> None:
    """Put `new` (the leaf `dest` with a write made at an index) in place of `dest`.

    A leaf backed by a file shared between processes (td-memmap's shared values)
    takes the new values in place, so every process sees them; replacing it with
    an in-memory leaf would drop the write for the others. A plain leaf is an
    immutable value: the container holds `new` instead.
    """
    if new is dest:
        return
    stacked = getattr(type(new), "_is_stack", False)
    if stacked == getattr(type(dest), "_is_stack", False):
        if not dest._write_(new.as_array() if stacked else new.data):
            td._set_str(key, new)
        return
    if type(dest)._write_ is not NonTensorData._write_:
        values = new.as_array().reshape(-1)
        if values.size and all(same_value(v, values[0]) for v in values):
            dest._write_(values[0])  # one value for every element still: the file takes it
            return
        raise ValueError(
            f"cannot write one element of the shared non-tensor entry {full_key!r}: it holds "
            "one value for the whole batch, in its file; write the whole batch "
            "(td.set_(key, value)), or share a NonTensorStack to hold a value per element"
        )
    td._set_str(key, new)


def _set_at_lazy(
    td: Any, parts: tuple[list[Any], int], key: str, value: Any, index: Any, full_key: Any
) -> None:
    members, d = parts
    try:
        split = td._split_index(index)
    except IndexError:  # the index reaches into feature dims: not separable by member
        split = None
    if split is not None and type(split[0]) is int:  # one member: write there
        set_at(members[split[0]], key, value, split[1] or ..., full_key)
        return
    entry = td._get_str(key, NO_DEFAULT)
    if entry is NO_DEFAULT:
        raise KeyNotFoundError(
            f"key {full_key!r} not found in every member of the lazy stack "
            f"(common keys: {sorted(td._keys_str())}); set_at_ writes into an existing entry"
        )
    if is_td(entry):  # a lazy stack of the members' sub-TensorDicts: writes go through
        entry[index] = value
        return
    if is_nt(entry):
        td._set_str(key, entry._set_at(index, value))
        return
    set_at(td._new({key: entry}, td.batch_size), key, value, index, full_key)  # a stacked copy
    for member, part in zip(members, entry.unbind(d)):
        _write_entry(member, key, part)


def _write_entry(td: Any, key: str, value: Tensor) -> None:
    """Copy `value` into the existing tensor entry `key` of `td`, through lazy stacks."""
    parts = lazy_parts(td)
    if parts is not None:
        for member, part in zip(parts[0], value.unbind(parts[1])):
            _write_entry(member, key, part)
        return
    td._get_str(key).copy_(value)


# ------------------------------------------------------------ multi-leaf writes
def no_grad_for(td: Any) -> bool:
    """Whether writes into `td` must run under `no_grad` (its leaves are parameters)."""
    return isinstance(td, torch.nn.Module)


def zero_all(leaves: list[Tensor]) -> None:
    if not leaves:
        return
    if torch._C._are_functorch_transforms_active():
        for t in leaves:
            t.zero_()
    else:
        torch._foreach_zero_(leaves)


def plan_copy(
    td: Any, src: Any, dests: list[Tensor], srcs: list[Tensor], prefix: tuple[str, ...]
) -> None:
    """Validate `td.copy_(src)`, collecting the tensors to copy; keys `td` lacks are skipped."""
    parts = lazy_parts(td)
    if parts is not None:
        members, d = parts
        if src.batch_dims <= d or src.batch_size[d] != len(members):
            raise BatchSizeError(
                f"copy_: cannot copy a TensorDict of batch_size {list(src.batch_size)} into "
                f"{(*prefix,)!r} of batch_size {list(td.batch_size)}"
            )
        for member, part in zip(members, src.unbind(d)):
            plan_copy(member, part, dests, srcs, prefix)
        return
    get = td._getter()
    for key, value in src._items_str():
        dest = get(key, NO_DEFAULT)
        if type(dest) is Tensor and type(value) is Tensor and dest.shape == value.shape:
            dests.append(dest)  # the usual leaf, checked tightly
            srcs.append(value)
        elif isinstance(dest, Tensor):
            _check_leaf(dest, value, (*prefix, key))
            dests.append(dest)
            srcs.append(value)
        elif is_td(dest):
            plan_copy(dest, value, dests, srcs, (*prefix, key))
        # a key td lacks, or a non-tensor leaf: skipped


def _check_leaf(dest: Tensor, value: Any, full: tuple[str, ...]) -> None:
    """Raise unless `value` is a tensor that can be copied (broadcast) into `dest`."""
    if not isinstance(value, Tensor) or (
        value.shape != dest.shape and broadcast_shape(value.shape, dest.shape) != dest.shape
    ):
        shape = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise BatchSizeError(
            f"copy_: cannot copy a value of shape {shape} into entry {full!r} "
            f"of shape {list(dest.shape)}"
        )


def plan_copy_dense(
    td: Any, src: Any, dests: list[Tensor], srcs: list[Tensor], shapes: bool = True
) -> bool:
    """`plan_copy` for two trees of one exact dense class with tensor leaves (of equal
    shapes, unless `shapes` is False: the caller checks them).

    Returns False, with the lists partly filled, at the first entry that needs the
    general route: a key `td` lacks, a broadcast, another kind of leaf or node.
    """
    cls = type(td)
    if td._pending is not None or src._pending is not None:
        return False
    get = td._tensordict.get
    for key, value in src._tensordict.items():
        dest = get(key)
        kind = type(dest)
        if kind is Tensor:
            if type(value) is not Tensor or (shapes and dest.shape != value.shape):
                return False
            dests.append(dest)
            srcs.append(value)
        elif kind is not cls or type(value) is not cls:
            return False
        elif not plan_copy_dense(dest, value, dests, srcs, shapes):
            return False
    return True


def copy_at_dense(td: Any, src: Any, index: Any, non_blocking: bool) -> bool:
    """`td[index] = src` in place where it is plain: two dense trees of one class pairing
    leaf for leaf, `index` ints and slices over batch dims, and every `leaf[index]` (a
    view) of its source leaf's shape: one `_foreach_copy_` into the views. Returns False,
    with nothing written, otherwise.
    """
    cls = type(td)
    if cls is not type(src) or not cls._plain_nodes:
        return False
    if type(index) is tuple:
        if len(index) > len(td.batch_size) or not all(type(i) in _BASIC for i in index):
            return False
    elif type(index) not in _BASIC or not td.batch_size:
        return False
    dests: list[Tensor] = []
    srcs: list[Tensor] = []
    if not plan_copy_dense(td, src, dests, srcs, shapes=False):
        return False
    try:
        views = [dest[index] for dest in dests]
    except (IndexError, ValueError):  # out of range, a negative step: the general route says so
        return False
    for view, value in zip(views, srcs):
        if view.shape != value.shape:
            return False
    copy_all(views, srcs, non_blocking)
    return True


_BASIC = (int, slice)


_any_requires_grad = getattr(torch._C, "_any_requires_grad", None)


def _records_graph(dests: list[Tensor], srcs: list[Tensor]) -> bool:
    """Whether the copies must be recorded by autograd, one `copy_` each.

    `_foreach_copy_` has no derivative: a tensor that requires grad on either side
    would get a graph that fails in `backward()`. A destination that is a leaf
    requiring grad, or a view of one, is left to `_foreach_copy_`, which refuses
    it before writing anything (one `copy_` at a time would write the pairs before).
    """
    if not torch.is_grad_enabled():
        return False
    if _any_requires_grad is not None and not is_compiling():  # (a C call Dynamo cannot trace)
        if not _any_requires_grad(dests, srcs):
            return False
    elif not any(t.requires_grad for t in dests) and not any(t.requires_grad for t in srcs):
        return False
    return not any(t.requires_grad and _leaf_or_view_of_one(t) for t in dests)


def _leaf_or_view_of_one(t: Tensor) -> bool:
    base = t._base
    return t.is_leaf or (base is not None and base.is_leaf)


def copy_all(dests: list[Tensor], srcs: list[Tensor], non_blocking: bool) -> None:
    """Copy each of `srcs` into the tensor of `dests` at its place (shapes checked before)."""
    if not dests:
        return
    if torch._C._are_functorch_transforms_active() or _records_graph(dests, srcs):
        for dest, src in zip(dests, srcs):
            dest.copy_(src, non_blocking=non_blocking)
    elif non_blocking:
        torch._foreach_copy_(dests, srcs, non_blocking=True)
    else:  # without the keyword: parsing it costs as much as a few leaves' copies
        torch._foreach_copy_(dests, srcs)


def _flat_items(source: Any, prefix: tuple[str, ...] = ()) -> Iterable[tuple[tuple[str, ...], Any]]:
    """`(full key, leaf value)` of a TensorDict or a (nested) mapping with str or tuple keys."""
    items = source._items_str() if is_td(source) else source.items()
    for key, value in items:
        full = prefix + ((key,) if type(key) is str else tuple(as_tuple(unravel_key(key))))
        if is_td(value) or isinstance(value, Mapping):
            yield from _flat_items(value, full)
        else:
            yield full, value


def as_tuple(key: Any) -> tuple[str, ...]:
    return (key,) if type(key) is str else key


def plan_at(
    td: Any,
    source: Any,
    index: Any,
    allowed: set[tuple[str, ...]] | None,
    clone: bool,
    missing: type[KeyError],
    name: str,
) -> list[tuple[Any, str, Any, tuple[str, ...]]]:
    """Validate writing every leaf of `source` at `index` into `td`'s existing entries."""
    plan: list[tuple[Any, str, Any, tuple[str, ...]]] = []
    shapes: dict[torch.Size, torch.Size] = {}
    advanced = _through_index_put(index)
    for full, value in _flat_items(source):
        if allowed is not None and full not in allowed:
            continue
        parent = td
        for part in full[:-1]:
            parent = parent._get_str(part, NO_DEFAULT)
            if parent is NO_DEFAULT or not is_td(parent):
                break
        dest, shape = _entry_meta(parent, full[-1]) if is_td(parent) else (NO_DEFAULT, None)
        if dest is NO_DEFAULT:
            raise missing(
                f"{name}: key {full if len(full) > 1 else full[0]!r} is not in the destination "
                f"(keys: {sorted(td._keys_str())}); it writes into existing entries only"
            )
        if shape is not None and isinstance(value, Tensor):
            slot = shapes.get(shape)
            if slot is None:
                slot = shapes[shape] = slot_shape(shape, index)
            if value.shape != slot and broadcast_shape(value.shape, slot) != slot:
                raise BatchSizeError(
                    f"{name}: cannot write a value of shape {list(value.shape)} into entry "
                    f"{full!r} of shape {list(shape)} at index {index!r} (the slot has "
                    f"shape {list(slot)})"
                )
            if advanced and value.dtype != dest.dtype:
                raise DTypeError(
                    f"{name}: cannot write entry {full!r} of dtype {value.dtype} into dtype "
                    f"{dest.dtype} through an index tensor (torch's index_put does not cast): "
                    f"convert the value first, e.g. value.to({dest.dtype})"
                )
        if clone and isinstance(value, Tensor):
            value = value.clone()
        plan.append((parent, full[-1], value, full))
    return plan


def _through_index_put(index: Any) -> bool:
    """Whether a write at `index` is torch's `index_put` (an index tensor, list or array)."""
    items = index if type(index) is tuple else (index,)
    return any(isinstance(i, (Tensor, list, np.ndarray)) for i in items)


def _entry_meta(td: Any, key: str) -> tuple[Any, torch.Size | None]:
    """The entry at `key` (for a lazy stack: its first member's) and its shape if it is a
    tensor whose dims are all known (a lazy stack's ragged leaf has none), without stacking."""
    parts = lazy_parts(td)
    if parts is None:
        dest = td._get_str(key, NO_DEFAULT)
        return dest, dest.shape if isinstance(dest, Tensor) else None
    if key not in td._keys_str():
        return NO_DEFAULT, None
    dest = parts[0][0]._get_str(key)
    if not isinstance(dest, Tensor):
        return dest, None
    shape = td.get_item_shape(key)
    return dest, None if -1 in shape else shape


def fill(td: Any, path: tuple[str, ...], value: Any) -> None:
    parts = lazy_parts(td)
    if parts is not None:
        for member in parts[0]:
            fill(member, path, value)
        return
    entry = td._get_str(path[0])
    if len(path) > 1:
        fill(entry, path[1:], value)
    elif isinstance(entry, Tensor):
        entry.fill_(value)
    elif is_td(entry):
        for leaf in storage_leaves(entry):
            leaf.fill_(value)


def write_plan(td: Any, plan: list[tuple[Any, str, Any, tuple[str, ...]]], idx: Any) -> None:
    if no_grad_for(td):
        with torch.no_grad():
            for parent, key, value, full in plan:
                set_at(parent, key, value, idx, full)
        return
    for parent, key, value, full in plan:
        set_at(parent, key, value, idx, full)


def set_into(out: Any, result: Any) -> Any:
    """Set `out`'s entries to `result`'s (`where(out=)`: dtypes follow the result); returns `out`."""
    parts = lazy_parts(out)
    if parts is not None and result.batch_size == out.batch_size:
        for member, part in zip(parts[0], result.unbind(parts[1])):
            set_into(member, part)
        return out
    return out.update(result)


def copy_into(out: Any, result: Any) -> Any:
    """Copy `result` into `out` (the `out=` forms), checked first; returns `out`."""
    if getattr(out, "_direct", True) is False:  # its reads are copies: its own copy_ reaches it
        out.copy_(result)
        return out
    dests: list[Tensor] = []
    srcs: list[Tensor] = []
    plan_copy(out, result, dests, srcs, ())
    copy_all(dests, srcs, False)
    return out


def rebind(td: Any, result: Any) -> Any:
    """Make `td` hold `result`'s entries and batch size (the `inplace=True` forms)."""
    for key, value in result._items_str():
        td._set_str(key, value)
    if td.batch_size != result.batch_size:
        td.batch_size = result.batch_size
    return td
