"""Leaf-wise operations: apply, moving (`to`), cloning, memory.

Pointwise math and comparisons live in `td_core._ops.pointwise`, dtype casts in
`td_core._ops.casts`. Non-tensor leaves are carried along unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TD, TensorDictContract, provided
from td_core._core.traverse import (
    is_stack,
    is_td,
    map_leaves,
    per_member,
    rebuild,
    stack_parts,
    tensor_leaves,
)
from td_core._core.utils import NO_DEFAULT, as_device, as_size, broadcast_shape
from td_core._ops.casts import cast_all
from td_core._ops.dict_methods import PerObject
from td_core.errors import BatchSizeError, KeyNotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["ApplyMixin", "to"]

Tensor = torch.Tensor


# ---------------------------------------------------------------------- apply
def _apply(
    td: TensorDictContract,
    fn: Callable[..., Any],
    others: tuple[TensorDictContract, ...],
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
) -> Any | None:
    if batch_size is None and is_stack(td):  # per member (a lazy stack's reads are copies)
        return per_member(
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
    out: dict[str, Any] = {}
    bs = td.batch_size if batch_size is None else batch_size
    n = len(td.batch_size)
    # the usual call, `td.apply(fn)`: plain tensor leaves take a short path
    plain = not (others or named or inplace)
    check = batch_size is None and n > 0  # results must keep the batch dims
    first = bs[0] if n == 1 else -1  # one batch dim: compare an int, not a Size slice
    for key, value in td._items_str():
        if plain and type(value) is Tensor:
            result = fn(value)
            if result is None:
                continue
            if check and type(result) is Tensor:
                shape = result.shape
                if (not shape or shape[0] != first) if first >= 0 else shape[:n] != bs:
                    raise _batch_error(result, prefix, key, bs)
            out[key] = result
            continue
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
            sub: Any = _apply(
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
            raise _batch_error(result, prefix, key, bs)
        out[key] = result
    if inplace:
        return None
    return td._new(out, bs, td.device if device is NO_DEFAULT else as_device(device))


def _batch_error(result: Tensor, prefix: tuple[str, ...], key: str, bs: torch.Size) -> Exception:
    return BatchSizeError(
        f"apply: the function returned a tensor of shape {list(result.shape)} for key "
        f"{(*prefix, key) if prefix else key!r}, which does not start with the batch_size "
        f"{list(bs)}; pass batch_size= if the function changes the batch dims"
    )


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


# ------------------------------------------------------------------ memory
# The stream each TensorDict was marked with by `record_stream` (one per TensorDict, as upstream).
_STREAMS = PerObject()


def _replace_leaves(td: TensorDictContract, new: TensorDictContract) -> None:
    """Put `new`'s tensor leaves (a tree shaped like `td`) in `td`'s storage, in place."""
    parts = stack_parts(td)
    if parts is not None:
        new_parts = stack_parts(new)
        assert new_parts is not None  # rebuild keeps a lazy stack lazy
        for member, new_member in zip(parts[0], new_parts[0]):
            _replace_leaves(member, new_member)
        return
    for key, value in list(td._items_str()):
        if isinstance(value, Tensor):
            td._set_str(key, new._get_str(key))
        elif not value._is_non_tensor:
            _replace_leaves(value, new._get_str(key))


# ----------------------------------------------------------------------- to
def to(td: TD, *args: Any, **kwargs: Any) -> TD | Any:
    """`td.to(device)`, `td.to(dtype)`, `td.to(device, dtype)`, `td.to(tensor)`, `td.to(attrs_td)`."""
    if args and is_td(args[0]):
        # as upstream: a TensorDict argument holds a `TensorAttrs` per leaf (see `attrs`)
        if len(args) > 1:
            raise TypeError(
                f"to(attrs_td) takes no other positional argument, got {len(args) - 1} more"
            )
        kwargs.pop("cast_filter", None)
        return provided("to_attrs")(td, args[0], non_blocking=kwargs.pop("non_blocking", None))
    batch_size = kwargs.pop("batch_size", None)
    if batch_size is not None:
        return _to_batch_size(td, as_size(batch_size), args, kwargs)
    non_blocking = kwargs.pop("non_blocking", False)
    other = kwargs.pop("other", None)
    if is_td(other):  # an example TensorDict: its device, and its dtype if it has one
        args = (*args, other.device, other.dtype)
    elif other is not None:
        args = (other, *args)
    if args and isinstance(args[0], Tensor):
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
        moved = td._to_consolidated(device, non_blocking)
        if moved is not None:  # one transfer of the whole buffer
            return moved
        return map_leaves(
            td, _mover(device, non_blocking), device=device, keep_non_tensor=lambda v: v.to(device)
        )
    return map_leaves(
        td,
        lambda t: t.to(device, dtype, non_blocking=non_blocking),
        device=device,
        keep_non_tensor=lambda v: v.to(device),
    )


def _to_batch_size(td: Any, batch_size: torch.Size, args: Any, kwargs: Any) -> Any:
    """`to(..., batch_size=...)`: the cast or move, then a copy with that batch size."""
    if stack_parts(td) is not None:
        raise TypeError(
            f"Cannot pass batch-size to to() of a {type(td).__name__}: its batch size follows "
            "its members; call to() and then to_tensordict() and set batch_size"
        )
    out = to(td, *args, **kwargs)
    if out is td:
        out = td.clone(recurse=False)
    out.batch_size = batch_size
    return out


def _mover(device: torch.device, non_blocking: bool) -> Callable[[Tensor], Tensor]:
    """`t.to(device)` per leaf, skipping the call where nothing moves (the costly part on cpu)."""
    if device.type == "cpu":
        return lambda t: t if t.is_cpu else t.to(device, non_blocking=non_blocking)
    if non_blocking:  # a keyword argument costs more than the call itself
        return lambda t: t.to(device, non_blocking=True)
    return lambda t: t.to(device)


class ApplyMixin(TensorDictContract):
    """Leaf-wise methods of TensorDictBase."""

    __slots__ = ()

    def apply(
        self,
        fn: Callable[..., Any],
        *others: TensorDictContract,
        batch_size: Any = None,
        device: Any = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        call_on_nested: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> Self | None:
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

    def apply_(self, fn: Callable[..., Any], *others: TensorDictContract, **kwargs: Any) -> Self:
        """Apply `fn` to every tensor leaf and write the results in place (returns self).

        All-or-nothing: `fn` runs on every leaf before any result is written,
        so if it raises (or returns a value that does not fit its leaf) no leaf
        changes. On a lazy stack the results are written into the members.
        """
        self.apply(fn, *others, inplace=True, **kwargs)
        return self

    def named_apply(
        self,
        fn: Callable[..., Any],
        *others: TensorDictContract,
        nested_keys: bool = False,
        prefix: tuple[str, ...] = (),
        batch_size: Any = None,
        device: Any = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        call_on_nested: bool = False,
    ) -> Self | None:
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
    def clone(self, recurse: bool = True) -> Self:
        """A copy; with `recurse=False` only the structure is copied (tensors are shared)."""
        if not recurse:
            return map_leaves(self, lambda t: t)
        return map_leaves(self, Tensor.clone, keep_non_tensor=lambda v: v.clone())

    def __copy__(self) -> Self:
        return self.clone(recurse=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self.clone()

    def contiguous(self) -> Any:
        """Every tensor leaf made contiguous (expanded leaves are materialised)."""
        return map_leaves(self, Tensor.contiguous)

    def is_contiguous(self) -> bool:
        return all(map(Tensor.is_contiguous, tensor_leaves(self)))

    def share_memory_(self) -> Self:
        """Move every CPU leaf to shared memory, then lock (new entries would not be shared)."""
        for t in tensor_leaves(self):
            t.share_memory_()
        return self.lock_()

    def is_shared(self) -> bool:
        """Whether every tensor leaf is in shared memory (CUDA tensors count as shared)."""
        leaves = tensor_leaves(self)
        return bool(leaves) and all(t.is_shared() or t.is_cuda for t in leaves)

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> Self:
        """Every tensor leaf copied to page-locked memory (needs an accelerator).

        Args:
            num_threads: pin the leaves on this many threads (`None` or `0`:
                on the calling thread).
            inplace: replace the leaves of this TensorDict by their pinned
                copies (allowed when locked) and return it.

        Raises:
            RuntimeError: if no accelerator is available; nothing is replaced.
        """
        leaves = tensor_leaves(self)
        try:
            if num_threads:
                with ThreadPoolExecutor(num_threads) as pool:
                    pinned = list(pool.map(Tensor.pin_memory, leaves))
            else:
                pinned = [t.pin_memory() for t in leaves]
        except RuntimeError as err:
            raise RuntimeError(
                f"pin_memory needs an accelerator (CUDA) to be available: {err}"
            ) from err
        result = rebuild(self, iter(pinned))
        if not inplace:
            return result
        _replace_leaves(self, result)
        return self

    def pin_memory_(self, num_threads: int = 0) -> Self:
        """Pin the tensor leaves in place and return self (deprecated, as upstream).

        Deprecated: use `pin_memory(inplace=True)`; upstream removes this in 0.17.

        Args:
            num_threads: the number of threads that pin the leaves (`0`: the calling thread).
        """
        warnings.warn(
            "TensorDictBase.pin_memory_() is deprecated and will be removed in TensorDict 0.17. "
            "Use pin_memory(inplace=True) instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        self.pin_memory(num_threads=num_threads, inplace=True)
        return self

    def record_stream(self, stream: Any) -> Self:
        """Mark every tensor leaf as used by `stream` (`torch.Tensor.record_stream`).

        The memory of a leaf freed later is not reused before the work queued
        on `stream` is done. A TensorDict is marked with one stream only.

        Args:
            stream: a `torch.cuda.Stream`.

        Returns:
            self.

        Raises:
            RuntimeError: if the TensorDict is already marked with another
                stream, or if a leaf refuses the stream (a CPU tensor, or a
                `stream` that is not a stream).
        """
        previous = _STREAMS.get(self)
        if previous is not None and previous != stream:
            raise RuntimeError(
                f"record_stream: this TensorDict is already marked with stream {previous!r}; "
                f"it cannot be marked with {stream!r} too"
            )
        for t in tensor_leaves(self):
            t.record_stream(stream)
        _STREAMS.set(self, stream)
        return self

    def attrs(
        self,
        *,
        fields: Sequence[str] = ("device", "dtype", "shape"),
        num_threads: int | None = None,
    ) -> Self:
        """A TensorDict of empty batch size with a `TensorAttrs` in place of each tensor leaf.

        Pass it to `to` to move and cast another TensorDict leaf by leaf, when
        its leaves do not share one device or dtype. Non-tensor leaves are
        kept; sub-TensorDicts (and tensorclasses) keep their kind.

        Args:
            fields: the attributes to record, among `"device"`, `"dtype"` and
                `"shape"`; the others are `None`.
            num_threads: accepted for upstream compatibility; the leaves are
                described on the calling thread (it is metadata only).

        Example:
            ```python
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict(a=torch.zeros(3), b=torch.zeros(3, dtype=torch.int32), batch_size=[3])
            >>> target = TensorDict(a=torch.ones(3), b=torch.ones(3), batch_size=[3])
            >>> target.to(td.attrs(fields=("dtype",)))["b"].dtype
            torch.int32

            ```
        """
        return provided("attrs_of")(self, tuple(fields))

    # ----------------------------------------------------------- reductions
