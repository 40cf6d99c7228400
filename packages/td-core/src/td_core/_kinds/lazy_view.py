"""`LazyViewTensorDict`: upstream's legacy lazy shape views, written through to their source.

Under `set_lazy_legacy(True)`, `td.permute(...)`, `transpose`, `squeeze`,
`unsqueeze` and `view` return one of these (upstream's `_PermutedTensorDict`,
`_TransposedTensorDict`, `_SqueezedTensorDict`, `_UnsqueezedTensorDict` and
`_ViewedTensorDict`, here one kind parametrised by its `ViewOp`). It keeps no
entries of its own:

- a read applies the op to the source's entry on every access, so it never
  goes stale (a sub-TensorDict entry is read as a lazy view of it);
- a write applies the inverse op and goes into the source: new keys land in
  the source in its own layout, an in-place write (`set_`, `update_`,
  `apply_`, pointwise ops) changes the source's memory;
- a delete removes the key from the source; the lock is the source's
  (`lock_()` on the view locks the source, as upstream).

The op undone gives the source back: `td.permute(1, 0).permute(1, 0) is td`.
Outside legacy mode, shape ops on a view raise `NotDenseError` (a
`RuntimeError`): make it dense first with `to_tensordict()`.
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.contract import provide
from td_core._core.traverse import _batched, is_td, map_batch
from td_core._io.repr import td_repr
from td_core._io.repr_compact import with_compact
from td_core._kinds.base import TensorDictBase
from td_core._kinds.pytree import register
from td_core._kinds.sub import reads_copies
from td_core._kinds.write_back import CopyBackMixin
from td_core._ops.legacy_views import ViewOp
from td_core.errors import BatchSizeError

__all__ = ["LazyViewTensorDict", "lazy_view"]

Tensor = torch.Tensor


class LazyViewTensorDict(CopyBackMixin):
    """A lazy view of `source` through the batch-dim op `op`, reading from and writing into it.

    Built by the shape ops under `set_lazy_legacy(True)`; see the module docs.

    Args:
        source: the TensorDict viewed.
        op: the op, over the leading `len(op.before)` batch dims of `source`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, set_lazy_legacy
        >>> td = TensorDict({"a": torch.zeros(3, 2)}, [3, 2])
        >>> with set_lazy_legacy(True):
        ...     tdp = td.permute(1, 0)
        >>> tdp["b"] = torch.ones(2, 3)
        >>> td["b"].shape
        torch.Size([3, 2])
    """

    _writes_through = True
    _view_name = "a lazy view"
    _view_arg_key = "op"
    _names_refusal = (
        "Names of a lazy tensordict cannot be modified: a lazy view's dim names follow its "
        "source's. Call to_tensordict() first, or name the source's dims."
    )
    _caches_when_locked = True  # while its source is locked (see `lock_cache`)

    def __init__(self, source: TensorDictBase, op: ViewOp) -> None:
        if not is_td(source):
            raise TypeError(f"a lazy view views a TensorDict, got {type(source).__name__}")
        n = len(op.before)
        if source.batch_size[:n] != op.before:
            raise ValueError(
                f"a lazy {op.kind} view over batch size {list(op.before)} cannot view a "
                f"TensorDict of batch size {list(source.batch_size)}"
            )
        self._source = source
        self._view_op = op
        self._batch_size = op.after + source.batch_size[n:]
        self._reads_are_copies = reads_copies(source)
        self._lock_owner = source  # its lock; results cached on it go with the source's

    # ---------------------------------------------------------------- metadata
    @property
    def _view_arg(self) -> ViewOp:
        return self._view_op

    @property
    def _batch_rule(self) -> str:
        return f"a lazy {self._view_op.kind} view's batch size follows its source"

    @property
    def _is_locked(self) -> bool:
        return self._source._is_locked

    @_is_locked.setter
    def _is_locked(self, value: bool) -> None:
        self._source._set_lock(value)

    def _set_lock(self, locked: bool) -> None:
        """The lock is the source's: locking the view locks the source, as upstream."""
        self._source._set_lock(locked)

    def _raw_names(self) -> Any:
        names = self._source._raw_names()
        if names is None:
            return None
        n = len(self._view_op.before)
        lead = self._view_op.names(list(names[:n]))
        return None if lead is None else (*lead, *names[n:])

    def _store_names(self, names: Any) -> None:
        if names is not None and tuple(names) != tuple(self.names):
            raise self._names_error()

    @with_compact
    def __repr__(self) -> str:
        return td_repr(self, after={"op": self._view_op.describe()})

    # ---------------------------------------------------------------- reading
    def _view(self, value: Any) -> Any:
        op = self._view_op
        if type(value) is Tensor or (isinstance(value, Tensor) and _batched(value)):
            return op.forward(value)
        n = len(op.before)
        if value._is_non_tensor:  # non-tensor data and unbatched tensors
            return value._map_batch(op.forward, op.after, n)
        if getattr(value, "_td_tensorclass", False):  # its fields are fixed: a dense view
            return map_batch(value, op.forward, op.after + value.batch_size[n:])
        return LazyViewTensorDict(value, op)

    def _back(self, value: Any) -> Any:
        """`value` (validated against this view) in the source's layout."""
        op = self._view_op
        if type(value) is Tensor or (isinstance(value, Tensor) and _batched(value)):
            return op.backward(value)
        k = len(op.after)
        if value._is_non_tensor:
            return value._map_batch(op.backward, op.before, k)
        return map_batch(value, op.backward, op.before + value.batch_size[k:])

    # ---------------------------------------------------------------- writing
    def _set_str(self, key: str, value: Any) -> None:
        self._source._set_str(key, self._back(value))

    def _del_str(self, key: str) -> None:
        self._source._del_str(key)

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        if not isinstance(dest, Tensor):
            TensorDictBase._copy_into(self, key, dest, item, full_key)
            return
        # the source copies into its own entry (its reads may be copies, its leaves
        # parameters): the value goes there in the source's layout
        if not isinstance(item, Tensor):
            item = torch.as_tensor(item, device=dest.device)
        bs = self.batch_size
        try:
            if item.shape[: len(bs)] != bs and item.ndim >= len(bs):
                raise RuntimeError("batch dims differ")
            value = item.expand(dest.shape)
        except RuntimeError as err:
            raise BatchSizeError(
                f"Failed to update {full_key!r}: cannot copy a value of shape "
                f"{list(item.shape)} into its entry of shape {list(dest.shape)}"
            ) from err
        source = self._source
        source._copy_into(key, source._get_str(key), self._view_op.backward(value), full_key)


def lazy_view(source: Any, op: ViewOp) -> LazyViewTensorDict:
    """A lazy view of `source` through `op` (see `LazyViewTensorDict`)."""
    return LazyViewTensorDict(source, op)


register(LazyViewTensorDict)
provide("lazy_view", lazy_view)
provide("LazyViewTensorDict", LazyViewTensorDict)
