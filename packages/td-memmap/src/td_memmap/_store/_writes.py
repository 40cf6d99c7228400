"""What a write to a TensorDictStore sends: whole sub-trees, and the bytes of indexed rows."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import torch

from td_core import TensorDict, is_non_tensor, is_tensor_collection
from td_core._shared.kinds import index_device, stand_in
from td_core.errors import BatchSizeError, DTypeError
from td_memmap._format import dtype_from_name
from td_memmap._store import _layout as L

__all__ = ["subtree_writes", "index_plan"]

Write = tuple[str, dict[str, Any], "bytes | None"]
Op = Callable[[Any], Any]


def subtree_writes(path: tuple[str, ...], value: Any) -> list[Write]:
    """The registry entries and data of `value` stored at `path` (a leaf or a whole sub-tree)."""
    if isinstance(value, torch.Tensor):
        return [(L.field(path), L.tensor_meta(value, _name(path)), L.tensor_bytes(value))]
    if is_non_tensor(value):
        return [(L.field(path), L.non_tensor_meta(value, _name(path)), None)]
    if is_tensor_collection(value):
        out: list[Write] = [
            (L.field(path), {"kind": "td", "batch_size": list(value.batch_size)}, None)
        ]
        for key, item in value.items():
            out.extend(subtree_writes(path + (key,), item))
        return out
    raise TypeError(f"cannot store entry {_name(path)!r} of type {type(value).__name__}")


def _name(path: tuple[str, ...]) -> Any:
    return path[0] if len(path) == 1 else path


def _full_index(index: Any, ndim: int) -> tuple[Any, ...]:
    """`index` as a tuple that names the batch dims only (an Ellipsis spans batch dims)."""
    parts = index if type(index) is tuple else (index,)
    if not any(p is Ellipsis for p in parts):
        return parts
    used = 0
    for p in parts:
        if p is None or p is Ellipsis:
            continue
        used += p.ndim if isinstance(p, torch.Tensor) and p.dtype == torch.bool else 1
    at = next(i for i, p in enumerate(parts) if p is Ellipsis)
    return (*parts[:at], *(slice(None),) * (ndim - used), *parts[at + 1 :])


def index_plan(
    store: Any, registry: dict[tuple[str, ...], dict[str, Any]], index: Any, value: Any
) -> list[Op]:
    """The commands that write `value` at batch `index` of `store` (checked before any is sent).

    A key of `value` the store lacks is created, zero-filled outside `index`, as upstream.

    Raises:
        BatchSizeError: a value does not fit the indexed slot of its entry.
        DTypeError: a value cannot be converted to its entry's dtype.
    """
    bs = store.batch_size
    idx = _full_index(index, len(bs))
    try:
        sub = stand_in(bs, idx)[idx].shape
    except IndexError as err:
        raise IndexError(
            f"cannot write at index {index!r} of batch_size {list(bs)}: {err}"
        ) from None
    base = store._path
    n = len(base)
    leaves = {
        p[n:]: m for p, m in registry.items() if p[:n] == base and len(p) > n and m["kind"] != "td"
    }
    if isinstance(value, dict):
        value = TensorDict(value, sub)
    pairs: list[tuple[tuple[str, ...], Any]] = []
    ops: list[Op] = []
    srv = store._srv
    is_collection = is_tensor_collection(value) and not is_non_tensor(value)
    if is_collection:
        for key, item in value.items(include_nested=True):
            rel = (key,) if isinstance(key, str) else tuple(key)
            if is_tensor_collection(item) and not is_non_tensor(item):
                continue  # a sub-TensorDict: its leaves come on their own
            if rel not in leaves:  # a new entry: created zero-filled (empty for non-tensors)
                ops.extend(_create_at(srv, registry, base, rel, bs, idx, sub, item))
                continue
            pairs.append((rel, item))
    else:
        # a tensor or number goes to every tensor leaf (non-tensor leaves hold no numbers)
        pairs = [(rel, value) for rel, meta in leaves.items() if meta["kind"] == "tensor"]
    for rel, item in pairs:
        meta = leaves[rel]
        full = base + rel
        field = L.field(full)
        if meta["kind"] == "tensor" and meta.get("unbatched") and is_collection:
            # outside the batch dims: a row holds all of it, as in a dense TensorDict
            ops.extend(_whole_write(srv.data_key(field), meta, item, _name(full), index))
        elif meta["kind"] == "tensor":
            ops.extend(_row_writes(srv.data_key(field), meta, idx, sub, item, _name(full), index))
        else:
            # a non-tensor leaf has the batch size of the TensorDict holding it
            inner = bs if full[:-1] == base else torch.Size(registry[full[:-1]]["batch_size"])
            inner_sub = sub + inner[len(bs) :]
            ops.append(
                _non_tensor_write(srv.keys_key, field, meta, inner, idx, inner_sub, item, full)
            )
    return ops


def _row_writes(
    data_key: str,
    meta: dict[str, Any],
    idx: tuple[Any, ...],
    sub: torch.Size,
    item: Any,
    key: Any,
    index: Any,
) -> list[Op]:
    dtype = dtype_from_name(meta["dtype"])
    shape = torch.Size(meta["shape"])
    if is_tensor_collection(item):
        raise DTypeError(
            f"cannot write a {type(item).__name__} at index {index!r} of tensor entry {key!r}"
        )
    try:
        values = torch.as_tensor(item).to(dtype)
    except (TypeError, ValueError, RuntimeError) as err:
        raise DTypeError(
            f"cannot write {type(item).__name__} at index {index!r} of entry {key!r} "
            f"(dtype {meta['dtype']}): {err}"
        ) from None
    positions = torch.arange(shape.numel(), device=index_device(idx)).view(shape)[idx].cpu()
    extra = values.dim() - positions.dim()
    if extra > 0 and all(d == 1 for d in values.shape[:extra]):
        values = values.reshape(values.shape[extra:])  # leading ones drop, as in t[i] = v
    try:
        values = values.expand(positions.shape)
    except RuntimeError:
        raise BatchSizeError(
            f"cannot write a value of shape {list(values.shape)} at index {index!r} of entry "
            f"{key!r}: the slot has shape {list(positions.shape)}"
        ) from None
    pos = positions.reshape(-1)
    vals = values.reshape(-1)
    if pos.numel() == 0:
        return []
    pos, order = torch.sort(pos, stable=True)
    vals = vals[order]
    keep = torch.ones_like(pos, dtype=torch.bool)  # a repeated position: the last write wins
    keep[:-1] = pos[1:] != pos[:-1]
    pos, vals = pos[keep], vals[keep]
    breaks = (torch.nonzero(pos[1:] != pos[:-1] + 1).reshape(-1) + 1).tolist()
    itemsize = vals.element_size()
    ops: list[Op] = []
    for start, stop in zip([0, *breaks], [*breaks, pos.numel()]):
        offset = int(pos[start]) * itemsize
        chunk = L.tensor_bytes(vals[start:stop])
        ops.append(functools.partial(_setrange, data_key, offset, chunk))
    return ops


def _whole_write(data_key: str, meta: dict[str, Any], item: Any, key: Any, index: Any) -> list[Op]:
    """The commands writing `item` over the whole unbatched entry `key` (shapes must match)."""
    if not isinstance(item, torch.Tensor) or list(item.shape) != meta["shape"]:
        if isinstance(item, torch.Tensor):
            what = f"a tensor of shape {list(item.shape)}"
        else:
            what = f"a {type(item).__name__}"
        raise BatchSizeError(
            f"cannot write {what} at index {index!r} into the unbatched entry {key!r} of shape "
            f"{meta['shape']}: "
            "a row holds all of it, so the shapes must match"
        )
    return _row_writes(data_key, meta, (), torch.Size(), item, key, index)


def _create_at(
    srv: Any,
    registry: dict[tuple[str, ...], dict[str, Any]],
    base: tuple[str, ...],
    rel: tuple[str, ...],
    bs: torch.Size,
    idx: tuple[Any, ...],
    sub: torch.Size,
    item: Any,
) -> list[Op]:
    """The commands creating the new entry `base + rel` with `item` at `idx` (zeros elsewhere)."""
    local = TensorDict({}, bs)
    if isinstance(item, torch.Tensor):
        local.set("v", torch.zeros((*bs, *item.shape[len(sub) :]), dtype=item.dtype))
    local[idx if len(idx) != 1 else idx[0]] = TensorDict({"v": item}, sub)
    full = base + rel
    writes = subtree_writes(full, local.get("v"))
    for depth in range(len(base) + 1, len(full)):  # sub-TensorDicts on the way, if missing
        node = full[:depth]
        if node not in registry:
            writes.append((L.field(node), {"kind": "td", "batch_size": list(bs)}, None))
    return [functools.partial(_put, srv, field, meta, data) for field, meta, data in writes]


def _put(srv: Any, field: str, meta: dict[str, Any], data: bytes | None, pipe: Any) -> Any:
    if data is not None:
        pipe.set(srv.data_key(field), data)
    return pipe.hset(srv.keys_key, field, json.dumps(meta))


def _setrange(data_key: str, offset: int, chunk: bytes, pipe: Any) -> Any:
    return pipe.setrange(data_key, offset, chunk)


def _non_tensor_write(
    keys_key: str,
    field: str,
    meta: dict[str, Any],
    bs: torch.Size,
    idx: tuple[Any, ...],
    sub: torch.Size,
    item: Any,
    full: tuple[str, ...],
) -> Op:
    local = TensorDict({"v": L.non_tensor_from_meta(meta, bs, None)}, bs)
    local[idx if len(idx) != 1 else idx[0]] = TensorDict({"v": item}, sub)
    new = json.dumps(L.non_tensor_meta(local.get("v"), _name(full)))
    return lambda pipe: pipe.hset(keys_key, field, new)
