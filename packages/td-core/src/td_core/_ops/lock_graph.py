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

from torch.compiler import is_compiling

from td_core._core.traverse import is_td
from td_core._ops.per_object import PerObject

__all__ = ["holders_of", "link", "unlink_unless_held"]

_HOLDERS = PerObject("lock_graph._HOLDERS")  # node -> {id(holder): weakref to holder}
# (while torch.compile traces: {negative number: _Strong(holder)}, on the node itself)


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
        if is_compiling():  # no id() or weak reference of an object made in the graph
            for holder in above:
                holders[-1 - len(holders)] = _Strong(holder)  # (a key no id() can be)
        else:
            for holder in above:
                holders[id(holder)] = weakref.ref(holder)
    below = [*above, node]
    for sub in td._subtrees():
        link(sub, below)


class _Strong:
    """A holder recorded while torch.compile traces: held strongly, read like a weak reference."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


#: how the walk reached a node: `(id of the node above, key)`, `None` for the top
_Via = tuple[int, Any] | None


def _walk(
    td: Any, out: dict[int, tuple[Any, _Via]], via: _Via = None
) -> dict[int, tuple[Any, _Via]]:
    """Every node of the tree under `td` (itself included), by id, with how it was reached."""
    node = _node(td)
    if id(node) not in out:
        out[id(node)] = (node, via)
        for key, sub in _sub_items(node):  # (a tensorclass: its inner TensorDict's)
            _walk(sub, out, (id(node), key))
    return out


def _path(nodes: dict[int, tuple[Any, _Via]], via: _Via) -> str:
    """The path that names a node `_walk` reached by `via` (built only for an error)."""
    parts = []
    while via is not None:
        above, key = via
        parts.append(f"[{key!r}]")
        via = nodes[above][1]
    return "the TensorDict" + "".join(reversed(parts))


def unlink_unless_held(td: Any) -> str | None:
    """Forget every holder of the TensorDicts under `td`, unless a live, locked TensorDict
    outside `td` holds one of them: then the path of the first such one, nothing forgotten."""
    nodes = _walk(td, {})
    for node, via in nodes.values():
        holders = _HOLDERS.get(node)
        if not holders:
            continue
        for key, ref in list(holders.items()):
            holder = ref()
            if holder is None:
                del holders[key]
            elif (key if key >= 0 else id(holder)) not in nodes and holder._is_locked:
                return _path(nodes, via)
    for node, _ in nodes.values():
        _HOLDERS.pop(node, None)
    return None


def holders_of(td: Any) -> list[Any]:
    """The live TensorDicts recorded above `td` (locked when they were recorded)."""
    holders = _HOLDERS.get(_node(td))
    if not holders:
        return []
    return [holder for ref in list(holders.values()) if (holder := ref()) is not None]


def _sub_items(td: Any) -> list[tuple[Any, Any]]:
    """`(key, sub-TensorDict)` of the containers `td` holds directly (a lazy stack: its
    members, by position)."""
    if getattr(type(td), "_stack_parts", None) is not None:
        return list(enumerate(td._subtrees()))
    # (`_key_items`: a ragged lazy stack under a tensorclass gives its leaves unstacked)
    return [(key, value) for key, value in td._key_items() if is_td(value)]
