"""Leaf-wise operations: apply, arithmetic, comparisons, casting, cloning, memory.

Arithmetic with a scalar or another TensorDict goes through ``torch._foreach_*``
(one call for all leaves); with a tensor operand each leaf uses torch's usual
(trailing) broadcasting, exactly as ``td.apply(lambda x: x + t)`` would.
Non-tensor leaves are carried along unchanged.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._map import (
    aligned_leaves,
    is_nt,
    is_td,
    map_batch,
    map_leaves,
    per_member,
    rebuild,
    tensor_leaves,
)
from td_core._utils import NO_DEFAULT, as_device, as_size, broadcast_shape, normalize_dim
from td_core.errors import BatchSizeError, KeyNotFoundError

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["ApplyMixin", "to"]

Tensor = torch.Tensor


# ---------------------------------------------------------------------- apply
def _apply(
    td: TensorDictBase,
    fn: Callable[..., Any],
    others: tuple[TensorDictBase, ...],
    *,
    named: bool,
    nested_keys: bool,
    prefix: tuple[str, ...],
    default: Any,
    call_on_nested: bool,
    inplace: bool,
    batch_size: torch.Size | None,
    device: Any,
    filter_empty: bool | None,
    writes: list[tuple[Any, Any, Any]],
) -> TensorDictBase | None:
    if batch_size is None:  # a lazy stack runs per member (its reads are stacked copies)
        lazy = per_member(
            td,
            lambda m, *o: _apply(
                m,
                fn,
                o,
                named=named,
                nested_keys=nested_keys,
                prefix=prefix,
                default=default,
                call_on_nested=call_on_nested,
                inplace=inplace,
                batch_size=None,
                device=device,
                filter_empty=filter_empty,
                writes=writes,
            ),
            *others,
        )
        if lazy is not NotImplemented:
            return lazy
    out: dict[str, Any] = {}
    bs = td.batch_size if batch_size is None else batch_size
    n = len(td.batch_size)
    for key, value in td._items_str():
        other_values = []
        for i, other in enumerate(others):
            item = other._get_str(key, NO_DEFAULT)
            if item is NO_DEFAULT:
                if default is NO_DEFAULT:
                    raise KeyNotFoundError(
                        f"key {(*prefix, key) if prefix else key!r} is missing from TensorDict number "
                        f"{i + 1} of the others passed to apply (pass default= to fill it)"
                    )
                item = default
            other_values.append(item)
        is_tensor = isinstance(value, Tensor)
        if not is_tensor and value._is_non_tensor:
            if not inplace:
                out[key] = value
            continue
        nested = not is_tensor
        if nested and not call_on_nested:
            sub = _apply(
                value,
                fn,
                tuple(other_values),
                named=named,
                nested_keys=nested_keys,
                prefix=(*prefix, key),
                default=default,
                call_on_nested=call_on_nested,
                inplace=inplace,
                batch_size=batch_size,
                device=device,
                filter_empty=filter_empty,
                writes=writes,
            )
            if not inplace and not (filter_empty and sub.is_empty()):
                out[key] = sub
            continue
        if named:
            name = ((*prefix, key) if prefix else key) if nested_keys else key
            result = fn(name, value, *other_values)
        else:
            result = fn(value, *other_values)
        if result is None:
            continue
        if inplace:
            if result is not value:  # written by _write_all once every result is computed
                writes.append(((*prefix, key), value, result))
            continue
        if type(result) is Tensor and batch_size is None and result.shape[:n] != bs:
            raise BatchSizeError(
                f"apply: the function returned a tensor of shape {list(result.shape)} for key "
                f"{(*prefix, key) if prefix else key!r}, which does not start with the batch_size "
                f"{list(bs)}; pass batch_size= if the function changes the batch dims"
            )
        out[key] = result
    if inplace:
        return None
    return td._new(out, bs, td.device if device is NO_DEFAULT else as_device(device))


def _write_all(writes: list[tuple[Any, Any, Any]]) -> None:
    """Write ``apply_``'s results, after checking every one fits its destination.

    ``apply_`` is all-or-nothing like ``update``: the function runs on every
    leaf first, so an exception from it (or a result that does not fit) leaves
    every leaf as it was.
    """
    for key, dest, result in writes:
        if isinstance(dest, Tensor):
            if not isinstance(result, Tensor):
                raise TypeError(
                    f"apply_: the function returned a {type(result).__name__} for key {key!r}, "
                    "expected a tensor (or None to leave the entry alone)"
                )
            if broadcast_shape(result.shape, dest.shape) != dest.shape:
                raise BatchSizeError(
                    f"apply_: the function returned a tensor of shape {list(result.shape)} for key "
                    f"{key!r}, which cannot be written into its shape {list(dest.shape)}"
                )
    for _, dest, result in writes:
        if isinstance(dest, Tensor):
            dest.copy_(result)
        else:
            dest.update_(result)


# ------------------------------------------------------------------ arithmetic
def _other_leaves(td: TensorDictBase, other: TensorDictBase) -> list[Tensor]:
    """``other``'s tensor leaves at ``td``'s leaf keys, in ``td``'s traversal order."""
    return aligned_leaves(td, other)


def _scaled(other: Any, alpha: Any) -> Any:
    """``alpha * other`` for ``add``/``sub`` with ``alpha`` (TensorDicts scaled leaf-wise)."""
    return other if alpha is None else other * alpha


def _binary(
    name: str, foreach: Callable[..., list[Tensor]] | None, op: Callable[[Any, Any], Any]
) -> Callable[..., Any]:
    def method(self: TensorDictBase, other: Any, *, alpha: Any = None) -> TensorDictBase:
        other = _scaled(other, alpha)
        leaves = tensor_leaves(self)
        if is_td(other):
            others = _other_leaves(self, other)
            results = (
                foreach(leaves, others) if foreach else [op(a, b) for a, b in zip(leaves, others)]
            )
        elif foreach is not None and isinstance(other, (int, float)) and leaves:
            results = foreach(leaves, other)
        else:
            results = [op(a, other) for a in leaves]
        return rebuild(self, iter(results))

    method.__name__ = name
    method.__doc__ = (
        f"Leaf-wise ``{name}`` with a scalar, a tensor or a TensorDict (new TensorDict)."
    )
    return method


def _binary_(
    name: str, foreach_: Callable[..., None] | None, op_: Callable[[Any, Any], Any]
) -> Callable[..., Any]:
    def method(self: TensorDictBase, other: Any, *, alpha: Any = None) -> TensorDictBase:
        other = _scaled(other, alpha)
        leaves = tensor_leaves(self)
        if not leaves:
            return self
        if is_td(other):
            others = _other_leaves(self, other)
            if foreach_ is not None:
                foreach_(leaves, others)
            else:
                for a, b in zip(leaves, others):
                    op_(a, b)
        elif foreach_ is not None and isinstance(other, (int, float)):
            foreach_(leaves, other)
        else:
            for a in leaves:
                op_(a, other)
        return self

    method.__name__ = name
    method.__doc__ = f"In-place leaf-wise ``{name}`` (returns self)."
    return method


def _reflected(name: str, op: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def method(self: TensorDictBase, other: Any) -> TensorDictBase:
        return rebuild(self, iter([op(other, a) for a in tensor_leaves(self)]))

    method.__name__ = name
    return method


def _unary(name: str, foreach: Callable[[list[Tensor]], list[Tensor]]) -> Callable[..., Any]:
    def method(self: TensorDictBase) -> TensorDictBase:
        leaves = tensor_leaves(self)
        return rebuild(self, iter(foreach(leaves) if leaves else []))

    method.__name__ = name
    method.__doc__ = f"Leaf-wise ``{name}`` (new TensorDict)."
    return method


def _compare(name: str, op: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def method(self: TensorDictBase, other: Any) -> Any:
        if is_td(other):
            return _zip_compare(self, other, op, ())
        if isinstance(other, (Tensor, int, float, bool)):
            return map_leaves(
                self, lambda t: op(t, other), keep_non_tensor=lambda v: _nt_compare(v, other, op)
            )
        return NotImplemented

    method.__name__ = name
    return method


def _nt_compare(value: Any, other: Any, op: Callable[[Any, Any], Any]) -> Tensor:
    """Element-wise ``==`` / ``!=`` of non-tensor values, as a bool tensor of the batch shape."""
    if op is not operator.eq and op is not operator.ne:
        raise TypeError(f"non-tensor data {value!r} can only be compared with == and !=")
    mine = value.as_array()
    theirs = other.as_array() if is_nt(other) else None
    if theirs is not None and theirs.shape != mine.shape:
        theirs = np.broadcast_to(theirs, mine.shape)
    flat = [
        bool(op(x, theirs.flat[i] if theirs is not None else other))
        for i, x in enumerate(mine.flat)
    ]
    return torch.tensor(flat, dtype=torch.bool).reshape(tuple(value.batch_size))


def _zip_compare(
    td: TensorDictBase,
    other: TensorDictBase,
    op: Callable[[Any, Any], Any],
    prefix: tuple[str, ...],
) -> TensorDictBase:
    lazy = per_member(td, lambda m, o: _zip_compare(m, o, op, prefix), other)
    if lazy is not NotImplemented:
        return lazy
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        item = other._get_str(key, NO_DEFAULT)
        if item is NO_DEFAULT:
            raise KeyNotFoundError(
                f"key {(*prefix, key)!r} is in the first TensorDict but not in the second"
            )
        if isinstance(value, Tensor):
            out[key] = op(value, item)
        elif value._is_non_tensor:
            out[key] = _nt_compare(value, item, op)
        else:
            out[key] = _zip_compare(value, item, op, (*prefix, key))
    return td._new(out, td.batch_size)


def _reduce_bool(td: TensorDictBase, dim: int | None, name: str) -> Any:
    """``all``/``any``: a Python bool over every leaf, or a TensorDict reduced over batch dim ``dim``."""
    if dim is None:
        leaves = tensor_leaves(td)
        if not leaves:
            return name == "all"
        return bool(getattr(torch.stack([getattr(t, name)() for t in leaves]), name)())
    d = normalize_dim(dim, td.batch_dims)
    lead = torch.Size(s for i, s in enumerate(td.batch_size) if i != d)
    return map_batch(td, lambda t: getattr(t, name)(d), lead)


# ----------------------------------------------------------------------- to
def to(td: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
    """``td.to(device)``, ``td.to(dtype)``, ``td.to(device, dtype)``, ``td.to(other)``."""
    non_blocking = kwargs.pop("non_blocking", False)
    if kwargs.pop("batch_size", None) is not None:
        raise TypeError("to(batch_size=...) is not supported; set td.batch_size instead")
    if args and is_td(args[0]):
        device, dtype = args[0].device, None
        args = args[1:]
    elif args and isinstance(args[0], Tensor):
        device, dtype = args[0].device, args[0].dtype
        args = args[1:]
    else:
        device, dtype = None, None
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, torch.dtype):
            dtype = arg
        elif arg is not None:
            device = as_device(arg)
    if device is None and dtype is None:
        return td
    if device is None:
        return _cast_all(td, dtype)
    if dtype is None:
        return map_leaves(
            td,
            lambda t: t.to(device, non_blocking=non_blocking),
            device=device,
            keep_non_tensor=lambda v: v.to(device),
        )
    return map_leaves(
        td,
        lambda t: t.to(device, dtype, non_blocking=non_blocking),
        device=device,
        keep_non_tensor=lambda v: v.to(device),
    )


def _cast_all(td: TensorDictBase, dtype: torch.dtype) -> TensorDictBase:
    """Every tensor leaf cast to ``dtype``, in one fused copy where autograd allows."""
    leaves = tensor_leaves(td)
    if any(t.requires_grad for t in leaves):
        return map_leaves(td, lambda t: t.to(dtype))
    todo = [t for t in leaves if t.dtype != dtype]
    if not todo:
        return rebuild(td, iter(leaves))
    allocate = functools.partial(
        torch.empty_like, dtype=dtype
    )  # map() calls it with no Python frame
    outs = list(map(allocate, todo))
    torch._foreach_copy_(outs, todo)
    if len(outs) == len(leaves):
        return rebuild(td, iter(outs))
    done = iter(outs)
    return rebuild(td, iter([next(done) if t.dtype != dtype else t for t in leaves]))


def _cast(name: str, dtype: torch.dtype) -> Callable[..., Any]:
    def method(self: TensorDictBase) -> TensorDictBase:
        return _cast_all(self, dtype)

    method.__name__ = name
    method.__doc__ = f"Every tensor leaf cast to ``{dtype}``."
    return method


class ApplyMixin:
    """Leaf-wise methods of TensorDictBase."""

    __slots__ = ()

    def apply(
        self: TensorDictBase,
        fn: Callable[..., Any],
        *others: TensorDictBase,
        batch_size: Any = None,
        device: Any = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        call_on_nested: bool = False,
    ) -> TensorDictBase | None:
        """A new TensorDict with ``fn(leaf, *leaves_of_others)`` at every tensor leaf.

        A ``None`` result drops the entry. Non-tensor leaves are kept as they are.

        Args:
            others: TensorDicts whose leaves at the same keys are passed too.
            batch_size: the result's batch size, if ``fn`` changes the batch dims.
            device: the result's device (default: this TensorDict's).
            inplace: write results into the existing leaves (see :meth:`apply_`).
            default: the value passed for keys missing from ``others``.
            filter_empty: drop sub-TensorDicts that end up empty.
            call_on_nested: call ``fn`` on sub-TensorDicts instead of their leaves.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.tensor(1.0), "b": torch.tensor(1)}, [])
            >>> "b" in td.apply(lambda x: x if x.dtype == torch.float else None)
            False
        """
        writes: list[tuple[Any, Any, Any]] = []
        result = _apply(
            self,
            fn,
            others,
            named=False,
            nested_keys=False,
            prefix=(),
            default=default,
            call_on_nested=call_on_nested,
            inplace=inplace,
            batch_size=None if batch_size is None else as_size(batch_size),
            device=device,
            filter_empty=filter_empty,
            writes=writes,
        )
        _write_all(writes)
        return result

    def apply_(
        self: TensorDictBase, fn: Callable[..., Any], *others: TensorDictBase, **kwargs: Any
    ) -> TensorDictBase:
        """Apply ``fn`` to every tensor leaf and write the results in place (returns self).

        All-or-nothing: ``fn`` runs on every leaf before any result is written,
        so if it raises (or returns a value that does not fit its leaf) no leaf
        changes. On a lazy stack the results are written into the members.
        """
        self.apply(fn, *others, inplace=True, **kwargs)
        return self

    def named_apply(
        self: TensorDictBase,
        fn: Callable[..., Any],
        *others: TensorDictBase,
        nested_keys: bool = False,
        prefix: tuple[str, ...] = (),
        batch_size: Any = None,
        device: Any = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        call_on_nested: bool = False,
    ) -> TensorDictBase | None:
        """Like :meth:`apply`, calling ``fn(key, leaf, *others)``.

        With ``nested_keys=True`` the key is the full nested key (a tuple below the top level).
        """
        writes: list[tuple[Any, Any, Any]] = []
        result = _apply(
            self,
            fn,
            others,
            named=True,
            nested_keys=nested_keys,
            prefix=tuple(prefix),
            default=default,
            call_on_nested=call_on_nested,
            inplace=inplace,
            batch_size=None if batch_size is None else as_size(batch_size),
            device=device,
            filter_empty=filter_empty,
            writes=writes,
        )
        _write_all(writes)
        return result

    # ------------------------------------------------------------------ memory
    def clone(self: TensorDictBase, recurse: bool = True) -> TensorDictBase:
        """A copy; with ``recurse=False`` only the structure is copied (tensors are shared)."""
        if not recurse:
            return map_leaves(self, lambda t: t)
        return map_leaves(self, Tensor.clone, keep_non_tensor=lambda v: v.clone())

    def __copy__(self: TensorDictBase) -> TensorDictBase:
        return self.clone(recurse=False)

    def __deepcopy__(self: TensorDictBase, memo: dict[int, Any]) -> TensorDictBase:
        return self.clone()

    def detach(self: TensorDictBase) -> TensorDictBase:
        """Every tensor leaf detached from the autograd graph."""
        return map_leaves(self, Tensor.detach)

    def detach_(self: TensorDictBase) -> TensorDictBase:
        for t in tensor_leaves(self):
            t.detach_()
        return self

    def contiguous(self: TensorDictBase) -> TensorDictBase:
        """Every tensor leaf made contiguous (expanded leaves are materialised)."""
        return map_leaves(self, Tensor.contiguous)

    def is_contiguous(self: TensorDictBase) -> bool:
        return all(t.is_contiguous() for t in tensor_leaves(self))

    def zero_(self: TensorDictBase) -> TensorDictBase:
        """Zero every tensor leaf in place."""
        leaves = tensor_leaves(self)
        if leaves:
            torch._foreach_zero_(leaves)
        return self

    def fill_(self: TensorDictBase, key: Any, value: float | bool) -> TensorDictBase:
        """Fill the entry at ``key`` (every leaf of it, if it is a TensorDict) with ``value``."""
        entry = self.get(key)
        for t in tensor_leaves(entry) if is_td(entry) else [entry]:
            t.fill_(value)
        return self

    def requires_grad_(self: TensorDictBase, requires_grad: bool = True) -> TensorDictBase:
        """Set ``requires_grad`` on every floating-point or complex leaf."""
        for t in tensor_leaves(self):
            if t.is_floating_point() or t.is_complex():
                t.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self: TensorDictBase) -> bool:
        return any(t.requires_grad for t in tensor_leaves(self))

    def share_memory_(self: TensorDictBase) -> TensorDictBase:
        """Move every CPU leaf to shared memory, then lock (new entries would not be shared)."""
        for t in tensor_leaves(self):
            t.share_memory_()
        return self.lock_()

    def is_shared(self: TensorDictBase) -> bool:
        """Whether every tensor leaf is in shared memory (CUDA tensors count as shared)."""
        leaves = tensor_leaves(self)
        return bool(leaves) and all(t.is_shared() or t.is_cuda for t in leaves)

    def pin_memory(self: TensorDictBase) -> TensorDictBase:
        """Every tensor leaf in page-locked memory (needs an accelerator)."""
        try:
            return map_leaves(self, Tensor.pin_memory)
        except RuntimeError as err:
            raise RuntimeError(
                f"pin_memory needs an accelerator (CUDA) to be available: {err}"
            ) from err

    # ----------------------------------------------------------- reductions
    def all(self: TensorDictBase, dim: int | None = None) -> Any:
        """``True`` if every element of every tensor leaf is true; per batch dim with ``dim``."""
        return _reduce_bool(self, dim, "all")

    def any(self: TensorDictBase, dim: int | None = None) -> Any:
        """``True`` if any element of any tensor leaf is true; per batch dim with ``dim``."""
        return _reduce_bool(self, dim, "any")

    # operators are attached below from tables, so each is written once
    __eq__ = _compare("__eq__", operator.eq)  # type: ignore[assignment]
    __ne__ = _compare("__ne__", operator.ne)  # type: ignore[assignment]
    __lt__ = _compare("__lt__", operator.lt)
    __le__ = _compare("__le__", operator.le)
    __gt__ = _compare("__gt__", operator.gt)
    __ge__ = _compare("__ge__", operator.ge)


_BINARY = {
    # name: (foreach, foreach in place, operator, in-place operator)
    "add": (torch._foreach_add, torch._foreach_add_, operator.add, operator.iadd),
    "sub": (torch._foreach_sub, torch._foreach_sub_, operator.sub, operator.isub),
    "mul": (torch._foreach_mul, torch._foreach_mul_, operator.mul, operator.imul),
    "div": (torch._foreach_div, torch._foreach_div_, operator.truediv, operator.itruediv),
    "pow": (torch._foreach_pow, torch._foreach_pow_, operator.pow, operator.ipow),
    "maximum": (torch._foreach_maximum, torch._foreach_maximum_, torch.maximum, None),
    "minimum": (torch._foreach_minimum, torch._foreach_minimum_, torch.minimum, None),
    "bitwise_and": (None, None, operator.and_, operator.iand),
    "bitwise_or": (None, None, operator.or_, operator.ior),
    "bitwise_xor": (None, None, operator.xor, operator.ixor),
}
_DUNDER = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "truediv",
    "pow": "pow",
    "bitwise_and": "and",
    "bitwise_or": "or",
    "bitwise_xor": "xor",
}
_UNARY = {
    "neg": torch._foreach_neg,
    "abs": torch._foreach_abs,
    "exp": torch._foreach_exp,
    "log": torch._foreach_log,
    "sqrt": torch._foreach_sqrt,
    "sigmoid": torch._foreach_sigmoid,
    "reciprocal": torch._foreach_reciprocal,
    "sign": torch._foreach_sign,
}
_CASTS = {
    "float": torch.float32,
    "double": torch.float64,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int": torch.int32,
    "long": torch.int64,
    "bool": torch.bool,
    "byte": torch.uint8,
}


def _install() -> None:
    for name, (foreach, foreach_, op, op_) in _BINARY.items():
        method = _binary(name, foreach, op)
        setattr(ApplyMixin, name, method)
        inplace_op = op_ if op_ is not None else (lambda a, b, _op=op: a.copy_(_op(a, b)))
        setattr(ApplyMixin, f"{name}_", _binary_(f"{name}_", foreach_, inplace_op))
        if name in _DUNDER:
            dunder = _DUNDER[name]
            setattr(ApplyMixin, f"__{dunder}__", method)
            setattr(ApplyMixin, f"__i{dunder}__", getattr(ApplyMixin, f"{name}_"))
            setattr(ApplyMixin, f"__r{dunder}__", _reflected(f"__r{dunder}__", op))
    ApplyMixin.__radd__ = ApplyMixin.add  # type: ignore[attr-defined]
    ApplyMixin.__rmul__ = ApplyMixin.mul  # type: ignore[attr-defined]
    for name, foreach in _UNARY.items():
        setattr(ApplyMixin, name, _unary(name, foreach))
    ApplyMixin.__neg__ = ApplyMixin.neg  # type: ignore[attr-defined]
    ApplyMixin.__abs__ = ApplyMixin.abs  # type: ignore[attr-defined]
    ApplyMixin.__invert__ = _unary("__invert__", lambda ts: [~t for t in ts])  # type: ignore[attr-defined]
    for name, dtype in _CASTS.items():
        setattr(ApplyMixin, name, _cast(name, dtype))


_install()
