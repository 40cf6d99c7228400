"""The key walk of a lazy stack: over the members' entries, without stacking them.

`keys(include_nested=True, ...)` (and its `len`) walks a container through
`_key_nodes()`: `(key, value)` pairs where only a value's class is read, and a
subtree's own `_key_nodes()` is walked in turn. A lazy stack's keys are the keys
its members have in common, in the first member's order; a nested entry's keys
are those its members' sub-TensorDicts have in common, and so on down. So the
walk needs no stacked value at all: `MemberNodes` stands for a nested lazy
stack (the members' sub-TensorDicts) and lists their common keys the same way,
instead of building a `LazyStackedTensorDict` per nested entry as a read would.

What a read of the entry would give is only built where its class is not known
from the first member's value (a non-tensor leaf: its stack), or where the read
would raise (members whose entries are not all TensorDicts, or whose batch dims
differ in number): the stack is then built so that it raises the same error.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import eq
from typing import Any

from torch import Tensor

from td_core._core.traverse import is_td
from td_core._core.utils import NO_DEFAULT

__all__ = ["MemberNodes", "member_key_nodes"]

#: stacks the members' values of one entry as the lazy stack's read does (its `_stack_values`)
StackValues = Callable[[str, list[Any]], Any]


class MemberNodes:
    """The nested entry `key` of a lazy stack, as its members' sub-TensorDicts (keys only).

    The key walk reads a subtree's class flags and its `_key_nodes()`; this
    class answers both like the lazy stack a read would build, without building it.
    """

    __slots__ = ("_members", "_stack_values")
    _td_collection = True
    _is_non_tensor = False

    def __init__(self, members: list[Any], stack_values: StackValues) -> None:
        self._members = members
        self._stack_values = stack_values

    def _key_nodes(self) -> list[tuple[str, Any]]:
        return member_key_nodes(self._members, self._stack_values)


def _stackable(values: list[Any]) -> bool:
    """Whether a lazy stack of `values` can be built: TensorDicts with as many batch dims
    (what the lazy stack's read checks)."""
    first = values[0]
    if not is_td(first):
        return False
    cls, bs = type(first), first.batch_size
    for other in values:  # the usual case: members of one kind and one batch size
        if type(other) is not cls or other.batch_size != bs:
            break
    else:
        return True
    return all(map(is_td, values)) and len({len(v.batch_size) for v in values}) == 1


def member_key_nodes(members: list[Any], stack_values: StackValues) -> list[tuple[str, Any]]:
    """`(key, value)` for the keys `members` have in common, in the first member's order.

    A tensor leaf's value is the first member's tensor (only its class is read);
    a nested TensorDict's is a `MemberNodes` of the members' sub-TensorDicts;
    any other entry's is what `stack_values` gives (the lazy stack's read).

    Args:
        members: the members of a lazy stack (at least one).
        stack_values: the lazy stack's `_stack_values`: builds an entry's stacked
            value where its class cannot be known otherwise, or raises the read's error.
    """
    first, others = members[0], members[1:]
    keys = first._keys_str()
    other_keys = [member._keys_str() for member in others]
    nodes = first._key_nodes()
    if not all(map(eq, repeat(keys), other_keys)):  # exclusive keys: only the common ones
        nodes = [(k, v) for k, v in nodes if all(k in o for o in other_keys)]
    out: list[tuple[str, Any]] = []
    for key, value in nodes:
        cls = type(value)
        if cls is Tensor:
            out.append((key, value))
            continue
        if getattr(cls, "_td_collection", False) and not cls._is_non_tensor:  # a subtree
            values = [member._get_str(key, NO_DEFAULT) for member in members]
            if _stackable(values):
                out.append((key, MemberNodes(values, stack_values)))
                continue
        elif isinstance(value, Tensor):  # a tensor subclass (an `UnbatchedTensor`, ...)
            out.append((key, value))
            continue
        else:
            values = [member._get_str(key, NO_DEFAULT) for member in members]
        # a non-tensor leaf (its stack's class is read), or members the read refuses: read it
        out.append((key, stack_values(key, values)))
    return out
