"""Dtype casts (`float32()`, `bfloat16()`, `type()`, ...): one table, one implementation.

Every cast method takes `cast_filter=`, a function of `(key_tuple, tensor)`
that says which leaves to cast (the others are kept). Non-tensor leaves are
carried along; lazy stacks are cast per member and re-stacked lazily.

Examples:
    >>> import torch
    >>> from td_core import TensorDict
    >>> td = TensorDict({"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.int64)}, [2])
    >>> td.float64()["a"].dtype, td.dtype, td.int64().dtype
    (torch.float64, None, torch.int64)
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import rebuild, tensor_leaves
from td_core._ops.lazy_shape import restack
from td_core._ops.pointwise_run import _lazy_members

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["CAST_DTYPES", "CastMixin", "cast_all"]

Tensor = torch.Tensor
CastFilter = Callable[[tuple[str, ...], Tensor], bool]

# method name -> dtype
CAST_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "half": torch.float16,
    "float": torch.float32,
    "double": torch.float64,
    "int": torch.int32,
    "long": torch.int64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "byte": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "bool": torch.bool,
    "complex32": torch.complex32,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
    "qint8": torch.qint8,
    "qint32": torch.qint32,
    "quint8": torch.quint8,
    "quint4x2": torch.quint4x2,
}
_QUANTIZED = {torch.qint8, torch.qint32, torch.quint8, torch.quint4x2}


_CAST_METHODS = {
    torch.float64: torch.Tensor.double,
    torch.float32: torch.Tensor.float,
    torch.float16: torch.Tensor.half,
    torch.bfloat16: torch.Tensor.bfloat16,
    torch.int64: torch.Tensor.long,
    torch.int32: torch.Tensor.int,
    torch.int16: torch.Tensor.short,
    torch.int8: torch.Tensor.char,
    torch.uint8: torch.Tensor.byte,
    torch.bool: torch.Tensor.bool,
}


def cast_all(
    td: TensorDictContract, dtype: torch.dtype, cast_filter: CastFilter | None = None
) -> Any:
    """Every tensor leaf (those `cast_filter` accepts) cast to `dtype`."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"invalid type: {dtype!r} (expected a torch.dtype such as torch.float32)")
    members = _lazy_members(td)
    if members is not None:
        dim = td.stack_dim  # type: ignore[attr-defined]
        return restack(td, [cast_all(m, dtype, cast_filter) for m in members], dim)
    if dtype in _QUANTIZED and tensor_leaves(td):
        raise RuntimeError(
            f"cannot cast to {dtype}: quantized dtypes need a scale and a zero point; use "
            f"td.apply(lambda t: torch.quantize_per_tensor(t, scale, zero_point, {dtype}))"
        )
    if cast_filter is not None:
        out = td.named_apply(
            lambda key, t: t.to(dtype) if cast_filter(_as_tuple(key), t) else t,
            nested_keys=True,
        )
        assert out is not None  # not in place: named_apply returns the result
        return out
    leaves = tensor_leaves(td)
    method = _CAST_METHODS.get(dtype)
    if method is not None:  # t.double() & co: the same as t.to(dtype), a third of its parsing
        return rebuild(td, iter(list(map(method, leaves))))
    if torch._C._are_functorch_transforms_active() or any(t.requires_grad for t in leaves):
        return rebuild(td, iter([t.to(dtype) for t in leaves]))
    todo = [t for t in leaves if t.dtype != dtype]
    if not todo:
        return rebuild(td, iter(leaves))
    allocate = functools.partial(torch.empty_like, dtype=dtype)  # map() calls it frame-free
    outs = list(map(allocate, todo))
    torch._foreach_copy_(outs, todo)
    if len(outs) == len(leaves):
        return rebuild(td, iter(outs))
    done = iter(outs)
    return rebuild(td, iter([next(done) if t.dtype != dtype else t for t in leaves]))


def _dtypes(td: TensorDictContract) -> set[torch.dtype]:
    """The dtypes of the tensor leaves (a lazy stack's read per member: no stacking)."""
    members = _lazy_members(td)
    if members is not None:
        return set().union(*map(_dtypes, members))
    out = set()
    for value in td._values_str():
        if isinstance(value, Tensor):
            out.add(value.dtype)
        elif not value._is_non_tensor:
            out |= _dtypes(value)
    return out


def _as_tuple(key: Any) -> tuple[str, ...]:
    return key if type(key) is tuple else (key,)


class CastMixin(TensorDictContract):
    """Dtype methods of `td_core.TensorDictBase`."""

    __slots__ = ()

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype shared by every tensor leaf, or `None` if they differ (or there are none)."""
        dtypes = _dtypes(self)
        return dtypes.pop() if len(dtypes) == 1 else None

    def is_floating_point(self) -> builtins.bool:
        """Whether every tensor leaf has a floating-point dtype (`True` when there are none)."""
        return all(d.is_floating_point for d in _dtypes(self))

    def type(self, dst_type: torch.dtype, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `dst_type` (a `torch.dtype`); see `float32`."""
        return cast_all(self, dst_type, cast_filter)

    def float16(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.float16`."""
        return cast_all(self, CAST_DTYPES["float16"], cast_filter)

    def float32(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.float32` (a new TensorDict).

        Args:
            cast_filter: `cast_filter(key_tuple, tensor)` says whether to cast
                that leaf; the others are kept as they are.
        """
        return cast_all(self, CAST_DTYPES["float32"], cast_filter)

    def float64(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.float64`."""
        return cast_all(self, CAST_DTYPES["float64"], cast_filter)

    def bfloat16(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.bfloat16`."""
        return cast_all(self, CAST_DTYPES["bfloat16"], cast_filter)

    def half(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.float16`."""
        return cast_all(self, CAST_DTYPES["half"], cast_filter)

    def float(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.float32`."""
        return cast_all(self, CAST_DTYPES["float"], cast_filter)

    def double(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.float64`."""
        return cast_all(self, CAST_DTYPES["double"], cast_filter)

    def int(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.int32`."""
        return cast_all(self, CAST_DTYPES["int"], cast_filter)

    def long(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.int64`."""
        return cast_all(self, CAST_DTYPES["long"], cast_filter)

    def int8(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.int8`."""
        return cast_all(self, CAST_DTYPES["int8"], cast_filter)

    def int16(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.int16`."""
        return cast_all(self, CAST_DTYPES["int16"], cast_filter)

    def int32(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.int32`."""
        return cast_all(self, CAST_DTYPES["int32"], cast_filter)

    def int64(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.int64`."""
        return cast_all(self, CAST_DTYPES["int64"], cast_filter)

    def uint8(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.uint8`."""
        return cast_all(self, CAST_DTYPES["uint8"], cast_filter)

    def byte(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.uint8`."""
        return cast_all(self, CAST_DTYPES["byte"], cast_filter)

    def uint16(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.uint16`."""
        return cast_all(self, CAST_DTYPES["uint16"], cast_filter)

    def uint32(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.uint32`."""
        return cast_all(self, CAST_DTYPES["uint32"], cast_filter)

    def uint64(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.uint64`."""
        return cast_all(self, CAST_DTYPES["uint64"], cast_filter)

    def bool(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.bool`."""
        return cast_all(self, CAST_DTYPES["bool"], cast_filter)

    def complex32(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.complex32`."""
        return cast_all(self, CAST_DTYPES["complex32"], cast_filter)

    def complex64(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.complex64`."""
        return cast_all(self, CAST_DTYPES["complex64"], cast_filter)

    def complex128(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Every tensor leaf cast to `torch.complex128`."""
        return cast_all(self, CAST_DTYPES["complex128"], cast_filter)

    def qint8(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Raises `RuntimeError` as upstream: quantizing needs a scale (use `apply`)."""
        return cast_all(self, CAST_DTYPES["qint8"], cast_filter)

    def qint32(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Raises `RuntimeError` as upstream: quantizing needs a scale (use `apply`)."""
        return cast_all(self, CAST_DTYPES["qint32"], cast_filter)

    def quint8(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Raises `RuntimeError` as upstream: quantizing needs a scale (use `apply`)."""
        return cast_all(self, CAST_DTYPES["quint8"], cast_filter)

    def quint4x2(self, *, cast_filter: CastFilter | None = None) -> Self:
        """Raises `RuntimeError` as upstream: quantizing needs a scale (use `apply`)."""
        return cast_all(self, CAST_DTYPES["quint4x2"], cast_filter)
