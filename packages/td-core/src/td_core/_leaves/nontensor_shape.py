"""The batch-shape methods of a non-tensor leaf, as a tensor collection has them.

Each one is the container's shape op on this one leaf: the op runs on the leaf's
index tensor (`arange(numel).view(batch_size)`) and the leaf gathers its values at
the result, so `leaf.flatten()`, `td.flatten().get(key)` and `td.get(key).flatten()`
agree. A `NonTensorData` (one shared value) stays one value of the new batch size;
a `NonTensorStack` moves its values; indexing a stack down to one element gives a
`NonTensorData` holding it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._leaves.nontensor_arrays import on_cpu, same_value

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["NonTensorShapeMixin"]

_Fn = Callable[[torch.Tensor], torch.Tensor]


def _sizes(args: tuple[Any, ...]) -> tuple[int, ...]:
    """`f(2, 3)` and `f((2, 3))` / `f(torch.Size([2, 3]))` alike."""
    if len(args) == 1 and isinstance(args[0], (Sequence, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def _result_shape(fn: _Fn, shape: torch.Size) -> torch.Size:
    """The shape `fn` gives on a tensor of `shape`: on a `meta` tensor (no elements), else on
    the positions (an op meta tensors refuse)."""
    try:
        return fn(torch.empty(shape, device="meta")).shape
    except (RuntimeError, NotImplementedError, TypeError, IndexError, ValueError):
        return fn(torch.arange(shape.numel()).view(shape)).shape


def _plain_index(index: Any) -> bool:
    """Whether `index` holds only ints, slices, `None` and `...` (checked on a meta tensor)."""
    parts = index if type(index) is tuple else (index,)
    return all(p is None or p is Ellipsis or type(p) in (int, slice) for p in parts)


class NonTensorShapeMixin:
    """Indexing and shape ops of a non-tensor leaf (see the module docstring)."""

    __slots__ = ()

    if TYPE_CHECKING:
        batch_size: torch.Size

        def _map_batch(self, fn: _Fn, lead: torch.Size, n: int) -> Any: ...

        def _map_batch_multi(self, fn: Callable[[torch.Tensor], Sequence[torch.Tensor]]) -> Any: ...

        @classmethod
        def _stack_with(cls, leaves: list[Any], dim: int) -> Any: ...

        @classmethod
        def _cat_with(cls, leaves: list[Any], dim: int) -> Any: ...

        @classmethod
        def _of_array(cls, values: np.ndarray, device: Any) -> Any: ...

        def as_array(self) -> np.ndarray: ...

        device: Any

    def _batch_op(self, fn: _Fn, *, on_meta: bool = True) -> Any:
        if on_meta:
            lead = _result_shape(fn, self.batch_size)
        else:  # index tensors: meta tensors do not check their values against the batch
            lead = fn(torch.arange(self.batch_size.numel()).view(self.batch_size)).shape
        return self._map_batch(fn, lead, len(self.batch_size))

    def __getitem__(self, index: Any) -> Any:
        """The leaf at batch `index` (an int, slice, mask, index tensor or a tuple of them)."""
        if isinstance(index, str):
            raise TypeError(f"a non-tensor leaf has no keys: cannot index it with {index!r}")
        index = on_cpu(index)  # the values are indexed on the CPU
        return self._batch_op(lambda t: t[index], on_meta=_plain_index(index))

    def reshape(self, *shape: Any) -> Self:
        """The leaf with batch size `shape` (one `-1` is inferred)."""
        sizes = _sizes(shape)
        return self._batch_op(lambda t: t.reshape(sizes))

    def view(self, *shape: Any) -> Self:
        """Same as `reshape`: a leaf has no storage to share."""
        return self.reshape(*shape)

    def flatten(self, start_dim: int | None = 0, end_dim: int | None = -1) -> Self:
        """Batch dims `start_dim` to `end_dim` merged into one (a 0-d leaf gives size 1)."""
        start = 0 if start_dim is None else start_dim
        end = -1 if end_dim is None else end_dim
        return self._batch_op(lambda t: t.flatten(start, end))

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Batch dim `dim` split into `sizes`."""
        return self._batch_op(lambda t: t.unflatten(dim, tuple(sizes)))

    def squeeze(self, dim: int | None = None) -> Self:
        """Batch dims of size one removed (only `dim` when given)."""
        return self._batch_op(lambda t: t.squeeze() if dim is None else t.squeeze(dim))

    def unsqueeze(self, dim: int) -> Self:
        """A batch dim of size one inserted at `dim`."""
        return self._batch_op(lambda t: t.unsqueeze(dim))

    def expand(self, *shape: Any) -> Self:
        """The leaf broadcast to batch size `shape` (as `Tensor.expand`)."""
        sizes = _sizes(shape)
        return self._batch_op(lambda t: t.expand(sizes))

    def permute(self, *dims: Any) -> Self:
        """The batch dims reordered."""
        order = _sizes(dims)
        return self._batch_op(lambda t: t.permute(order))

    def transpose(self, dim0: int, dim1: int) -> Self:
        """Batch dims `dim0` and `dim1` swapped."""
        return self._batch_op(lambda t: t.transpose(dim0, dim1))

    def repeat(self, *repeats: Any) -> Self:
        """The values tiled `repeats` times along each batch dim (as `Tensor.repeat`)."""
        counts = _sizes(repeats)
        return self._batch_op(lambda t: t.repeat(counts))

    def repeat_interleave(self, repeats: int | torch.Tensor, dim: int | None = None) -> Self:
        """Each value repeated `repeats` times along batch dim `dim` (flattened when `None`)."""
        return self._batch_op(lambda t: t.repeat_interleave(repeats, dim=dim))

    def flip(self, dims: Sequence[int]) -> Self:
        """The values reversed along batch dims `dims`."""
        return self._batch_op(lambda t: t.flip(tuple(dims)))

    def where(
        self, condition: torch.Tensor, other: Any, *, out: Any = None, pad: Any = None
    ) -> Any:
        """This leaf's values where `condition` is True, `other`'s elsewhere.

        Args:
            condition: a boolean mask over the leading batch dims (it broadcasts
                over the others).
            other: a non-tensor leaf of a batch size that broadcasts to this one,
                or one plain value.
            out: a non-tensor leaf of the result's batch size that takes the result's
                values, in place, and is returned: a `NonTensorStack`, or a
                `NonTensorData` when the result is one value repeated.
            pad: accepted for `TensorDict.where`'s signature: a leaf has no keys that
                one side could lack.

        Raises:
            TypeError: `out` is not a non-tensor leaf, or is a `NonTensorData` and the
                result holds several values (nothing is written).
            ValueError: `out`'s batch size is not the result's (nothing is written).
        """
        del pad
        n = len(self.batch_size)
        if condition.dtype != torch.bool or condition.ndim > n:
            raise RuntimeError(
                f"where: condition must be a bool tensor over the batch dims {list(self.batch_size)}, "
                f"got {condition.dtype} of shape {list(condition.shape)}"
            )
        grid = condition.reshape(*condition.shape, *([1] * (n - condition.ndim)))
        mask = grid.expand(self.batch_size).cpu().numpy()
        mine = self.as_array()
        if getattr(type(other), "_is_non_tensor", False) and not isinstance(other, torch.Tensor):
            theirs = np.broadcast_to(other.as_array(), mine.shape)
        else:
            theirs = np.empty(mine.shape, dtype=object)
            theirs.fill(other)
        picked = np.empty(mine.shape, dtype=object)
        picked[...] = mine
        picked[~mask] = theirs[~mask]
        if out is not None:
            return _write_into(out, picked)
        return type(self)._of_array(picked, self.device)

    def unbind(self, dim: int = 0) -> tuple[Any, ...]:
        """The leaves along batch dim `dim`."""
        return tuple(self._map_batch_multi(lambda t: t.unbind(dim)))

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """`torch.stack`/`torch.cat` of non-tensor leaves, and torch's shape functions on one."""
        kwargs = dict(kwargs or {})
        if func in _JOIN:
            leaves = list(args[0] if args else kwargs.pop("tensors"))
            dim = args[1] if len(args) > 1 else kwargs.pop("dim", 0)
            if kwargs.pop("out", None) is not None or kwargs:
                return NotImplemented
            if not leaves or not all(getattr(type(v), "_is_non_tensor", False) for v in leaves):
                return NotImplemented  # mixed with TensorDicts or tensors: not a leaf-only join
            if isinstance(leaves[0], torch.Tensor):  # `UnbatchedTensor`s join as tensors
                return NotImplemented
            return _JOIN[func](leaves, dim)
        method = _METHODS.get(func)
        if method is None or not args or not isinstance(args[0], cls):
            return NotImplemented
        return getattr(args[0], method)(*args[1:], **kwargs)


def _write_into(out: Any, values: np.ndarray) -> Any:
    """`out` (a non-tensor leaf) holding `values` in place; see `where`."""
    if not getattr(type(out), "_is_non_tensor", False) or isinstance(out, torch.Tensor):
        raise TypeError(f"where(out=): out must be a non-tensor leaf, got {type(out).__name__}")
    if tuple(out.batch_size) != values.shape:
        raise ValueError(
            f"where(out=): out has batch_size {list(out.batch_size)}, the result "
            f"{list(values.shape)}; give an out of the result's batch size"
        )
    if getattr(type(out), "_is_stack", False):
        if not out._write_(values):  # leaves backed by a file write there
            out._restore(values, None, out.batch_size, out.device)
        return out
    first = values.flat[0] if values.size else None
    if any(not same_value(v, first) for v in values.flat):
        raise TypeError(
            "where(out=): the result holds several values and out is a NonTensorData, "
            "which holds one; pass a NonTensorStack as out"
        )
    if not out._write_(first):
        out.data = first
    return out


def _stack(leaves: list[Any], dim: int) -> Any:
    sizes = {tuple(leaf.batch_size) for leaf in leaves}
    if len(sizes) > 1:
        raise ValueError(
            "torch.stack of non-tensor leaves needs one batch size, got "
            f"{[list(leaf.batch_size) for leaf in leaves]}"
        )
    return type(leaves[0])._stack_with(leaves, dim)


def _cat(leaves: list[Any], dim: int) -> Any:
    return type(leaves[0])._cat_with(leaves, dim)


_JOIN: dict[Callable[..., Any], Callable[[list[Any], int], Any]] = {
    torch.stack: _stack,
    torch.cat: _cat,
    torch.concat: _cat,
    torch.concatenate: _cat,
}
_METHODS: dict[Callable[..., Any], str] = {
    torch.unbind: "unbind",
    torch.squeeze: "squeeze",
    torch.unsqueeze: "unsqueeze",
    torch.flatten: "flatten",
    torch.unflatten: "unflatten",
    torch.reshape: "reshape",
    torch.permute: "permute",
    torch.transpose: "transpose",
    torch.flip: "flip",
    torch.repeat_interleave: "repeat_interleave",
}
