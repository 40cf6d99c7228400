"""A tensorclass over a TensorDict of another kind: writes go to that kind.

A tensorclass holds its fields in `_tensordict`. Most instances hold a dense
`TensorDict`, whose leaves are the data: in-place ops on the instance write
into them. `from_tensordict` also wraps, as upstream does, a lazy stack, a
sub-TensorDict view, a `PersistentTensorDict` (HDF5, zarr) or a
`TensorDictStore`, without copying it. Their reads are copies (or views the
kind itself must write through), so every in-place op of the instance is
handed to the wrapped kind's own op of the same name, which knows where its
data lives (a lazy stack writes into its members, a store into the server).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from td_core._core.keys import NestedKey
from td_core._core.traverse import is_nt, is_stack
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.inplace_route import InPlaceRouteMixin

__all__ = ["WrappedKindMixin", "wraps_as_is"]


def wraps_as_is(td: Any) -> bool:
    """Whether `from_tensordict(td)` wraps `td` itself rather than a dense copy of it.

    A dense `TensorDict` and the kinds whose writes must reach their own data
    are wrapped; dense subclasses (`TypedTensorDict`), `TensorDictParams`,
    tensorclasses and non-tensor leaves give a dense copy of their entries.
    """
    if type(td) is TensorDict:
        return True
    if isinstance(td, TensorDict) or is_nt(td) or getattr(type(td), "_td_tensorclass", False):
        return False
    return not isinstance(td, torch.nn.Module)  # TensorDictParams


class WrappedKindMixin(InPlaceRouteMixin):
    """In-place ops of a tensorclass, handed to its `_tensordict` when that is not dense."""

    __slots__ = ()
    _tensordict: Any
    _wrap: Callable[[Any], Any]  # the tensorclass's constructor over a TensorDict, as it is

    @property
    def _direct(self) -> bool:
        return type(self._tensordict) is TensorDict

    @property
    def _reads_are_copies(self) -> bool:  # type: ignore[override]  # per instance here
        """Whether ops must write results back (pointwise ops then go entry by entry)."""
        return type(self._tensordict) is not TensorDict

    def _run_elsewhere(self, method: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        return getattr(self._tensordict, method.__name__)(*args, **kwargs)

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: NestedKey) -> None:
        if self._direct:
            TensorDictBase._copy_into(self, key, dest, item, full_key)
        else:
            self._tensordict._copy_into(key, dest, item, full_key)

    # ------------------------------------------------------- views of a wrapped lazy stack
    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Any:
        """Every field but `keys`; over a lazy stack, an instance over the stack's own
        `exclude` (its members' tensors, shared), as on a dense TensorDict."""
        td = self._tensordict
        if not is_stack(td):
            return TensorDictBase.exclude(self, *keys, inplace=inplace)
        if inplace:  # the stack drops the keys from its members (ragged entries are not read)
            td.exclude(*keys, inplace=True)
            return self
        return type(self)._wrap(td.exclude(*keys))
