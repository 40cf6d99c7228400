"""Tensorclasses on disk: the name a save records, and finding the class again safely.

A save records a tensorclass as `"module:qualname"`. Loading looks the class
up among modules that are *already imported* (`sys.modules`), reading module
and class `__dict__`s only: nothing is imported, and no `__getattr__` or
other code named by the file runs. The object found must be a tensorclass.
A class this process has saved is also found by its name (weakly held), which
is how classes defined inside functions (`<locals>` in their qualname, out of
reach of a lookup by name) load back in the process that saved them.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from td_core import is_tensorclass
from td_core._shared.classes import loaded_object

__all__ = ["class_name", "check_class_name", "find_class", "like_source"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a module's name is whatever it is registered under in sys.modules (test runners use
# names such as "packages.my-pkg.tests.test_x"); a qualname is made of identifiers
_NAME = re.compile(rf"[^\s:]+:(?:{_IDENT}|<locals>)(?:\.(?:{_IDENT}|<locals>))*")
_MAX_NAME = 1000


#: The tensorclasses this process has saved, by recorded name (the latest one per name).
_SAVED: dict[str, weakref.ref[type]] = {}


def class_name(cls: type) -> str:
    """The name a save records for `cls`: `"module:qualname"` (remembered for `find_class`)."""
    name = f"{cls.__module__}:{cls.__qualname__}"
    try:
        _SAVED[name] = weakref.ref(cls)
    except TypeError:  # not weakly referenceable: found by module lookup only
        pass
    return name


def check_class_name(name: object) -> str | None:
    """Why `name` is not a well-formed recorded class name, or `None` if it is."""
    if type(name) is not str:
        return f"expected a string, got {type(name).__name__}"
    if len(name) > _MAX_NAME or _NAME.fullmatch(name) is None:
        return "expected 'module:qualname', a qualname made of Python identifiers"
    return None


def find_class(name: str) -> type | None:
    """The tensorclass recorded as `name`, if its module is already imported; else `None`.

    A class that this process saved under `name` is found too, when the
    lookup in its module fails (a class defined in a function).

    Examples:
        >>> find_class("td_core:TensorDict") is None  # not a tensorclass
        True
        >>> find_class("some.module.never.imported:Thing") is None
        True
    """
    found = loaded_object(name)
    if found is None:
        ref = _SAVED.get(name)
        found = None if ref is None else ref()
    if not isinstance(found, type) or not is_tensorclass(found):
        return None
    return found


def like_source(source: Any, result: Any) -> Any:
    """`result` (a store or file over `source`'s copy) as an instance of `source`'s
    tensorclass over it, when `source` is one; else `result` itself."""
    if not is_tensorclass(source):
        return result
    cls: Any = type(source)
    return cls.from_tensordict(result)
