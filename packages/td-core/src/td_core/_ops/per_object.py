"""`PerObject`: side tables keyed by object identity, whose entries vanish with their object.

Eagerly an entry lives in the table, keyed by `id(obj)` and dropped with the object
through a weak reference. While torch.compile traces, neither works for an object
made in the graph (Dynamo cannot rebuild its `id()` or a weak reference to it), so
the entry goes on the object itself, in its `_td_side` dict (a slot of the dense and
lazy kinds, the `__dict__` of a tensorclass), and reads look there too.
"""

from __future__ import annotations

import weakref
from typing import Any

from torch.compiler import is_compiling

__all__ = ["PerObject"]

#: whether any entry was ever put on an object (then reads look there, eagerly too)
_side_in_use = False


def _put_on(obj: Any, name: str, value: Any) -> bool:
    """Keep `value` for table `name` on `obj` itself; False if `obj` has no room for it."""
    global _side_in_use
    side = getattr(obj, "_td_side", None)
    if side is None:
        side = {}
        try:
            object.__setattr__(obj, "_td_side", side)
        except AttributeError:  # neither the slot nor a __dict__
            return False
    side[name] = value
    _side_in_use = True
    return True


class PerObject:
    """A dict keyed by object identity whose entries vanish with their object.

    (`WeakKeyDictionary` compares keys with `==`, which a TensorDict
    answers with a TensorDict.)
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._data: dict[int, tuple[weakref.ref[Any], Any]] = {}
        self._used = False  # nothing was ever set: reads answer at once (the usual case)

    def set(self, obj: Any, value: Any) -> None:
        self._used = True
        if is_compiling() and _put_on(obj, self._name, value):
            return
        key = id(obj)
        self._data[key] = (weakref.ref(obj, lambda _, key=key: self._data.pop(key, None)), value)  # type: ignore[misc]  # mypy cannot infer a lambda with a default

    def _side(self, obj: Any) -> dict[str, Any] | None:
        if not (_side_in_use or is_compiling()):
            return None
        side = getattr(obj, "_td_side", None)
        return side if side is not None and self._name in side else None

    def get(self, obj: Any, default: Any = None) -> Any:
        if not self._used:
            return default
        entry = self._data.get(id(obj))
        if entry is None or entry[0]() is not obj:
            side = self._side(obj)
            return default if side is None else side[self._name]
        return entry[1]

    def pop(self, obj: Any, default: Any) -> Any:
        if not self._used:
            return default
        entry = self._data.get(id(obj))
        if entry is None or entry[0]() is not obj:
            side = self._side(obj)
            return default if side is None else side.pop(self._name)
        del self._data[id(obj)]
        return entry[1]
