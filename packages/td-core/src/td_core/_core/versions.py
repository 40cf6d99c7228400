"""`implement_for`: pick one of several implementations by the installed version of a package."""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from typing import Any

__all__ = ["implement_for"]

# the chosen implementation of each function, by module and qualified name
_CHOSEN: dict[tuple[str, str], Callable[..., Any]] = {}


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "2.15.0+cu132" -> (2, 15, 0)."""
    match = re.match(r"\d+(\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"implement_for: cannot read the version {version!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def _at_least(version: tuple[int, ...], bound: tuple[int, ...]) -> bool:
    width = max(len(version), len(bound))
    return version + (0,) * (width - len(version)) >= bound + (0,) * (width - len(bound))


class implement_for:  # upstream's name (a decorator class)
    """Use the decorated function only when a package's version is in `[from_version, to_version)`.

    Several functions of the same name can each be decorated for a range of
    versions; the one whose range holds the installed version is the one
    the name refers to, whatever the order of the definitions. When no range
    holds (or the package is not installed), calling the name raises
    `ModuleNotFoundError`, naming the package and the ranges.

    Args:
        module_name: the package whose `__version__` decides (e.g. `"torch"`).
        from_version: the first version the implementation supports (`None`: any).
        to_version: the first version it no longer supports (`None`: any later).
        class_method: make the chosen implementation a `classmethod`.

    Examples:
        >>> from td_core import implement_for
        >>> @implement_for("torch", "2.0", None)
        ... def which():
        ...     return "new"
        >>> @implement_for("torch", None, "2.0")
        ... def which():
        ...     return "old"
        >>> which()
        'new'
    """

    def __init__(
        self,
        module_name: str,
        from_version: str | None = None,
        to_version: str | None = None,
        *,
        class_method: bool = False,
    ) -> None:
        self.module_name = module_name
        self.from_version = from_version
        self.to_version = to_version
        self.class_method = class_method

    def _range(self) -> str:
        return f"[{self.from_version or '-inf'}, {self.to_version or 'inf'})"

    def holds(self) -> bool:
        """Whether the installed version of `module_name` is in this range."""
        try:
            module = importlib.import_module(self.module_name)
        except ImportError:
            return False
        version = getattr(module, "__version__", None)
        if not isinstance(version, str):
            return False
        current = _release(version)
        if self.from_version is not None and not _at_least(current, _release(self.from_version)):
            return False
        return self.to_version is None or not _at_least(current, _release(self.to_version))

    def __call__(self, fn: Callable[..., Any]) -> Any:
        key = (fn.__module__, fn.__qualname__)
        if self.holds():
            _CHOSEN[key] = fn
            return classmethod(fn) if self.class_method else fn
        chosen = _CHOSEN.get(key)
        if chosen is not None:  # a definition above already covers this version
            return classmethod(chosen) if self.class_method else chosen
        ranges = self._range()

        @functools.wraps(fn)
        def unsupported(*args: Any, **kwargs: Any) -> Any:
            raise ModuleNotFoundError(
                f"{fn.__qualname__} has no implementation for the installed "
                f"{self.module_name!r} (this one supports versions {ranges})"
            )

        return classmethod(unsupported) if self.class_method else unsupported
