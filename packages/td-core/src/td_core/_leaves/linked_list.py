"""`LinkedList`: the values of a non-tensor entry, as a list whose item assignment writes back.

`td["names"]` of a `NonTensorStack` entry reads a (nested) list of its values. Code
written for upstream then assigns into that list (`values[0] = "z"`) and expects the
TensorDict to hold the new value, so a plain list would drop that write silently. A
`LinkedList` remembers where it was read from (the container, the key, and for an
inner list of a nested one its position) and sends each item assignment there first,
through `set_at_`: if the container refuses the write, the list is unchanged too.

Changing the list's length (`append`, `pop`, `del`, ...) cannot be written back (a
batch has a fixed size): it unlinks the list, as upstream. `sort` and `reverse`
reorder the items, which is a write of every item, so they write back.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any, SupportsIndex

import numpy as np
import torch
import torch.utils._pytree as pytree

from td_core.errors import KeyNotFoundError

__all__ = ["LinkedList", "bare_values", "linked_rows", "linked_values"]

# (container, key or None for the container's own rows, index of this list's first dims)
_Link = tuple[Any, Any, tuple[int, ...]]


class LinkedList(list):
    """A list of a non-tensor entry's values whose item assignments write back into it.

    `td[key]` (and `get_non_tensor`, a tensorclass field, `tolist(as_linked_list=True)`)
    returns one for a `NonTensorStack` entry. `values[i] = v` (slices too, and the
    inner lists of a nested one) writes `v` into the TensorDict first; if that
    raises, the list is left as it was. Methods that change the length (`append`,
    `extend`, `insert`, `pop`, `remove`, `clear`, `del`, `+=`, `*=`) change the list
    only and unlink it. Copies and pickles are plain, unlinked lists of the items.

    Args:
        iterable: the items. Built this way, the list is not linked to anything.
        td: a bare non-tensor leaf the items came from. td's leaves are immutable
            values, so item assignment on such a list raises `TypeError` (read the
            entry through the TensorDict holding it to get a list that writes back).

    Examples:
        >>> from td_core import TensorDict
        >>> td = TensorDict(batch_size=[3])
        >>> td["names"] = ["a", "b", "c"]
        >>> values = td["names"]
        >>> values[0] = "z"
        >>> td["names"]
        LinkedList(['z', 'b', 'c'])
        >>> values.append("d")  # unlinks: the batch keeps its size
        >>> td["names"].tolist()
        ['z', 'b', 'c']
    """

    __slots__ = ("_link",)

    def __init__(self, iterable: Iterable[Any] = (), /, *, td: Any = None) -> None:
        super().__init__(iterable)
        self._link: _Link | None = None if td is None else (td, _BARE, ())

    @classmethod
    def _bound(cls, items: list[Any], owner: Any, key: Any, prefix: tuple[int, ...]) -> LinkedList:
        out = cls(items)
        out._link = (owner, key, prefix)
        return out

    def __setitem__(self, index: SupportsIndex | slice, value: Any) -> None:
        link = self._link
        if link is None:
            list.__setitem__(self, index, value)
            return
        owner, key, prefix = link
        if key is _BARE:
            raise TypeError(
                f"cannot assign into the values of a bare {type(owner).__name__}: td's "
                "non-tensor leaves are immutable values; read the entry through the "
                "TensorDict holding it (td[key]) to get a list that writes back"
            )
        entry = owner if key is None else owner.get(key, _MISSING)
        if entry is _MISSING:
            raise KeyNotFoundError(
                f"cannot write into the values of {_name(key)}: the TensorDict they were "
                "read from no longer holds that key"
            )
        inner = tuple(entry.batch_size[len(prefix) + 1 :])
        if isinstance(index, slice):
            where = range(len(self))[index]
            items = list(value)
            if len(items) != len(where):
                raise ValueError(
                    f"cannot assign {len(items)} values to {len(where)} elements of the "
                    f"values of {_name(key)}: a batch keeps its size"
                )
            if not items:
                return
            batch_index = (*prefix, torch.tensor(list(where), dtype=torch.long))
            _write(owner, key, entry, items, (len(items), *inner), batch_index)
            linked = [_relink(v, owner, key, (*prefix, i), inner) for i, v in zip(where, items)]
            list.__setitem__(self, index, linked)
            return
        i = range(len(self))[operator.index(index)]  # IndexError as a list raises it
        _write(owner, key, entry, value, inner, (*prefix, i))
        list.__setitem__(self, i, _relink(value, owner, key, (*prefix, i), inner))

    def tolist(self) -> list[Any]:
        """A plain, unlinked copy of the items; inner `LinkedList`s become lists too."""
        return [v.tolist() if isinstance(v, LinkedList) else v for v in self]

    def sort(self, *, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        """Sort the items, writing the new order into the TensorDict when linked."""
        self[:] = sorted(self, key=key, reverse=reverse)

    def reverse(self) -> None:
        """Reverse the items, writing the new order into the TensorDict when linked."""
        self[:] = self[::-1]

    def _unlink(self) -> None:
        self._link = None

    def append(self, item: Any, /) -> None:
        """Append `item`; the list is no longer linked (a batch keeps its size)."""
        self._unlink()
        list.append(self, item)

    def extend(self, items: Iterable[Any], /) -> None:
        """Extend with `items`; the list is no longer linked."""
        self._unlink()
        list.extend(self, items)

    def insert(self, index: SupportsIndex, item: Any, /) -> None:
        """Insert `item` before `index`; the list is no longer linked."""
        self._unlink()
        list.insert(self, index, item)

    def pop(self, index: SupportsIndex = -1, /) -> Any:
        """Remove and return the item at `index`; the list is no longer linked."""
        self._unlink()
        return list.pop(self, index)

    def remove(self, item: Any, /) -> None:
        """Remove the first item equal to `item`; the list is no longer linked."""
        self._unlink()
        list.remove(self, item)

    def clear(self) -> None:
        """Remove every item; the list is no longer linked."""
        self._unlink()
        list.clear(self)

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        self._unlink()
        list.__delitem__(self, index)

    def __iadd__(self, items: Iterable[Any]) -> LinkedList:  # type: ignore[misc]  # += keeps the object (list.__add__ builds a list)
        self._unlink()
        return list.__iadd__(self, items)

    def __imul__(self, n: SupportsIndex) -> LinkedList:
        self._unlink()
        return list.__imul__(self, n)

    def __repr__(self) -> str:
        return f"LinkedList({list.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # copies and pickles hold the items only: a link to a live TensorDict does not travel
        return (type(self), (list(self),))


class _Bare:
    """The key of a list read from a bare leaf: it has no container to write into."""


_BARE = _Bare()
_MISSING = object()  # `get`'s default: the key is gone from the container


def linked_values(leaf: Any, owner: Any, key: Any) -> Any:
    """What reading the non-tensor `leaf` at `key` of `owner` gives: its value, or for a
    stack, its values as (nested) `LinkedList`s that write back into `owner`."""
    if not getattr(type(leaf), "_is_stack", False):
        return leaf.data
    return _link_nested(leaf.tolist(), owner, key, (), leaf.batch_dims)


def linked_rows(rows: list[Any], td: Any) -> LinkedList:
    """`td.tolist()`'s nested lists `rows` as `LinkedList`s: assigning a row writes `td[i]`."""
    return _link_nested(rows, td, None, (), td.batch_dims)


def bare_values(values: list[Any], leaf: Any) -> LinkedList:
    """The nested lists `values` of a bare `leaf` as `LinkedList`s that refuse assignment."""
    return _link_nested(values, leaf, _BARE, (), leaf.batch_dims)


def _link_nested(
    items: list[Any], owner: Any, key: Any, prefix: tuple[int, ...], depth: int
) -> Any:
    if depth > 1:
        items = [_link_nested(v, owner, key, (*prefix, i), depth - 1) for i, v in enumerate(items)]
    return LinkedList._bound(items, owner, key, prefix)


def _relink(
    value: Any, owner: Any, key: Any, prefix: tuple[int, ...], inner: tuple[int, ...]
) -> Any:
    """The item stored in the list after writing `value` at `prefix`: a row is linked too."""
    if not inner:
        return value
    return _link_nested(list(value), owner, key, prefix, len(inner))


def _write(
    owner: Any, key: Any, entry: Any, value: Any, shape: tuple[int, ...], index: Any
) -> None:
    """Write `value`, laid out over a slot of batch `shape`, at `index` of `owner`'s `key`
    (or of `owner`'s own rows for `key=None`); nothing is written if it does not fit."""
    if key is None and not shape:
        owner[index] = value  # one row: a dict or a TensorDict, as `td[i] = ...` takes it
        return
    cells = np.empty(shape, dtype=object)  # the items, checked against the slot's dims
    _fill(cells, value, (), key)
    if key is not None:  # one value stays whole (a list value too); rows become a stack
        owner.set_at_(key, entry._of_array(cells, entry.device), index)
        return
    rows = owner[index].clone()  # several rows: built on a copy, then written at once
    for at in np.ndindex(*shape):
        rows[at] = cells[at]
    owner[index] = rows


def _fill(out: np.ndarray, value: Any, at: tuple[int, ...], key: Any) -> None:
    if len(at) == out.ndim:
        if out.ndim:
            out[at] = value  # a full index sets the one cell: a list value is kept whole
        else:
            out.fill(value)
        return
    n = out.shape[len(at)]
    if not isinstance(value, (list, tuple)) or len(value) != n:
        got = f"{len(value)} items" if isinstance(value, (list, tuple)) else type(value).__name__
        raise ValueError(
            f"cannot assign {got} to {n} elements (batch dims {list(out.shape)}) of the "
            f"values of {_name(key)}"
        )
    for i, v in enumerate(value):
        _fill(out, v, (*at, i), key)


def _name(key: Any) -> str:
    return "the TensorDict's rows" if key is None else f"entry {key!r}"


pytree.register_pytree_node(
    LinkedList,
    lambda values: (list(values), None),
    lambda children, _: LinkedList(children),
    serialized_type_name="td_core.LinkedList",
    flatten_with_keys_fn=lambda values: (
        [(pytree.SequenceKey(i), v) for i, v in enumerate(values)],
        None,
    ),
)
