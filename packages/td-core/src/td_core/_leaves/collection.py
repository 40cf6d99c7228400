"""Abstract names for `isinstance` checks: `TensorCollection` and `NonTensorDataBase`.

Neither is a base class td's kinds inherit from: each answers `isinstance`
through `__subclasshook__`, from the class flags every kind already carries.
So `isinstance(x, TensorCollection)` holds for every kind (dense, lazy
stacks, `TensorDictParams`, tensorclasses, whether made with
`@tensorclass` or `TensorClass`, and non-tensor leaves).
"""

from __future__ import annotations

import abc
from typing import Any

from td_core._leaves.nontensor import NonTensorData

__all__ = ["TensorCollection", "NonTensorDataBase"]


class TensorCollection(abc.ABC):  # noqa: B024 - an isinstance target, nothing to implement
    """What every TensorDict-like object is an instance of.

    Examples:
        >>> import torch
        >>> from td_core import TensorCollection, TensorDict, lazy_stack
        >>> td = TensorDict(a=torch.zeros(2))
        >>> isinstance(td, TensorCollection), isinstance(lazy_stack([td, td]), TensorCollection)
        (True, True)
        >>> isinstance(torch.zeros(2), TensorCollection)
        False
    """

    __slots__ = ()

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is TensorCollection:
            return bool(getattr(other, "_td_collection", False))
        return NotImplemented


class NonTensorDataBase(abc.ABC):  # noqa: B024 - an isinstance target
    """What single-value non-tensor leaves (`NonTensorData`, `MetaData`) are instances of.

    A `NonTensorStack` (one value per element) is not.

    Examples:
        >>> from td_core import NonTensorData, NonTensorDataBase, NonTensorStack
        >>> isinstance(NonTensorData(1), NonTensorDataBase)
        True
        >>> isinstance(NonTensorStack.from_list([1, 2]), NonTensorDataBase)
        False
    """

    __slots__ = ()

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is NonTensorDataBase:
            return issubclass(other, NonTensorData)
        return NotImplemented
