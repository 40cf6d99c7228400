"""Nested keys: normalising them once at the boundary, and the keys() view.

A nested key is a `str` or a tuple whose items are strings or nested tuples
of strings. `unravel_key` flattens it once (`("a", ("b", ("c",)))` becomes
`("a", "b", "c")`; a one-item tuple becomes its string), so every internal
path works on `str` or a flat tuple of `str`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Union

from torch import Tensor

from td_core.errors import KeyTypeError

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract

__all__ = ["NestedKey", "unravel_key", "unravel_key_list", "default_is_leaf", "is_leaf_nontensor"]

NestedKey = Union[str, tuple[Any, ...]]  # noqa: UP007 - a runtime alias, valid on 3.10


def _flatten_into(key: tuple[Any, ...], out: list[str]) -> None:
    for item in key:
        if type(item) is str:
            out.append(item)
        elif isinstance(item, tuple):
            _flatten_into(item, out)
        elif isinstance(item, str):
            out.append(str(item))
        else:
            raise TypeError(f"nested keys are made of strings, got {item!r} in key {key!r}")


def unravel_key(key: NestedKey) -> str | tuple[str, ...]:
    """Flatten a nested key: a `str`, or a tuple of two or more `str`.

    Examples:
        >>> from td_core import unravel_key
        >>> unravel_key(("a", ("b", ("c",))))
        ('a', 'b', 'c')
        >>> unravel_key((("a",),))
        'a'
    """
    if type(key) is str:
        return key
    if type(key) is tuple and len(key) > 1:
        for item in key:
            if type(item) is not str:
                break
        else:  # already flat (the usual nested key): no copy
            return key
    if isinstance(key, tuple):
        out: list[str] = []
        _flatten_into(key, out)
        if not out:
            raise KeyError("the empty tuple is not a valid key")
        return out[0] if len(out) == 1 else tuple(out)
    if isinstance(key, str):
        return str(key)
    raise TypeError(
        f"keys are strings or tuples of strings, got {key!r} of type {type(key).__name__}"
    )


def unravel_key_list(keys: Any) -> list[str | tuple[str, ...]]:
    """`unravel_key` applied to each key of a list or tuple of keys.

    A tuple is a sequence of keys here, as upstream (`("a", "b")` gives
    `["a", "b"]`); a lone `str` becomes a one-item list.

    Examples:
        >>> from td_core import unravel_key_list
        >>> unravel_key_list(["a", ("b", ("c",)), ("d",)])
        ['a', ('b', 'c'), 'd']
        >>> unravel_key_list(("a", "b"))
        ['a', 'b']
    """
    if isinstance(keys, str):
        return [unravel_key(keys)]
    return [unravel_key(k) for k in keys]


def as_tuple(key: str | tuple[str, ...]) -> tuple[str, ...]:
    """A normalised key as a tuple of path components."""
    return (key,) if type(key) is str else key  # type: ignore[return-value]


def default_is_leaf(cls: type) -> bool:
    """Default `is_leaf` of `keys()`: tensors only (not sub-TensorDicts, not non-tensor data).

    This matches upstream: `keys(leaves_only=True)` lists tensor leaves, so
    code that calls tensor methods on each leaf keeps working.
    """
    return not getattr(cls, "_td_collection", False)


def is_leaf_nontensor(cls: type) -> bool:
    """An `is_leaf` that also counts non-tensor data as leaves."""
    return not getattr(cls, "_td_collection", False) or getattr(cls, "_is_non_tensor", False)


def _is_subtree(cls: type) -> bool:
    return getattr(cls, "_td_collection", False) and not getattr(cls, "_is_non_tensor", False)


class KeysView:
    """The keys of a TensorDict, optionally nested; supports `in` with nested keys.

    Iteration yields `str` for top-level keys and flat tuples for nested ones.
    """

    __slots__ = ("_td", "_include_nested", "_leaves_only", "_is_leaf", "_sort")

    def __init__(
        self,
        td: TensorDictContract,
        include_nested: bool,
        leaves_only: bool,
        is_leaf: Callable[[type], bool] | None,
        sort: bool = False,
    ) -> None:
        self._td = td
        self._include_nested = include_nested
        self._leaves_only = leaves_only
        self._is_leaf = is_leaf or default_is_leaf
        self._sort = sort

    def __iter__(self) -> Iterator[str | tuple[str, ...]]:
        if not (self._include_nested or self._leaves_only or self._sort):  # td.keys()
            return iter(self._td._keys_str())
        it = self._iter()
        if self._sort:
            return iter(sorted(it, key=lambda k: k if type(k) is str else ".".join(k)))
        return it

    def _iter(self) -> Iterator[str | tuple[str, ...]]:
        if not self._include_nested and not self._leaves_only:
            return iter(self._td._keys_str())
        if self._is_leaf is default_is_leaf:
            out: list[str | tuple[str, ...]] = []
            self._collect(self._td, (), out)
            return iter(out)
        return self._walk(self._td, ())

    def _collect(
        self, td: TensorDictContract, prefix: tuple[str, ...], out: list[str | tuple[str, ...]]
    ) -> None:
        """`_walk` for the default `is_leaf`, eagerly: no generator per level."""
        nested, leaves_only = self._include_nested, self._leaves_only
        for key, value in td._key_nodes():
            if type(value) is Tensor or not getattr(type(value), "_td_collection", False):
                out.append((*prefix, key) if prefix else key)
                continue
            if nested and not value._is_non_tensor:  # a node's keys come before its own
                self._collect(value, (*prefix, key), out)
            if not leaves_only:
                out.append((*prefix, key) if prefix else key)

    def items(self) -> list[tuple[str | tuple[str, ...], Any]]:
        """`(key, entry)` for the default `is_leaf`, a node before its keys (upstream's
        `items` order, where `keys` lists a node after its keys), read in
        the same walk (a nested key is not looked up again from the top)."""
        out: list[tuple[str | tuple[str, ...], Any]] = []
        self._collect_items(self._td, (), out)
        return out

    def _collect_items(
        self, td: TensorDictContract, prefix: tuple[str, ...], out: list[Any]
    ) -> None:
        nested, leaves_only = self._include_nested, self._leaves_only
        for key, value in td._items_str():
            if type(value) is Tensor or not getattr(type(value), "_td_collection", False):
                out.append(((*prefix, key) if prefix else key, value))
                continue
            if not leaves_only:
                out.append(((*prefix, key) if prefix else key, value))
            if nested and not value._is_non_tensor:
                self._collect_items(value, (*prefix, key), out)

    def _walk(
        self, td: TensorDictContract, prefix: tuple[str, ...]
    ) -> Iterator[str | tuple[str, ...]]:
        is_leaf = self._is_leaf
        default = is_leaf is default_is_leaf
        for key, value in td._key_items():
            if default and type(value) is Tensor:  # fast path: a tensor is a leaf, never a subtree
                yield (*prefix, key) if prefix else key
                continue
            full = prefix + (key,) if prefix else key
            cls = type(value)
            leaf = is_leaf(cls)
            if self._include_nested and _is_subtree(cls):
                yield from self._walk(value, prefix + (key,))
            if leaf or not self._leaves_only:
                yield full

    def __len__(self) -> int:
        # list(keys) calls this before iterating: count without building the keys
        if not self._include_nested and not self._leaves_only:
            return len(self._td._keys_str())
        if self._is_leaf is default_is_leaf:
            return self._count(self._td)
        return sum(1 for _ in self._iter())

    def _count(self, td: TensorDictContract) -> int:
        """How many keys `_collect` gives for `td`."""
        nested, leaves_only = self._include_nested, self._leaves_only
        n = 0
        for _, value in td._key_nodes():  # a lazy stack's entries are not stacked
            if type(value) is Tensor or not getattr(type(value), "_td_collection", False):
                n += 1
                continue
            if not leaves_only:
                n += 1
            if nested and not value._is_non_tensor:
                n += self._count(value)
        return n

    def __contains__(self, key: object) -> bool:
        try:
            key = unravel_key(key)  # type: ignore[arg-type]
        except KeyError:  # the empty tuple
            return False
        except TypeError:
            raise KeyTypeError(
                f"TensorDict keys are always strings. {key!r} is not a key: a NestedKey is a "
                "str or a tuple of str"
            ) from None
        if type(key) is str:
            if key not in self._td._keys_str():
                return False
            if self._leaves_only:
                return self._is_leaf(type(self._td._get_str(key)))
            return True
        if not self._include_nested:
            raise KeyTypeError(
                f"{key!r} in keys(): checks with tuples of strings is only supported for "
                "nested keys views: use keys(include_nested=True)"
            )
        td = self._td
        for part in key[:-1]:
            td = td._get_str(part, None)
            if td is None or not _is_subtree(type(td)) or self._is_leaf(type(td)):
                return False
        if key[-1] not in td._keys_str():
            return False
        if self._leaves_only:
            return self._is_leaf(type(td._get_str(key[-1])))
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Iterable):
            return NotImplemented
        try:
            return set(self) == set(other)
        except TypeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_TensorDictKeysView({list(self)}, include_nested={self._include_nested}, leaves_only={self._leaves_only})"


class TopKeysView(KeysView):
    """`td.keys()`: the top-level keys, live. The same view with nothing to check per call."""

    __slots__ = ()
    _include_nested = _leaves_only = _sort = False
    _is_leaf = staticmethod(default_is_leaf)

    def __init__(self, td: TensorDictContract) -> None:
        self._td = td

    def __iter__(self) -> Iterator[str | tuple[str, ...]]:
        return iter(self._td._keys_str())

    def __len__(self) -> int:
        return len(self._td._keys_str())
