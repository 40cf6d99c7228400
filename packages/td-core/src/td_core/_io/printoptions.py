"""`set_printoptions`/`get_printoptions`: what `repr` of a TensorDict shows.

The options live in one `ContextVar` holding an immutable mapping, so a
`with set_printoptions(...)` block changes the printing of the code it runs
only. td prints the detailed form by default (`compact=False`, see
docs/migration.md); `compact=True` asks for upstream's compact form
(`td_core._io.repr_compact`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any, TypeVar

__all__ = ["set_printoptions", "get_printoptions", "print_option"]

_F = TypeVar("_F")

_DEFAULTS: dict[str, Any] = {
    "show_batch_size": True,
    "show_device": True,
    "show_is_shared": True,
    "show_shape": True,
    "show_field_device": True,
    "show_dtype": True,
    "show_field_is_shared": True,
    "show_grad": False,
    "show_is_contiguous": False,
    "show_is_view": False,
    "show_storage_size": False,
    "plain": False,
    "sort_keys": "alphabetical",
    "compact": False,
    "html": True,
}
_QUIET = {
    "show_device": False,
    "show_is_shared": False,
    "show_field_device": False,
    "show_dtype": False,
    "show_field_is_shared": False,
}
# the options only the detailed form reads: passing one without `compact` selects that form
_DETAILED_ONLY = frozenset(
    {
        "show_is_shared",
        "show_shape",
        "show_field_device",
        "show_field_is_shared",
        "show_grad",
        "show_is_contiguous",
        "show_is_view",
        "show_storage_size",
        "plain",
    }
)
_OPTIONS: ContextVar[Mapping[str, Any]] = ContextVar(
    "td_printoptions", default=MappingProxyType(_DEFAULTS)
)


def print_option(name: str) -> Any:
    """The current value of one print option."""
    return _OPTIONS.get()[name]


class set_printoptions:
    """Set what `repr` of a TensorDict shows, for a block, a function, or (`.set()`) the context.

    Keyword Args:
        verbose: `False` hides devices, dtypes and `is_shared` unless an
            option below sets them.
        **kwargs: `show_batch_size`, `show_device`, `show_is_shared`,
            `show_shape`, `show_field_device`, `show_dtype`,
            `show_field_is_shared`, `show_grad`, `show_is_contiguous`,
            `show_is_view`, `show_storage_size`, `plain`, `sort_keys`
            (`"alphabetical"` or `None` for insertion order; the compact
            form also takes a function of each entry's text), `compact`
            and `html`. Options not passed
            keep their current value. `compact=True` prints each entry as
            its dtype and its dims after the batch dims (`f32[3]`), as
            upstream does by default; td's default is `compact=False`, the
            detailed form. Passing an option that only the detailed form
            reads (`show_shape`, `show_is_shared`, `show_field_device`,
            `show_field_is_shared`, `show_grad`, `show_is_contiguous`,
            `show_is_view`, `show_storage_size`, `plain`) without
            `compact` also sets `compact=False`.

    Raises:
        TypeError: for an unknown option.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, set_printoptions
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> with set_printoptions(verbose=False):
        ...     print(td)
        TensorDict(
            fields={
                a: Tensor(shape=torch.Size([3]))},
            batch_size=torch.Size([3]))
        >>> with set_printoptions(compact=True):
        ...     print(td)
        TensorDict(batch_size=[3], fields={a: f32[]})
    """

    def __init__(self, *, verbose: bool = True, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(_DEFAULTS)
        if unknown:
            raise TypeError(
                f"Unknown printoptions: {sorted(unknown)}. Valid options: {sorted(_DEFAULTS)}"
            )
        if "compact" not in kwargs and not _DETAILED_ONLY.isdisjoint(kwargs):
            kwargs["compact"] = False
        self._kwargs = {**_QUIET, **kwargs} if not verbose else dict(kwargs)
        self._tokens: list[Token[Mapping[str, Any]]] = []

    def _merged(self) -> Mapping[str, Any]:
        return MappingProxyType({**_OPTIONS.get(), **self._kwargs})

    def set(self) -> None:
        """Apply the options for the rest of the current context (`__exit__` undoes it)."""
        self._tokens.append(_OPTIONS.set(self._merged()))

    def __enter__(self) -> None:
        self._tokens.append(_OPTIONS.set(self._merged()))

    def __exit__(self, *exc: object) -> None:
        _OPTIONS.reset(self._tokens.pop())

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)  # type: ignore[arg-type]
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)  # type: ignore[operator]

        return wrapper  # type: ignore[return-value]


def get_printoptions() -> dict[str, Any]:
    """The current print options, as a new `dict`.

    Examples:
        >>> from td_core import get_printoptions
        >>> get_printoptions()["show_dtype"]
        True
    """
    return dict(_OPTIONS.get())
