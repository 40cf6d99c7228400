"""`PerObject`: side tables keyed by object identity, whose entries vanish with their object."""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["PerObject"]


class PerObject:
    """A dict keyed by object identity whose entries vanish with their object.

    (`WeakKeyDictionary` compares keys with `==`, which a TensorDict
    answers with a TensorDict.)
    """

    def __init__(self) -> None:
        self._data: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def set(self, obj: Any, value: Any) -> None:
        key = id(obj)
        self._data[key] = (weakref.ref(obj, lambda _, key=key: self._data.pop(key, None)), value)  # type: ignore[misc]  # mypy cannot infer a lambda with a default

    def get(self, obj: Any, default: Any = None) -> Any:
        entry = self._data.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return default
        return entry[1]

    def pop(self, obj: Any, default: Any) -> Any:
        entry = self._data.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return default
        del self._data[id(obj)]
        return entry[1]
