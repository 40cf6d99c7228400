"""Nested keys as td-query accepts them: a `str` or a (nested) tuple of `str`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["NestedKey", "key_list", "unravel"]

NestedKey = str | tuple[Any, ...]


def _flatten(key: tuple[Any, ...], out: list[str], what: str, whole: Any) -> None:
    for item in key:
        if isinstance(item, str):
            out.append(str(item))
        elif isinstance(item, tuple):
            _flatten(item, out, what, whole)
        else:
            raise TypeError(f"{what}: nested keys are made of strings, got {item!r} in {whole!r}")


def unravel(key: Any, what: str) -> str | tuple[str, ...]:
    """Flatten a nested key (`("a", ("b",))` -> `("a", "b")`; `("a",)` -> `"a"`)."""
    if isinstance(key, str):
        return str(key)
    if isinstance(key, tuple):
        out: list[str] = []
        _flatten(key, out, what, key)
        if not out:
            raise ValueError(f"{what}: the empty tuple is not a valid key")
        return out[0] if len(out) == 1 else tuple(out)
    raise TypeError(
        f"{what}: keys are strings or tuples of strings, got {key!r} of type {type(key).__name__}"
    )


def key_list(keys: Any, what: str) -> list[str | tuple[str, ...]]:
    """One key (a `str` or a tuple) or a sequence of keys, as a list of flat keys."""
    if isinstance(keys, (str, tuple)):
        return [unravel(keys, what)]
    if not isinstance(keys, Sequence):
        raise TypeError(f"{what} must be a key or a list of keys, got {type(keys).__name__}")
    out = [unravel(k, what) for k in keys]
    if not out:
        raise ValueError(f"{what} must name at least one key, got {keys!r}")
    seen = set()
    for k in out:
        if k in seen:
            raise ValueError(f"{what} names key {k!r} twice: {out!r}")
        seen.add(k)
    return out
