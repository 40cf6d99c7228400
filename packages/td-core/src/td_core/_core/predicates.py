"""Small public helpers: dtype predicates for `apply`/`cast_filter`, and key utilities.

The dtype predicates test their LAST argument, so they work as `fn(value)`
and as `fn(key, value)`.
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.keys import unravel_key

__all__ = [
    "KEY_SEPARATOR",
    "unravel_key_to_tuple",
    "is_inexact",
    "is_floating",
    "is_integer",
    "is_bool",
    "is_tensorclass",
    "is_tensor_collection",
]

KEY_SEPARATOR: str = "."
"""The separator `flatten_keys` uses by default to join nested keys."""


def unravel_key_to_tuple(key: Any) -> tuple[str, ...]:
    """A nested key as a flat tuple of `str`; `()` for an invalid key (never raises).

    Examples:
        >>> from td_core import unravel_key_to_tuple
        >>> unravel_key_to_tuple("a"), unravel_key_to_tuple(("a", ("b",))), unravel_key_to_tuple(1)
        (('a',), ('a', 'b'), ())
    """
    try:
        flat = unravel_key(key)
    except (TypeError, KeyError):
        return ()
    return (flat,) if isinstance(flat, str) else flat


def is_inexact(*args: Any) -> bool:
    """Whether the last argument has a floating-point or complex dtype.

    Examples:
        >>> import torch
        >>> from td_core import is_inexact
        >>> is_inexact(torch.zeros(3)), is_inexact("k", torch.zeros(3, dtype=torch.long))
        (True, False)
    """
    dtype = args[-1].dtype
    return dtype.is_floating_point or dtype.is_complex


def is_floating(*args: Any) -> bool:
    """Whether the last argument has a floating-point dtype (complex excluded)."""
    return args[-1].dtype.is_floating_point


def is_integer(*args: Any) -> bool:
    """Whether the last argument has an integer dtype (signed or unsigned; not bool)."""
    dtype = args[-1].dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype is torch.bool)


def is_bool(*args: Any) -> bool:
    """Whether the last argument has dtype `torch.bool`."""
    return args[-1].dtype is torch.bool


def is_tensorclass(obj: Any) -> bool:
    """Whether `obj` (an instance or a class) is a tensorclass."""
    cls = obj if isinstance(obj, type) else type(obj)
    return bool(getattr(cls, "_td_tensorclass", False))


def is_tensor_collection(obj: Any) -> bool:
    """Whether `obj` (an instance or a class) is a TensorDict-like container."""
    cls = obj if isinstance(obj, type) else type(obj)
    return bool(getattr(cls, "_td_collection", False)) and not getattr(cls, "_is_non_tensor", False)
