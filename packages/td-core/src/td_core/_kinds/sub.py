"""`SubTensorDict`: a write-through view of a TensorDict at an index.

`td._get_sub_tensordict(idx)` (upstream's private name, kept as a
compatibility shim) returns one. Unlike `td[idx]`, which builds a new
TensorDict, the view keeps no entries of its own:

- a read indexes the source's entry on every access (`source[key][idx]`),
  so it never goes stale when the source changes;
- a write goes into the source: an existing leaf is written in place at
  `idx`; a new key gets a zero-filled leaf of the source's batch size in
  the source, then the value at `idx` (the rest of the source stays zero);
- a delete removes the key from the source.

With a basic index (ints, slices, `None`, `...`) the leaves read are views,
so in-place tensor ops write through too. With an advanced index (tensors,
lists, masks) a read is a copy: in-place ops run on the copies and the
results are written back at `idx` (pointwise ops, `zero_`, `fill_`,
`apply_`, `copy_`, `update_` all go through the write primitives).

Where the source's own reads are copies (a lazy stack, an HDF5 file), every
write goes through the source's indexed write (`source[idx] = ...`) and
in-place ops run on a copy that is written back, as for an advanced index.
Writing an existing tensor entry is always an in-place write into the source,
so it is allowed on a locked source (as `set_` is).

Shape changes (`view`, `permute`, `squeeze`, ...) raise `NotDenseError` (the
result could not write through), except under `set_lazy_legacy(True)`, where
they give lazy views of this one. `reshape` gives a dense copy. The lock state
is the source's: a view cannot be locked or unlocked alone.
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.contract import provide
from td_core._core.traverse import _batched, is_nt, is_td, stack_parts
from td_core._core.utils import NO_DEFAULT
from td_core._kinds.base import TensorDictBase
from td_core._kinds.pytree import register
from td_core._kinds.write_back import CopyBackMixin
from td_core._leaves.nontensor import NonTensorStack
from td_core._ops.index import indexed_shape, normalize_index
from td_core._ops.names import index_names
from td_core.errors import BatchSizeError, LockedError

__all__ = ["SubTensorDict"]

Tensor = torch.Tensor


def _is_basic(index: tuple[Any, ...]) -> bool:
    return all(item is None or isinstance(item, (int, slice)) for item in index)


def reads_copies(td: Any) -> bool:
    """Whether reading a leaf of `td` gives a copy rather than a view of its memory
    (a view at an advanced index, a lazy stack, a kind whose class says `_file_backed`)."""
    return (
        bool(td._reads_are_copies)
        or stack_parts(td) is not None
        or bool(getattr(type(td), "_file_backed", False))
    )


class SubTensorDict(CopyBackMixin):
    """A view of `source` at the batch index `idx` that reads from and writes into `source`.

    Args:
        source: the TensorDict viewed.
        idx: an index over `source`'s batch dims, as for `source[idx]`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> td = TensorDict({"a": torch.zeros(3, 2)}, [3])
        >>> sub = td._get_sub_tensordict(1)
        >>> sub["b"] = torch.ones(2)
        >>> td["b"]
        tensor([[0., 0.],
                [1., 1.],
                [0., 0.]])
    """

    def __init__(self, source: TensorDictBase, idx: Any) -> None:
        if not is_td(source) or is_nt(source):
            raise TypeError(f"a sub-TensorDict views a TensorDict, got {type(source).__name__}")
        index = normalize_index(idx, source.batch_size)
        self._source = source
        self._idx: Any = index[0] if len(index) == 1 else index
        # the source's leaves are its memory: `leaf[idx] = value` writes into it
        self._source_views = not reads_copies(source)
        self._basic = _is_basic(index) and self._source_views
        self._reads_are_copies = not self._basic
        self._batch_size = indexed_shape(source.batch_size, index)

    _writes_through = True
    _view_name = "a sub-TensorDict view"
    _view_arg_key = "idx"
    _names_refusal = (
        "Names of a subtensordict cannot be modified: a sub-TensorDict view's dim names are its "
        "source's. Instantiate it as a TensorDict first (to_tensordict()), or name the source's dims."
    )

    # ---------------------------------------------------------------- metadata
    @property
    def idx(self) -> Any:
        """The index into `source`'s batch dims."""
        return self._idx

    @property
    def _view_arg(self) -> Any:
        return self._idx

    @property
    def _batch_rule(self) -> str:
        return "a sub-TensorDict's batch size follows its index into the source"

    @property
    def _is_locked(self) -> bool:
        return self._source._is_locked

    @_is_locked.setter
    def _is_locked(self, value: bool) -> None:
        if value != self._source._is_locked:
            what = "lock" if value else "unlock"
            raise RuntimeError(
                f"Cannot {what} a sub-TensorDict view: its lock is its source's. "
                f"{what.capitalize()} the parent tensordict instead."
            )

    def _raw_names(self) -> Any:
        names = self._source._raw_names()
        return None if names is None else index_names(names, self._idx)

    def _store_names(self, names: Any) -> None:
        if names is not None and any(n is not None for n in names):
            raise self._names_error()

    def is_contiguous(self) -> bool:
        """Always False: the entries are views of (or copies from) the source."""
        return False

    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> Any:
        """A plain TensorDict holding a copy of the viewed entries (`inplace=True` is refused)."""
        if inplace:
            raise NotImplementedError(
                "contiguous(inplace=True) is not supported on a SubTensorDict (a view of its "
                "source); use contiguous(), which returns a TensorDict"
            )
        return self.to_tensordict().contiguous(canonical=canonical)

    def memmap_(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: the leaves are views into the source, which would have to move."""
        raise RuntimeError(
            "Converting a sub-tensordict values to memmap cannot be done in place: its leaves "
            "are views of the source; call memmap_() on the source, or memmap() for a copy"
        )

    def get_parent_tensordict(self) -> TensorDictBase:
        """The source TensorDict (upstream's name for `source`)."""
        return self._source

    # ---------------------------------------------------------------- reading
    def _view(self, value: Any) -> Any:
        if type(value) is Tensor or (isinstance(value, Tensor) and _batched(value)):
            return value[self._idx]
        if value._is_non_tensor:  # non-tensor data and unbatched tensors
            idx = self._idx
            return value._map_batch(lambda t: t[idx], self._batch_size, self._source.batch_dims)
        return SubTensorDict(value, self._idx)

    # ---------------------------------------------------------------- writing
    def _set_leaf(self, key: str, item: Any, inplace: bool, full_key: Any) -> None:
        current = self._source._get_str(key, NO_DEFAULT)
        if self._is_locked and isinstance(current, Tensor) and isinstance(item, Tensor):
            # an existing tensor entry is written in place at the index: allowed when
            # the source is locked, as set_() is (the source's structure stays as it is)
            self._write(key, current, self._validate(item, full_key))
            return
        TensorDictBase._set_leaf(self, key, item, inplace, full_key)

    def _set_str(self, key: str, value: Any) -> None:
        source = self._source
        current = source._get_str(key, NO_DEFAULT)
        if current is NO_DEFAULT:
            current = self._allocate(key, value)
        self._write(key, current, value)

    def _allocate(self, key: str, value: Any) -> Any:
        """A new source entry for `key` that `value` can be written into at the index."""
        source = self._source
        if source._is_locked:
            raise LockedError(
                f"cannot set key {key!r}: the sub-TensorDict's source is locked (unlock_() it first)"
            )
        outer = source.batch_size
        if isinstance(value, Tensor):
            entry: Any = value.new_zeros((*outer, *value.shape[self.batch_dims :]))
        elif getattr(type(value), "_is_stack", False):
            # a value per element: the source's other elements hold None, as upstream
            entry = NonTensorStack._filled(None, outer, value.device)
            source._set_str(key, entry)
            return entry
        elif is_nt(value):
            entry = source._validate(value, key)  # the value over the source's batch size
            source._set_str(key, entry)
            return entry
        else:
            entry = source._new({}, torch.Size((*outer, *value.batch_size[self.batch_dims :])))
        source._set_str(key, source._validate(entry, key))
        return source._get_str(key)

    def _write(self, key: str, current: Any, value: Any) -> None:
        if isinstance(current, Tensor):
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot write a {type(value).__name__} into the tensor leaf {key!r} "
                    "through a sub-TensorDict view"
                )
            expected = indexed_shape(current.shape, _as_tuple(self._idx))
            if value.shape != expected:
                raise BatchSizeError(
                    f"cannot set key {key!r} through a sub-TensorDict view: a value of shape "
                    f"{list(value.shape)} replacing an entry of shape {list(expected)} is "
                    "prohibited for existing tensors (a view writes into its source in place); "
                    "clone the view with to_tensordict() to change shapes"
                )
            if self._source_views:
                current[self._idx] = value
            else:  # the leaf read was a copy: the source writes at the index itself
                self._source._setitem_index(
                    self._idx, self._source._new({key: value}, self.batch_size)
                )
        elif is_td(current) and not is_nt(current):
            if not is_td(value):
                raise ValueError(
                    f"Tried to replace a tensordict with a {type(value).__name__} at key {key!r} "
                    "through a sub-TensorDict view; delete the key first"
                )
            sub = SubTensorDict(current, self._idx)
            for k, v in value._items_str():
                sub._set_str(k, v)
        else:  # a non-tensor leaf: the source's own indexed write decides
            self._source._setitem_index(self._idx, self._source._new({key: value}, self.batch_size))

    def _del_str(self, key: str) -> None:
        self._source.del_(key)

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        if self._basic:
            TensorDictBase._copy_into(self, key, dest, item, full_key)
            return
        value = self._validate(item, full_key)
        if isinstance(dest, Tensor) and isinstance(value, Tensor):
            value = value.to(dest.dtype).expand_as(dest) if value.shape != dest.shape else value
        self._set_str(key, value)


def _as_tuple(index: Any) -> tuple[Any, ...]:
    return index if type(index) is tuple else (index,)


provide("SubTensorDict", SubTensorDict)
register(SubTensorDict)
