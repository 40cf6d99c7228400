"""Which tensorclass a stored TensorDict comes back as (`TensorDictStore.from_store`)."""

from __future__ import annotations

import warnings
from typing import Any

from td_core import is_tensorclass
from td_memmap._classes import check_class_name, find_class

__all__ = ["stored_class"]


def _find_dotted(path: str) -> type | None:
    """The tensorclass at the dotted `path` ("pkg.module.Class"), in a module already imported."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest module name first
        found = find_class(f"{'.'.join(parts[:cut])}:{'.'.join(parts[cut:])}")
        if found is not None:
            return found
    return None


def stored_class(given: type | str | None, recorded: str | None) -> Any:
    """The tensorclass to wrap a store in: `given` (a class or a path), else the `recorded`
    one if it is loaded (a warning says when it is not), else `None` (a plain store)."""
    if isinstance(given, type):
        if not is_tensorclass(given):
            raise TypeError(f"tensorclass_cls={given.__name__} is not a tensorclass")
        return given
    if given is not None:
        found = find_class(given) if ":" in given else _find_dotted(given)
        if found is None:
            raise ValueError(
                f"tensorclass_cls={given!r} names no tensorclass in a module already imported: "
                "import its module first, or pass the class itself (td never imports a module "
                "on a name's say-so)"
            )
        return found
    if recorded is None or check_class_name(recorded) is not None:
        return None
    found = find_class(recorded)
    if found is None:
        warnings.warn(
            f"the stored TensorDict was written from the tensorclass {recorded!r}, whose module "
            "is not imported: it is read back as a TensorDictStore (import the module, or pass "
            "tensorclass_cls=, to get the class)",
            UserWarning,
            stacklevel=3,
        )
    return found
