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
    is_td,
    map_leaves,
    rebuild,
    stack_parts,
    tensor_leaves,
)
from td_core._core.utils import NO_DEFAULT, as_device, as_size
from td_core._ops.apply_run import ApplyOptions, run_apply
from td_core._ops.casts import cast_all
from td_core._ops.dict_methods import PerObject
from td_core._ops.shape import assign_reshaped
from td_core.errors import LockedError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["ApplyMixin", "to", "to_device"]

Tensor = torch.Tensor


# ------------------------------------------------------------------ memory
# The stream each TensorDict was marked with by `record_stream` (one per TensorDict, as upstream).
_STREAMS = PerObject("apply._STREAMS")


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


def _canonical(t: Tensor) -> Tensor:
    """`t` with the row-major strides of its shape (a copy only where they differ)."""
    expected, step = [], 1
    for size in reversed(t.shape):
        expected.append(step)
        step *= size
    if t.stride() == tuple(reversed(expected)):
        return t
    return t.clone(memory_format=torch.contiguous_format)


# ----------------------------------------------------------------------- to
def to(td: TD, *args: Any, **kwargs: Any) -> TD | Any:
    """`td.to(device)`, `td.to(dtype)`, `td.to(device, dtype)`, `td.to(tensor)`, `td.to(attrs_td)`.

    With `inplace=True` the moved or cast leaves replace td's own (its sub-TensorDicts
    stay the same objects) and td itself is returned, as upstream. With
    `non_blocking_pin=True` the leaves are pinned first (on `num_threads` threads)
    and copied asynchronously when the target is an accelerator; a CPU target
    ignores both.
    """
    pin = kwargs.pop("non_blocking_pin", False)
    num_threads = kwargs.pop("num_threads", None)
    if kwargs.pop("inplace", False):
        if td.is_locked:
            raise LockedError(
                "Cannot modify locked TensorDict: to(..., inplace=True) replaces its leaves "
                "(unlock_() it first, or call to() without inplace)"
            )
        out = to(td, *args, non_blocking_pin=pin, num_threads=num_threads, **kwargs)
        if out is not td:
            _replace_leaves(td, out)
            _set_device_tree(td, out.device)
        return td
    if args and is_td(args[0]):
        # as upstream: a TensorDict argument holds a `TensorAttrs` per leaf (see `attrs`)
        if len(args) > 1:
            raise TypeError(
                "to(attrs_td) does not accept additional positional arguments: it takes no "
                f"other positional argument, got {len(args) - 1} more ({args[1:]!r}); the attrs "
                "TensorDict gives each leaf's device and dtype"
            )
        if pin:
            raise NotImplementedError(
                "to(attrs_td, non_blocking_pin=True) is not supported: non_blocking_pin pins "
                "the leaves for one target device, and an attrs TensorDict gives one per leaf"
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
    if pin and device is not None and device.type != "cpu":
        # pinned leaves copy to the accelerator asynchronously, as upstream
        source: Any = td  # (`pin_memory` is the ApplyMixin's own, not the contract's)
        td = source.pin_memory(num_threads=num_threads)
        non_blocking = True
    if device is None:
        assert dtype is not None  # both None returned above
        return cast_all(td, dtype)
    if dtype is None:
        return to_device(td, device, non_blocking)
    return map_leaves(
        td,
        lambda t: t.to(device, dtype, non_blocking=non_blocking),
        device=device,
        keep_non_tensor=lambda v: v.to(device),
    )


def to_device(td: TD, device: torch.device, non_blocking: bool = False) -> TD | Any:
    """`td.to(device)` for a parsed `device` (see `to`): `td` itself if it is there already."""
    if device == td.device:  # already there: as upstream, the TensorDict itself
        return td
    moved = td._to_consolidated(device, non_blocking)
    if moved is not None:  # one transfer of the whole buffer
        return moved
    if device.type == "cpu":  # leaves already there are not moved: not even a call each
        relabelled = _on_cpu(td, device)
        if relabelled is not None:
            return relabelled
    return map_leaves(
        td, _mover(device, non_blocking), device=device, keep_non_tensor=lambda v: v.to(device)
    )


def _on_cpu(td: Any, device: torch.device) -> Any:
    """`td`'s tensors, unmoved, in containers on (cpu) `device`; None, having built
    nothing that matters, at the first leaf that is not on cpu (or for a lazy stack)."""
    if stack_parts(td) is not None:
        return None
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if type(value) is Tensor or isinstance(value, Tensor):
            if not value.is_cpu:
                return None
            out[key] = value
        elif value._is_non_tensor:
            out[key] = value.to(device)
        else:
            sub = _on_cpu(value, device)
            if sub is None:
                return None
            out[key] = sub
    return td._new(out, td.batch_size, device)


def _set_device_tree(td: Any, device: Any) -> None:
    """Record `device` as the device of `td` and its sub-TensorDicts."""
    td._set_device(device)
    for sub in td._subtrees():
        _set_device_tree(sub, device)


def _to_batch_size(td: Any, batch_size: torch.Size, args: Any, kwargs: Any) -> Any:
    """`to(..., batch_size=...)`: the cast or move, then a copy with that batch size."""
    if stack_parts(td) is not None or getattr(td, "_view_op", None) is not None:
        follows = "its members" if stack_parts(td) is not None else "its source"
        raise TypeError(
            f"Cannot pass batch-size to to() of a {type(td).__name__}: its batch size follows "
            f"{follows}; call to() and then to_tensordict() and set batch_size"
        )
    out = to(td, *args, **kwargs)
    if out is td:  # a copy of the structure (a dense one for a write-through view)
        out = map_leaves(td, lambda t: t) if td._writes_through else td.clone(recurse=False)
    out.batch_size = batch_size
    return out


def _mover(device: torch.device, non_blocking: bool) -> Callable[[Tensor], Tensor]:
    """`t.to(device)` per leaf, skipping the call where nothing moves (the costly part on cpu)."""
    if device.type == "cpu":
        return lambda t: t if t.is_cpu else t.to(device, non_blocking=non_blocking)
    if non_blocking:  # a keyword argument costs more than the call itself
        return lambda t: t.to(device, non_blocking=True)
    return lambda t: t.to(device)


def _finish(td: Any, result: Any, names: Any, propagate_lock: bool) -> Any:
    """Name and lock `apply`'s result as its `names` and `propagate_lock` ask."""
    if result is None or result is td:
        return result
    if names is not NO_DEFAULT:
        result.names = names
    if propagate_lock and td.is_locked:
        result.lock_()
    return result


class ApplyMixin(TensorDictContract):
    """Leaf-wise methods of TensorDictBase."""

    __slots__ = ()

    def apply(
        self,
        fn: Callable[..., Any],
        *others: TensorDictContract,
        batch_size: Any = None,
        device: Any = NO_DEFAULT,
        names: Sequence[str | None] | object | None = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        propagate_lock: bool = False,
        call_on_nested: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        out: TensorDictContract | None = None,
    ) -> Self | None:
        """A new TensorDict with `fn(leaf, *leaves_of_others)` at every tensor leaf.

        A `None` result drops the entry, and a sub-TensorDict left with no
        entry is dropped too; when nothing is left at all, `apply` returns
        `None` (as upstream). Non-tensor leaves are kept as they are.

        Args:
            fn: the function called on every leaf.
            others: TensorDicts whose leaves at the same keys are passed too.
            batch_size: the result's batch size, if `fn` changes the batch dims.
            device: the result's device (default: this TensorDict's).
            names: the names of the result's batch dims.
            inplace: write results into the existing leaves and return self.
            default: the value passed for keys missing from `others`.
            filter_empty: `True` drops every sub-TensorDict left empty, `False`
                keeps them all; `None` (default) keeps those that held no leaf
                to start with.
            propagate_lock: lock the result if this TensorDict is locked.
            call_on_nested: call `fn` on sub-TensorDicts instead of their leaves.
            is_leaf: a predicate on an entry's class: entries it accepts (a
                sub-TensorDict, a non-tensor leaf) are passed to `fn` whole.
            out: a TensorDict the results are written into (and returned).

        Returns:
            The result, self (`inplace=True`), `out`, or `None` if nothing is left.

        Raises:
            KeyNotFoundError: if a key is missing from one of `others` and no
                `default` is given.
            BatchSizeError: if a result loses the batch dims (pass `batch_size=`).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.tensor(1.0), "b": torch.tensor(1)}, [])
            >>> "b" in td.apply(lambda x: x if x.dtype == torch.float else None)
            False
            >>> td.apply(lambda x: None) is None
            True
        """
        opts = ApplyOptions(
            fn,
            default=default,
            call_on_nested=call_on_nested,
            inplace=inplace,
            batch_size=None if batch_size is None else as_size(batch_size),
            device=device,
            filter_empty=filter_empty,
            is_leaf=is_leaf,
        )
        return _finish(self, run_apply(self, others, opts, out=out), names, propagate_lock)

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
        names: Sequence[str | None] | object | None = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        propagate_lock: bool = False,
        call_on_nested: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        out: TensorDictContract | None = None,
    ) -> Self | None:
        """Like `apply`, calling `fn(key, leaf, *others)`.

        With `nested_keys=True` the key is the full nested key (a tuple below
        the top level). The other arguments are `apply`'s.
        """
        opts = ApplyOptions(
            fn,
            named=True,
            nested_keys=nested_keys,
            default=default,
            call_on_nested=call_on_nested,
            inplace=inplace,
            batch_size=None if batch_size is None else as_size(batch_size),
            device=device,
            filter_empty=filter_empty,
            is_leaf=is_leaf,
        )
        result = run_apply(self, others, opts, prefix=tuple(prefix), out=out)
        return _finish(self, result, names, propagate_lock)

    def _fast_apply(
        self,
        fn: Callable[..., Any],
        *others: TensorDictContract,
        named: bool = False,
        nested_keys: bool = False,
        filter_empty: bool | None = False,
        num_threads: int = 0,
        checked: bool = True,
        **kwargs: Any,
    ) -> Self | None:
        """Compatibility shim for upstream's private `_fast_apply`: `apply` or `named_apply`.

        Upstream code calls this private method; td runs the public `apply`
        (`named_apply` with `named=True`, which takes `nested_keys`) with the
        other keywords, and upstream's default `filter_empty=False` (sub-TensorDicts
        left empty are kept). Results are checked as in `apply` whatever `checked`
        says, and `num_threads` is accepted but the leaves run on the calling
        thread. Prefer `apply`.
        """
        del num_threads, checked  # accepted for upstream compatibility
        # ApplyMixin's own methods: a kind that wraps `_fast_apply` wraps it once
        if named:
            return ApplyMixin.named_apply(
                self, fn, *others, nested_keys=nested_keys, filter_empty=filter_empty, **kwargs
            )
        return ApplyMixin.apply(self, fn, *others, filter_empty=filter_empty, **kwargs)

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

    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> Any:
        """Every tensor leaf made contiguous (expanded leaves are materialised).

        Args:
            inplace: rebind this TensorDict's leaves to their contiguous copies
                (the sub-TensorDicts stay the same objects) and return it.
            canonical: also copy the leaves that `is_contiguous()` accepts but
                whose strides are not the row-major ones of their shape (a
                size-1 dim with an odd stride).
        """
        out = map_leaves(self, _canonical if canonical else Tensor.contiguous)
        return assign_reshaped(self, out, "contiguous") if inplace else out

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
                "record_stream: A stream is already associated with this TensorDict instance: "
                f"it is already marked with stream {previous!r} and cannot be marked with "
                f"{stream!r} too"
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
