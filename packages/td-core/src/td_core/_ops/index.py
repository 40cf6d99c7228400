"""Indexing over the batch dims: `td[idx]` and `td[idx] = value`.

An index is normalised once: lists and numpy arrays become tensors, and an
Ellipsis expands to full slices over the *batch* dims only (so `td[..., :2]`
slices the last batch dim, never a feature dim). The normalised tuple then
indexes every leaf directly: trailing (feature) dims are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.compiler import is_compiling

from td_core._core.contract import TensorDictContract, dense
from td_core._core.first_class import is_first_class_dim
from td_core._core.traverse import index_batch, is_nt, is_stack, is_td, map_batch
from td_core._core.utils import NO_DEFAULT, broadcast_shape, stand_in
from td_core._leaves.nontensor import NonTensorData
from td_core._leaves.unbatched import is_unbatched
from td_core._ops.writes import copy_at_dense, plan_copy_dense
from td_core.errors import BatchSizeError, DimError, DTypeError, IndexTypeError, LockedError

if TYPE_CHECKING:
    pass

__all__ = [
    "IndexingMixin",
    "batch_fits",
    "fits",
    "indexed_shape",
    "normalize_index",
]

Tensor = torch.Tensor
_SLICE_ALL = slice(None)


def _convert(item: Any) -> Any:
    if isinstance(item, (list, range)):
        return torch.tensor(list(item)) if len(item) else torch.zeros(0, dtype=torch.long)
    if isinstance(item, np.ndarray):
        return torch.from_numpy(item)
    if isinstance(item, np.integer):
        return int(item)
    if isinstance(item, np.bool_):
        return bool(item)
    return item


def _dims_used(item: Any) -> int:
    if item is None or item is Ellipsis:
        return 0
    if isinstance(item, Tensor) and item.dtype == torch.bool:
        return max(item.ndim, 1)
    if isinstance(item, bool):
        return 0
    return 1


def normalize_index(index: Any, batch_size: torch.Size) -> tuple[Any, ...]:
    """`index` as a tuple that indexes only batch dims, with Ellipsis expanded.

    Raises:
        IndexError: naming the index and the batch size when the index uses more
            dims than there are batch dims, or a boolean mask's shape does not
            match the batch dims it covers.
    """
    if type(index) is Tensor and batch_size:
        if index.dtype is not torch.bool:
            return (index,)  # positions over the first batch dim: nothing to check
        if index.ndim == 1 and index.shape[0] == batch_size[0]:
            return (index,)  # one mask over the first batch dim, of its size
    items = index if type(index) is tuple else (index,)
    items = tuple(_convert(i) for i in items)
    for item in items:
        if not (
            item is None
            or item is Ellipsis
            or isinstance(item, (int, slice, Tensor))
            or is_first_class_dim(item)
        ):
            raise IndexTypeError(
                f"Invalid index {item!r} of type {type(item).__name__} for a TensorDict: use "
                "ints, slices, None, ..., lists, ranges, tensors or numpy arrays"
            )
    used = sum(_dims_used(i) for i in items)
    ndim = len(batch_size)
    if used > ndim:  # DimError: an IndexError, and the ValueError torch raises for first-class dims
        raise DimError(
            f"too many indices for tensor of dimension {ndim}: index {index!r} uses {used} dims "
            f"but the TensorDict's batch_size {list(batch_size)} has {ndim}"
        )
    n_ellipsis = sum(1 for i in items if i is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError(f"an index can only have a single ellipsis, got {index!r}")
    if n_ellipsis:
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items = items[:at] + (_SLICE_ALL,) * (ndim - used) + items[at + 1 :]
    pos = 0
    for item in items:
        if isinstance(item, Tensor) and item.dtype == torch.bool and item.ndim:
            expected = batch_size[pos : pos + item.ndim]
            if item.shape != expected:
                raise IndexError(
                    f"boolean mask of shape {list(item.shape)} does not match the batch dims "
                    f"{list(expected)} it indexes (batch_size {list(batch_size)})"
                )
        pos += _dims_used(item)
    return items


def single_index(norm: tuple[Any, ...], batch_size: torch.Size) -> tuple[int, torch.Tensor] | None:
    """`(dim, positions)` when `norm` is full slices then one 1-d index tensor or mask.

    Such an index reads with `index_select` and writes with `index_copy_`
    (each about a third faster than advanced indexing on CPU), and a mask is
    turned into positions once instead of once per leaf.
    """
    if not norm or is_compiling():  # the bounds check reads the index's values: data-dependent
        return None
    item = norm[-1]
    d = len(norm) - 1
    if not isinstance(item, Tensor) or item.ndim != 1:
        return None
    if d and any(i != _SLICE_ALL for i in norm[:-1]):
        return None
    if item.dtype == torch.bool:
        return d, item.nonzero().squeeze(-1)
    if item.dtype not in (torch.int64, torch.int32):
        return None
    size = batch_size[d]
    if not item.numel():
        return d, item.long()
    bounds = torch.aminmax(item)
    low, high = int(bounds[0]), int(bounds[1])
    if high >= size or low < -size:
        bad = high if high >= size else low
        raise IndexError(
            f"index {bad} is out of range for batch dim {d} of size {size} (batch_size {list(batch_size)})"
        )
    positions = item if item.dtype == torch.int64 else item.long()
    return d, positions if low >= 0 else torch.where(positions < 0, positions + size, positions)


def copy_at_plain(td: Any, src: Any, index: Any, non_blocking: bool) -> bool:
    """`copy_at_dense`, and the same at positions or a mask over one batch dim (after
    full slices): every slot's shape and dtype checked, then one `index_copy_` a leaf
    (it refuses a cast). Returns False, with nothing written, where that does not apply.
    """
    if not isinstance(index, (Tensor, list, np.ndarray)):
        return copy_at_dense(td, src, index, non_blocking)
    cls = type(td)
    if cls is not type(src) or not cls._plain_nodes:
        return False
    bs = td.batch_size
    try:
        single = single_index(normalize_index(index, bs), bs)
    except IndexError:  # the general route names the index and the batch size
        return False
    if single is None:
        return False
    d, positions = single
    dests: list[Tensor] = []
    srcs: list[Tensor] = []
    if not plan_copy_dense(td, src, dests, srcs, shapes=False):
        return False
    n, device = positions.numel(), positions.device
    slots: dict[torch.Size, torch.Size] = {}
    for dest, value in zip(dests, srcs):
        shape = dest.shape
        slot = slots.get(shape)
        if slot is None:
            slot = slots[shape] = torch.Size((*shape[:d], n, *shape[d + 1 :]))
        if value.shape != slot or value.dtype != dest.dtype or dest.device != device:
            return False
    for dest, value in zip(dests, srcs):
        dest.index_copy_(d, positions, value)
    return True


def basic_shape(batch_size: torch.Size, index: tuple[Any, ...]) -> torch.Size | None:
    """`indexed_shape` of a tuple of in-range ints and forward slices over the leading batch
    dims, worked out from the sizes; `None` for any other index (the general route)."""
    if len(index) > len(batch_size):
        return None
    lead = []
    for item, n in zip(index, batch_size):
        cls = type(item)
        if cls is int:
            if not -n <= item < n:
                return None  # out of range: the general route raises
        elif cls is slice and (item.step is None or item.step > 0):
            lead.append(len(range(*item.indices(n))))
        else:
            return None
    return torch.Size((*lead, *batch_size[len(index) :]))


def indexed_shape(batch_size: torch.Size, index: tuple[Any, ...]) -> torch.Size:
    """The batch size after indexing (computed on a stride-0 stand-in, no data copied)."""
    # (a first-class dim gives a functorch tensor, whose shape is the positional dims' tuple)
    return torch.Size(stand_in(batch_size, index)[index].shape)


class IndexingMixin(TensorDictContract):
    """`__getitem__` over batch dims and `__setitem__` with an index."""

    __slots__ = ()

    def _index(self, index: Any) -> Any:
        bs = self.batch_size
        cls = type(index)
        if cls is int:
            if not bs:
                raise DimError(
                    f"cannot index a TensorDict with batch_size [] by {index!r}: indexing a "
                    "tensordict with td.batch_dims==0 is not permitted (it has no batch dim; "
                    "read its entries by key)"
                )
            if not -bs[0] <= index < bs[0]:
                raise IndexError(f"index {index} is out of range for batch_size {list(bs)}")
            return index_batch(self, index, bs[1:])
        if cls is slice:
            if not bs:
                raise IndexError("cannot slice a TensorDict with batch_size []")
            length = len(range(*index.indices(bs[0])))
            return index_batch(self, index, torch.Size((length, *bs[1:])))
        if cls is tuple:
            lead = basic_shape(bs, index)  # td[i, j], td[:, j]: nothing to normalise
            if lead is not None:
                return index_batch(self, index, lead)
        norm = normalize_index(index, bs)
        single = single_index(norm, bs)
        if single is not None:
            d, positions = single
            lead = torch.Size((*bs[:d], positions.numel(), *bs[d + 1 :]))

            def select(t: Tensor) -> Tensor:
                try:
                    return t.index_select(d, positions)
                except RuntimeError:  # e.g. positions on another device than this leaf
                    return t[norm]

            return map_batch(self, select, lead)
        lead = indexed_shape(bs, norm)
        return index_batch(self, norm if len(norm) != 1 else norm[0], lead)

    def _setitem_index(self, index: Any, value: Any) -> None:
        bs = self.batch_size
        single = None
        norm: Any  # the index as given (an int or a slice), else normalised to a tuple
        if type(index) is int and bs and -bs[0] <= index < bs[0]:
            norm, sub = index, bs[1:]
        elif type(index) is slice and bs:
            norm, sub = index, torch.Size((len(range(*index.indices(bs[0]))), *bs[1:]))
        elif type(index) is tuple and (lead := basic_shape(bs, index)) is not None:
            norm, sub = index, lead  # td[i, j] = v, td[:, j] = v: nothing to normalise
        else:
            norm = normalize_index(index, bs)
            single = single_index(norm, bs)
            if single is not None:
                d, positions = single
                sub = torch.Size((*bs[:d], positions.numel(), *bs[d + 1 :]))
            else:
                sub = indexed_shape(bs, norm)
            if len(norm) == 1:  # a bare index is cheaper for torch than a 1-tuple
                norm = norm[0]
        if isinstance(value, dict):
            value = dense(value, sub)
        if is_td(value):
            if value.batch_size == sub and copy_at_dense(self, value, norm, False):
                return
            writes: list[tuple[Tensor, Any]] = []
            later: list[tuple[TensorDictContract, str, Any, int]] = []
            _plan_sub(self, value, sub, norm, (), writes, later)
            _apply_plan(writes, later, norm, sub, single)
        else:
            leaves = list(self.items(include_nested=True, leaves_only=True))
            if isinstance(value, (bool, int, float)):
                for (
                    _,
                    dest,
                ) in leaves:  # a Python scalar is cast to each leaf's dtype, as torch does
                    dest[norm] = value
                return
            if not isinstance(value, Tensor):
                value = torch.as_tensor(value)
            n = len(self.batch_size)
            for key, dest in leaves:
                slot = sub + dest.shape[n:]
                if not fits(value.shape, slot):
                    raise BatchSizeError(
                        f"cannot write a tensor of shape {list(value.shape)} into entry {key!r} at index "
                        f"{index!r}: the slot has shape {list(slot)}"
                    )
            for _, dest in leaves:
                dest[norm] = value if value.dtype == dest.dtype else value.to(dest.dtype)


def _plan_sub(
    td: TensorDictContract,
    value: TensorDictContract,
    sub: torch.Size,
    index: Any,
    prefix: tuple[str, ...],
    writes: list[tuple[Tensor, Any]],
    later: list[tuple[TensorDictContract, str, Any, int]],
) -> None:
    """Validate `td[index] = value` completely, collecting the writes to make.

    Nothing is written here, so a failure leaves `td` as it was.
    """
    vbs = value.batch_size
    nv = len(vbs)
    if vbs != sub and not batch_fits(vbs, sub):
        raise BatchSizeError(
            f"batch dimension mismatch: cannot write a TensorDict of batch_size {list(vbs)} at "
            f"index {index!r}: the indexed destination TensorDict batch size is {list(sub)} "
            "(Cannot broadcast the tensordict to it: its batch dims must match or be 1, and extra "
            "leading dims must be 1)"
        )
    n = len(td.batch_size)
    get = td._getter()
    append = writes.append
    advanced = _advanced(index)  # torch's index_put refuses a cast: dtypes are checked too
    for key, src in value._items_str():
        dest = get(key, NO_DEFAULT)
        if type(dest) is Tensor and type(src) is Tensor:  # the common case, checked tightly
            if advanced and dest.dtype != src.dtype:
                raise _dtype_error((*prefix, key), src, dest)
            # same feature shape; 0 or 1 feature dims (most leaves) need no slicing
            ds, ss = dest.shape, src.shape
            k = len(ds) - n
            if k == len(ss) - nv and (
                k == 0 or (ds[-1] == ss[-1] and (k == 1 or ds[n:] == ss[nv:]))
            ):
                append((dest, src))
                continue
        if is_unbatched(dest):  # outside the batch dims: a row holds all of it, as upstream
            if not isinstance(src, Tensor) or src.shape != dest.shape:
                raise BatchSizeError(
                    f"cannot write {_what(src)} into the unbatched entry {(*prefix, key)!r} of "
                    f"shape {list(dest.shape)}: a row holds all of it, so the shapes must match"
                )
            later.append((td, key, src, WHOLE))
        elif isinstance(dest, Tensor):
            if not isinstance(src, Tensor):
                raise TypeError(
                    f"cannot write a {type(src).__name__} into tensor entry {(*prefix, key)!r}"
                )
            if advanced and dest.dtype != src.dtype:
                raise _dtype_error((*prefix, key), src, dest)
            feat = dest.shape[n:]
            if feat != src.shape[nv:] and src.ndim > nv and not fits(src.shape, sub + feat):
                raise BatchSizeError(
                    f"cannot write entry {(*prefix, key)!r} of shape {list(src.shape)} into shape "
                    f"{list(dest.shape)} at index {index!r}"
                )
            writes.append((dest, src))
        elif dest is NO_DEFAULT:
            if td._is_locked:
                raise LockedError(
                    f"Cannot modify locked TensorDict: cannot add key {(*prefix, key)!r} through an indexed write"
                )
            later.append((td, key, src, nv))
        elif is_nt(dest):
            later.append((td, key, src, -1))
        else:
            if not is_td(src):
                raise TypeError(
                    f"cannot write a {type(src).__name__} into TensorDict entry {(*prefix, key)!r}"
                )
            if is_stack(dest):  # a lazy stack's reads are copies: it plans writes into its members
                later.append((dest._plan_setitem(index, src), key, src, COMMIT))
                continue
            _plan_sub(dest, src, sub, index, (*prefix, key), writes, later)


def fits(shape: Sequence[int], slot: Sequence[int]) -> bool:
    """Whether a value of `shape` can be written into `slot`, as torch's `t[index] = value`.

    The shapes broadcast right-aligned to `slot`; dims of `shape` beyond `slot`'s
    rank must be leading ones (`t[i] = img[None]` works).
    """
    extra = len(shape) - len(slot)
    if extra > 0:
        if any(d != 1 for d in shape[:extra]):
            return False
        shape = shape[extra:]
    return broadcast_shape(shape, slot) == torch.Size(slot)


def batch_fits(batch_size: Sequence[int], sub: Sequence[int]) -> bool:
    """Whether a TensorDict of `batch_size` can be written where the batch size is `sub`.

    Its leading dims broadcast to `sub` (any further dims are its own), or it
    `fits` `sub` as a tensor would (fewer dims, or extra leading ones).
    """
    n = len(sub)
    if len(batch_size) >= n and broadcast_shape(batch_size[:n], sub) == torch.Size(sub):
        return True
    return fits(batch_size, sub)


def _advanced(index: Any) -> bool:
    """Whether `index` holds an index tensor (a write through it is torch's `index_put`)."""
    if isinstance(index, Tensor):
        return True
    return type(index) is tuple and any(isinstance(i, Tensor) for i in index)


def _dtype_error(key: tuple[str, ...], src: Tensor, dest: Tensor) -> DTypeError:
    return DTypeError(
        f"cannot write entry {key if len(key) > 1 else key[0]!r} of dtype {src.dtype} "
        f"into dtype {dest.dtype} through an index tensor (torch's index_put does not "
        f"cast): convert the value first, e.g. value.to({dest.dtype})"
    )


# `later`'s marker for a write a nested lazy stack planned itself: `(commit, key, src, COMMIT)`
COMMIT = -2
# `later`'s marker for an unbatched entry, written whole: `(td, key, src, WHOLE)`
WHOLE = -3


def _what(src: Any) -> str:
    return f"a value of shape {list(src.shape)}" if isinstance(src, Tensor) else type(src).__name__


def _apply_plan(
    writes: list[tuple[Tensor, Any]],
    later: list[tuple[TensorDictContract, str, Any, int]],
    index: Any,
    sub: torch.Size,
    single: tuple[int, torch.Tensor] | None = None,
) -> None:
    if single is not None:
        d, positions = single
        for dest, src in writes:
            try:
                dest.index_copy_(d, positions, src)
            except RuntimeError:  # needs broadcasting or a cast: index_copy_ checks before writing
                dest[index] = src
    else:
        for dest, src in writes:
            dest[index] = src
    for td, key, src, nv in later:
        if nv == COMMIT:  # the planned writes of a nested lazy stack
            commit: Any = td
            commit()
            continue
        if nv == WHOLE:
            td._get_str(key).copy_(src)
            continue
        if nv < 0:  # an existing non-tensor leaf: replace it with the updated values
            dest = td._get_str(key)
            td._set_str(key, dest._set_at(index, src if is_nt(src) else NonTensorData(src, ())))
            continue
        dest = _allocate(td, src, nv)  # lazy pre-allocation on first write
        td._set_str(key, dest)
        if isinstance(dest, Tensor):
            dest[index] = src
        elif is_nt(dest):
            td._set_str(key, dest._set_at(index, src))
        else:
            writes_: list[tuple[Tensor, Any]] = []
            later_: list[tuple[TensorDictContract, str, Any, int]] = []
            _plan_sub(dest, src, sub, index, (key,), writes_, later_)
            _apply_plan(writes_, later_, index, sub)


def _allocate(td: TensorDictContract, src: Any, nv: int) -> Any:
    """An empty entry of `td`'s batch size shaped like `src` beyond its `nv` batch dims."""
    bs = td.batch_size
    if isinstance(src, Tensor):
        return torch.zeros(bs + src.shape[nv:], dtype=src.dtype, device=td.device or src.device)
    if is_nt(src):  # one value: it fills the new entry (as upstream); several: None
        shape = bs + src.batch_size[nv:]  # feature dims past the batch are kept, as for tensors
        return NonTensorData(src.data if isinstance(src, NonTensorData) else None, shape, td.device)
    return td._new({}, bs + src.batch_size[nv:])
