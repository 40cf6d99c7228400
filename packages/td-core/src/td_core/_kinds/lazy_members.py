"""The members of a `LazyStackedTensorDict`: adding, replacing, and their batch sizes.

`append`, `insert` and `extend` check every new member (a TensorDict of the
members' batch size and device) before any is added, and refuse on a locked
stack. `auto_batch_size_` grows the members' batch size to what they all share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.traverse import is_td
from td_core.errors import BatchSizeError, DeviceError, LockedError

if TYPE_CHECKING:
    from typing_extensions import Self

    from td_core._kinds.base import TensorDictBase

__all__ = ["LazyMembersMixin"]


class LazyMembersMixin:
    """Member management of `td_core.LazyStackedTensorDict`."""

    __slots__ = ()

    if TYPE_CHECKING:
        tensordicts: list[TensorDictBase]
        stack_dim: int
        _is_locked: bool

        @property
        def _first(self) -> TensorDictBase: ...
        @property
        def device(self) -> torch.device | None: ...
        @property
        def batch_dims(self) -> int: ...
        def keys(self, *args: Any, **kwargs: Any) -> Any: ...

    def append(self, tensordict: TensorDictBase) -> None:
        """Add a member at the end of the stack (its batch size must be the members')."""
        self.insert(len(self.tensordicts), tensordict)

    def insert(self, index: int, tensordict: TensorDictBase) -> None:
        """Add a member before position `index` of the stack dim."""
        self._check_members([tensordict])
        self.tensordicts.insert(index, tensordict)

    def extend(self, tensordict: Sequence[TensorDictBase] | TensorDictBase) -> None:
        """Add members at the end: a list of TensorDicts, or a TensorDict unbound along the stack dim."""
        items = list(tensordict.unbind(self.stack_dim) if is_td(tensordict) else tensordict)
        self._check_members(items)  # all checked before any is added
        self.tensordicts.extend(items)

    def _check_members(self, items: Sequence[Any]) -> None:
        if self._is_locked:
            raise LockedError("cannot add members to a locked LazyStackedTensorDict; unlock_() it")
        bs = self._first.batch_size
        for item in items:
            if not is_td(item):
                raise TypeError(
                    f"cannot add a {type(item).__name__} to a lazy stack: Expected new value to "
                    "be TensorDictBase instance (a TensorDict, a lazy stack or a tensorclass)"
                )
            if item.batch_size != bs:
                raise BatchSizeError(
                    f"Batch sizes in tensordicts differs: cannot add a TensorDict of batch_size "
                    f"{list(item.batch_size)} to a lazy stack whose members have batch_size {list(bs)}"
                )
            device = self.device
            if self.tensordicts and device is not None and item.device != device:
                raise DeviceError(
                    f"Devices differ: cannot add a TensorDict on device {item.device} to a lazy "
                    f"stack on device {device}; move it first with .to({str(device)!r})"
                )

    def valid_keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> Any:
        """The keys every member holds (the same as `keys`)."""
        return self.keys(include_nested, leaves_only, is_leaf, sort=sort)

    def auto_batch_size_(
        self, batch_dims: int | None = None, keep_compliant_size: bool = False
    ) -> Self:
        """Grow the members' batch size to the longest leading shape they all share.

        `batch_dims` caps the number of dims of the stack's batch size. A lazy
        stack's batch size is always compliant, so `keep_compliant_size=True`
        leaves it as it is.
        """
        if keep_compliant_size:
            return self
        member_dims = None if batch_dims is None else max(batch_dims - 1, self.batch_dims - 1)
        for td in self.tensordicts:
            td.auto_batch_size_(member_dims)
        common = list(self.tensordicts[0].batch_size)
        for td in self.tensordicts[1:]:
            i = 0
            while i < len(common) and i < len(td.batch_size) and common[i] == td.batch_size[i]:
                i += 1
            del common[i:]
        for td in self.tensordicts:
            if list(td.batch_size) != common:
                td.batch_size = torch.Size(common)
        return self
