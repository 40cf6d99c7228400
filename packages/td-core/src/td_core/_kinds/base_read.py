"""Reading entries: `get` and its strict and non-tensor forms, for every kind.

`TensorDictBase` takes these from `ReadMixin`; they run over the storage
primitives of the contract (`_get_str`, `_keys_str`).
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.flags import get_defaults_to_none
from td_core._core.keys import NestedKey, unravel_key
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT
from td_core._leaves.linked_list import linked_values
from td_core.errors import KeyNotFoundError, NotATensorDictError

__all__ = ["ReadMixin", "defaults_to_none"]

_ABSENT_KEY: Any = object()  # `get`'s default when `td[key]` reads: missing keys always raise


def defaults_to_none() -> bool:
    """Whether `get` of a missing key without a default returns `None` (`set_get_defaults_to_none`)."""
    return get_defaults_to_none()


class ReadMixin(TensorDictContract):
    """`get`, `get_non_tensor` and the nested-key walk behind them."""

    __slots__ = ()

    def get(
        self,
        key: NestedKey,
        default: Any = NO_DEFAULT,
        *,
        as_list: bool = False,
        as_padded_tensor: bool = False,
        as_nested_tensor: bool = False,
        padding_side: str = "right",
        layout: torch.layout | None = None,
        padding_value: float | int | bool = 0.0,
    ) -> Any:
        """The entry at `key` (a tensor, a sub-TensorDict or a non-tensor leaf).

        A missing key without a `default` gives `None`, as `dict.get` and
        upstream (since v0.7); under `set_get_defaults_to_none(False)` it raises
        `KeyError` naming the key and the available keys. `td[key]` always raises.

        The keywords say how to read a ragged leaf of a lazy stack (one whose
        shape differs between the members) without stacking it; on a TensorDict
        they are passed down to the lazy stack on the path, and ignored for a
        leaf no lazy stack holds (as upstream).

        Args:
            key: a key or nested key.
            default: returned when `key` is missing (on a lazy stack: when a
                member lacks it).
            as_list: the members' tensors as a list.
            as_padded_tensor: the members' tensors padded to a common shape
                with `padding_value` (on `padding_side`, `"right"` or
                `"left"`) and stacked along a new first dim.
            as_nested_tensor: the members' tensors as one nested tensor (of `layout`).
            padding_side: see `as_padded_tensor`.
            layout: see `as_nested_tensor`.
            padding_value: see `as_padded_tensor`.

        Raises:
            KeyError: naming the key, if it is missing, no `default` is given and
                `set_get_defaults_to_none(False)` is in force.
            TypeError: on a lazy stack, if more than one of `as_list`,
                `as_padded_tensor` and `as_nested_tensor` is set.
            ValueError: (also a `KeyError`) if a nested key goes through a leaf,
                e.g. `get(("a", "b"))` where `td["a"]` is a tensor, and no
                `default` is given.

        Examples:
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": 0, "b": {"c": 1}})
            >>> td.get(("b", "c"))
            tensor(1)
            >>> td.get("x") is None, td.get(("x", "y")) is None, td.get("x", 0)
            (True, True, 0)
        """
        if as_list or as_padded_tensor or as_nested_tensor:
            return self._get_ragged(
                key,
                default,
                as_list=as_list,
                as_padded_tensor=as_padded_tensor,
                as_nested_tensor=as_nested_tensor,
                padding_side=padding_side,
                layout=layout,
                padding_value=padding_value,
            )
        if type(key) is not str:
            key = unravel_key(key)
            if isinstance(key, tuple):
                return self._get_tuple(key, default)
        value = self._get_str(key, NO_DEFAULT)
        if value is NO_DEFAULT:
            if default is NO_DEFAULT:
                if defaults_to_none():
                    return None
                raise self._missing(key)
            return default
        return value

    def _get_ragged(self, key: NestedKey, default: Any, **how: Any) -> Any:
        """`get` with a ragged-read keyword: handed to the sub-TensorDict on the path (a lazy
        stack reads it: `LazyReadMixin._get_ragged`)."""
        key = unravel_key(key)
        if isinstance(key, tuple) and len(key) > 1:
            child = self._get_str(key[0], None)
            if is_td(child):
                return child.get(key[1:], default, **how)
        return self.get(key, default)  # a leaf here, or the missing key's error

    def _get_tuple(self, key: tuple[str, ...], default: Any, strict: bool = False) -> Any:
        td = self
        for i, part in enumerate(key):
            value = td._get_str(part, NO_DEFAULT) if is_td(td) else NO_DEFAULT
            if value is NO_DEFAULT:
                if default is not NO_DEFAULT:
                    return default
                if not strict and defaults_to_none() and is_td(td):
                    return None  # a missing key; a leaf on the path is a mistake: it raises
                if i and not is_td(td):
                    raise NotATensorDictError(
                        f"key {key!r} not found: {key[:i]!r} is a leaf of type "
                        f"{type(td).__name__}, not a TensorDict (Expected a TensorDictBase "
                        f"instance at {key[:i]!r})"
                    )
                raise KeyNotFoundError(
                    f"key {key!r} not found: {key[: i + 1]!r} is missing"
                    + (
                        f" (keys at {key[:i]!r}: {sorted(td._keys_str())})"
                        if i
                        else f" (keys: {sorted(td._keys_str())})"
                    )
                )
            td = value
        return td

    def _missing(self, key: str) -> KeyNotFoundError:
        return KeyNotFoundError(
            f"key {key!r} not found in {type(self).__name__} with keys {sorted(self._keys_str())}"
        )

    def get_non_tensor(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """The value of a non-tensor entry (or the entry itself for tensors).

        Unlike `get`, a missing key without a `default` raises `KeyError`, as upstream.
        """
        value = self.get(key, _ABSENT_KEY if default is NO_DEFAULT else default)
        if value is _ABSENT_KEY:
            value = self._get_strict(key)
        return linked_values(value, self, key) if is_nt(value) else value

    def _get_strict(self, key: NestedKey) -> Any:
        """The entry at `key`, or `KeyError` naming it whatever `set_get_defaults_to_none` says."""
        key = unravel_key(key)
        if isinstance(key, str):
            value = self._get_str(key, NO_DEFAULT)
            if value is NO_DEFAULT:
                raise self._missing(key)
            return value
        return self._get_tuple(key, NO_DEFAULT, strict=True)
