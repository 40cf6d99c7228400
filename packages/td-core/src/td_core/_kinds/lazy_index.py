"""Indexing a `LazyStackedTensorDict`: reads and writes split along the stack dim.

An index that selects along the stack dim (an int, a slice, a list or 1-d
index tensor, a 1-d mask) gives members, or a lazy stack of indexed members,
so writes to the result reach the originals; `lazy[i]` and `lazy[:, i]` on
the stack dim are the member itself, as upstream. Other indices give a dense
result, and writes through them are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._core.contract import TensorDictContract, dense
from td_core._core.first_class import is_first_class_dim
from td_core._core.keys import is_leaf_nontensor
from td_core._core.traverse import is_stack, is_td
from td_core._core.utils import broadcast_shape, index_device
from td_core._leaves.nontensor import NonTensorData, NonTensorStack
from td_core._ops.index import (
    _apply_plan,
    _plan_sub,
    batch_fits,
    indexed_shape,
    normalize_index,
)
from td_core._ops.names import carry_index_names
from td_core.errors import BatchSizeError, LockedError

if TYPE_CHECKING:
    from td_core._kinds.base import TensorDictBase

__all__ = ["LazyIndexMixin"]

Tensor = torch.Tensor


def _member_index(member: Any, index: Any) -> Any:
    """`member._index(index)`, its sub-TensorDicts' dim names kept where the member is named."""
    out = member._index(index)
    return out if member._raw_names() is None else carry_index_names(member, out, index)


class LazyIndexMixin:
    """`_index` / `_setitem_index` of `LazyStackedTensorDict`, which provides the members."""

    __slots__ = ()

    if TYPE_CHECKING:
        tensordicts: list[TensorDictBase]
        stack_dim: int

        @property
        def batch_size(self) -> torch.Size: ...
        @property
        def batch_dims(self) -> int: ...
        def contiguous(self, *, inplace: bool = ..., canonical: bool = ...) -> TensorDictBase: ...
        def _restack(self, members: list[TensorDictBase], dim: int) -> TensorDictBase: ...
        def _is_ragged(self) -> bool: ...

    def _split_index(
        self, index: Any, *, nd: bool = False
    ) -> tuple[Any, tuple[Any, ...], int] | None:
        """(item on the stack dim, index for the members, result stack dim), or None if not separable.

        With `nd`, the stack item may be an n-d index tensor (reads only): its dims
        start at the result stack dim.
        """
        norm = normalize_index(index, self.batch_size)
        pos, result_dim, at = 0, 0, None
        for i, item in enumerate(norm):
            if (
                item is None
                or _scalar_bool(item)
                or (isinstance(item, Tensor) and item.dtype == torch.bool and item.ndim > 1)
            ):
                return None
            if pos == self.stack_dim:
                at = i
                break
            pos += 1
            if not (
                isinstance(item, int)
                or (isinstance(item, Tensor) and item.ndim == 0)
                or is_first_class_dim(item)  # binds its dim, as an int removes it
            ):
                result_dim += 1
        if at is None:  # the index stops before the stack dim, which lands after its result
            member_bs = self.tensordicts[0].batch_size
            lead = len(indexed_shape(member_bs, norm)) - (len(member_bs) - self.stack_dim)
            return slice(None), norm, lead
        stack_item, rest = norm[at], norm[:at] + norm[at + 1 :]
        if is_first_class_dim(stack_item):
            raise ValueError(
                f"Cannot index a lazy stack along its stack dim ({self.stack_dim}) with the "
                f"first-class dim {stack_item!r}: its members are separate TensorDicts, not one "
                "tensor; index another dim, or make it dense first (contiguous())"
            )
        if isinstance(stack_item, Tensor) and stack_item.dtype == torch.bool:
            stack_item = stack_item.nonzero().squeeze(-1)
        elif isinstance(stack_item, Tensor) and stack_item.ndim == 0:
            stack_item = int(stack_item)  # a 0-d index tensor picks one member, as an int
        if isinstance(stack_item, int):
            return stack_item, rest, result_dim
        tensors = [k for k, r in enumerate(norm) if isinstance(r, Tensor) and r.ndim and k != at]
        if isinstance(stack_item, Tensor):
            if tensors or (stack_item.ndim > 1 and not nd):
                return None  # the stack item broadcasts with another index tensor
            return stack_item, rest, result_dim
        if tensors and tensors[0] < at < tensors[-1]:
            return None  # torch moves index tensors split by the stack dim's slice to the front
        return stack_item, rest, self._sliced_stack_dim(norm, at)

    def _sliced_stack_dim(self, norm: tuple[Any, ...], at: int) -> int:
        """Where the stack dim, indexed by the slice `norm[at]`, lands in the result."""
        shapes = []
        # members of different sizes: each such dim (-1) probed at the largest member's size
        sizes = list(self.batch_size)
        for i, n in enumerate(sizes):
            if n == -1:
                m = i if i < self.stack_dim else i - 1
                sizes[i] = max(td.batch_size[m] for td in self.tensordicts)
        for size in (2, 3):  # only the stack dim's size differs between the two probes
            probe = list(sizes)
            probe[self.stack_dim] = size
            shapes.append(indexed_shape(torch.Size(probe), (*norm[:at], _FULL, *norm[at + 1 :])))
        return next(d for d, (a, b) in enumerate(zip(*shapes)) if a != b)

    def _members_for(self, stack_item: Any) -> list[int]:
        n = len(self.tensordicts)
        if isinstance(stack_item, slice):
            return list(range(n))[stack_item]
        positions = stack_item.tolist() if isinstance(stack_item, Tensor) else [stack_item]
        out = []
        for p in positions:
            if not -n <= p < n:
                raise IndexError(f"index {p} is out of range for the stack dim of size {n}")
            out.append(p % n)
        return out

    def _member_parts(
        self, index: Any, value: Any, stack_item: Any, result_dim: int, count: int
    ) -> list[Any]:
        """The part of `value` each of the `count` members picked by `stack_item` receives.

        One member takes the whole value; several take its slices along
        `result_dim` (a TensorDict, or a tensor with one row per member) or,
        for anything else, the same value each.

        Raises:
            BatchSizeError: when `value` has another number of slices than members.
        """
        if isinstance(stack_item, int):
            parts: list[Any] = [value]
        elif is_td(value) or (
            isinstance(value, Tensor)
            and value.ndim > result_dim
            and value.shape[result_dim] == count
        ):
            parts = list(value.unbind(result_dim))
        else:
            parts = [value] * count
        if len(parts) != count:
            raise BatchSizeError(
                f"lazy stack: {len(parts)} values for {count} selected members at {index!r}"
            )
        return parts

    def _index(self, index: Any) -> TensorDictBase:
        d = self.stack_dim
        at = index if not d else _member_at(index, d)
        if type(at) is int:  # lazy[i] / lazy[:, i] on the stack dim: the i-th member itself
            members = self.tensordicts
            if -len(members) <= at < len(members):
                return members[at]
        items = index if type(index) is tuple else (index,)
        if any(_scalar_bool(i) for i in items):  # a new dim of size 1 (True) or 0 (False)
            if all(bool(i) for i in items if _scalar_bool(i)):
                return self._index(tuple(None if _scalar_bool(i) else i for i in items))
            return self.contiguous()._index(index)
        split = self._split_index(index, nd=True)
        if split is None:
            new_dims = _new_dims(index, self.batch_size)
            if new_dims:  # `None` items: index without them, then insert the new dims
                norm = normalize_index(index, self.batch_size)
                out = self._index(tuple(i for i in norm if i is not None))
                for d in new_dims:
                    out = out.unsqueeze(d)
                return out
            return self.contiguous()._index(index)
        stack_item, rest, result_dim = split
        if isinstance(stack_item, int):
            member = self.tensordicts[self._members_for(stack_item)[0]]
            if all(type(r) is slice and r == _FULL for r in rest):
                return member  # lazy[:, i]: the member itself, as upstream
            return _member_index(member, rest)
        if isinstance(stack_item, Tensor) and stack_item.ndim > 1 and stack_item.numel():
            return self._index_nd(stack_item, rest, result_dim)
        members = [self.tensordicts[i] for i in self._members_for(stack_item)]
        if not members and not self._is_ragged():  # keys and feature shapes are known
            return self.contiguous()._index(index)
        if not members:  # ragged: an empty lazy stack, whose members would have this batch size
            first = self.tensordicts[0]
            member_bs = first._index(rest).batch_size if rest else first.batch_size
            return type(self)(stack_dim=result_dim, batch_size=member_bs, device=first.device)  # type: ignore[call-arg,return-value]
        return self._restack([_member_index(m, rest) if rest else m for m in members], result_dim)

    def _index_nd(self, stack_item: Tensor, rest: tuple[Any, ...], dim: int) -> TensorDictBase:
        """Lazy stacks of lazy stacks for an n-d index tensor on the stack dim (`dim` onwards)."""
        if stack_item.ndim == 1:
            picked = [self.tensordicts[i] for i in self._members_for(stack_item)]
            return self._restack([_member_index(m, rest) if rest else m for m in picked], dim)
        return self._restack([self._index_nd(row, rest, dim) for row in stack_item], dim)

    def _setitem_index(self, index: Any, value: Any) -> None:
        self._plan_setitem(index, value)()

    def _plan_setitem(self, index: Any, value: Any) -> Callable[[], None]:
        """Check `self[index] = value` against the members; the function that writes it.

        Nothing is written before the returned function runs, so a write
        planned beside others (a lazy stack nested in a TensorDict) is
        all-or-nothing with them.
        """
        split = self._split_index(index)
        if isinstance(value, dict) or is_td(value):
            full = indexed_shape(self.batch_size, normalize_index(index, self.batch_size))
            value = _as_batch(dense(value, full) if isinstance(value, dict) else value, full, index)
        if split is None:
            return self._plan_scattered(index, value)
        stack_item, rest, result_dim = split
        picked = self._members_for(stack_item)
        parts = self._member_parts(index, value, stack_item, result_dim, len(picked))
        member_bs = self.tensordicts[0].batch_size
        norm = normalize_index(rest, member_bs) if rest else ()
        sub = indexed_shape(member_bs, norm) if norm else member_bs
        writes: list[tuple[Tensor, Any]] = []
        later: list[tuple[TensorDictContract, str, Any, int]] = []
        plain: list[tuple[TensorDictBase, Any]] = []
        for i, part in zip(
            picked, parts
        ):  # plan every member's TensorDict write before writing any
            member = self.tensordicts[i]
            if is_td(part):
                _plan_sub(member, part, sub, norm, (), writes, later)
            else:
                plain.append((member, part))
        fills = self._fills(value, picked, len(full)) if is_td(value) else []

        def commit() -> None:
            for member, part in plain:
                member[norm] = part
            _apply_plan(writes, later, norm, sub)
            for member, key, fill in fills:
                member.set(key, fill)

        return commit

    def _fills(self, value: Any, picked: list[int], lead: int) -> list[tuple[Any, Any, Any]]:
        """What the members left out of an index write get for the keys it adds.

        As a dense TensorDict fills a new key outside the rows written, each
        member that was not written and lacks a leaf of `value` gets it filled:
        zeros for a tensor (of the leaf's dtype and feature shape), `None` for a
        non-tensor value. `lead` is the number of batch dims of `value`.

        Raises:
            LockedError: when a member that would gain a key is locked.
        """
        chosen = set(picked)
        others = [td for i, td in enumerate(self.tensordicts) if i not in chosen]
        if not others:
            return []
        try:
            leaves = list(value.items(True, True, is_leaf=is_leaf_nontensor))
        except BatchSizeError:  # a ragged value: no one shape to fill with
            return []
        fills = []
        for member in others:
            have = member.keys(True, True, is_leaf=is_leaf_nontensor)
            for key, leaf in leaves:
                if key in have:
                    continue
                if member.is_locked:
                    raise LockedError(
                        f"cannot write the new key {key!r} into a lazy stack whose member is "
                        "locked: the members left out of the write would gain it too"
                    )
                bs = member.batch_size
                if isinstance(leaf, Tensor):
                    fill: Any = leaf.new_zeros((*bs, *leaf.shape[lead:]))
                else:
                    fill = _none_fill(bs, leaf.batch_size[lead:], member.device)
                fills.append((member, key, fill))
        return fills

    def _plan_scattered(self, index: Any, value: Any) -> Callable[[], None]:
        """Plan `self[index] = value` for an index that mixes the stack dim with others.

        A boolean mask over several dims, or index tensors on the stack dim and
        another: each selected element is traced to its member and position
        there, and every member gets one advanced-index write of its share.
        """
        bs = self.batch_size
        try:
            picked = torch.arange(bs.numel(), device=index_device(index)).view(bs)[index]
        except (IndexError, RuntimeError, TypeError) as err:
            raise IndexError(
                f"cannot write through a lazy stack at index {index!r}: {err}"
            ) from None
        sub = picked.shape
        coords = torch.unravel_index(picked.reshape(-1), bs)
        d = self.stack_dim
        owner, member_coords = coords[d], coords[:d] + coords[d + 1 :]
        rows = _rows(value, sub, index)
        commits = []
        for i, member in enumerate(self.tensordicts):
            sel = (owner == i).nonzero().squeeze(-1)
            if not sel.numel():
                continue
            part = value if rows is None else rows[sel]
            if not member_coords:  # 0-d members: the one selected element is the whole member
                member_index: Any = ()
                part = part if rows is None else part[0]
            else:
                member_index = tuple(c[sel] for c in member_coords)
            commits.append(_plan_member_write(member, member_index, part))

        def commit() -> None:
            for write in commits:
                write()

        return commit


def _none_fill(bs: torch.Size, feature: torch.Size, device: Any) -> Any:
    """`None` for every element of `bs`, and of the leaf's dims past the batch when it has some."""
    if not feature:
        return NonTensorData(None, batch_size=bs, device=device)
    return NonTensorStack(np.full((*bs, *feature), None, dtype=object), device=device)


def _rows(value: Any, sub: torch.Size, index: Any) -> Any:
    """`value` with its leading `sub` dims flattened, to pick each member's rows; None to broadcast."""
    lead = len(sub)
    if is_td(value):
        if value.batch_size[:lead] != sub:
            if broadcast_shape(value.batch_size[:lead], sub) != sub:
                raise BatchSizeError(
                    f"cannot write a TensorDict of batch_size {list(value.batch_size)} at index "
                    f"{index!r}: the indexed batch_size is {list(sub)}"
                )
            value = value.expand(*sub, *value.batch_size[lead:])
        return value.reshape(-1, *value.batch_size[lead:])
    if isinstance(value, Tensor) and value.ndim >= lead and value.shape[:lead] == sub:
        return value.reshape(-1, *value.shape[lead:])
    return None  # a scalar, or a tensor that broadcasts into every selected element


def _plan_member_write(member: Any, index: Any, part: Any) -> Callable[[], None]:
    """Check `member[index] = part`; the function that writes it."""
    if is_stack(member):
        return member._plan_setitem(index, part)
    if not is_td(part):
        return lambda: member.__setitem__(index, part)
    norm: Any = normalize_index(index, member.batch_size) if index != () else ...
    sub = indexed_shape(member.batch_size, norm) if index != () else member.batch_size
    writes: list[tuple[Tensor, Any]] = []
    later: list[tuple[TensorDictContract, str, Any, int]] = []
    _plan_sub(member, part, sub, norm, (), writes, later)
    return lambda: _apply_plan(writes, later, norm, sub)


_FULL = slice(None)


def _as_batch(value: Any, batch_size: torch.Size, index: Any) -> Any:
    """The TensorDict `value` broadcast to `batch_size` (leading ones dropped), as torch does."""
    own, n = value.batch_size, len(batch_size)
    if own[:n] == batch_size:
        return value
    if not batch_fits(own, batch_size):
        raise BatchSizeError(
            f"batch dimension mismatch: cannot write a TensorDict of batch_size "
            f"{list(value.batch_size)} at index {index!r}, whose batch_size is {list(batch_size)} "
            "(Cannot broadcast the tensordict to it: its batch dims must match or be 1, and "
            "extra leading dims must be 1)"
        )
    if len(own) >= n and broadcast_shape(own[:n], batch_size) == batch_size:
        return value.expand(*batch_size, *own[n:])  # its leading dims broadcast
    while value.batch_dims > n:  # extra leading ones, as torch drops them
        value = value[0]
    return value.expand(batch_size)


def _scalar_bool(item: Any) -> bool:
    """Whether an index item is a scalar boolean (`True`, `False` or a 0-d bool tensor)."""
    if isinstance(item, Tensor):
        return item.dtype == torch.bool and item.ndim == 0
    return type(item) is bool


def _member_at(index: Any, stack_dim: int) -> Any:
    """The int of `index` = `(:, ..., :, i)` with `i` at `stack_dim`; None for other indices."""
    if type(index) is tuple and len(index) == stack_dim + 1:
        *lead, at = index
        if all(type(i) is slice and i == _FULL for i in lead):
            return at
    return None


def _new_dims(index: Any, batch_size: torch.Size) -> list[int]:
    """Where the `None` items of a basic `index` (ints, slices) put new dims in the result.

    Empty when there is no `None` or the index holds tensors (advanced indexing moves dims).
    """
    norm = normalize_index(index, batch_size)
    if any(isinstance(i, Tensor) for i in norm):
        return []
    out, pos = [], 0
    for item in norm:
        if item is None:
            out.append(pos)
        if not isinstance(item, int):
            pos += 1
    return out
