"""The lock graph: which locked TensorDicts hold a sub-TensorDict.

`lock_()` locks a whole tree; each sub-TensorDict remembers, by weak
reference, the TensorDicts above it in that tree (its parent, the parent's
parent, ...). Unlocking a sub-TensorDict while one of them is alive and
locked would let that locked TensorDict change through it, so `unlock_()`
refuses; it succeeds once the locked holders are unlocked or gone. A
sub-TensorDict shared by two locked trees is held by both, so unlocking
either root is refused until they are grouped under one root (upstream's
rule).

A tensorclass is represented by the TensorDict that holds its fields.
"""

from __future__ import annotations

import weakref
from typing import Any

from td_core._ops.per_object import PerObject

__all__ = ["holders_of", "link", "locked_elsewhere", "unlink"]

_HOLDERS = PerObject()  # node -> {id(holder): weakref to holder}


def _node(td: Any) -> Any:
    """The object the graph keys `td` by (a tensorclass: the TensorDict of its fields)."""
    return td._tensordict if getattr(type(td), "_td_tensorclass", False) else td


def link(td: Any, above: list[Any]) -> None:
    """Record `above` (the locked TensorDicts over `td`) as holders of `td`, and so on down."""
    node = _node(td)
    if above:
        holders = _HOLDERS.get(node)
        if holders is None:
            holders = {}
            _HOLDERS.set(node, holders)
        for holder in above:
            holders[id(holder)] = weakref.ref(holder)
    below = [*above, node]
    for sub in td._subtrees():
        link(sub, below)


def _walk(td: Any, path: str, out: dict[int, tuple[Any, str]]) -> dict[int, tuple[Any, str]]:
    """Every node of the tree under `td` (itself included), by id, with a path to name it."""
    node = _node(td)
    if id(node) not in out:
        out[id(node)] = (node, path)
        for key, sub in _sub_items(td):
            _walk(sub, f"{path}[{key!r}]", out)
    return out


def locked_elsewhere(td: Any) -> str | None:
    """The path of the first TensorDict under `td` that a live, locked TensorDict outside it holds."""
    nodes = _walk(td, "the TensorDict", {})
    for node, path in nodes.values():
        holders = _HOLDERS.get(node)
        if not holders:
            continue
        for key, ref in list(holders.items()):
            holder = ref()
            if holder is None:
                del holders[key]
            elif key not in nodes and holder._is_locked:
                return path
    return None


def holders_of(td: Any) -> list[Any]:
    """The live TensorDicts recorded above `td` (locked when they were recorded)."""
    holders = _HOLDERS.get(_node(td))
    if not holders:
        return []
    return [holder for ref in list(holders.values()) if (holder := ref()) is not None]


def unlink(td: Any) -> None:
    """Forget every holder of the TensorDicts under `td` (all unlocked or outside: checked first)."""
    for node, _ in _walk(td, "", {}).values():
        _HOLDERS.pop(node, None)


def _sub_items(td: Any) -> list[tuple[Any, Any]]:
    subs = td._subtrees()
    if getattr(type(td), "_stack_parts", None) is not None:  # a lazy stack: its members
        return list(enumerate(subs))
    keys = [key for key, value in td._key_items() if any(value is s for s in subs)]
    return list(zip(keys, subs)) if len(keys) == len(subs) else list(enumerate(subs))
