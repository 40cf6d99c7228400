"""Results cached on a locked TensorDict (`flatten_keys`, `unflatten_keys`, `sorted_keys`).

A locked TensorDict cannot gain, lose or replace an entry, so a result that
depends only on which entries it holds can be computed once and handed back
while the lock lasts, as upstream does (`tensordict.utils.cache`). The cache
of a TensorDict is a table of its own (`td._cache`, a read-only mapping from
method name to `{arguments: result}`, or `None`); the rules that keep it from
ever answering with stale data:

- It is used only while the TensorDict is locked, never while compiling, and
  only by kinds that set `_caches_when_locked` (dense TensorDicts, lazy stacks,
  `TensorDictParams`, lazy legacy views; not a `SubTensorDict`, whose lock is its
  source's). A lazy view's lock is its source's (`_lock_owner`): what is cached on
  the view is dropped whenever the source's cache is.
- A result that holds leaves is cached only when it holds the stored leaf
  objects themselves (`shares_leaves`), so in-place writes to the leaves show
  through it: not when reading an entry gives a copy (a lazy stack below a
  dense TensorDict, a sub-TensorDict view, a `TensorDictParams` whose
  parameters `nn.Module` may swap). A lazy view's reads are views of its
  source's leaves (the same memory): it qualifies where its source does. A lazy
  stack itself is keyed by its members too, so a changed member list is a miss.
- A cached TensorDict result is handed back locked (it is shared by every
  caller, unlike upstream's, which callers may change). Unlocking it drops the
  cache it sits in.
- `drop(td)` forgets the cache of `td`, of the locked TensorDicts above it, of
  the TensorDicts whose cache holds it and of the lazy views over it. It runs when a TensorDict is
  unlocked, and when a locked one replaces an entry (an in-place write of a
  non-tensor value), changes its dim names or its device.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar

from torch.compiler import is_compiling

from td_core._core.traverse import is_td, stack_parts
from td_core._core.utils import NO_DEFAULT
from td_core._ops.lock_graph import holders_of
from td_core._ops.per_object import PerObject

__all__ = ["cache_view", "cache_when_locked", "cached", "drop", "shares_leaves"]

T = TypeVar("T")
P = ParamSpec("P")
S = TypeVar("S")


class _Cache:
    """What one locked TensorDict remembers."""

    __slots__ = ("entries", "members", "shares")

    def __init__(self, members: tuple[Any, ...] | None) -> None:
        self.entries: dict[str, dict[Hashable, Any]] = {}
        self.members = members  # a lazy stack's (stack_dim, *members) when filled
        self.shares: bool | None = None  # `shares_leaves`, once asked


_CACHES = PerObject("lock_cache._CACHES")  # locked TensorDict -> _Cache
_ORIGINS = PerObject(
    "lock_cache._ORIGINS"
)  # node of a cached result -> {id(source): weakref to source}
_VIEWS = PerObject(
    "lock_cache._VIEWS"
)  # lock owner -> {id(view): weakref to a lazy view over it with a cache}


def _node(td: Any) -> Any:
    """The object locks are kept on (a tensorclass: the TensorDict of its fields)."""
    return td._tensordict if getattr(type(td), "_td_tensorclass", False) else td


def _members(td: Any) -> tuple[Any, ...] | None:
    parts = stack_parts(td)
    return None if parts is None else (parts[1], *parts[0])


def _same_members(old: tuple[Any, ...] | None, new: tuple[Any, ...] | None) -> bool:
    if old is None or new is None:
        return old is new
    return len(old) == len(new) and old[0] == new[0] and all(a is b for a, b in zip(old, new))


def _plain_tree(td: Any) -> bool:
    node = _node(td)
    return bool(type(node)._plain_nodes) and all(_plain_tree(sub) for sub in node._subtrees())


def shares_leaves(td: Any) -> bool:
    """Whether results built from `td`'s entries hold its stored leaf objects (not copies).

    True for a tree of dense TensorDicts (tensorclasses over them included),
    and for a lazy stack of such trees (its structural ops work member by
    member); False where a read gives a new object.
    """
    owner = getattr(td, "_lock_owner", None)
    if owner is not None:  # a lazy view: its reads view the owner's leaves
        return shares_leaves(owner)
    parts = stack_parts(td)
    if parts is not None:
        return all(shares_leaves(member) for member in parts[0])
    return _plain_tree(td)


def cache_view(td: Any) -> MappingProxyType[str, dict[Hashable, Any]] | None:
    """`td._cache`: the cached results by method name (read-only), `None` when there are none."""
    cache = _CACHES.get(td)
    return None if cache is None else MappingProxyType(cache.entries)


def cached(td: Any, name: str, key: Hashable, compute: Callable[[], T], *, holds_leaves: bool) -> T:
    """`compute()`, remembered on `td` under `(name, key)` while `td` stays locked.

    Args:
        td: the TensorDict the method was called on.
        name: the method's name (the key of `td._cache`).
        key: the arguments that select the result (hashable; else nothing is cached).
        compute: computes the result.
        holds_leaves: the result holds `td`'s leaves (cached only if `shares_leaves(td)`).

    Returns:
        the cached result, or the freshly computed one.
    """
    if not td._is_locked or not type(td)._caches_when_locked or is_compiling():
        return compute()
    try:
        hash(key)
    except TypeError:  # e.g. an unhashable `is_leaf`
        return compute()
    members = _members(td)
    cache = _CACHES.get(td)
    if cache is None or not _same_members(cache.members, members):
        cache = _Cache(members)
        _CACHES.set(td, cache)
        if td._lock_owner is not None:
            _note_view(td._lock_owner, td)
    table = cache.entries.get(name)
    if table is not None:
        hit = table.get(key, NO_DEFAULT)
        if hit is not NO_DEFAULT:
            return hit
    if holds_leaves:
        if cache.shares is None:
            cache.shares = shares_leaves(td)
        if not cache.shares:
            return compute()
    out = compute()
    if is_td(out) and out is not td:
        _adopt(td, out)
    if table is None:
        table = cache.entries[name] = {}
    table[key] = out
    return out


def cache_when_locked(
    name: str, key: Callable[..., Hashable | None], *, holds_leaves: bool
) -> Callable[[Callable[Concatenate[S, P], T]], Callable[Concatenate[S, P], T]]:
    """Decorate a method so that its results are `cached` on a locked TensorDict.

    Args:
        name: the key of `td._cache` the results go under.
        key: called with the method's arguments (not `self`); returns their
            cache key, or `None` for a call that must not be cached (in place).
        holds_leaves: as for `cached`.
    """

    def decorate(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
        @functools.wraps(method)
        def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
            if not self._is_locked:  # type: ignore[attr-defined]  # the usual case: one check
                return method(self, *args, **kwargs)
            arguments = key(*args, **kwargs)
            if arguments is None:
                return method(self, *args, **kwargs)
            return cached(
                self,
                name,
                arguments,
                lambda: method(self, *args, **kwargs),
                holds_leaves=holds_leaves,
            )

        return wrapper

    return decorate


def _tree(td: Any, out: dict[int, Any]) -> dict[int, Any]:
    """Every node under `td` (itself included), by id."""
    node = _node(td)
    if id(node) not in out:
        out[id(node)] = node
        for sub in node._subtrees():
            _tree(sub, out)
    return out


def _adopt(source: Any, result: Any) -> None:
    """Lock `result` and note `source` as the origin of the nodes it does not share with it."""
    own = _tree(source, {})
    result._lock_tree(True)  # not `lock_()`: the result does not join a lock graph
    for key, node in _tree(result, {}).items():
        if key not in own:
            _link(_ORIGINS, node, source)


def _note_view(owner: Any, view: Any) -> None:
    """Remember that `view` (whose lock is `owner`'s) caches results: `drop(owner)` drops them."""
    _link(_VIEWS, owner, view)


def _link(table: PerObject, node: Any, other: Any) -> None:
    """Note in `table` that dropping `node`'s cache must drop `other`'s (held weakly)."""
    links = table.get(node)
    if links is None:
        links = {}
        table.set(node, links)
    links[id(other)] = weakref.ref(other)


def drop(td: Any, seen: set[int] | None = None) -> None:
    """Forget the results cached on `td`, above it in a locked tree, and built from it."""
    node = _node(td)
    if seen is None:
        seen = set()
    elif id(node) in seen:
        return
    seen.add(id(node))
    _CACHES.pop(node, None)
    if node is not td:
        _CACHES.pop(td, None)
    for holder in holders_of(node):
        drop(holder, seen)
    for table in (_ORIGINS, _VIEWS):  # the sources it was built from, the views over it
        links = table.pop(node, None) or {}
        for ref in links.values():
            other = ref()
            if other is not None:
                drop(other, seen)
