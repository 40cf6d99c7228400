"""Non-tensor leaves: any Python value stored in a TensorDict with the batch size.

`NonTensorData` is one value shared by every element of the batch.
`NonTensorStack` holds one value per element, as a numpy object array whose
shape is the batch size. Every batch operation (indexing, reshape, permute,
flip, ...) is applied to an index tensor `arange(numel).view(batch_size)`
and the values are gathered with the result, so values stay aligned with the
tensors under any shape op, through one mechanism.

One rule for stacking (upstream collapses equal values, a source of bugs):
stacking non-tensor leaves always gives a `NonTensorStack`, whether or not
the values are equal, and reading it gives a (nested) list.

A stack of one value repeated (what stacking or concatenating equal
`NonTensorData` gives) stores that value once and its batch size: joining,
splitting, unbinding and reshaping it cost O(1) in the batch's element count.
The object array is built only when the values are read one by one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._core.flags import capture_non_tensor_stack
from td_core._core.utils import BatchMeta
from td_core._leaves.linked_list import bare_values
from td_core._leaves.nontensor_arrays import (
    device_name,
    full,
    gather,
    member_parts,
    on_cpu,
    positions,
    positions_through,
    result_shapes,
    same_value,
    stack_elements,
)
from td_core._leaves.nontensor_shape import NonTensorShapeMixin
from td_core._leaves.nontensor_values import StackValuesMixin

__all__ = ["NonTensorData", "NonTensorStack", "is_non_tensor"]

_Fn = Callable[[torch.Tensor], torch.Tensor]


class _NonTensorBase(NonTensorShapeMixin, BatchMeta):
    """What both kinds of non-tensor leaf share: batch metadata and device."""

    _td_collection = True
    _is_non_tensor = True
    __slots__ = ("batch_size", "device")

    batch_size: torch.Size
    device: torch.device | None

    if TYPE_CHECKING:

        def as_array(self) -> np.ndarray: ...

    def _map_batch_multi(
        self, fn: Callable[[torch.Tensor], Sequence[torch.Tensor]]
    ) -> list[NonTensorStack | NonTensorData]:
        flat = self.as_array().reshape(-1)
        return [
            _from_array(gather(flat, idx), self.device)
            for idx in positions_through(fn, self.batch_size, self.device)
        ]

    def _set_at(self, index: Any, value: Any) -> NonTensorStack | NonTensorData:
        """A leaf equal to this one with `value` written at batch `index`."""
        mine = (self.data,) if isinstance(self, NonTensorData) else _uniform(self)
        theirs = (
            (value.data,)
            if isinstance(value, NonTensorData)
            else _uniform(value)
            if isinstance(value, _NonTensorBase)
            else None
        )
        if mine is not None and theirs is not None and same_value(theirs[0], mine[0]):
            return self  # type: ignore[return-value]  # writing the shared value back changes nothing (and needs no numpy)
        values = self.as_array().copy()
        flat = values.reshape(-1)
        where = positions(self.batch_size)[on_cpu(index)].numpy()
        if isinstance(value, _NonTensorBase):
            # element by element (one element included: a 0-d array would be stored whole)
            src = np.broadcast_to(value.as_array(), where.shape)
            flat[where.reshape(-1)] = src.reshape(-1)
        else:
            flat[where.reshape(-1)] = full(torch.Size([where.size]), value)
        return _from_array(values, self.device)

    @classmethod
    def _of_array(cls, values: np.ndarray, device: Any) -> Any:
        return _from_array(values, device)

    @classmethod
    def _stack_with(cls, leaves: list[Any], dim: int) -> Any:
        return stack_non_tensors(leaves, dim)

    @classmethod
    def _cat_with(cls, leaves: list[Any], dim: int) -> Any:
        return cat_non_tensors(leaves, dim)

    def _write_(self, value: Any) -> bool:
        """Write `value` into this leaf in place, if it supports that.

        Plain non-tensor leaves are immutable values: they return False and the
        container replaces them. Leaves backed by shared storage override this.
        """
        return False

    def to(self, device: torch.device | str | None) -> _NonTensorBase:
        out = copy.copy(self)
        out.device = None if device is None else torch.device(device)
        return out

    def clone(self, recurse: bool = True) -> _NonTensorBase:
        return copy.deepcopy(self) if recurse else copy.copy(self)

    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> _NonTensorBase:
        """The leaf itself: its values have no memory layout to change."""
        del inplace, canonical
        return self

    def tolist(
        self,
        *,
        convert_nodes: bool = True,
        convert_tensors: bool | str = False,
        tolist_first: bool = False,
        as_linked_list: bool = False,
    ) -> Any:
        """The values as nested lists over the batch dims; the keywords but
        `as_linked_list` change nothing (they are `TensorDictBase.tolist`'s). A bare
        leaf is an immutable value: its `LinkedList`s refuse item assignment, which
        the lists `td[key]` gives write back."""
        del convert_nodes, convert_tensors, tolist_first
        values = self.as_array().tolist()
        return bare_values(values, self) if as_linked_list and self.batch_size else values

    def data_ptr(self) -> int:
        """0: a non-tensor leaf holds no tensor data (as a tensor without storage).

        Lets code that collects `v.data_ptr()` over every leaf of a TensorDict
        (to check that an operation kept the same storages) run over non-tensor
        leaves too; upstream's non-tensor leaves contribute no address either.
        """
        return 0

    def __len__(self) -> int:
        if not self.batch_size:
            raise TypeError("len() of a 0-d non-tensor leaf")
        return self.batch_size[0]


class NonTensorData(_NonTensorBase):
    """One Python value shared by every element of a batch.

    Examples:
        >>> from td_core import TensorDict
        >>> td = TensorDict(batch_size=[2])
        >>> td["name"] = "cartpole"
        >>> td["name"], td[0]["name"]
        ('cartpole', 'cartpole')
    """

    # `__dict__` beside the slot: code written for upstream, where a leaf is a dataclass,
    # inspects `leaf.__dict__` (the value itself stays in its slot, never in the dict)
    __slots__ = ("__dict__", "data")

    data: Any

    def __init__(
        self,
        data: Any,
        batch_size: Sequence[int] = (),
        device: torch.device | str | None = None,
        *,
        names: Sequence[str | None] | None = None,
    ) -> None:
        """Wrap `data` for a batch of `batch_size`.

        Args:
            data: the Python value (a `NonTensorData` given here is unwrapped).
            batch_size: the batch size it is shared over.
            device: the device it reports.
            names: accepted as upstream's: dim names belong to the TensorDict that
                holds the leaf, so they are only checked (one per batch dim).
        """
        if isinstance(data, NonTensorData):
            data = data.data  # a leaf given a leaf holds its value, as upstream unwraps it
        elif isinstance(data, _NonTensorBase):
            raise TypeError(
                "NonTensorData wraps one value shared by the batch, got a NonTensorStack of "
                "several; store the stack itself or one of its values"
            )
        if names is not None and len(names) != len(batch_size):
            raise ValueError(
                f"NonTensorData got {len(names)} dim names {list(names)} for batch_size "
                f"{list(batch_size)}; give one name (or None) per batch dim"
            )
        self.data = data
        self.batch_size = torch.Size(batch_size)
        self.device = None if device is None else torch.device(device)

    def as_array(self) -> np.ndarray:
        return full(self.batch_size, self.data)

    def _map_batch(self, fn: _Fn, lead: torch.Size, n: int) -> NonTensorData:
        return NonTensorData(self.data, lead + self.batch_size[n:], self.device)

    def _map_batch_multi(
        self, fn: Callable[[torch.Tensor], Sequence[torch.Tensor]]
    ) -> list[NonTensorStack | NonTensorData]:
        return [
            NonTensorData(self.data, shape, self.device)
            for shape in result_shapes(fn, self.batch_size)
        ]

    def maybe_to_stack(self) -> NonTensorStack | NonTensorData:
        """This value over the batch as a `NonTensorStack` (the leaf itself when 0-d).

        The elements share the value (it is stored once, not copied).

        Examples:
            >>> from td_core import NonTensorData
            >>> stack = NonTensorData("a", batch_size=[2]).maybe_to_stack()
            >>> type(stack).__name__, stack.tolist()
            ('NonTensorStack', ['a', 'a'])
        """
        if not self.batch_size:
            return self
        return NonTensorStack._filled(self.data, self.batch_size, self.device)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped value (a function stored as an entry, read back by `apply`)."""
        return self.data(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "data": self.data,
            "batch_size": tuple(self.batch_size),
            "device": device_name(self.device),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.data = state["data"]
        self.batch_size = torch.Size(state["batch_size"])
        self.device = None if state["device"] is None else torch.device(state["device"])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NonTensorData):
            return bool(self.data == other.data) and self.batch_size == other.batch_size
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"NonTensorData(data={self.data}, batch_size={self.batch_size}, device={self.device})"
        )


class NonTensorStack(StackValuesMixin, _NonTensorBase):
    """One Python value per element of a batch; reading gives a (nested) list.

    Built from its elements, as upstream: `NonTensorStack("a", "b")` or
    `NonTensorStack(*leaves, stack_dim=1)`, where each element is a plain value or a
    non-tensor leaf (all of one batch size). A single object `numpy` array is taken
    as the values themselves, laid out by its shape.

    Args:
        *values: the elements, stacked along `stack_dim`.
        stack_dim: the new batch dim the elements are stacked along.
        batch_size: the expected batch size of the result (checked), needed only to
            give the shape of an empty stack.
        device: the device reported by the leaf.

    Raises:
        ValueError: elements of different batch sizes, or a `batch_size` that does not
            match the stack.

    Examples:
        >>> from td_core import NonTensorData, NonTensorStack
        >>> NonTensorStack("a", "b").tolist()
        ['a', 'b']
        >>> NonTensorStack(NonTensorData("x", batch_size=[2]), "y", stack_dim=1).tolist()
        Traceback (most recent call last):
        ...
        ValueError: NonTensorStack: the elements must have one batch size, got [[2], []]

    A stack built by stacking leaves remembers them: a batch op that selects
    exactly one of them (`unbind` along the stack dim, `td[i]`) gives that
    leaf back, so a `NonTensorData` survives a stack and an unbind, as upstream.
    """

    __slots__ = ("_array", "_fill", "_member_dim", "_members")
    _is_stack = True

    def __init__(
        self,
        *values: Any,
        stack_dim: int = 0,
        batch_size: Sequence[int] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if len(values) == 1 and isinstance(values[0], np.ndarray) and values[0].dtype == object:
            array = values[0]
        else:
            array = stack_elements(values, stack_dim, batch_size)
        if batch_size is not None and tuple(array.shape) != tuple(batch_size):
            raise ValueError(
                f"NonTensorStack: batch_size {list(batch_size)} does not match the "
                f"{len(values)} element(s) stacked along dim {stack_dim}, which give "
                f"{list(array.shape)}"
            )
        self._array: np.ndarray | None = array
        self._fill: tuple[Any] | None = None
        self.batch_size = torch.Size(array.shape)
        self.device = None if device is None else torch.device(device)
        self._members: tuple[_NonTensorBase, ...] | None = None
        self._member_dim = 0

    @classmethod
    def _filled(cls, value: Any, batch_size: torch.Size, device: torch.device | None) -> Any:
        """A stack of `batch_size` whose every element is `value`, which is stored once."""
        out = cls.__new__(cls)
        out._restore(None, (value,), batch_size, device)
        return out

    @property
    def _values(self) -> np.ndarray:
        """The values as an object array of the batch shape (built on first use when filled)."""
        array = self._array
        if array is None:
            assert self._fill is not None  # one of the two is always set
            array = self._array = full(self.batch_size, self._fill[0])
        return array

    def _fill_value(self) -> tuple[Any] | None:
        """`(value,)` when every element is `value` (stored once), else None."""
        # subclasses that build their own storage (td-memmap's shared stacks) have no fill
        return getattr(self, "_fill", None)

    def _uniform_parts(
        self, fn: Callable[[torch.Tensor], Sequence[torch.Tensor]]
    ) -> list[tuple[torch.Size, Any]] | None:
        """The shapes of `fn`'s results on a filled stack, each with the stacked leaf it is.

        See `member_parts`; None when `fn` refuses the expanded index (the caller then
        gathers the values).
        """
        members = getattr(self, "_members", None)
        if members is None:
            return [(shape, None) for shape in result_shapes(fn, self.batch_size)]
        return member_parts(fn, self.batch_size, self._member_dim, members)

    def _member_at(self, idx: torch.Tensor) -> _NonTensorBase | None:
        """The stacked leaf whose positions are exactly `idx`, if any."""
        # subclasses that build their own storage (td-memmap's shared stacks) may skip __init__
        members = getattr(self, "_members", None)
        d = getattr(self, "_member_dim", 0)
        if members is None or idx.numel() == 0 or idx.shape != members[0].batch_size:
            return None
        bs = self.batch_size
        i = (int(idx.reshape(-1)[0]) // math.prod(bs[d + 1 :])) % bs[d]
        return members[i] if torch.equal(idx, positions(bs).select(d, i)) else None

    def _map_batch_multi(
        self, fn: Callable[[torch.Tensor], Sequence[torch.Tensor]]
    ) -> list[NonTensorStack | NonTensorData]:
        fill = self._fill_value()
        if fill is not None:
            parts = self._uniform_parts(fn)
            if parts is not None:
                return [
                    member if member is not None else _filled(fill[0], shape, self.device)
                    for shape, member in parts
                ]
        flat = self._values.reshape(-1)
        out: list[Any] = []
        for idx in positions_through(fn, self.batch_size, self.device):
            member = self._member_at(idx)
            out.append(_from_array(gather(flat, idx), self.device) if member is None else member)
        return out

    def to(self, device: torch.device | str | None) -> NonTensorStack:
        fill = self._fill_value()
        if fill is not None:
            out = NonTensorStack._filled(
                fill[0], self.batch_size, None if device is None else torch.device(device)
            )
        else:
            out = NonTensorStack(self._values, device=device)
        members = getattr(self, "_members", None)
        if members is not None:
            out._members = tuple(m.to(device) for m in members)
            out._member_dim = self._member_dim
        return out

    @property
    def data(self) -> list[Any]:
        return self.tolist()

    def maybe_to_stack(self) -> NonTensorStack:
        """The stack itself (its elements are values already)."""
        return self

    def as_array(self) -> np.ndarray:
        return self._values

    def _map_batch(self, fn: _Fn, lead: torch.Size, n: int) -> NonTensorStack | NonTensorData:
        if getattr(fn, "fills_new", False):
            # a `new_*` constructor: its values mean nothing as positions; every new
            # element repeats the first value, as a `NonTensorData` keeps its one value
            first = self._values.flat[0] if self.batch_size.numel() else None
            return _filled(first, lead + self.batch_size[n:], self.device)
        fill = self._fill_value()
        if fill is not None:
            shape = lead + self.batch_size[n:]
            members = getattr(self, "_members", None)
            if members is None or shape != members[0].batch_size:
                return _filled(fill[0], shape, self.device)
            parts = self._uniform_parts(lambda t: (fn(t),))
            if parts is not None:
                member = parts[0][1]
                return _filled(fill[0], shape, self.device) if member is None else member
        idx = positions_through(fn, self.batch_size, self.device)
        member = self._member_at(idx)
        if member is not None:
            return member  # type: ignore[return-value]  # a stacked leaf is one of the two
        return _from_array(gather(self._values.reshape(-1), idx), self.device)

    def clone(self, recurse: bool = True) -> NonTensorStack:
        fill = self._fill_value()
        if fill is not None:  # a deep copy of the array would copy its one value once, too
            value = copy.deepcopy(fill[0]) if recurse else fill[0]
            out = NonTensorStack._filled(value, self.batch_size, self.device)
        else:
            out = NonTensorStack(
                copy.deepcopy(self._values) if recurse else self._values.copy(),
                device=self.device,
            )
        members = getattr(self, "_members", None)
        if members is not None:
            out._members = tuple(m.clone(recurse) for m in members)
            out._member_dim = self._member_dim
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NonTensorStack):
            mine, theirs = self._fill_value(), other._fill_value()
            if mine is not None and theirs is not None and self.batch_size == other.batch_size:
                return same_value(mine[0], theirs[0]) or not self.batch_size.numel()
            return self.batch_size == other.batch_size and bool(
                (self._values == other._values).all()
            )
        if isinstance(other, NonTensorData):  # a stack of one repeated value equals it
            value = other.data
            same = all(same_value(v, value) for v in self._values.flat)
            return self.batch_size == other.batch_size and same
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"NonTensorStack({self.tolist()!r}, batch_size={self.batch_size}, device={self.device})"
        )


def _filled(value: Any, shape: torch.Size, device: torch.device | None) -> Any:
    """`value` over a batch of `shape`: a filled stack, or the value itself when 0-d."""
    if not shape:
        return NonTensorData(value, (), device)
    return NonTensorStack._filled(value, shape, device)


def _from_array(values: np.ndarray, device: torch.device | None) -> NonTensorStack | NonTensorData:
    # a 0-d gather is one value: keep it a plain NonTensorData so td[i]["k"] gives the value
    if values.ndim == 0:
        return NonTensorData(values.item(), (), device)
    return NonTensorStack(values, device=device)


def stack_non_tensors(leaves: Sequence[_NonTensorBase], dim: int) -> Any:
    """Stack non-tensor leaves of equal batch size into one `NonTensorStack`.

    Two exceptions, both opt-in: leaves whose class defines `_stack_leaves`
    (`MetaData`) may stack into one leaf, and under
    `set_capture_non_tensor_stack(True)` equal values give one `NonTensorData`.
    """
    special = _collapse(leaves, dim)
    if special is not None:
        return special
    shared = _shared_value(leaves)
    if shared is not None:  # the value once, not one per element
        bs = list(leaves[0].batch_size)
        if not -len(bs) - 1 <= dim <= len(bs):
            raise IndexError(
                f"NonTensorStack: stack_dim {dim} is out of range for {len(bs) + 1} dims"
            )
        dim = dim % (len(bs) + 1)
        bs.insert(dim, len(leaves))
        out = NonTensorStack._filled(shared[0], torch.Size(bs), leaves[0].device)
    else:
        values = np.stack([leaf.as_array() for leaf in leaves], axis=dim)
        out = NonTensorStack(values, device=leaves[0].device)
    out._members, out._member_dim = tuple(leaves), dim
    return out


def _uniform(leaf: Any) -> tuple[Any] | None:
    """`(value,)` when every element of `leaf` is `value`, known without reading them."""
    if type(leaf) is NonTensorData:
        return (leaf.data,)
    if type(leaf) is NonTensorStack:
        return leaf._fill_value()
    return None


def _shared_value(leaves: Sequence[_NonTensorBase]) -> tuple[Any] | None:
    """`(value,)` when every leaf holds only `value` (and says so without reading), else None."""
    first = _uniform(leaves[0])
    if first is None:
        return None
    for leaf in leaves[1:]:
        value = _uniform(leaf)
        if value is None or not same_value(value[0], first[0]):
            return None
    return first


def _collapse(leaves: Sequence[_NonTensorBase], dim: int) -> Any:
    stack_leaves = getattr(type(leaves[0]), "_stack_leaves", None)
    if stack_leaves is not None:
        out = stack_leaves(leaves, dim)
        if out is not None:
            return out
    first = leaves[0]
    if (
        capture_non_tensor_stack()
        and isinstance(first, NonTensorData)
        and all(isinstance(v, NonTensorData) and same_value(v.data, first.data) for v in leaves)
    ):
        bs = list(first.batch_size)
        bs.insert(dim, len(leaves))
        return NonTensorData(first.data, torch.Size(bs), first.device)
    return None


def cat_non_tensors(leaves: Sequence[_NonTensorBase], dim: int) -> _NonTensorBase:
    """Concatenate non-tensor leaves: one `NonTensorData` when they are `NonTensorData` of one
    value (as upstream), else a `NonTensorStack`."""
    first = leaves[0].batch_size
    n = len(first)
    shared = _shared_value(leaves)
    if shared is not None and -n <= dim < n:
        dim %= n
        rest = first[:dim] + first[dim + 1 :]
        if all(
            len(leaf.batch_size) == n and leaf.batch_size[:dim] + leaf.batch_size[dim + 1 :] == rest
            for leaf in leaves
        ):  # the value once (mismatched sizes: numpy below names them)
            bs = list(first)
            bs[dim] = sum(leaf.batch_size[dim] for leaf in leaves)
            if all(type(leaf) is NonTensorData for leaf in leaves):
                return NonTensorData(shared[0], torch.Size(bs), leaves[0].device)
            return NonTensorStack._filled(shared[0], torch.Size(bs), leaves[0].device)
    return NonTensorStack(
        np.concatenate([leaf.as_array() for leaf in leaves], axis=dim), device=leaves[0].device
    )


def is_non_tensor(obj: Any) -> bool:
    """Whether `obj` is a non-tensor leaf (`NonTensorData` or `NonTensorStack`)."""
    return getattr(type(obj), "_is_non_tensor", False)
