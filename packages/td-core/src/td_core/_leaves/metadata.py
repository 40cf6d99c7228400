"""`MetaData`: one Python object for a whole batch, kept as one object by batch ops.

It is a `NonTensorData` whose indexing and shape ops give a `MetaData`,
and whose stack is one `MetaData` when every item holds the very same
object (`is`), a `NonTensorStack` otherwise. `MetaData[cls]` checks the
type of the value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch

from td_core._leaves.nontensor import NonTensorData
from td_core._leaves.nontensor_arrays import result_shapes

__all__ = ["MetaData"]


class MetaData(NonTensorData):
    """A value that describes the batch as a whole (a config, a dataset name).

    Args:
        data: the value (a `NonTensorData` is unwrapped).
        batch_size: the batch size of the entry.
        device: the device of the entry (the value is not moved).

    Raises:
        TypeError: for `MetaData[cls]` when `data` is not a `cls`.

    Examples:
        >>> import torch
        >>> from td_core import MetaData, TensorDict
        >>> config = {"lr": 0.1}
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> td["config"] = MetaData(config, batch_size=[3])
        >>> td[0]["config"] is config
        True
    """

    __slots__ = ()
    _expected_type: ClassVar[type | None] = None

    def __init__(
        self,
        data: Any,
        batch_size: Sequence[int] = (),
        device: torch.device | str | None = None,
        *,
        names: Any = None,
    ) -> None:
        del names
        if isinstance(data, NonTensorData):
            data = data.data
        expected = type(self)._expected_type
        if expected is not None and not isinstance(data, expected):
            raise TypeError(
                f"{type(self).__name__}: Expected data of type {expected.__name__}, got "
                f"{type(data).__name__} ({data!r})"
            )
        super().__init__(data, batch_size, device)

    @classmethod
    @functools.cache
    def __class_getitem__(cls, expected: type) -> type[MetaData]:
        return type(
            f"MetaData[{expected.__name__}]", (cls,), {"__slots__": (), "_expected_type": expected}
        )

    def _map_batch(self, fn: Any, lead: torch.Size, n: int) -> MetaData:
        return type(self)(self.data, lead + self.batch_size[n:], self.device)

    def _map_batch_multi(self, fn: Callable[[torch.Tensor], Sequence[torch.Tensor]]) -> list[Any]:
        return [
            type(self)(self.data, shape, self.device)
            for shape in result_shapes(fn, self.batch_size)
        ]

    def clone(self, recurse: bool = True) -> MetaData:
        import copy

        return type(self)(
            copy.deepcopy(self.data) if recurse else self.data, self.batch_size, self.device
        )

    @classmethod
    def _stack_leaves(cls, leaves: Sequence[Any], dim: int) -> MetaData | None:
        """One `MetaData` when every leaf holds the same object, else `None` (stack them)."""
        first = leaves[0]
        if all(isinstance(leaf, MetaData) and leaf.data is first.data for leaf in leaves):
            bs = list(first.batch_size)
            bs.insert(dim, len(leaves))
            return type(first)(first.data, torch.Size(bs), first.device)
        return None

    def __repr__(self) -> str:
        return f"MetaData(data={self.data}, batch_size={self.batch_size}, device={self.device})"
