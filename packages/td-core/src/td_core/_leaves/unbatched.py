"""`UnbatchedTensor`: a tensor entry without the batch dims, left alone by batch operations.

A plain tensor entry starts with the batch size; an `UnbatchedTensor` has any
shape. It holds data that belongs to the whole batch (a lookup table, a
shared mask, model parameters). Batch operations (indexing, reshape, permute,
expand, stack, cat, unbind, split, lazy stacking, ...) return it with its
data and shape unchanged; leaf operations (arithmetic, `clone`, `to`, casts)
apply to it as to any tensor and keep it an `UnbatchedTensor`.

The traversals of `td_core._core.traverse` treat it like a non-tensor leaf: it is a
`torch.Tensor` whose class says `_is_non_tensor = True`, so the batch
traversals send it down the non-tensor branch (`_map_batch`,
`_map_batch_multi`), while `is_nt`, `is_td` and leaf-wise traversals still see
a tensor. Its `batch_size` is the batch size of the TensorDict holding it,
kept up to date by those hooks (and read by nothing in td but users).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard, cast

import torch

__all__ = [
    "UnbatchedTensor",
    "is_unbatched",
    "shared_unbatched",
    "unbatched_storage_differs",
    "warn_unbatched_storage",
]

Tensor = torch.Tensor


def is_unbatched(value: Any) -> TypeGuard[UnbatchedTensor]:
    """Whether `value` is an `UnbatchedTensor` (a tensor that batch ops leave alone)."""
    return type(value) is not Tensor and getattr(type(value), "_td_pass_through", False)


def shared_unbatched(
    values: Sequence[Any], batch_size: torch.Size, *, warn: bool = True
) -> UnbatchedTensor:
    """The entry that stacking or concatenating `UnbatchedTensor`s gives: the first one.

    An unbatched entry is shared by the whole batch, so only the first input's
    data is kept; inputs that hold other data get a `UserWarning` (as upstream).
    With `warn=False` the caller checks `unbatched_storage_differs` and warns
    itself, once the whole operation has succeeded (a failed stack warns of nothing).
    """
    if warn and unbatched_storage_differs(values):
        warn_unbatched_storage(stacklevel=4)
    return values[0].with_batch_size(batch_size)


def unbatched_storage_differs(values: Sequence[Any]) -> bool:
    """Whether some of the `UnbatchedTensor`s `values` hold other data than the first.

    The same storage is the same data; copies of equal values (what workers send
    back, what a clone gives) lose nothing when only the first is kept.
    """
    first = values[0]
    ptr = first.data_ptr()
    return any(
        other.data_ptr() != ptr and not _same_data(first.data, other.data) for other in values[1:]
    )


def _same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


def warn_unbatched_storage(stacklevel: int = 3) -> None:
    """Warn that stacking kept only the first of several different `UnbatchedTensor`s."""
    warnings.warn(
        "Stacking UnbatchedTensors with different data storage: only the first one's data "
        "is kept (an UnbatchedTensor is shared by the whole batch; store data that differs "
        "per element as a regular tensor).",
        UserWarning,
        stacklevel=stacklevel,
    )


def _first_batch_size(args: Any) -> torch.Size | None:
    for arg in args:
        if isinstance(arg, UnbatchedTensor):
            return arg.batch_size
        if isinstance(arg, (list, tuple)):
            found = _first_batch_size(arg)
            if found is not None:
                return found
    return None


class UnbatchedTensor(Tensor):
    """A tensor entry that has no batch dims and that batch operations leave unchanged.

    Use it for data shared by every element of the batch. In a TensorDict,
    indexing, reshaping, permuting, expanding, stacking, concatenating and
    unbinding return the entry as it is (same data, same shape); arithmetic,
    `clone`, `to` and casts apply to it as to any tensor and return an
    `UnbatchedTensor`. It is a `torch.Tensor`, so `td["table"]` is usable as one.

    `UnbatchedTensor(data, batch_size=None)` takes the payload (anything
    `torch.as_tensor` accepts) and the batch size of the TensorDict holding
    it; a TensorDict sets the batch size when the tensor is stored, so it
    rarely needs passing. It does not change the payload's shape.

    Example:
        ```python
        >>> import torch
        >>> from td_core import TensorDict, UnbatchedTensor
        >>> td = TensorDict(table=UnbatchedTensor(torch.zeros(3, 4)), x=torch.zeros(2, 5), batch_size=[2])
        >>> td[0]["table"].shape
        torch.Size([3, 4])
        >>> td.reshape(1, 2)["table"].data_ptr() == td["table"].data_ptr()
        True

        ```
    """

    _td_pass_through = True
    # the batch traversals send it down their non-tensor branch (see the module docstring)
    _is_non_tensor = True
    _batch_size: torch.Size

    @staticmethod
    def __new__(cls, data: Any, batch_size: Sequence[int] | None = None) -> UnbatchedTensor:
        tensor = data if isinstance(data, Tensor) else torch.as_tensor(data)
        out = cast(
            UnbatchedTensor,
            tensor.as_subclass(cls) if type(tensor) is not cls else tensor.view_as(tensor),
        )
        if batch_size is not None:
            out._batch_size = torch.Size(batch_size)
        elif isinstance(data, UnbatchedTensor):
            out._batch_size = data.batch_size
        return out

    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the TensorDict holding it (`[]` outside one)."""
        return self.__dict__.get("_batch_size", torch.Size())

    @batch_size.setter
    def batch_size(self, value: Sequence[int]) -> None:
        self._batch_size = torch.Size(value)

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = super().__torch_function__(func, types, args, kwargs or {})
        results = out if isinstance(out, (list, tuple)) else (out,)
        bs = None
        for result in results:  # results inherit the batch size of the inputs
            if isinstance(result, UnbatchedTensor) and "_batch_size" not in result.__dict__:
                bs = _first_batch_size(args) if bs is None else bs
                if bs is None:
                    break
                result._batch_size = bs
        return out

    def with_batch_size(self, batch_size: torch.Size) -> UnbatchedTensor:
        """An alias of this tensor (same data) carrying `batch_size`."""
        if self.batch_size == batch_size:
            return self
        with torch._C.DisableTorchFunctionSubclass():
            out = Tensor.view_as(self, self).as_subclass(UnbatchedTensor)
        out._batch_size = torch.Size(batch_size)
        return out

    # ---------------------------------------------- the non-tensor leaf hooks of `_map`
    def _map_batch(self, fn: Callable[[Tensor], Tensor], lead: torch.Size, n: int) -> Any:
        return self.with_batch_size(lead + self.batch_size[n:])

    def _map_batch_multi(self, fn: Callable[[Tensor], Sequence[Tensor]]) -> list[Any]:
        probe = torch.empty(self.batch_size, dtype=torch.bool)
        return [self.with_batch_size(part.shape) for part in fn(probe)]

    # ------------------------------------------------ printing: the data, as a tensor prints
    def _plain(self) -> Tensor:
        with torch._C.DisableTorchFunctionSubclass():
            return Tensor.as_subclass(self, Tensor)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch leaves the keyword untyped
        return f"UnbatchedTensor({self._plain()!r})"

    def __str__(self) -> str:
        return str(self._plain())

    def __format__(self, format_spec: str) -> str:
        return format(self._plain(), format_spec)

    # Python looks these up on the type and words its error with the type's name:
    # delegating gives what the plain tensor gives, result or error ("type Tensor ...")
    def __round__(self, *ndigits: Any) -> Any:
        plain: Any = self._plain()
        return round(plain, *ndigits)

    def __trunc__(self) -> Any:
        plain: Any = self._plain()
        return math.trunc(plain)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild, (self.as_subclass(Tensor), self.batch_size))


def _rebuild(data: Tensor, batch_size: torch.Size) -> UnbatchedTensor:
    return UnbatchedTensor(data, batch_size)
