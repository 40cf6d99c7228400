"""Where a TensorDict was saved to or loaded from (`TensorDict.saved_path`).

Kept beside the objects, not in them: a registry keyed by identity, whose
entries go away with the objects (weak references), so td-core's classes
need no slot for it.
"""

from __future__ import annotations

import weakref
from typing import Any, TypeVar

__all__ = ["remember", "saved_path"]

_T = TypeVar("_T")
_PATHS: dict[int, tuple[weakref.ref[Any], str]] = {}


def remember(obj: _T, path: str | None) -> _T:
    """Record that `obj` lives in folder `path` (nothing if None); returns `obj`."""
    if path is None:
        return obj
    key = id(obj)

    def forget(ref: weakref.ref[Any], key: int = key) -> None:
        entry = _PATHS.get(key)
        if entry is not None and entry[0] is ref:
            del _PATHS[key]

    try:
        _PATHS[key] = (weakref.ref(obj, forget), path)
    except TypeError:  # not weakly referenceable: not recorded
        pass
    return obj


def saved_path(obj: Any) -> str | None:
    """The folder `obj` was last saved to or loaded from by td-memmap, or None."""
    entry = _PATHS.get(id(obj))
    if entry is None or entry[0]() is not obj:
        return None
    return entry[1]
