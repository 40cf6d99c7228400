"""In-place ops of kinds whose leaves, as read, may not be where the data lives.

`TensorDictBase`'s in-place ops write into the tensors its reads return. That
reaches the data where reads are views of the storage (a dense TensorDict, a
sub-TensorDict of one). Where reads are copies (a view of a lazy stack or of a
file, a key-value store, a tensorclass over a lazy stack or a store), such a
write would be silently lost. A kind with this mixin says which case it is in
(`_direct`) and, for the second, how an op reaches its data
(`_run_elsewhere`): by default the op runs on a dense copy whose entries are
then written back through `_write_back_all`.

Every in-place op that is not a per-leaf pointwise op (those go through
`_fast_apply(..., inplace=True)`) is listed here, so a kind that uses the mixin
loses no write through any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from td_core._core.keys import NestedKey
from td_core._kinds.base import TensorDictBase

__all__ = ["InPlaceRouteMixin"]

Tensor = torch.Tensor


class InPlaceRouteMixin(TensorDictBase):
    """Routes `apply_`, `apply`/`named_apply`/`_fast_apply` with `inplace=True`, `zero_`,
    `fill_`, `copy_`, `update_`, `masked_fill_`, `copy_at_`, `update_at_`, `set_at_` and
    `td[index] = value` to where the kind's data lives (see the module doc)."""

    __slots__ = ()

    @property
    def _direct(self) -> bool:
        """Whether the leaves read are the data itself (then ops run as they are)."""
        return False

    def _write_back_all(self, copy: Any) -> None:
        """Write every entry of `copy` (a dense copy an op has changed) into the data."""
        for key, entry in copy._items_str():
            self._set_str(key, entry)

    def _run_elsewhere(self, method: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Run `method` (a `TensorDictBase` method) so its writes reach the data: on a
        dense copy, written back; its result is passed on."""
        copy = self.to_tensordict()
        result = method(copy, *args, **kwargs)
        self._write_back_all(copy)
        return result

    def _inplace(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the in-place `method` where the data lives; returns self."""
        if self._direct:
            method(self, *args, **kwargs)
        else:
            self._run_elsewhere(method, args, kwargs)
        return self

    def _inplace_if_asked(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`method` as it is, or routed like `_inplace` when called with `inplace=True` (its
        `None`, when `fn` kept no leaf and `filter_empty` drops them, is passed on)."""
        if not kwargs.get("inplace") or self._direct:
            return method(self, *args, **kwargs)
        result = self._run_elsewhere(method, args, kwargs)
        return None if result is None else self

    def _setitem_index(self, index: Any, value: Any) -> None:
        if self._direct:
            TensorDictBase._setitem_index(self, index, value)
        else:
            self._run_elsewhere(TensorDictBase._setitem_index, (index, value), {})

    def set_at_(self, key: NestedKey, value: Any, index: Any, *, non_blocking: bool = False) -> Any:
        """`td[key][index] = value` in place, written where the data lives; returns self."""
        self._inplace(TensorDictBase.set_at_, key, value, index, non_blocking=non_blocking)
        return self

    def apply_(self, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> Any:
        """`apply(fn, inplace=True)`, written where the data lives."""
        return self._inplace(TensorDictBase.apply_, fn, *others, **kwargs)

    def apply(self, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> Any:
        """`apply`; with `inplace=True` the results are written where the data lives."""
        return self._inplace_if_asked(TensorDictBase.apply, fn, *others, **kwargs)

    def named_apply(self, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> Any:
        """`named_apply`; with `inplace=True` the results are written where the data lives."""
        return self._inplace_if_asked(TensorDictBase.named_apply, fn, *others, **kwargs)

    def _fast_apply(self, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> Any:
        """Upstream's private `_fast_apply`; with `inplace=True` the results reach the data."""
        return self._inplace_if_asked(TensorDictBase._fast_apply, fn, *others, **kwargs)

    def zero_(self) -> Any:
        """Zero every tensor leaf."""
        return self._inplace(TensorDictBase.zero_)

    def fill_(self, key: Any, value: float | bool) -> Any:
        """Fill the entry at `key` with `value`."""
        return self._inplace(TensorDictBase.fill_, key, value)

    def copy_(self, tensordict: Any, non_blocking: bool = False) -> Any:
        """Copy the leaves of `tensordict` into the existing entries."""
        return self._inplace(TensorDictBase.copy_, tensordict, non_blocking)

    def update_(
        self,
        input_dict_or_td: Any = None,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
        non_blocking: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Copy the input's entries into the existing entries, in place."""
        return self._inplace(
            TensorDictBase.update_,
            input_dict_or_td,
            clone,
            keys_to_update=keys_to_update,
            non_blocking=non_blocking,
            **kwargs,
        )

    def masked_fill_(self, mask: Tensor, value: float | bool) -> Any:
        """Fill every tensor leaf with `value` where `mask` is true."""
        return self._inplace(TensorDictBase.masked_fill_, mask, value)

    def copy_at_(
        self, tensordict: Any, idx: Any, non_blocking: bool = False, *, fast: bool = True
    ) -> Any:
        """Copy `tensordict` into the existing entries at index `idx`."""
        return self._inplace(TensorDictBase.copy_at_, tensordict, idx, non_blocking, fast=fast)

    def update_at_(
        self,
        input_dict_or_td: Any,
        idx: Any,
        clone: bool = False,
        *,
        non_blocking: bool = False,
        keys_to_update: Any = None,
    ) -> Any:
        """Write the input's leaves into the existing entries at index `idx`."""
        return self._inplace(
            TensorDictBase.update_at_,
            input_dict_or_td,
            idx,
            clone,
            non_blocking=non_blocking,
            keys_to_update=keys_to_update,
        )
