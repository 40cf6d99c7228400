"""Finding sibling packages at call time through entry points.

td-core never imports td-memmap or td-distributions. A sibling that adds
behaviour to the container declares, in its pyproject:

```toml
[project.entry-points."td_core.extensions"]
memmap = "td_memmap._extension"
```

and `load_extension("memmap", "td-memmap")` imports that module the first
time it is needed (never at `import td_core`) and caches it. The container's
methods that only hand their arguments to such a module pass them with
`delegate`, so that no parameter can be left behind.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from td_core.errors import ExtensionMissingError

__all__ = ["ENTRY_POINT_GROUP", "delegate", "load_extension", "has_extension"]

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


def delegate(
    function: Callable[..., Any], arguments: Mapping[str, Any], /, *leading: Any, **extra: Any
) -> Any:
    """Call `function` with the parameters of the method that hands its work to it.

    The delegating method passes its `locals()`, taken as its first statement
    so that they hold its parameters only. `self` and `cls` are left out
    (`leading` says what goes first, by position); every other parameter is
    passed by its own name, so `function` must use the same names; a
    `**kwargs` parameter (named `kwargs`) is spread; `extra` is added.

    Args:
        function: what does the work (a sibling's function, or another method).
        arguments: the delegating method's parameters, by name.
        *leading: positional arguments put first (the TensorDict, for a sibling's function).
        **extra: keywords the delegating method adds (e.g. `inplace=True`).

    Returns:
        What `function` returns.

    Examples:
        >>> def target(td, prefix, *, mode="r", **kwargs):
        ...     return td, prefix, mode, kwargs
        >>> def method(self, prefix, *, mode="r", **kwargs):
        ...     return delegate(target, locals(), self)
        >>> method("td", "dir", mode="r+", extra=1)
        ('td', 'dir', 'r+', {'extra': 1})
    """
    named = {
        name: value for name, value in arguments.items() if name not in ("self", "cls", "kwargs")
    }
    return function(*leading, **named, **arguments.get("kwargs", {}), **extra)
