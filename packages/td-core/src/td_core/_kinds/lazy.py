"""`LazyStackedTensorDict`: a stack of TensorDicts that keeps the originals.

Reads stack on demand (`lazy["a"]` stacks the members' `"a"`); a sub-TensorDict
comes back as a lazy stack of the members' sub-TensorDicts, so writes at any
depth go through. Writes unbind along the stack dim into the members. Members
share a batch size but may hold keys the others lack (`exclusive_fields`)
and leaves whose feature shapes differ (read them with `as_nested_tensor`).
Shapes are known without stacking (`get_item_shape`).

Indexing that selects along the stack dim (an int, a slice, a list or 1-d
index tensor, a 1-d mask) gives members or a lazy stack of indexed members, so
writes to the result reach the originals. Other indices (`None`, masks over
several dims, index tensors on other dims together with one on the stack dim)
give a dense result.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from itertools import repeat
from operator import eq
from typing import Any, TypeVar

import torch

from td_core._core.contract import lazy, one_tensorclass, provide
from td_core._core.first_class import is_first_class_tensor
from td_core._core.flags import list_to_stack
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT, broadcast_shape, normalize_dim
from td_core._io.consolidate import pack, unpack
from td_core._io.pickle_pack import pickle_pack, share_per_leaf
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.lazy_constructors import LazyConstructorsMixin
from td_core._kinds.lazy_hooks import LazyHooksMixin, set_hooks, with_hook_out
from td_core._kinds.lazy_index import LazyIndexMixin
from td_core._kinds.lazy_keys import member_key_nodes
from td_core._kinds.lazy_members import LazyMembersMixin
from td_core._kinds.lazy_read import LazyReadMixin
from td_core._kinds.lazy_repr import LazyReprMixin
from td_core._kinds.pytree import allow_weights_only, register
from td_core._leaves.lists import MemberValues, split_list
from td_core._leaves.nontensor import NonTensorData, stack_non_tensors
from td_core._leaves.unbatched import is_unbatched, shared_unbatched
from td_core._ops.lock_cache import drop
from td_core._ops.names import carry_names, inherit_names
from td_core._ops.stack import stack
from td_core.errors import BatchSizeError, DimError

__all__ = ["LazyStackedTensorDict", "lazy_stack"]

Tensor = torch.Tensor
_F = TypeVar("_F", bound=Callable[..., Any])


class LazyStackedTensorDict(  # type: ignore[misc]  # from_dict takes one mapping per member, as upstream
    LazyConstructorsMixin,
    LazyHooksMixin,
    LazyIndexMixin,
    LazyMembersMixin,
    LazyReadMixin,
    LazyReprMixin,
    TensorDictBase,
):
    """A lazy stack of TensorDicts along batch dim `stack_dim`.

    Args:
        *tensordicts: the members; they must share a batch size.
        stack_dim: where the new dim goes among the batch dims.
        hook_out: deprecated upstream: a callable applied to the tensors read (see `hook_out`).
        hook_in: deprecated upstream: see `hook_in`.
    """

    _caches_when_locked = True
    _view_slot = True  # a view op records its source in `_view_record` (see `_ops.views`)
    _td_lazy_stack = True
    __slots__ = (
        "__weakref__",
        "_is_locked",
        "_ragged_batch",
        "_td_dim_name",
        "_template",
        "_view_record",
        "_td_side",  # per-object state kept on the object while torch.compile traces
        "stack_dim",
        "tensordicts",
    )
    _td_dim_name: str | None
    _from_list_lazy = True  # `from_list` builds a lazy stack (ragged members allowed), as upstream

    def __init__(
        self,
        *tensordicts: TensorDictBase,
        stack_dim: int = 0,
        hook_out: Callable[[Any], Any] | None = None,
        hook_in: Callable[[Any], Any] | None = None,
        batch_size: Any = None,
        device: Any = None,
        stack_dim_name: str | None = None,
        strict_shape: bool = False,
    ) -> None:
        if len(tensordicts) == 1 and isinstance(tensordicts[0], (list, tuple)):
            tensordicts = tuple(tensordicts[0])
        # with no member (filled later by append/extend), the members' batch size and
        # device are `batch_size` and `device`
        template = None if tensordicts else TensorDict(batch_size=batch_size or (), device=device)
        self._template = template
        bs = template.batch_size if template is not None else tensordicts[0].batch_size
        if tensordicts and batch_size is not None and torch.Size(batch_size) != bs:
            raise BatchSizeError(
                f"lazy stack: batch_size {list(batch_size)} is the members' batch size and "
                f"must match theirs, {list(bs)} (it only matters for a stack with no member)"
            )
        ragged_batch = False
        for i, td in enumerate(tensordicts):
            if not is_td(td):
                raise TypeError(f"lazy stack: item {i} is a {type(td).__name__}, not a TensorDict")
            if td.batch_size != bs:
                # members of one rank may differ in size: those dims read -1, as upstream
                if strict_shape or len(td.batch_size) != len(bs):
                    raise BatchSizeError(
                        f"lazy stack: the batch sizes in tensordicts differs: TensorDict {i} has "
                        f"batch_size {list(td.batch_size)}, TensorDict 0 has {list(bs)}"
                        + (
                            " (strict_shape=True needs one batch size)"
                            if strict_shape and len(td.batch_size) == len(bs)
                            else "; members must have as many batch dims"
                        )
                    )
                ragged_batch = True
        self._ragged_batch = ragged_batch
        self.tensordicts: list[TensorDictBase] = list(tensordicts)
        if not isinstance(stack_dim, bool) and isinstance(stack_dim, int):
            if not -len(bs) - 1 <= stack_dim <= len(bs):
                raise DimError(
                    f"lazy stack: stack_dim {stack_dim} is out of range for members with "
                    f"{len(bs)} batch dims (it must be in [{-len(bs) - 1}, {len(bs)}])"
                )
        self.stack_dim = normalize_dim(stack_dim, len(bs) + 1)
        self._is_locked = False
        if stack_dim_name is not None:
            self._td_dim_name = stack_dim_name
        if strict_shape and self._is_ragged():
            raise BatchSizeError(
                "lazy stack: strict_shape=True, but the members' leaves differ in shape; pass "
                "strict_shape=False to stack them lazily"
            )
        if hook_out is not None or hook_in is not None:
            warnings.warn(
                "LazyStackedTensorDict(hook_out=..., hook_in=...) is deprecated and will be "
                "removed in TensorDict 0.17.",
                DeprecationWarning,
                stacklevel=2,
            )
            set_hooks(self, hook_out, hook_in)

    @classmethod
    def lazy_stack(  # type: ignore[override]  # upstream's keywords for a lazy stack
        cls,
        items: Sequence[TensorDictBase],
        dim: int = 0,
        *,
        device: Any = None,
        out: TensorDictBase | None = None,
        stack_dim_name: str | None = None,
        strict_shape: bool = False,
    ) -> Any:
        """Stack `items` lazily along batch dim `dim` (see `td_core.lazy_stack`)."""
        return lazy_stack(
            items,
            dim,
            device=device,
            out=out,
            stack_dim_name=stack_dim_name,
            strict_shape=strict_shape,
        )

    # ---------------------------------------------------------------- members
    def _replace_members(self, members: list[TensorDictBase], member_bs: torch.Size) -> None:
        """Hold `members` instead (`update(update_batch_size=True)`; they share a rank).

        `member_bs` is the members' batch size, kept for a stack left with no member.
        """
        self.tensordicts = members
        self._template = None if members else TensorDict(batch_size=member_bs)
        self._ragged_batch = len({td.batch_size for td in members}) > 1

    @property
    def _first(self) -> TensorDictBase:
        """The first member, or an empty stand-in with the members' batch size if there is none."""
        return self.tensordicts[0] if self.tensordicts else self._template  # type: ignore[return-value]

    # ---------------------------------------------------------------- metadata
    @property
    def batch_size(self) -> torch.Size:
        bs = self._member_batch()
        d = self.stack_dim
        return torch.Size((*bs[:d], len(self.tensordicts), *bs[d:]))

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        raise RuntimeError(
            "Modifying the batch size of a lazy representation of a tensordict is not permitted. "
            "Consider instantiating the tensordict first by calling `td = td.to_tensordict()` "
            "before resetting the batch size. (A LazyStackedTensorDict's batch size follows its "
            "members: set theirs, or change it with a shape op.)"
        )

    def _member_batch(self) -> torch.Size:
        """The members' batch size; a dim where members differ reads -1, as upstream."""
        bs = self._first.batch_size
        if not self._ragged_batch:
            return bs
        sizes = list(bs)
        for td in self.tensordicts[1:]:
            for i, n in enumerate(td.batch_size):
                if sizes[i] != n:
                    sizes[i] = -1
        return torch.Size(sizes)

    @property
    def device(self) -> torch.device | None:
        devices = {td.device for td in self.tensordicts or [self._first]}
        return devices.pop() if len(devices) == 1 else None

    def _set_device(self, device: Any) -> None:
        for td in self.tensordicts:
            td._set_device(device)

    def _subtrees(self) -> list[TensorDictBase]:
        return list(self.tensordicts)  # walking members avoids stacking every entry

    def _raw_names(self) -> tuple[str | None, ...] | None:
        member = self._first._raw_names()
        own = getattr(self, "_td_dim_name", None)
        if member is None and own is None:
            return None
        names = list(member or (None,) * (self.batch_dims - 1))
        names.insert(self.stack_dim, own)
        return tuple(names)

    # ------------------------------------------------- per-member traversals (_map)
    def _stack_parts(self) -> tuple[list[TensorDictBase], int]:
        """The members and the stack dim: `_map`'s traversals walk these."""
        return self.tensordicts, self.stack_dim

    def _restack(
        self, members: Sequence[TensorDictBase], dim: int, *, named: bool = True
    ) -> LazyStackedTensorDict:
        """A lazy stack of per-member results (what per-member traversals return).

        `dim` is where this stack's own dim went, so its name (if any) goes there too,
        unless `named` is false.
        """
        members = list(members)
        bs = members[0].batch_size if members else None
        if bs is not None and 0 <= dim <= len(bs) and all(map(_fits, members, repeat(bs))):
            # what the constructor checks holds already (members of one batch size, a
            # valid dim): per-member results are restacked often (every nested read)
            out = LazyStackedTensorDict.__new__(LazyStackedTensorDict)
            out._template = None
            out._ragged_batch = False
            out.tensordicts = members
            out.stack_dim = dim
            out._is_locked = False
        else:  # the constructor says what is wrong
            out = LazyStackedTensorDict(*members, stack_dim=dim)
        name = getattr(self, "_td_dim_name", None)
        if name is not None and named:
            out._td_dim_name = name
        return out

    def _pytree_members(self) -> tuple[list[TensorDictBase], int] | None:
        """The members and stack dim when pytree must walk the members (see `_kinds.pytree`).

        That is when the entries cannot be stacked: the members' keys or entry
        shapes differ. Otherwise `None`: the node's children are the stacked entries.
        """
        if not self.tensordicts:
            return None
        if any(self.exclusive_keys()) or self._is_ragged():
            return self.tensordicts, self.stack_dim
        return None

    def _is_ragged(self) -> bool:
        """Whether a common entry has different shapes in the members (at any depth)."""
        return _ragged_members(self.tensordicts)

    def _store_names(self, names: tuple[str | None, ...] | None) -> None:
        if self._is_locked:  # results cached while locked carry the old names
            drop(self)
        d = self.stack_dim
        self._td_dim_name = None if names is None else names[d]
        member = None if names is None else (*names[:d], *names[d + 1 :])
        for td in self.tensordicts:
            td._store_names(member)

    # ---------------------------------------------------------------- primitives
    def _keys_str(self) -> dict[str, None]:
        tds = self.tensordicts
        if not tds:
            return dict.fromkeys(self._first._keys_str())
        keys = tds[0]._keys_str()
        others = [td._keys_str() for td in tds[1:]]
        if all(map(eq, repeat(keys), others)):
            # the usual stack: every member has the same keys (dict key views compare as
            # sets, lengths first); `map` runs the comparisons without a Python frame
            return dict.fromkeys(keys)
        return {k: None for k in keys if all(k in other for other in others)}

    def exclusive_keys(self) -> list[list[str]]:
        """For each member, the keys it holds that are not common to all members."""
        common = self._keys_str()
        return [[k for k in td._keys_str() if k not in common] for td in self.tensordicts]

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        values = [td._get_str(key, NO_DEFAULT) for td in self.tensordicts]
        if not values:
            return default
        for value in values:  # (a loop: no generator frame on this hot read)
            if value is NO_DEFAULT:
                return default
        return with_hook_out(self, self._stack_values(key, values))

    def _stack_values(self, key: str, values: list[Any]) -> Any:
        first = values[0]
        if type(first) is not Tensor and is_unbatched(first):  # shared by the members
            return shared_unbatched(values, self.batch_size)
        if isinstance(first, Tensor):
            try:
                return torch.stack(values, self.stack_dim)
            except RuntimeError:
                shapes = [list(v.shape) for v in values]
                raise BatchSizeError(
                    f"lazy stack: entry {key!r} has different shapes in the members {shapes} "
                    "(Failed to stack tensors within a tensordict); read it with "
                    f"get({key!r}, as_nested_tensor=True), get({key!r}, as_padded_tensor=True), "
                    f"get({key!r}, as_list=True) or get_item_shape({key!r})"
                ) from None
        if is_nt(first):
            return stack_non_tensors(values, self.stack_dim)
        if is_first_class_tensor(first):  # leaves of `lazy[d0]`: functorch's stack wants a Dim
            return torch.cat([v.unsqueeze(self.stack_dim) for v in values], self.stack_dim)
        if getattr(type(first), "_td_tensorclass", False):
            cls = one_tensorclass(values)
            if cls is not None:  # instances of one tensorclass: the class over a stack, as upstream
                return cls._wrap(self._stack_values(key, [v._tensordict for v in values]))
        out = self._restack(values, self.stack_dim)
        if all(v.is_locked for v in values):  # locked members: the stack of them is locked too
            out._is_locked = True
        return out

    def _validate(self, value: Any, key: Any, *, adopt: bool = True) -> Any:
        entry = super()._validate(value, key, adopt=adopt)
        if is_nt(entry) and isinstance(value, list) and list_to_stack() and self.tensordicts:
            # a list that is no one tensor: one item per member, validated by the member
            parts = split_list(value, self.stack_dim, len(self.tensordicts))
            if parts is not None:
                return MemberValues(td._validate(p, key) for td, p in zip(self.tensordicts, parts))
        return entry

    def _set_str(self, key: str, value: Any) -> None:
        if not self.tensordicts:  # nowhere to keep it: refused rather than dropped
            raise BatchSizeError(
                f"cannot set key {key!r} in a lazy stack with no member: append members first"
            )
        d = self.stack_dim
        parts: Sequence[Any]
        if type(value) is MemberValues:
            parts = value
        elif type(value) is not Tensor and is_unbatched(value):
            member_bs = self.tensordicts[0].batch_size
            parts = [value.with_batch_size(member_bs)] * len(self.tensordicts)
        elif isinstance(value, Tensor):
            parts = value.unbind(d)
        elif is_nt(value):
            if isinstance(value, NonTensorData):
                member_bs = self.tensordicts[0].batch_size
                parts = [NonTensorData(value.data, member_bs, value.device)] * len(self.tensordicts)
            else:
                parts = value._map_batch_multi(lambda t: t.unbind(d))
        else:
            parts = value.unbind(d)
        for td, part in zip(self.tensordicts, parts):
            td._set_str(key, part)

    def _del_str(self, key: str) -> None:
        for td in self.tensordicts:
            td._del_str(key)

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        """In-place write of `item` into entry `key`: into the members' own storage.

        `dest` (a stacked read) is only used to check the value fits, before
        any member is written.
        """
        if isinstance(dest, Tensor):
            if not isinstance(item, Tensor):
                item = torch.as_tensor(item, device=dest.device)
            if broadcast_shape(item.shape, dest.shape) != dest.shape:
                raise BatchSizeError(
                    f"Failed to update {full_key!r}: cannot copy a value of shape "
                    f"{list(item.shape)} into its entry of shape {list(dest.shape)}"
                )
            parts = item.expand(dest.shape).unbind(self.stack_dim)
            for td, part in zip(self.tensordicts, parts):
                td._copy_into(key, td._get_str(key), part, full_key)
        elif is_td(dest):
            dest.update_(item)  # a lazy stack of the members' sub-TensorDicts: writes go through
        else:
            self._set_str(key, self._validate(item.data if is_nt(item) else item, full_key))

    def _items_str(self) -> list[tuple[str, Any]]:
        return [(key, self._get_str(key)) for key in self._keys_str()]

    def _key_items(self) -> list[tuple[str, Any]]:
        out = []
        first = dict(self._first._key_items())
        for key in self._keys_str():
            value = first[key]
            # a member's tensor stands for the stacked one (only its type is read): ragged
            # leaves are never stacked
            out.append((key, value if isinstance(value, Tensor) else self._get_str(key)))
        return out

    def _key_nodes(self) -> Collection[tuple[str, Any]]:
        if not self.tensordicts:
            return self._key_items()
        return member_key_nodes(self.tensordicts, self._stack_values)  # no sub-stack built

    def _values_str(self) -> list[Any]:
        return [self._get_str(key) for key in self._keys_str()]

    def _new(
        self, source: dict[str, Any], batch_size: torch.Size, device: Any = NO_DEFAULT
    ) -> TensorDict:
        return inherit_names(
            self,
            TensorDict._new_unsafe(
                source, batch_size, self.device if device is NO_DEFAULT else device
            ),
        )

    @classmethod
    def _from_pytree(
        cls, source: dict[str, Any], batch_size: torch.Size, device: Any
    ) -> TensorDict:
        return TensorDict._new_unsafe(source, batch_size, device)

    # ---------------------------------------------------------------- structure
    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> TensorDictBase:
        """A dense TensorDict holding the stacked common entries (stacking makes them canonical).

        Raises:
            NotImplementedError: with `inplace=True`: a lazy stack cannot become dense in place.
        """
        del canonical  # stacking writes fresh row-major leaves
        if inplace:
            raise NotImplementedError(
                "contiguous(inplace=True) is not supported on a LazyStackedTensorDict: it cannot "
                "become dense in place; use contiguous(), which returns a dense TensorDict"
            )
        if self.exclusive_keys() != [[] for _ in self.tensordicts]:
            out = stack([td.select(*self._keys_str()) for td in self.tensordicts], self.stack_dim)
        else:
            out = stack(self.tensordicts, self.stack_dim)
        names = self._raw_names()  # the stack dim's name included
        return out if names is None else carry_names(out, names)

    def unbind(self, dim: int = 0) -> tuple[TensorDictBase, ...]:
        if normalize_dim(dim, self.batch_dims) == self.stack_dim:
            return tuple(self.tensordicts)
        return super().unbind(dim)

    def is_shared(self) -> bool:
        return bool(self.tensordicts) and all(td.is_shared() for td in self.tensordicts)

    def __getstate__(self) -> dict[str, Any]:
        packed = pack(self)
        if packed is None and type(self) is LazyStackedTensorDict:  # small: faster as one
            packed = pickle_pack(self, self.tensordicts, TensorDict)
        if packed is not None:  # the members' leaves share one buffer: send it once
            return {"consolidated": packed, "locked": self._is_locked}
        return self._member_state()

    def _member_state(self) -> dict[str, Any]:
        """The state member by member (what processes sharing memory exchange)."""
        return {
            "tensordicts": self.tensordicts,
            "stack_dim": self.stack_dim,
            "locked": self._is_locked,
            "bs": self._first.batch_size,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        relock = "consolidated" in state and state["locked"]  # its skeleton's are not
        if "consolidated" in state:
            rebuilt = unpack(*state["consolidated"])
            assert isinstance(rebuilt, LazyStackedTensorDict)  # the skeleton is a lazy stack
            state = {**state, "tensordicts": rebuilt.tensordicts, "stack_dim": rebuilt.stack_dim}
        self.tensordicts = list(state["tensordicts"])
        self._template = None if self.tensordicts else TensorDict(batch_size=state.get("bs", ()))
        self.stack_dim = state["stack_dim"]
        self._is_locked = state["locked"] and not relock
        sizes = {td.batch_size for td in self.tensordicts}
        self._ragged_batch = len(sizes) > 1
        if relock:
            self.lock_()


def _fits(member: Any, batch_size: torch.Size) -> bool:
    """Whether `member` can join a lazy stack of members of `batch_size` (its constructor's check)."""
    return is_td(member) and member.batch_size == batch_size


def _ragged_members(tds: Sequence[TensorDictBase]) -> bool:
    if len(tds) < 2:
        return False
    first, *rest = tds
    if not rest:
        return False
    for key in first._keys_str():
        try:
            values = [td._get_str(key, NO_DEFAULT) for td in tds]
        except BatchSizeError:  # a member is itself a ragged lazy stack
            return True
        if any(v is NO_DEFAULT for v in values):
            continue  # an exclusive key
        head = values[0]
        if isinstance(head, Tensor):
            if any(not isinstance(v, Tensor) or v.shape != head.shape for v in values[1:]):
                return True
        elif is_td(head):
            if any(not is_td(v) or v.batch_size != head.batch_size for v in values[1:]):
                return True
            if _ragged_members(values):
                return True
    return False


def lazy_stack(
    tensordicts: Sequence[TensorDictBase],
    dim: int = 0,
    *,
    device: Any = None,
    out: TensorDictBase | None = None,
    stack_dim_name: str | None = None,
    strict_shape: bool = False,
) -> Any:
    """Stack TensorDicts lazily along batch dim `dim` (see `LazyStackedTensorDict`).

    Args:
        tensordicts: the members; they must share a batch size (and, with
            `strict_shape`, so must each of their leaves' shapes).
        dim: where the new dim goes among the batch dims.
        device: accepted for upstream compatibility: the members keep theirs.
        out: a TensorDict to write the stacked values into, in place (as
            `stack(..., out=)`); it is returned.
        stack_dim_name: a name for the new dim.
        strict_shape: refuse members whose leaves differ in shape.

    Raises:
        ValueError: if `tensordicts` is empty.
        BatchSizeError: if the members' batch sizes differ, or (with
            `strict_shape`) their leaves' shapes.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, lazy_stack
        >>> a, b = TensorDict(x=torch.zeros(2)), TensorDict(x=torch.ones(2))
        >>> lazy_stack([a, b])["x"].shape
        torch.Size([2, 2])
    """
    del device  # the members keep their device
    items = list(tensordicts)
    if not items:
        raise ValueError(
            "lazy_stack needs at least one TensorDict; build an empty stack to fill later "
            "with LazyStackedTensorDict(stack_dim=..., batch_size=...)"
        )
    if out is not None:
        return stack(items, dim, out=out)
    if strict_shape:
        bs = items[0].batch_size
        for i, td in enumerate(items):
            if td.batch_size != bs:
                raise BatchSizeError(
                    "lazy_stack(..., strict_shape=True): stacking tensordicts requires them to "
                    f"have congruent batch sizes; TensorDict {i} has {list(td.batch_size)}, "
                    f"TensorDict 0 has {list(bs)}"
                )
    if getattr(type(items[0]), "_td_tensorclass", False):  # maybe the class over a stack
        return lazy(items, dim, stack_dim_name=stack_dim_name, strict_shape=strict_shape)
    return LazyStackedTensorDict(
        *items, stack_dim=dim, stack_dim_name=stack_dim_name, strict_shape=strict_shape
    )


register(LazyStackedTensorDict)
share_per_leaf(LazyStackedTensorDict, LazyStackedTensorDict._member_state)
allow_weights_only(LazyStackedTensorDict)
provide("LazyStackedTensorDict", LazyStackedTensorDict)
