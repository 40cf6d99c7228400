"""`TensorDict`: the dense container, a plain dict of entries plus a batch size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch.compiler import is_compiling

from td_core._core.contract import provide
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT, as_device, as_size, leaf_shape
from td_core._io.consolidate import pack, unpack
from td_core._io.pickle_pack import pickle_pack, share_per_leaf
from td_core._kinds.base import TensorDictBase
from td_core._kinds.base_read import defaults_to_none
from td_core._kinds.dense_from_dict import lists_as_stacks
from td_core._kinds.pytree import allow_weights_only, register
from td_core._leaves.linked_list import linked_values
from td_core._leaves.nontensor import NonTensorData, NonTensorStack
from td_core._leaves.unbatched import is_unbatched
from td_core._ops.lock_cache import drop
from td_core.errors import BatchSizeError, LockedError, OptionsConflictError, _locked_new_key

__all__ = ["TensorDict", "from_dict"]

_TD = TypeVar("_TD", bound="TensorDict")

Tensor = torch.Tensor
_ABSENT = object()  # `_walk`'s answer for a key a dense TensorDict on the path lacks
_EMPTY_SIZE = torch.Size()  # (immutable: shared by every TensorDict without batch dims)


class TensorDict(TensorDictBase):
    """A dictionary of tensors that behaves like a tensor over its leading (batch) dims.

    Every entry's leading dims equal `batch_size`. Entries are tensors,
    nested TensorDicts (nested dicts are converted), or any other Python value
    (stored as a non-tensor leaf).

    Args:
        source: a mapping of keys to values (nested mappings become nested TensorDicts).
        batch_size: an int, a sequence of ints or a `torch.Size`. Omitted: `[]`.
            `None`: the largest leading shape common to every leaf (see
            `auto_batch_size_`).
        device: if given, every entry is moved there now and when written later.
        lock: lock the result (see `lock_`).
        **kwargs: more entries, as with `dict(**kwargs)`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> td = TensorDict({"obs": torch.zeros(3, 4, 5), "done": torch.zeros(3, 4, dtype=torch.bool)}, batch_size=[3, 4])
        >>> td[..., :2]["obs"].shape
        torch.Size([3, 2, 5])
        >>> td["nested", "key"] = torch.zeros(3, 4)
        >>> td["nested"].batch_size
        torch.Size([3, 4])
    """

    _plain_nodes = True
    _plain_results = False  # True: ops give a plain TensorDict, not this class (see `_new`)
    _caches_when_locked = True
    _view_slot = True  # a view op records its source in `_view_record` (see `_ops.views`)
    __slots__ = (
        "_tensordict",
        "_batch_size",
        "_device",
        "_is_locked",
        "_names",
        "_pending",
        "_view_record",
        "_td_side",  # per-object state kept on the object while torch.compile traces
        "__weakref__",
    )

    def __init__(
        self,
        source: Mapping[Any, Any] | None = None,
        batch_size: Any = NO_DEFAULT,
        device: Any = None,
        names: Sequence[str | None] | None = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        auto = batch_size is None
        if type(batch_size) is torch.Size:  # (a sub-TensorDict built from a nested dict)
            self._batch_size = batch_size
        elif auto or batch_size is NO_DEFAULT or (type(batch_size) is list and not batch_size):
            self._batch_size = _EMPTY_SIZE
        else:
            self._batch_size = as_size(batch_size)
        self._device = None if device is None else as_device(device)
        self._is_locked = False
        self._names: tuple[str | None, ...] | None = None
        self._pending: dict[str, Any] | None = None
        self._tensordict: dict[str, Any] = {}
        if names is not None and not auto:
            # named first, so that each sub-TensorDict is named as this one (on a copy, a
            # clash refused) as `set` does; checked again below against their own dims
            self._set_names(names)
        if source is not None:
            if kwargs:
                raise OptionsConflictError(
                    f"TensorDict: pass the entries either as source or as keyword arguments "
                    f"({sorted(kwargs)}), not both"
                )
            if type(source) is not dict and not isinstance(source, Mapping):
                raise TypeError(
                    f"TensorDict source must be a mapping, got {type(source).__name__}; "
                    "use TensorDict.from_any(...) for other containers"
                )
            if source:
                self._fill(source)
        if kwargs:
            self._fill(kwargs)
        if auto:
            self.auto_batch_size_()
        if names is not None:
            self._set_names(names)
        if lock:
            self.lock_()

    def _fill(self, source: Mapping[Any, Any]) -> None:
        data = self._tensordict
        validate = self._validate
        bs = self._batch_size
        n = len(bs)
        first = bs[0] if n == 1 else -1  # one batch dim (the usual case): no Size slicing
        plain = self._device is None
        for key, value in source.items():
            if plain and type(key) is str and type(value) is Tensor:  # the usual entry
                if not n:  # no batch dims: every tensor fits
                    data[key] = value
                    continue
                try:
                    shape = value.shape
                except RuntimeError:  # a strided nested tensor has none: `validate` checks it
                    data[key] = validate(value, key)
                    continue
                if (shape and shape[0] == first) if first >= 0 else shape[:n] == bs:
                    data[key] = value
                    continue
            if type(key) is not str:
                self.set(key, value)
            elif type(value) is dict:  # a nested dict: what `_validate` makes of a mapping
                data[key] = self._new_validated(value, bs, key)
            else:
                data[key] = validate(value, key)

    @classmethod
    def _new_unsafe(
        cls: type[_TD],
        source: dict[str, Any],
        batch_size: torch.Size,
        device: torch.device | None = None,
    ) -> _TD:
        """Build from entries already known to be valid; no checks, no copies."""
        td = cls.__new__(cls)
        td._tensordict = source
        td._batch_size = batch_size
        td._device = device
        td._is_locked = False
        td._names = None
        td._pending = None
        return td

    @classmethod
    def _from_pytree(
        cls, source: dict[str, Any], batch_size: torch.Size, device: Any
    ) -> TensorDict:
        return cls._new_unsafe(source, batch_size, device)

    def _new(
        self, source: dict[str, Any], batch_size: torch.Size, device: Any = NO_DEFAULT
    ) -> TensorDict:
        # a user's subclass survives every op, as upstream; internal subclasses that
        # carry extra state (`_plain_results`) give plain TensorDicts
        cls = TensorDict if type(self)._plain_results else type(self)
        td = cls.__new__(cls)
        td._tensordict = source
        td._batch_size = batch_size
        td._device = self._device if device is NO_DEFAULT else device
        td._is_locked = False
        names = self._names
        td._names = None if names is None or batch_size != self._batch_size else names
        td._pending = None
        return td

    @classmethod
    def from_dict(
        cls,
        input_dict: Mapping[Any, Any],
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        *,
        auto_batch_size: bool | None = None,
        names: Sequence[str | None] | None = None,
    ) -> TensorDict:
        """A TensorDict from a (nested) mapping.

        Args:
            input_dict: the entries; nested mappings become nested TensorDicts.
            batch_size: the batch size (default: empty, or inferred with `auto_batch_size`).
            device: the device of the result.
            batch_dims: infer the batch size, keeping at most this many dims.
            auto_batch_size: infer the batch size (the longest leading shape
                common to every leaf), as `auto_batch_size_`.
            names: names of the batch dims.

        Raises:
            BatchSizeError: (a `RuntimeError`) if a leaf does not start with `batch_size`.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> TensorDict.from_dict({"a": torch.zeros(3, 4)}, auto_batch_size=True).batch_size
            torch.Size([3, 4])
        """
        if is_td(input_dict):
            if batch_size is None and not auto_batch_size and batch_dims is None:
                batch_size = input_dict.batch_size
            input_dict = input_dict.to_dict()
        if not isinstance(input_dict, Mapping):
            raise TypeError(f"from_dict expects a mapping, got {type(input_dict).__name__}")
        if batch_size is not None and batch_dims is not None:
            raise OptionsConflictError(
                f"from_dict: pass either batch_size ({batch_size!r}) or batch_dims "
                f"({batch_dims!r}), not both"
            )
        if auto_batch_size is None:
            auto_batch_size = batch_dims is not None
        if batch_size is not None:
            out = cls(input_dict, batch_size=batch_size, device=device)
        else:
            out = cls(lists_as_stacks(input_dict) if auto_batch_size else input_dict, device=device)
            if auto_batch_size:
                out.auto_batch_size_(batch_dims)
        if names is not None:
            out._set_names(names)
        return out

    # ---------------------------------------------------------------- primitives
    # Keys added inside a torch.compile'd function go to `_pending` (None otherwise): a
    # mutated entry dict makes Dynamo guard on its length, recompiling once per number of
    # keys. `_pending` is None on entry every time, so its guard never changes; its
    # entries are folded into the entry dict at the next eager access.
    def _sync(self) -> dict[str, Any]:
        pending = self._pending
        if pending is not None and not is_compiling():
            self._tensordict.update(pending)
            self._pending = None
        return self._tensordict

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        """The entry at `key`, or `default` (never raises: callers decide)."""
        value = self._tensordict.get(key, NO_DEFAULT)
        if value is NO_DEFAULT and self._pending is not None:
            value = self._pending.get(key, NO_DEFAULT)
        return default if value is NO_DEFAULT else value

    def is_empty(self) -> bool:
        """Whether the TensorDict holds no leaf (sub-TensorDicts may exist but are empty)."""
        if self._pending is not None:
            return super().is_empty()
        for value in self._tensordict.values():  # the entries as stored: no key iterator
            if type(value) is Tensor or not is_td(value) or not value.is_empty():
                return False
        return True

    def _getter(self) -> Any:
        # nothing held back: the dict's own get has _get_str's semantics, without a Python frame
        return self._get_str if self._pending is not None else self._tensordict.get

    def _set_str(self, key: str, value: Any) -> None:
        if self._is_locked:  # an entry replaced in place (a non-tensor value): see lock_cache
            drop(self)
        entries = self._tensordict
        if key in entries or not is_compiling():  # only a new key, while compiling, is held back
            if self._pending is not None:
                self._sync()
            entries[key] = value
            return
        if self._pending is None:
            self._pending = {}
        self._pending[key] = value

    def _del_str(self, key: str) -> None:
        if self._is_locked:
            drop(self)
        if self._pending is not None and key in self._pending:
            del self._pending[key]
        else:
            del self._tensordict[key]

    def _keys_str(self) -> Any:
        if self._pending is None:
            return self._tensordict.keys()
        if is_compiling():
            return {**self._tensordict, **self._pending}.keys()
        return self._sync().keys()

    def _items_str(self) -> Any:
        if self._pending is None:
            return self._tensordict.items()
        if is_compiling():
            return [*self._tensordict.items(), *self._pending.items()]
        return self._sync().items()

    def _key_nodes(self) -> Any:
        # what the key walks read (see `TensorDictBase._key_nodes`): the stored entries
        if self._pending is None:
            return self._tensordict.items()
        return self._items_str()

    def _values_str(self) -> Any:
        if self._pending is None:
            return iter(self._tensordict.values())
        if is_compiling():
            return [*self._tensordict.values(), *self._pending.values()]
        return self._sync().values()

    # fast paths of the hottest reads
    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Any = None,
        *,
        sort: bool = False,
    ) -> Any:
        if self._pending is None and not (include_nested or leaves_only or sort):
            return self._tensordict.items()  # upstream's live view: len(), no iterator to build
        return TensorDictBase.items(self, include_nested, leaves_only, is_leaf, sort=sort)

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Any = None,
        *,
        sort: bool = False,
    ) -> Any:
        if self._pending is None and not (include_nested or leaves_only or sort):
            return self._tensordict.values()  # as items
        return TensorDictBase.values(self, include_nested, leaves_only, is_leaf, sort=sort)

    def __contains__(self, key: object) -> bool:
        if type(key) is str:
            if key in self._tensordict:  # (entries held back under compile are never here)
                return True
            if self._pending is None:
                return False
        return TensorDictBase.__contains__(self, key)

    def _walk(self, path: tuple[Any, ...], missing: Any = NO_DEFAULT) -> Any:
        """Fast lookup of a flat tuple of str through dense TensorDicts; NO_DEFAULT if it does
        not apply, `missing` where a dense TensorDict on the path lacks the next key."""
        value: Any = self
        for part in path:
            if type(part) is not str:
                return NO_DEFAULT
            try:
                entries = value._tensordict
            except AttributeError:  # a leaf on the path
                return NO_DEFAULT
            if type(entries) is not dict:  # a tensorclass: its TensorDict's own rules
                return NO_DEFAULT
            node, value = value, entries.get(part, NO_DEFAULT)  # (missing: no exception)
            if value is NO_DEFAULT:
                return missing if node._pending is None else NO_DEFAULT
        return value

    def get(
        self,
        key: Any,
        default: Any = NO_DEFAULT,
        *,
        as_list: bool = False,
        as_padded_tensor: bool = False,
        as_nested_tensor: bool = False,
        padding_side: str = "right",
        layout: torch.layout | None = None,
        padding_value: float | int | bool = 0.0,
    ) -> Any:
        if as_list or as_padded_tensor or as_nested_tensor:
            return self._get_ragged(
                key,
                default,
                as_list=as_list,
                as_padded_tensor=as_padded_tensor,
                as_nested_tensor=as_nested_tensor,
                padding_side=padding_side,
                layout=layout,
                padding_value=padding_value,
            )
        if type(key) is str:  # the most frequent key first
            value = self._get_str(key)
            if value is not NO_DEFAULT:
                return value
            if default is NO_DEFAULT:
                if defaults_to_none():
                    return None
                raise self._missing(key)
            return default
        if type(key) is tuple and key and type(key[0]) is str:
            value = self._walk(key, _ABSENT)
            if value is _ABSENT:
                if default is not NO_DEFAULT:
                    return default
                if defaults_to_none():
                    return None
            elif value is not NO_DEFAULT:
                return value
        return TensorDictBase.get(self, key, default)

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:  # the most frequent index first
            try:
                value = self._tensordict[index]
            except KeyError:
                value = self._get_str(index)
                if value is NO_DEFAULT:
                    raise self._missing(index) from None
            if type(value) is Tensor or not is_nt(value):
                return value
            return linked_values(value, self, index)
        if type(index) is tuple and index and type(index[0]) is str:
            value = self._walk(index)
            if value is not NO_DEFAULT and (type(value) is Tensor or not is_nt(value)):
                return value
            if value is not NO_DEFAULT:
                return linked_values(value, self, index)
        elif type(index) is not tuple and self._names is None:  # an int, a slice, a mask, ...
            return self._index(index)  # (what the base does for them, without its checks)
        return TensorDictBase.__getitem__(self, index)

    def set(
        self, key: Any, item: Any, inplace: bool = False, *, non_blocking: bool = False
    ) -> TensorDict:
        if type(key) is tuple and len(key) > 1 and type(item) is Tensor and not inplace:
            parent = self._walk(
                key[:-1]
            )  # dense parents only; anything else takes the general path
            if type(parent) is TensorDict and type(key[-1]) is str:
                parent.set(key[-1], item)
                return self
        if type(key) is str and not inplace and type(item) is Tensor and self._device is None:
            if self._is_locked:
                raise _locked_new_key(key)
            bs = self._batch_size
            if bs:  # (a torch.Size slice costs ~110 ns: one batch dim compares an int)
                try:
                    shape = item.shape
                except RuntimeError:  # a strided nested tensor has none: the general check
                    self._set_str(key, self._validate(item, key))
                    return self
                if shape[0] != bs[0] if len(bs) == 1 and shape else shape[: len(bs)] != bs:
                    raise self._shape_error(key, shape)
            self._set_str(key, item)
            return self
        return TensorDictBase.set(self, key, item, inplace, non_blocking=non_blocking)  # type: ignore[return-value]

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            if self._is_locked:
                raise _locked_new_key(index)
            if type(value) is Tensor and self._device is None:
                bs = self._batch_size
                if bs:  # as in `set`
                    try:
                        shape = value.shape
                    except RuntimeError:  # a strided nested tensor has none (as in `set`)
                        self._set_str(index, self._validate(value, index))
                        return
                    if shape[0] != bs[0] if len(bs) == 1 and shape else shape[: len(bs)] != bs:
                        raise self._shape_error(index, shape)
                self._set_str(index, value)
                return
            self._set_str(index, self._validate(value, index))
            return
        if type(index) is tuple and index and type(index[0]) is str:  # a nested key
            self.set(index, value)  # (what the base does with it, without its checks)
            return
        TensorDictBase.__setitem__(self, index, value)

    # ---------------------------------------------------------------- metadata
    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every entry."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, new_size: Any) -> None:
        self._set_batch_size(as_size(new_size))

    def _set_batch_size(self, size: torch.Size) -> None:
        if size == self._batch_size:  # every entry fits it already
            return
        if self._is_locked:
            raise LockedError("cannot change the batch_size of a locked TensorDict")
        n = len(size)
        updates: dict[str, Any] = {}
        for key, value in self._sync().items():
            if isinstance(value, Tensor):
                if type(value) is not Tensor and is_unbatched(value):
                    updates[key] = value.with_batch_size(size)
                elif leaf_shape(value)[:n] != size:
                    raise BatchSizeError(
                        f"cannot set batch_size {list(size)} because of entry {key!r}: the Tensor "
                        f"{key} has shape {leaf_shape(value)} which is incompatible with the batch-size "
                        f"{size}."
                    )
            elif is_nt(value):
                if value.batch_size[:n] != size:
                    if not isinstance(value, NonTensorData):
                        raise BatchSizeError(
                            f"cannot set batch_size {list(size)}: non-tensor entry {key!r} has batch_size "
                            f"{list(value.batch_size)}"
                        )
                    updates[key] = NonTensorData(value.data, size, value.device)
            elif value.batch_size[:n] != size:
                sub = value.clone(recurse=False) if value._is_locked else value
                try:
                    sub._set_batch_size(size)
                except BatchSizeError as err:
                    raise BatchSizeError(
                        f"cannot set batch_size {list(size)}: in entry {key!r}, {err}"
                    ) from None
                updates[key] = sub
        self._tensordict.update(updates)
        if self._names is not None and len(self._names) != n:
            kept = self._names[:n]
            self._names = (*kept, *(None,) * (n - len(kept))) if any(kept) else None
        self._batch_size = size

    @property
    def device(self) -> torch.device | None:
        """The device every entry lives on, or None if not fixed."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError(
            "the device of a TensorDict cannot be set; use td.to(device) or td.clear_device_()"
        )

    def _set_device(self, device: Any) -> None:
        if self._is_locked:
            drop(self)
        self._device = as_device(device)

    # ---------------------------------------------------------------- pickling
    def __getstate__(self) -> dict[str, Any]:
        packed = pack(self)
        if packed is None and type(self) is TensorDict:  # a small tree pickles faster as one
            packed = pickle_pack(self, (self,), TensorDict)
        if packed is not None:  # consolidated: one buffer, not one copy of it per leaf
            return {"consolidated": packed, **self._meta_state()}
        return self._leaf_state()

    def _leaf_state(self) -> dict[str, Any]:
        """The state leaf by leaf (what processes sharing memory exchange)."""
        return {"source": self._sync(), **self._meta_state()}

    def _meta_state(self) -> dict[str, Any]:
        return {
            "batch_size": tuple(self._batch_size),
            "device": None if self._device is None else str(self._device),
            "locked": self._is_locked,
            "names": self._names,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        relock = "consolidated" in state and state["locked"]  # its skeleton's nodes are not
        if "consolidated" in state:
            state = {**state, "source": dict(unpack(*state["consolidated"])._items_str())}
        self._tensordict = state["source"]
        self._batch_size = torch.Size(state["batch_size"])
        self._device = as_device(state["device"])
        self._is_locked = state["locked"] and not relock
        self._names = state.get("names")
        self._pending = None
        if relock:
            self.lock_()


def from_dict(
    input_dict: Mapping[Any, Any],
    *,
    auto_batch_size: bool | None = None,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: Sequence[str | None] | None = None,
) -> TensorDict:
    """A TensorDict from a (nested) mapping; see `TensorDict.from_dict`."""
    return TensorDict.from_dict(
        input_dict, batch_size, device, batch_dims, auto_batch_size=auto_batch_size, names=names
    )


register(TensorDict)
share_per_leaf(TensorDict, TensorDict._leaf_state)
allow_weights_only(TensorDict, NonTensorData, NonTensorStack)


provide("TensorDict", TensorDict)
provide("from_dict", from_dict)
