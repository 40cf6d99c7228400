"""`TensorDictBase`: the public API, written once over a few primitives.

A concrete class provides the storage primitives (`_get_str`, `_set_str`,
`_del_str`, `_keys_str`, `_items_str`, `_values_str`), `batch_size`,
`device`, `_new` (build a result from an entry dict without validation) and
the lock flag. Everything else lives here or in the op-family modules it
delegates to (`_index`, `_shape`, `_apply`, `_structure`, `_stack`).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping
from typing import Any

import numpy as np
import torch

from td_core._core.contract import TensorDictContract, dense, provided
from td_core._core.keys import KeysView, NestedKey, TopKeysView, unravel_key
from td_core._core.traverse import is_nt, is_stack, is_td
from td_core._core.utils import NO_DEFAULT, as_device, leaf_shape
from td_core._io.consolidate import ConsolidateMixin
from td_core._io.convert_to import ConvertMixin
from td_core._io.formats import InterchangeMixin
from td_core._io.memmap import MemmapMixin
from td_core._io.pack import PackMixin
from td_core._io.repr import td_repr
from td_core._io.repr_compact import with_compact
from td_core._io.tables import TabularMixin
from td_core._kinds.base_read import _ABSENT_KEY, ReadMixin
from td_core._leaves.linked_list import linked_values
from td_core._leaves.lists import read_list
from td_core._leaves.nontensor import NonTensorData
from td_core._leaves.unbatched import is_unbatched
from td_core._ops.apply import ApplyMixin, to_device
from td_core._ops.apply import to as to_
from td_core._ops.autograd import AutogradMixin
from td_core._ops.casts import CastMixin
from td_core._ops.compat import CompatMixin
from td_core._ops.dict_methods import MappingMixin
from td_core._ops.index import IndexingMixin
from td_core._ops.masked import MaskedMixin
from td_core._ops.names import (
    NamesMixin,
    adopt_names,
    carry_index_names,
    inherit_names,
    named_entry,
)
from td_core._ops.pointwise import PointwiseMixin
from td_core._ops.rearrange import LayoutMixin
from td_core._ops.reductions import ReductionMixin
from td_core._ops.shape import ShapeMixin
from td_core._ops.stack import StackMixin
from td_core._ops.structure import StructureMixin
from td_core._ops.torch_function import TORCH_FUNCTIONS
from td_core._ops.views import ViewsMixin, moved_back, remember
from td_core._parallel.collectives import CollectivesMixin
from td_core._parallel.dataloader import DataLoaderMixin
from td_core._parallel.distributed import PipeMixin
from td_core._parallel.p2p import PointToPointMixin
from td_core._parallel.workers import WorkersMixin
from td_core.errors import (
    BatchSizeError,
    KeyNotFoundError,
    LockedError,
    TruthValueError,
    _locked_new_key,
)

__all__ = ["TensorDictBase"]

Tensor = torch.Tensor
_SCALARS = (bool, int, float, complex, np.generic)


class TensorDictBase(
    ReadMixin,
    IndexingMixin,
    ShapeMixin,
    ApplyMixin,
    StructureMixin,
    PointwiseMixin,
    CastMixin,
    ReductionMixin,
    MaskedMixin,
    LayoutMixin,
    AutogradMixin,
    ConvertMixin,
    ViewsMixin,
    MappingMixin,
    NamesMixin,
    ConsolidateMixin,
    DataLoaderMixin,
    CollectivesMixin,
    PointToPointMixin,
    PipeMixin,
    StackMixin,
    InterchangeMixin,
    MemmapMixin,
    TabularMixin,
    PackMixin,
    WorkersMixin,
    CompatMixin,
    TensorDictContract,
):
    """Base of every TensorDict-like container; see `td_core.TensorDict`."""

    __slots__ = ()
    _td_collection = True
    _is_non_tensor = False

    def __class_getitem__(cls, params: Any) -> types.GenericAlias:
        """`TensorDict[str, Tensor]` in annotations, as upstream allows (a typing alias only)."""
        return types.GenericAlias(cls, params)

    # ------------------------------------------------------------------ metadata
    def size(self, dim: int | None = None) -> torch.Size | int:
        """The batch size, or its `dim`-th entry."""
        return self.batch_size if dim is None else self.batch_size[dim]

    @property
    def is_locked(self) -> bool:
        """Whether writes that add, replace or delete entries raise `LockedError`."""
        return self._is_locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        if value:
            self.lock_()
        else:
            self.unlock_()

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str or (
            type(index) is tuple and index and isinstance(index[0], (str, tuple))
        ):
            value = self.get(index, _ABSENT_KEY)
            if value is _ABSENT_KEY:  # td[key] raises whatever set_get_defaults_to_none says
                value = self._get_strict(index)
            return linked_values(value, self, index) if is_nt(value) else value
        names = self._raw_names()
        if names is None:
            return self._index(index)
        return carry_index_names(self, self._index(index), index)

    def __contains__(self, key: object) -> bool:
        return key in self.keys(include_nested=True)

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> KeysView:
        """The keys; nested ones as tuples with `include_nested=True`.

        Args:
            include_nested: also list the keys of sub-TensorDicts, as tuples.
            leaves_only: only keys of leaves (tensors, unless `is_leaf` says otherwise).
            is_leaf: a predicate on the entry's class deciding what is a leaf.
            sort: sort the keys (nested keys by their dotted form).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2), "b": {"c": torch.zeros(2)}}, [2])
            >>> list(td.keys(include_nested=True))  # a sub-TensorDict after its keys, as upstream
            ['a', ('b', 'c'), 'b']
            >>> ("b", ("c",)) in td.keys(include_nested=True)
            True
        """
        if include_nested or leaves_only or sort or is_leaf is not None:
            return KeysView(self, include_nested, leaves_only, is_leaf, sort)
        return TopKeysView(self)

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> Iterator[Any]:
        """The entries, in the order of `keys` with the same arguments."""
        if not include_nested and not leaves_only and not sort:
            return iter(self._values_str())  # no generator frame on the common call
        if is_leaf is None and not sort:
            return iter(
                [value for _, value in KeysView(self, include_nested, leaves_only, None).items()]
            )
        return (self.get(key) for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort))

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> Iterator[tuple[Any, Any]]:
        """`(key, entry)` pairs, in the order of `keys` with the same arguments."""
        if not include_nested and not leaves_only and not sort:
            return iter(self._items_str())  # no generator frame on the common call
        if is_leaf is None and not sort:
            return iter(KeysView(self, include_nested, leaves_only, None).items())
        return (
            (key, self.get(key))
            for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort)
        )

    def __len__(self) -> int:
        return self.batch_size[0] if self.batch_size else 0

    def __iter__(self) -> Iterator[TensorDictBase]:
        if not self.batch_size:
            raise TypeError(
                "iteration over a TensorDict with empty batch_size; iterate over keys() instead"
            )
        return iter(self.unbind(0))

    def __bool__(self) -> bool:
        raise TruthValueError(
            f"Converting a tensordict to boolean value is not permitted: the truth value of a "
            f"{type(self).__name__} with keys {sorted(self._keys_str())} is ambiguous; use "
            "(a == b).all() or .any() to reduce a comparison, .is_empty() to test for leaves"
        )

    def is_empty(self) -> bool:
        """Whether the TensorDict holds no leaf (sub-TensorDicts may exist but are empty)."""
        return not any(
            True for _ in self.keys(include_nested=True, leaves_only=True, is_leaf=_any_leaf)
        )

    __hash__ = object.__hash__

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        handler = TORCH_FUNCTIONS.get(func)
        if handler is None:
            return NotImplemented
        return handler(*args, **(kwargs or {}))

    @with_compact
    def __repr__(self) -> str:
        return td_repr(self)

    # ------------------------------------------------------------------ writing
    def set(
        self, key: NestedKey, item: Any, inplace: bool = False, *, non_blocking: bool = False
    ) -> TensorDictBase:
        """Write `item` at `key`; nested keys create missing sub-TensorDicts.

        Args:
            inplace: copy into the existing entry if there is one (else write a
                new one): the fault-tolerant version of `set_`.

        Raises:
            BatchSizeError: (a `RuntimeError` and `ValueError`) if the
                leading dims of `item` are not the batch size.
            LockedError: if the TensorDict is locked and the write is not in place.
        """
        if type(key) is not str:
            key = unravel_key(key)
            if isinstance(key, tuple):
                self._parent_for(key, create=True)._set_leaf(key[-1], item, inplace, key)
                return self
        self._set_leaf(key, item, inplace, key)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str or (
            type(index) is tuple and index and isinstance(index[0], (str, tuple))
        ):
            self.set(index, value)
        else:
            self._setitem_index(index, value)

    def set_(self, key: NestedKey, item: Any, *, non_blocking: bool = False) -> TensorDictBase:
        """Copy `item` into the existing entry at `key` (in place; allowed when locked).

        Raises `KeyError` if there is no such entry.
        """
        key = unravel_key(key)
        td = self if isinstance(key, str) else self._parent_for(key, create=False)
        leaf_key = key if type(key) is str else key[-1]
        dest = td._get_str(leaf_key, NO_DEFAULT)
        if dest is NO_DEFAULT:
            where = (  # upstream's words for a lazy stack
                "setting a value in-place on a stack of TensorDict needs an existing entry"
                if is_stack(td)
                else "set_ needs an existing entry"
            )
            raise KeyNotFoundError(
                f"{where}, but key {key!r} not found in {type(td).__name__} with keys "
                f"{sorted(td._keys_str())}; use set() to add it"
            )
        td._copy_into(leaf_key, dest, item, key)
        return self

    def setdefault(self, key: NestedKey, default: Any, inplace: bool = False) -> Any:
        """The entry at `key`; `default` is written there first if it is missing."""
        if key not in self.keys(include_nested=True):
            self.set(key, default, inplace=inplace)
        return self.get(key)

    def pop(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """Remove the entry at `key` and return it (or `default` if missing)."""
        try:
            value = self._get_strict(key)
        except KeyError as err:
            if default is NO_DEFAULT:
                raise KeyNotFoundError(
                    f"You are trying to pop key {unravel_key(key)!r}, which is not in the "
                    f"{type(self).__name__} ({err.args[0] if err.args else err}); pop(key, default) "
                    "returns the default instead"
                ) from err
            return default
        self.del_(key)
        return value

    def del_(self, key: NestedKey) -> TensorDictBase:
        """Delete the entry at `key`."""
        key = unravel_key(key)
        td = self if isinstance(key, str) else self._parent_for(key, create=False)
        leaf_key = key if type(key) is str else key[-1]
        if td._is_locked:
            raise LockedError(
                f"Cannot modify locked TensorDict: cannot delete key {key!r} (unlock_() it first)"
            )
        if leaf_key not in td._keys_str():
            raise (
                td._missing(leaf_key) if td is self else KeyNotFoundError(f"key {key!r} not found")
            )
        td._del_str(leaf_key)
        return self

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    # ---------------------------------------------------------------- internals
    def _getter(self) -> Callable[[str, Any], Any]:
        """`_get_str`, or a faster callable doing the same, for loops over many keys."""
        return self._get_str

    def _parent_for(self, key: tuple[str, ...], *, create: bool) -> TensorDictBase:
        """The sub-TensorDict holding `key[-1]`, created (empty) if missing and `create`."""
        td = self
        for i, part in enumerate(key[:-1]):
            sub = td._get_str(part, NO_DEFAULT)
            if sub is NO_DEFAULT:
                if not create:
                    raise KeyNotFoundError(f"key {key!r} not found: {key[: i + 1]!r} is missing")
                if td._is_locked:
                    raise LockedError(
                        f"Cannot modify locked TensorDict: cannot create {key[: i + 1]!r}"
                    )
                td._set_str(part, td._new({}, td.batch_size))
                sub = td._get_str(part)  # re-read: a lazy stack hands back a view of its members
            elif not is_td(sub):
                raise KeyError(
                    f"cannot reach key {key!r}: {key[: i + 1]!r} is a leaf, not a TensorDict"
                )
            td = sub
        return td

    def _set_leaf(self, key: str, item: Any, inplace: bool, full_key: NestedKey) -> None:
        if inplace:
            dest = self._get_str(key, NO_DEFAULT)
            if dest is not NO_DEFAULT:
                self._copy_into(key, dest, item, full_key)
                return
        if self._is_locked:
            raise _locked_new_key(full_key)
        self._set_str(key, self._validate(item, full_key))

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: NestedKey) -> None:
        if isinstance(dest, Tensor):
            if not isinstance(item, Tensor):
                item = torch.as_tensor(item, device=dest.device)
            if item.shape[: len(self.batch_size)] != self.batch_size and item.ndim >= len(
                self.batch_size
            ):
                raise BatchSizeError(
                    f"Failed to update {full_key!r}: cannot copy a value of shape "
                    f"{list(item.shape)} into its entry of shape {list(dest.shape)}"
                )
            try:
                dest.copy_(item)
            except RuntimeError as err:
                raise BatchSizeError(
                    f"Failed to update {full_key!r}: cannot copy a value of shape "
                    f"{list(item.shape)} into its entry of shape {list(dest.shape)}"
                ) from err
        elif is_td(dest):
            dest.update_(item)
        elif not dest._write_(item.data if is_nt(item) else item):
            # plain non-tensor leaves are immutable values: replace this one
            self._set_str(key, self._validate(item, full_key))

    def _validate(self, value: Any, key: NestedKey, *, adopt: bool = True) -> Any:
        """`value` converted to an entry and checked against the batch size and device.

        A sub-TensorDict set in an unnamed container names its dims (`adopt`); a
        caller that validates several entries before writing any (`update`) passes
        `adopt=False` and names the container once the entries are written.
        """
        bs = self.batch_size
        if isinstance(value, Tensor):
            if type(value) is not Tensor and is_unbatched(value):  # any shape: no batch dims
                value = value.with_batch_size(bs)
            elif value.is_nested:  # a strided nested tensor has no `shape`
                if leaf_shape(value)[: len(bs)] != bs:
                    raise self._shape_error(key, leaf_shape(value))
            elif value.shape[: len(bs)] != bs:
                raise self._shape_error(key, value.shape)
            device = self.device
            if device is not None and value.device != device:
                value = value.to(device)
            return value
        cls = type(value)
        if getattr(cls, "_td_collection", False):
            if cls._is_non_tensor:
                if value.batch_size == bs:
                    return value
                if isinstance(value, NonTensorData):
                    return NonTensorData(value.data, bs, value.device)
                if value.batch_size[: len(bs)] == bs:
                    return value  # a stack with dims past the batch, as a tensor has
                raise self._shape_error(key, value.batch_size)
            if value.batch_size[: len(bs)] != bs:
                value = self._widened(value, key)
            device = self.device
            if device is not None and value.device != device:
                value = value.to(device)
            names = self._raw_names()
            if names is None:  # an unnamed container takes the names of what it holds
                if adopt:
                    adopt_names(self, value)
                return value
            return named_entry(names, value, key)
        if isinstance(value, Mapping):
            return self._new_validated(value, bs, key)
        if isinstance(value, (list, tuple)):
            entry = read_list(value, bs, self.device)
            return self._validate(entry, key) if not is_nt(entry) else entry
        if isinstance(value, (np.ndarray, *_SCALARS)):
            if isinstance(value, np.ndarray) and value.dtype.kind in "OUSV":
                return NonTensorData(value, bs, self.device)
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                value = value.copy()  # a tensor over read-only memory would be unsafe to write
            try:
                tensor = torch.as_tensor(value, device=self.device)
            except (TypeError, ValueError, RuntimeError):
                return NonTensorData(value, bs, self.device)
            return self._validate(tensor, key)
        return NonTensorData(value, bs, self.device)

    def _widened(self, value: Any, key: NestedKey) -> Any:
        """A shallow copy of the TensorDict `value` with this batch size, which its batch size
        starts and all its leaves allow (as upstream); else the batch-size error."""
        bs, own = self.batch_size, value.batch_size
        reason: Exception | None = None
        if len(own) < len(bs) and bs[: len(own)] == own:
            copy = value.clone(recurse=False)
            try:
                copy.batch_size = bs
            except (RuntimeError, ValueError, TypeError) as err:
                reason = err
            else:
                return copy
        error = self._shape_error(key, own, what="batch_size")
        if reason is not None and error.args:  # say which entry kept it from widening
            error.args = (f"{error.args[0]} It cannot be widened to it: {reason}", *error.args[1:])
        raise error

    def _new_validated(
        self, source: Mapping[str, Any], batch_size: torch.Size, key: NestedKey
    ) -> TensorDictBase:
        return dense(source, batch_size, self.device)

    def _new(self, source: dict[str, Any], batch_size: torch.Size, device: Any = NO_DEFAULT) -> Any:
        """A plain TensorDict of `source` (entries already valid) carrying this one's names."""
        return inherit_names(
            self,
            provided("TensorDict")._new_unsafe(
                source, batch_size, self.device if device is NO_DEFAULT else device
            ),
        )

    def _shape_error(
        self, key: NestedKey, shape: torch.Size, what: str = "shape"
    ) -> BatchSizeError:
        return BatchSizeError(
            f"key {key!r}: batch dimension mismatch, got self.batch_size={self.batch_size} and "
            f"value.shape={torch.Size(shape)}; its {what} {list(shape)} must start with the "
            f"batch_size {list(self.batch_size)}. Python scalars become 0-d tensors: expand them "
            "to the batch size, or wrap the value in NonTensorData."
        )

    # ------------------------------------------------------------------ devices
    def to(self, *args: Any, **kwargs: Any) -> TensorDictBase:
        """Move and/or cast every tensor leaf, like `torch.Tensor.to`.

        Accepts a device, a dtype, both, a tensor (take its device and dtype),
        `non_blocking`, or a TensorDict from `attrs()`: each leaf then moves to
        the device and dtype recorded at its key (the result has no device).
        """
        if len(args) == 1 and not kwargs and type(args[0]) is str:  # `td.to("cuda:0")`
            device = as_device(args[0])
            if device == self.device:  # already there: itself, as upstream
                return self
            if device is not None:  # (a string always names one): parsed once
                return remember(self, to_device(self, device), moved_back)
        return remember(
            self, to_(self, *args, **kwargs), moved_back
        )  # `with td.to(d):` writes back

    def cpu(self) -> TensorDictBase:
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> TensorDictBase:
        return self.to(torch.device("cuda") if device is None else torch.device("cuda", device))

    def clear_device_(self) -> TensorDictBase:
        """Forget the device (entries stay where they are)."""
        self._set_device(None)
        for value in self._subtrees():
            value.clear_device_()
        return self

    def _subtrees(self) -> list[TensorDictBase]:
        """The sub-TensorDicts this container holds directly (a lazy stack: its members)."""
        return [value for value in self._values_str() if is_td(value)]

    def _key_items(self) -> Collection[tuple[str, Any]]:
        """`(key, value)` pairs for walking keys: a value's type and sub-keys are read, never
        its data (a lazy stack gives a member's leaf rather than stacking it)."""
        return self._items_str()

    def _key_nodes(self) -> Collection[tuple[str, Any]]:
        """`(key, value)` pairs for the key walks with the default `is_leaf` (`keys()`, its
        `len`): a value's class is read, and a subtree's own `_key_nodes()`; a lazy stack
        gives its members' sub-TensorDicts for a nested entry rather than stacking them."""
        return self._key_items()

    def _set_device(self, device: Any) -> None:
        raise TypeError(f"{type(self).__name__} does not support changing its device")

    def _get_sub_tensordict(self, idx: Any) -> TensorDictBase:
        """A write-through view of this TensorDict at `idx` (compatibility shim).

        Upstream's private name, which downstream libraries and upstream's
        tests call; td's `SubTensorDict` documents the semantics: reads index
        this TensorDict on every access, writes (new keys included) land here.
        """
        return provided("SubTensorDict")(self, idx)

    # ---------------------------------------------------------------- modules
    def to_module(
        self,
        module: Any,
        *,
        inplace: bool | None = None,
        return_swap: bool = True,
        swap_dest: TensorDictBase | None = None,
        use_state_dict: bool = False,
        non_blocking: bool = False,
        preserve_module_state: bool = True,
    ) -> Any:
        """Write these tensors into `module`'s parameters and buffers (see `td_core.to_module`).

        Returns what was replaced, a TensorDict that restores it when used as a
        context manager: `with params.to_module(model): model(x)`.
        """
        return provided("to_module")(
            self,
            module,
            inplace=inplace,
            return_swap=return_swap,
            swap_dest=swap_dest,
            use_state_dict=use_state_dict,
            non_blocking=non_blocking,
            preserve_module_state=preserve_module_state,
        )


def _any_leaf(cls: type) -> bool:
    return not getattr(cls, "_td_collection", False) or getattr(cls, "_is_non_tensor", False)


# as upstream (a `MutableMapping` subclass): `isinstance(td, Mapping)` holds, so code that
# takes any mapping (`nn.Module.load_state_dict(td)`, ...) takes a TensorDict
MutableMapping.register(TensorDictBase)
