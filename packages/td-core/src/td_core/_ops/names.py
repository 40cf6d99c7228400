"""Named batch dims (`names`, `refine_names`, `rename`, `rename_`).

A TensorDict stores one optional name per batch dim (`None` when every dim
is unnamed, the usual case, so unnamed containers pay nothing). Sub-TensorDicts
share the names of their parent's batch dims. Shape ops carry the names along
(see `names_after`): indexing drops the names of indexed-away dims,
`unsqueeze` inserts `None`, `permute` permutes them; ops that merge dims
(`view`, `flatten`) forget them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import entries_of, is_stack, is_td
from td_core._ops.lock_cache import drop
from td_core.errors import TDError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = [
    "NamesMixin",
    "NamesError",
    "NamesCountError",
    "names_after",
    "renamed_like",
    "carry_names",
    "named_entry",
    "adopt_names",
    "carry_index_names",
    "index_names",
    "inherit_names",
]

Names = tuple[str | None, ...]


class NamesError(TDError, RuntimeError):
    """Dim names that cannot be reconciled (`refine_names` on a differently named dim)."""


class NamesCountError(TDError, ValueError, IndexError):
    """As many dim names as batch dims are needed (upstream raises `IndexError` or `ValueError`)."""


def _check(names: Sequence[Any], ndim: int) -> Names:
    names = tuple(names)
    if len(names) != ndim:
        raise NamesCountError(
            f"got {len(names)} dim names {list(names)} for a TensorDict with {ndim} batch dims: "
            "the length of the dimension names must equate the tensordict batch_dims; "
            "give one name (or None) per batch dim"
        )
    for name in names:
        if name is not None and type(name) is not str:
            raise TypeError(f"dim names must be str or None, got {name!r} in {list(names)}")
    given = [n for n in names if n is not None]
    if len(given) != len(set(given)):
        raise ValueError(f"dim names must be unique, got {list(names)}")
    return names


def carry_names(result: Any, names: Sequence[str | None] | None) -> Any:
    """Give `result` (a TensorDict, or a tuple of them) the dim `names`; returns `result`."""
    if isinstance(result, tuple):
        for item in result:
            carry_names(item, names)
    elif is_td(result) and (names is None or len(names) == result.batch_dims):
        result._store_names(None if names is None else tuple(names))
    return result


def inherit_names(source: Any, result: Any) -> Any:
    """`result` with `source`'s names if it has the same batch size (for `_new`)."""
    names = source._raw_names()
    if names is not None and result.batch_size == source.batch_size:
        result._store_names(names)
    return result


def index_names(names: Names, index: Any) -> Names | None:
    """The names after `td[index]`; every result dim unnamed when that is unclear."""
    items = index if type(index) is tuple else (index,)
    ndim = len(names)
    used = 0
    advanced = 0
    for item in items:
        if item is None or item is Ellipsis:
            continue
        if isinstance(item, (torch.Tensor, np.ndarray, list)):
            advanced += 1
            t = torch.as_tensor(item)
            used += t.ndim if t.dtype is torch.bool else 1
        else:
            used += 1
    if advanced > 1:
        return None
    out: list[str | None] = []
    pos = 0
    for item in items:
        if item is None:
            out.append(None)
        elif item is Ellipsis:
            rest = ndim - used
            out.extend(names[pos : pos + rest])
            pos += rest
        elif isinstance(item, slice):
            out.append(names[pos])
            pos += 1
        elif isinstance(item, (torch.Tensor, np.ndarray, list)):
            t = torch.as_tensor(item)
            if t.dtype is torch.bool:  # a mask over one dim keeps it (and its name)
                out.append(names[pos] if t.ndim == 1 else None)
                pos += t.ndim
            else:
                out.extend([names[pos]] if t.ndim == 1 else [None] * t.ndim)
                pos += 1
        else:  # an integer: the dim goes away
            pos += 1
    out.extend(names[pos:])
    return tuple(out) if any(n is not None for n in out) else None


def named_entry(names: Names, value: Any, key: Any) -> Any:
    """The sub-TensorDict `value`, set at `key` under a parent named `names`, named as its parent.

    Its leading dims take the parent's names and its extra dims keep their own.
    `value` itself when it is named so already, else a shallow copy (the caller's
    object is never renamed).

    Raises:
        NamesError: (a `RuntimeError`) a leading dim of `value` has another name.
    """
    own = value._raw_names()
    n = len(names)
    if own is not None and own[:n] == names:
        return value
    if own is None:
        new = (*names, *(None,) * (value.batch_dims - n))
    else:
        clash = [(o, p) for o, p in zip(own[:n], names) if o is not None and o != p]
        if clash:
            raise NamesError(
                f"cannot set entry {key!r}: refine_names: cannot coerce its dim names {list(own)} "
                f"with the parent's names {list(names)} ({clash[0][0]!r} is not "
                f"{clash[0][1]!r}); rename the entry's dims first"
            )
        new = (*names, *own[n:])
    try:
        checked = _check(new, value.batch_dims)
    except ValueError as err:  # one of its own extra dims has a name of the parent's
        raise ValueError(f"cannot set entry {key!r}: {err}") from None
    copy = value.clone(recurse=False)
    copy._store_names(checked)
    return copy


def adopt_names(parent: Any, value: Any) -> None:
    """Name an unnamed `parent`'s batch dims as the leading dims of `value`, a sub-TensorDict set in it.

    Views (whose names are their source's) are left as they are.
    """
    if parent._writes_through:
        return
    own = value._raw_names()
    if own is not None:
        lead = own[: parent.batch_dims]
        if any(n is not None for n in lead):
            parent._store_names(tuple(lead))


def carry_index_names(source: Any, result: Any, index: Any) -> Any:
    """Name the dims of `result = source[index]` (for a `source` with named dims); returns `result`.

    The top's names are indexed (`index_names`). A sub-TensorDict with more batch
    dims than its parent keeps the names of its extra dims: the index reads the
    leading dims only. Lazy stacks keep the names on their members and are left
    to their own indexing.
    """
    names = source._raw_names()
    carry_names(result, None if names is None else index_names(names, index))
    _index_sub_names(source, result, index, source.batch_dims)
    return result


def _index_sub_names(source: Any, result: Any, index: Any, n: int) -> None:
    source, result = entries_of(source), entries_of(result)  # a tensorclass: what it wraps
    if is_stack(source) or is_stack(result):
        return
    for key, sub in source._items_str():
        if not is_td(sub) or sub._is_non_tensor or is_stack(sub):
            continue
        out = result._get_str(key, None)
        if out is None or not is_td(out):
            continue
        own = sub._raw_names()
        if own is not None and len(own) > n:
            lead = index_names(own[:n], index)
            extra = own[n:]
            width = out.batch_dims - len(extra)
            full = (*(lead if lead is not None else (None,) * width), *extra)
            if len(full) == out.batch_dims:
                out._store_names(full)
        _index_sub_names(sub, out, index, n)


def names_after(
    names: Names | None, *, drop: Sequence[int] = (), insert: Sequence[int] = ()
) -> Names | None:
    """The names once the dims `drop` are removed and then `None` is inserted at `insert`."""
    if names is None:
        return None
    out: list[str | None] = [n for i, n in enumerate(names) if i not in set(drop)]
    for pos in sorted(insert):
        out.insert(pos, None)
    return tuple(out) if any(n is not None for n in out) else None


def renamed_like(td: Any, out: Any, drop: Sequence[int], insert: Sequence[int]) -> Any:
    """`out` (a reshape of `td`) named as `td`: the `drop`ped dims' names go, the dims at
    `insert` are unnamed, the others keep theirs (`out` as is when `td` has no names)."""
    names = td._raw_names()
    if names is None or out is td:
        return out
    return carry_names(out, names_after(names, drop=drop, insert=insert))


def _check_sub_names(td: Any, names: Names, n: int) -> None:
    """Refuse `names` for `td` if a sub-TensorDict names one of its extra dims the same.

    `n` is the number of `td`'s dims its sub-TensorDicts carry first (one less
    for the members of a lazy stack, which lack the stack dim).
    """
    for sub in td._subtrees():
        carried = n - 1 if is_stack(td) else n
        own = sub._raw_names()
        if own is not None:
            clash = [name for name in own[carried:] if name is not None and name in names]
            if clash:
                raise ValueError(
                    f"dim names must be unique: {list(names)} would name a dim {clash[0]!r} "
                    f"in a sub-TensorDict that already has a dim {clash[0]!r} ({list(own)})"
                )
        _check_sub_names(sub, names, carried)


class NamesMixin(TensorDictContract):
    """Named-dimension methods of `td_core.TensorDictBase`."""

    __slots__ = ()

    # ------------------------------------------------------------------ storage
    def _raw_names(self) -> Names | None:
        """The stored names, or `None` when no dim is named."""
        names = getattr(self, "_names", None)
        if names is not None and len(names) != self.batch_dims:  # batch size changed since
            return None
        return names

    def _store_names(self, names: Names | None) -> None:
        """Store `names` (already checked) here and on the sub-TensorDicts' leading dims."""
        if names is not None and all(n is None for n in names):
            names = None
        if self._is_locked:  # results cached while locked carry the old names
            drop(self)
        object.__setattr__(self, "_names", names)
        n = len(self.batch_size)
        for sub in self._subtrees():
            extra = sub.batch_dims - n
            if names is None:
                own = sub._raw_names()
                sub._store_names(None if own is None else (*(None,) * n, *own[n:]))
            else:
                own = sub._raw_names()
                sub._store_names((*names, *(own[n:] if own is not None else (None,) * extra)))

    def _set_names(self, names: Sequence[str | None] | None) -> None:
        new = None if names is None else _check(names, self.batch_dims)
        if new is not None:
            _check_sub_names(self, new, self.batch_dims)
        self._store_names(new)

    # ------------------------------------------------------------------ public
    @property
    def names(self) -> list[str | None]:
        """The name of each batch dim (`None` for unnamed dims).

        Setting it names the dims in place (sub-TensorDicts follow).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(3, 4)}, [3, 4], names=["time", None])
            >>> td.names
            ['time', None]
            >>> td[0].names, td.unsqueeze(0).names
            ([None], [None, 'time', None])
        """
        names = self._raw_names()
        return [None] * self.batch_dims if names is None else list(names)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        self._set_names(value)

    def refine_names(self, *names: Any) -> Self:
        """Name unnamed dims, in place; `...` stands for the dims not listed (they keep their names).

        A dim that already has a name must be given that name (`None` for it is
        a clash, as upstream).

        Raises:
            ValueError: wrong number of names, or duplicates.
            NamesError: (a `RuntimeError`) a named dim given another name or `None`.
        """
        ndim = self.batch_dims
        current = self.names
        given: list[Any] = list(names)
        if Ellipsis in names:
            i = names.index(Ellipsis)
            fill = ndim - (len(names) - 1)
            if fill < 0:
                raise NamesCountError(f"refine_names: too many names {list(names)} for {ndim} dims")
            given = [*names[:i], *current[i : i + fill], *names[i + 1 :]]
        if len(given) != ndim:
            _check(given, ndim)  # raises the count error
        for old, name in zip(current, given):  # a clash first, as upstream, then duplicates
            if old is not None and old != name:
                raise NamesError(
                    f"refine_names: cannot coerce TensorDict names {current} with {list(names)}: "
                    f"the dim named {old!r} cannot be given {name!r}; use rename() to change names"
                )
        self._set_names(given)
        return self

    def rename(self, *names: Any, **rename_map: str) -> Self:
        """A shallow copy with renamed batch dims: `rename("a", "b")` or `rename(a="x")`."""
        new = self._renamed(names, rename_map)
        out = self.clone(recurse=False)
        out._store_names(new)
        return out

    def rename_(self, *names: Any, **rename_map: str) -> Self:
        """Rename the batch dims in place (also allowed when locked); see `rename`."""
        self._store_names(self._renamed(names, rename_map))
        return self

    def _renamed(self, names: tuple[Any, ...], rename_map: dict[str, str]) -> Names | None:
        if names and rename_map:
            raise TypeError("rename: pass either names positionally or a mapping as keywords")
        if rename_map:
            current = self.names
            unknown = [k for k in rename_map if k not in current]
            if unknown:
                raise ValueError(
                    f"rename: dims {unknown} are not among the dim names {current}; "
                    "name them first with refine_names()"
                )
            new = _check([rename_map.get(n, n) if n else n for n in current], self.batch_dims)
        elif len(names) == 1 and names[0] is None:
            return None
        else:
            new = _check(names, self.batch_dims)
        _check_sub_names(self, new, self.batch_dims)
        return new
