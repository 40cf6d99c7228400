"""Masked and indexed reads and writes (`where`, `masked_fill`, `get_at`, `set_at_`, `gather`, ...).

Two kinds of op live here:

* mask ops (`where`, `masked_fill`, `masked_fill_`): one table row each
  (name, what to do with one leaf, in place or not) and one implementation,
  `_mask_map`. The mask covers leading batch dims (size-1 dims
  broadcast) and is reshaped once per leaf rank to broadcast over the
  feature dims. Non-tensor leaves are kept as they are.
* indexed and whole-entry writes (`set_at_`, `update_at_`, `copy_`,
  `copy_at_`, `fill_`, `zero_`): every write is validated before the
  first one is made, and goes to the tensors that hold the data, so writes
  through a lazy stack reach its members (see `td_core._ops.index.set_at`).

A lazy stack runs mask ops member by member (the mask and a TensorDict
operand are split along the stack dim) and re-stacks lazily, which also
covers members whose leaves differ in shape. `TensorDictParams` writes its
parameters under `no_grad` where upstream does (`zero_`, `fill_`,
`set_at_`, `update_at_`, `copy_`, `copy_at_`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.keys import NestedKey, unravel_key
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT, normalize_dim
from td_core._leaves.unbatched import is_unbatched
from td_core._ops.index import copy_at_plain
from td_core._ops.names import carry_names
from td_core._ops.writes import (
    as_tuple,
    copy_all,
    copy_into,
    fill,
    is_lazy,
    lazy_parts,
    no_grad_for,
    plan_at,
    plan_copy,
    plan_copy_dense,
    rebind,
    set_at,
    set_into,
    storage_leaves,
    write_plan,
    zero_all,
)
from td_core.errors import BatchSizeError, KeyNotFoundError, MissingEntryError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["MaskedMixin"]

Tensor = torch.Tensor
_SCALARS = (int, float, bool)


class _MaskRow(NamedTuple):
    """One mask op: its name, its action on one leaf `(leaf, mask, operand)`, in place or not."""

    name: str
    leaf: Callable[[Tensor, Tensor, Any], Tensor]
    inplace: bool


MASK_OPS: dict[str, _MaskRow] = {
    "where": _MaskRow("where", lambda t, m, o: torch.where(m, t, o), False),
    "masked_fill": _MaskRow("masked_fill", Tensor.masked_fill, False),
    "masked_fill_": _MaskRow("masked_fill_", Tensor.masked_fill_, True),
}


# ------------------------------------------------------------------ mask ops
def _check_mask(td: Any, mask: Any, name: str, *, feature: bool = False) -> None:
    """Raise (before anything is written) unless `mask` is a boolean mask over leading batch dims.

    With `feature`, the mask may go on past the batch dims: those dims apply to each
    leaf's next dims (size 1 or the leaf's, as torch broadcasts), or must be 1 where
    a leaf has no such dim.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name}: the mask must be a boolean tensor, got {type(mask).__name__}")
    if mask.dtype is not torch.bool:
        raise RuntimeError(
            f"{name}: the mask must be a boolean tensor, got dtype {mask.dtype}; "
            "compare it (mask != 0) or cast it with .bool()"
        )
    bs = td.batch_size
    n = len(bs)
    if (mask.ndim > n and not feature) or any(m != b and m != 1 for m, b in zip(mask.shape, bs)):
        raise BatchSizeError(
            f"{name}: a mask of shape {list(mask.shape)} does not fit the batch_size {list(bs)}: "
            "its dims must be the leading batch dims (or 1, to broadcast)"
        )
    if mask.ndim > n:
        for key, leaf in td.items(include_nested=True, leaves_only=True):
            if not isinstance(leaf, Tensor):
                continue
            shape = leaf.shape
            for pos in range(n, mask.ndim):
                m = mask.shape[pos]
                if m != 1 and (pos >= len(shape) or shape[pos] != m):
                    raise BatchSizeError(
                        f"{name}: a mask of shape {list(mask.shape)} does not fit entry {key!r} "
                        f"of shape {list(shape)}: its dims past the batch_size {list(bs)} must "
                        "be 1 or the entry's"
                    )


def _leaf_mask(mask: Tensor, nd: int) -> Tensor:
    """`mask` shaped for a leaf of `nd` dims: trailing ones added, or extra trailing ones dropped."""
    if mask.ndim <= nd:
        return mask.reshape(mask.shape + (1,) * (nd - mask.ndim))
    return mask.reshape(mask.shape[:nd])  # the dropped dims are 1 (`_check_mask`)


def _split_mask(mask: Tensor, d: int, n: int) -> list[Tensor]:
    """The part of `mask` for each of `n` members stacked along batch dim `d`."""
    if mask.ndim <= d:
        return [mask] * n
    if mask.shape[d] != n:
        mask = mask.expand(*mask.shape[:d], n, *mask.shape[d + 1 :])
    return list(mask.unbind(d))


def _per_member(parts: tuple[list[Any], int], mask: Tensor, operand: Any) -> list[Any] | None:
    """`(member, mask, operand)` triples, or None if the operand cannot be split by member."""
    members, d = parts
    n = len(members)
    if is_td(operand):
        if operand.batch_dims <= d:
            return None
        operands: list[Any] = list(operand.unbind(d))
    elif isinstance(operand, Tensor) and operand.ndim:
        return None  # aligned with each leaf's trailing dims, not with the members
    else:
        operands = [operand] * n
    return list(zip(members, _split_mask(mask, d, n), operands))


def _mask_map(
    td: Any, row: _MaskRow, mask: Tensor, operand: Any, pad: Any, views: dict[int, Tensor]
) -> Any:
    """Apply `row` to every tensor leaf of `td` (the family's one implementation)."""
    parts = lazy_parts(td)
    if parts is not None:
        triples = _per_member(parts, mask, operand)
        if triples is not None:
            results = [_mask_map(m, row, mk, o, pad, {}) for m, mk, o in triples]
            return None if row.inplace else td.lazy_stack(results, parts[1])
    paired = is_td(operand)
    if paired and pad is None:  # keys only `operand` has: nothing to pair them with
        own = td._keys_str()
        extra = [key for key in operand._keys_str() if key not in own]
        if extra:
            raise KeyNotFoundError(
                f"{row.name}: key {extra[0]!r} not found and no pad value provided: other has "
                f"keys {sorted(extra)} that the TensorDict (keys {sorted(own)}) lacks; pass "
                "pad= to use a value there"
            )
    leaf = row.leaf
    inplace = row.inplace
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        other = operand
        if paired:
            other = operand._get_str(key, NO_DEFAULT)
            if other is NO_DEFAULT:
                if pad is None:
                    raise KeyNotFoundError(
                        f"{row.name}: key {key!r} not found and no pad value provided: it is "
                        f"missing from other (keys "
                        f"{sorted(operand._keys_str())}); pass pad= to use a value there"
                    )
                other = pad
        if isinstance(value, Tensor):
            if other is pad and paired:  # pad takes the leaf's dtype, as upstream
                other = torch.as_tensor(pad, dtype=value.dtype, device=value.device)
            nd = value.ndim
            m = views.get(nd)
            if m is None:
                m = views[nd] = _leaf_mask(mask, nd)
            if inplace:
                leaf(value, m, other)
            else:
                out[key] = leaf(value, m, other)
        elif value._is_non_tensor:
            # `where` picks between two non-tensor leaves element-wise; other rows keep them
            pick = row.name == "where" and is_nt(other) and not inplace
            out[key] = value.where(mask, other) if pick else value
        else:
            out[key] = _mask_map(value, row, mask, other, pad, views)
    if inplace:
        return None
    if paired and pad is not None:  # keys only other has: pad where the mask picks self
        for key, value in operand._items_str():
            if key not in out:
                out[key] = _pad_only_other(value, mask, pad, views)
    return td._new(out, td.batch_size)


def _pad_only_other(value: Any, mask: Tensor, pad: Any, views: dict[int, Tensor]) -> Any:
    if isinstance(value, Tensor):
        m = _leaf_mask(mask, value.ndim)
        return torch.where(m, torch.as_tensor(pad, dtype=value.dtype), value)
    if value._is_non_tensor:
        return value
    out = {k: _pad_only_other(v, mask, pad, views) for k, v in value._items_str()}
    return value._new(out, value.batch_size)


# ------------------------------------------------------------------ gather
def _expand_index(index: Tensor, shape: torch.Size, d: int) -> Tensor:
    """`index` broadcast over the trailing dims of `shape`, as `torch.gather` needs it."""
    idx = index.reshape(index.shape + (1,) * (len(shape) - index.ndim))
    target = list(shape)
    for i, size in enumerate(index.shape[: len(shape)]):
        target[i] = min(size, shape[i])
    target[d] = idx.shape[d]
    return idx.expand(target)


def _gather(td: Any, d: int, index: Tensor) -> Any:
    parts = lazy_parts(td)
    if parts is not None:
        members, sd = parts
        if d != sd and index.ndim > sd and index.shape[sd] == len(members):
            sub_d = d if d < sd else d - 1
            results = [_gather(m, sub_d, i) for m, i in zip(members, index.unbind(sd))]
            return td.lazy_stack(results, sd)
    out: dict[str, Any] = {}
    n = td.batch_dims
    expanded: dict[torch.Size, Tensor] = {}  # one expanded index per leaf shape
    for key, value in td._items_str():
        if type(value) is Tensor or (isinstance(value, Tensor) and not is_unbatched(value)):
            shape = value.shape
            idx = expanded.get(shape)
            if idx is None:
                idx = expanded[shape] = _expand_index(index, shape, d)
            out[key] = torch.gather(value, d, idx)
        elif value._is_non_tensor:
            out[key] = value._map_batch(
                lambda t: torch.gather(t, d, _expand_index(index, t.shape, d)), index.shape, n
            )
        else:
            out[key] = _gather(value, d, _expand_index(index, value.batch_size, d))
    return td._new(out, index.shape)


class MaskedMixin(TensorDictContract):
    """Methods of `td_core.TensorDictBase` from this family."""

    __slots__ = ()

    # ---------------------------------------------------------------- mask ops
    def where(
        self,
        condition: Tensor,
        other: Any,
        *,
        out: TensorDictContract | None = None,
        pad: Any = None,
        update_batch_size: bool = False,
    ) -> Self:
        """Leaf-wise `torch.where(condition, leaf, other)`: self where True, `other` elsewhere.

        Args:
            condition: a boolean mask over the leading batch dims (size-1 dims broadcast).
            other: a TensorDict (leaves paired by key), a tensor or a scalar.
            out: a TensorDict whose entries are set to the result's (returned).
            pad: the value used for keys present on one side only; without it,
                a key of self missing from `other` raises `KeyError`.
            update_batch_size: accepted for compatibility; the batch size is kept.

        Raises:
            RuntimeError: if `condition` is not boolean or does not fit the batch size.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.ones(3, 2)}, [3])
            >>> td.where(torch.tensor([True, False, True]), 0.0)["a"][:, 0]
            tensor([1., 0., 1.])
        """
        _check_mask(self, condition, "where")
        result = _mask_map(self, MASK_OPS["where"], condition, other, pad, {})
        return result if out is None else set_into(out, result)

    def masked_fill(self, mask: Tensor, value: float | bool) -> Self:
        """A copy with `value` written where `mask` (over leading batch dims) is True.

        The mask may have more dims than the batch size: each leaf takes them on its
        next dims (a `[16, 8, 1]` mask on batch `[16, 8]` fills whole rows).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2, 3)}, [2])
            >>> td.masked_fill(torch.tensor([True, False]), 1.0)["a"].sum(-1)
            tensor([3., 0.])
        """
        _check_mask(self, mask, "masked_fill", feature=True)
        return _mask_map(self, MASK_OPS["masked_fill"], mask, value, None, {})

    def masked_fill_(self, mask: Tensor, value: float | bool) -> Self:
        """Write `value` in place where `mask` (over leading batch dims) is True; returns self."""
        _check_mask(self, mask, "masked_fill_", feature=True)
        _mask_map(self, MASK_OPS["masked_fill_"], mask, value, None, {})
        return self

    def masked_select(self, mask: Tensor, *, inplace: bool = False) -> Self:
        """The batch elements where `mask` is True: the masked batch dims become one dim.

        Args:
            mask: a boolean mask whose shape is the batch size or its leading dims.
            inplace: rebind self's leaves to the result and return self (not on
                a lazy stack or `TensorDictParams`: `NotImplementedError`).

        Raises:
            IndexError: if the mask's shape does not match the batch dims it covers.
        """
        if isinstance(mask, Tensor) and mask.dtype is not torch.bool:
            raise RuntimeError(
                f"masked_select: the mask must be a boolean tensor, got dtype {mask.dtype}"
            )
        if inplace and (lazy_parts(self) is not None or no_grad_for(self)):
            raise NotImplementedError(
                f"masked_select(inplace=True) is not supported on {type(self).__name__}; "
                "use inplace=False (or to_tensordict() first)"
            )
        while mask.ndim > self.batch_dims and mask.shape[-1] == 1:
            mask = mask.squeeze(-1)
        result = self._index(mask)
        return rebind(self, result) if inplace else result

    def gather(
        self,
        dim: int,
        index: Tensor,
        out: TensorDictContract | None = None,
        *,
        inplace: bool = False,
    ) -> Self:
        """`torch.gather` along batch dim `dim` on every leaf; the result's batch size is `index.shape`.

        `index` is broadcast over each leaf's feature dims.

        Args:
            out: a TensorDict to write the result into (returned).
            inplace: rebind self's leaves to the result and return self (needs
                `index.ndim == batch_dims`; not on lazy stacks).

        Raises:
            RuntimeError: if `dim` is not a batch dim.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.arange(6).view(2, 3)}, [2, 3])
            >>> td.gather(1, torch.tensor([[2], [0]]))["a"]
            tensor([[2],
                    [3]])
        """
        n = self.batch_dims
        if inplace:
            if out is not None:
                raise ValueError(
                    "gather: out= and inplace=True are mutually exclusive; pass one of them"
                )
            if lazy_parts(self) is not None:
                raise NotImplementedError(
                    "gather(inplace=True) is not supported on a lazy stack; use inplace=False "
                    "(or to_tensordict() first)"
                )
            if index.ndim != n:
                raise NotImplementedError(
                    f"gather(inplace=True) needs index.ndim == batch_dims, got {index.ndim} "
                    f"and {n}; use inplace=False"
                )
        if not -n <= dim < n:
            raise BatchSizeError(
                f"gather: dim {dim} is not a batch dim of batch_size {list(self.batch_size)}"
            )
        if index.ndim == 0 or not len(index):
            raise RuntimeError(f"gather: the index is empty (shape {list(index.shape)})")
        result = _gather(self, normalize_dim(dim, n), index)
        if inplace:
            return rebind(self, result)
        if out is not None:
            return copy_into(out, result)
        names = self._raw_names()
        if names is not None and index.ndim == n:  # the index's dims stand for the batch dims
            carry_names(result, names)
        return result

    # ------------------------------------------------------- indexed reads/writes
    def get_at(self, key: NestedKey, index: Any, default: Any = NO_DEFAULT) -> Any:
        """`td.get(key)[index]`, reading only what is needed (through lazy stacks).

        Args:
            key: the entry's key.
            index: an index over the entry's leading dims.
            default: returned when the key is missing.

        Returns:
            The indexed entry; for a missing key, `default`, or `None` when no
            `default` is given (as `get`).

        Raises:
            KeyError: naming the key, if it is missing, no `default` is given and
                `set_get_defaults_to_none(False)` is in force (as `get`).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> TensorDict({"x": torch.arange(3)}, [3]).get_at("x", 1)
            tensor(1)
        """
        if type(key) is str and not is_lazy(type(self)):
            value = self._get_str(key, NO_DEFAULT)
            if type(value) is Tensor:
                return value[index]
        key = unravel_key(key)
        path = as_tuple(key)
        parent: Any = self
        for part in path[:-1]:
            parent = parent._get_str(part, NO_DEFAULT) if is_td(parent) else NO_DEFAULT
        try:
            value = parent._get_str(path[-1], NO_DEFAULT) if is_td(parent) else NO_DEFAULT
        except BatchSizeError:  # a lazy stack's ragged leaf: index the members first
            return parent._index(index).get(path[-1])
        if value is NO_DEFAULT:
            if default is NO_DEFAULT:  # get's rule: None, or its KeyError when switched off
                return self.get(key)
            return default
        if is_nt(value):  # index it the way the container indexes its leaves
            return parent._new({"_": value}, parent.batch_size)._index(index)._get_str("_")
        return value[index]

    def set_at_(
        self,
        key: NestedKey,
        value: Any,
        index: Any,
        *,
        non_blocking: bool = False,
    ) -> Self:
        """`td[key][index] = value` in place (allowed on a locked TensorDict); returns self.

        Raises:
            KeyError: naming the key, if it is missing.
            RuntimeError: if `value` does not fit `td[key][index]` (nothing is written).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"x": torch.zeros(3)}, [3])
            >>> td.set_at_("x", 1.0, 1)["x"]
            tensor([0., 1., 0.])
        """
        if type(key) is str:
            if not is_lazy(type(self)) and (type(value) is Tensor or type(value) in _SCALARS):
                dest = self._get_str(key, NO_DEFAULT)
                if type(dest) is Tensor:  # the usual case: a plain tensor leaf (not a Parameter)
                    try:
                        dest[index] = value  # torch checks the shape before it writes
                        return self
                    except RuntimeError:
                        pass  # the general path raises with the key and shapes named
            parent: Any = self
            leaf = key
        else:
            key = unravel_key(key)
            leaf = key if type(key) is str else key[-1]
            parent = self if isinstance(key, str) else self._parent_for(key, create=False)
        if no_grad_for(self):
            with torch.no_grad():
                set_at(parent, leaf, value, index, key)
        else:
            set_at(parent, leaf, value, index, key)
        return self

    def update_at_(
        self,
        input_dict_or_td: Mapping[Any, Any] | TensorDictContract,
        idx: Any,
        clone: bool = False,
        *,
        non_blocking: bool = False,
        keys_to_update: Iterable[NestedKey] | None = None,
    ) -> Self:
        """Write every leaf of the input at index `idx` into self's existing entries, in place.

        Every leaf is checked (key present, shape fits) before the first write.

        Raises:
            KeyError: naming a key of the input that self lacks.
            RuntimeError: naming a leaf whose shape does not fit its slot.
        """
        if keys_to_update is None and copy_at_plain(self, input_dict_or_td, idx, non_blocking):
            return self  # (clone=True copies as much: the values are copied in place)
        allowed = (
            None if keys_to_update is None else {as_tuple(unravel_key(k)) for k in keys_to_update}
        )
        plan = plan_at(self, input_dict_or_td, idx, allowed, clone, KeyNotFoundError, "update_at_")
        write_plan(self, plan, idx)
        return self

    def copy_at_(
        self,
        tensordict: TensorDictContract,
        idx: Any,
        non_blocking: bool = False,
        *,
        fast: bool = True,
    ) -> Self:
        """Copy `tensordict` into self at index `idx`, in place (`self[idx] = tensordict` without new keys).

        Raises:
            KeyError: (also a `RuntimeError` with `fast=True`, as upstream) naming
                a key of `tensordict` that self lacks.
        """
        if copy_at_plain(self, tensordict, idx, non_blocking):
            return self
        missing = MissingEntryError if fast else KeyNotFoundError
        plan = plan_at(self, tensordict, idx, None, False, missing, "copy_at_")
        write_plan(self, plan, idx)
        return self

    def copy_(self, tensordict: Any, non_blocking: bool = False) -> Self:
        """Copy the leaves of `tensordict` into self's entries in place; returns self.

        Keys that self lacks are skipped (as upstream); every shape is checked first.
        """
        dests: list[Tensor] = []
        srcs: list[Tensor] = []
        cls = type(self)
        if cls is type(tensordict) and cls._plain_nodes:
            if not plan_copy_dense(self, tensordict, dests, srcs):
                dests.clear()
                srcs.clear()
                plan_copy(self, tensordict, dests, srcs, ())
            copy_all(dests, srcs, non_blocking)
            return self
        if not is_td(tensordict):
            tensordict = self._new_validated(tensordict, self.batch_size, "")
        plan_copy(self, tensordict, dests, srcs, ())
        if no_grad_for(self):
            with torch.no_grad():
                copy_all(dests, srcs, non_blocking)
        else:
            copy_all(dests, srcs, non_blocking)
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the entry at `key` (every leaf of it, if it is a TensorDict) with `value`.

        Raises:
            KeyError: naming the key, if it is missing.
        """
        key = unravel_key(key)
        if (
            key not in self._keys_str()
            if type(key) is str
            else key not in self.keys(include_nested=True)
        ):
            raise KeyNotFoundError(
                f"fill_: key {key!r} not found (keys: {sorted(self._keys_str())})"
            )
        if no_grad_for(self):
            with torch.no_grad():
                fill(self, as_tuple(key), value)
        else:
            fill(self, as_tuple(key), value)
        return self

    def zero_(self) -> Self:
        """Zero every tensor leaf in place (a lazy stack's members included); returns self.

        Parameters (of this `TensorDictParams`, or of one nested in a TensorDict)
        are zeroed under `no_grad`, as their own `zero_` does.
        """
        if no_grad_for(self):
            with torch.no_grad():
                zero_all(storage_leaves(self))
            return self
        params: list[Tensor] = []
        zero_all(storage_leaves(self, [], params))
        if params:
            with torch.no_grad():
                zero_all(params)
        return self
