"""Leaf-wise operations: apply, moving (`to`), cloning, memory.

Pointwise math and comparisons live in `td_core._pointwise`, dtype casts in
`td_core._casts`. Non-tensor leaves are carried along unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core._casts import cast_all
from td_core._map import (
    is_td,
    map_leaves,
    per_member,
    tensor_leaves,
)
from td_core._utils import NO_DEFAULT, as_device, as_size, broadcast_shape
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
    is_leaf: Callable[[type], bool] | None = None,
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
                is_leaf=is_leaf,
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
        as_leaf = not is_tensor and is_leaf is not None and is_leaf(type(value))
        if not is_tensor and value._is_non_tensor and not as_leaf:
            if not inplace:
                out[key] = value
            continue
        nested = not is_tensor
        if nested and not call_on_nested and not as_leaf:
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
                is_leaf=is_leaf,
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
    """Write `apply_`'s results, after checking every one fits its destination.

    `apply_` is all-or-nothing like `update`: the function runs on every
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


# ----------------------------------------------------------------------- to
def to(td: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
    """`td.to(device)`, `td.to(dtype)`, `td.to(device, dtype)`, `td.to(other)`."""
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
        assert dtype is not None  # both None returned above
        return cast_all(td, dtype)
    if dtype is None:
        if device == td.device:  # already there: as upstream, the TensorDict itself
            return td
        return map_leaves(
            td, _mover(device, non_blocking), device=device, keep_non_tensor=lambda v: v.to(device)
        )
    return map_leaves(
        td,
        lambda t: t.to(device, dtype, non_blocking=non_blocking),
        device=device,
        keep_non_tensor=lambda v: v.to(device),
    )


def _mover(device: torch.device, non_blocking: bool) -> Callable[[Tensor], Tensor]:
    """`t.to(device)` per leaf, skipping the call where nothing moves (the costly part on cpu)."""
    if device.type == "cpu":
        return lambda t: t if t.is_cpu else t.to(device, non_blocking=non_blocking)
    if non_blocking:  # a keyword argument costs more than the call itself
        return lambda t: t.to(device, non_blocking=True)
    return lambda t: t.to(device)


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
        is_leaf: Callable[[type], bool] | None = None,
    ) -> TensorDictBase | None:
        """A new TensorDict with `fn(leaf, *leaves_of_others)` at every tensor leaf.

        A `None` result drops the entry. Non-tensor leaves are kept as they are.

        Args:
            others: TensorDicts whose leaves at the same keys are passed too.
            batch_size: the result's batch size, if `fn` changes the batch dims.
            device: the result's device (default: this TensorDict's).
            inplace: write results into the existing leaves (see `apply_`).
            default: the value passed for keys missing from `others`.
            filter_empty: drop sub-TensorDicts that end up empty.
            call_on_nested: call `fn` on sub-TensorDicts instead of their leaves.
            is_leaf: a predicate on an entry's class: entries it accepts (a
                sub-TensorDict, a non-tensor leaf) are passed to `fn` whole.

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
            is_leaf=is_leaf,
            writes=writes,
        )
        _write_all(writes)
        return result

    def apply_(
        self: TensorDictBase, fn: Callable[..., Any], *others: TensorDictBase, **kwargs: Any
    ) -> TensorDictBase:
        """Apply `fn` to every tensor leaf and write the results in place (returns self).

        All-or-nothing: `fn` runs on every leaf before any result is written,
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
        """Like `apply`, calling `fn(key, leaf, *others)`.

        With `nested_keys=True` the key is the full nested key (a tuple below the top level).
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
        """A copy; with `recurse=False` only the structure is copied (tensors are shared)."""
        if not recurse:
            return map_leaves(self, lambda t: t)
        return map_leaves(self, Tensor.clone, keep_non_tensor=lambda v: v.clone())

    def __copy__(self: TensorDictBase) -> TensorDictBase:
        return self.clone(recurse=False)

    def __deepcopy__(self: TensorDictBase, memo: dict[int, Any]) -> TensorDictBase:
        return self.clone()

    def contiguous(self: TensorDictBase) -> TensorDictBase:
        """Every tensor leaf made contiguous (expanded leaves are materialised)."""
        return map_leaves(self, Tensor.contiguous)

    def is_contiguous(self: TensorDictBase) -> bool:
        return all(t.is_contiguous() for t in tensor_leaves(self))

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
