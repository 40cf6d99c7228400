"""Finding sibling packages at call time through entry points.

td-core never imports td-memmap or td-distributions. A sibling that adds
behaviour to the container declares, in its pyproject:

```toml
[project.entry-points."td_core.extensions"]
memmap = "td_memmap._extension"
```

and `load_extension("memmap", "td-memmap")` imports that module the first
time it is needed (never at `import td_core`) and caches it.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points
from types import ModuleType

from td_core.errors import ExtensionMissingError

__all__ = ["ENTRY_POINT_GROUP", "load_extension", "has_extension"]

ENTRY_POINT_GROUP = "td_core.extensions"


@functools.cache
def _find(name: str) -> ModuleType | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        obj = ep.load()
        return obj if isinstance(obj, ModuleType) else importlib.import_module(ep.module)
    return None


def has_extension(name: str) -> bool:
    """Whether a sibling provides the extension `name`."""
    return _find(name) is not None


def load_extension(name: str, package: str) -> ModuleType:
    """The module registered for extension `name`.

    Raises:
        ExtensionMissingError: (an `ImportError`) naming `package` when no
            installed distribution provides it.
    """
    module = _find(name)
    if module is None:
        raise ExtensionMissingError(
            f"this feature needs the {package!r} package, which is not installed: "
            f"pip install {package}"
        )
    return module
