"""Finding a class a file or a peer names, without importing or running anything.

A saved TensorDict, a consolidated layout or a distributed transfer may record a
tensorclass as `"module:qualname"`. `loaded_object` looks that name up among the
modules that are *already imported* (`sys.modules`), reading module and class
`__dict__`s only: no module is imported and no `__getattr__` runs, so data can
name a class but never make this process run code.
"""

from __future__ import annotations

import sys
from types import MappingProxyType
from typing import Any

__all__ = ["loaded_object"]


def loaded_object(name: str) -> Any:
    """The object at `"module:qualname"` in a module already imported, or `None`.

    Examples:
        >>> loaded_object("td_core._core.class_lookup:loaded_object") is loaded_object
        True
        >>> loaded_object("some.module.never.imported:Thing") is None
        True
    """
    module_name, _, qualname = name.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        return None
    for part in qualname.split("."):
        try:
            namespace = vars(obj)  # the object's own namespace: no __getattr__ runs
        except TypeError:
            return None
        if not isinstance(namespace, (dict, MappingProxyType)):
            return None
        obj = namespace.get(part)
        if obj is None:
            return None
    return obj
