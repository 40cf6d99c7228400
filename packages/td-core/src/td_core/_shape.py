"""Shape operations over the batch dims (view, reshape, permute, unbind, split, ...).

Each op is a tensor function on the leading ``batch_dims`` dims plus the new
batch size, handed to ``map_batch``; feature dims are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from td_core._map import map_batch, map_batch_multi
from td_core._names import carry_names, names_after
from td_core._utils import infer_shape, normalize_dim, shape_args
from td_core.errors import BatchSizeError

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["ShapeMixin"]

Tensor = torch.Tensor


class ShapeMixin:
    """Batch-dim shape operations; every result shares storage with the input when torch's op does."""

    __slots__ = ()

    def view(self: TensorDictBase, *shape: Any) -> TensorDictBase:
        """A view with batch size ``shape`` (one dim may be -1)."""
        bs = self.batch_size
        new = infer_shape(shape_args(shape), bs.numel(), bs)
        n = len(bs)
        if not new:  # t.view() with no sizes is an error: pass the trailing shape as one tuple
            return map_batch(self, lambda t: t.view(t.shape[n:]), new)
        return map_batch(self, lambda t: t.view(*new, *t.shape[n:]), new)

    def reshape(self: TensorDictBase, *shape: Any) -> TensorDictBase:
        """Like ``view``, copying where a view is impossible."""
        bs = self.batch_size
        new = infer_shape(shape_args(shape), bs.numel(), bs)
        n = len(bs)
        if not new:
            return map_batch(self, lambda t: t.reshape(t.shape[n:]), new)
        return map_batch(self, lambda t: t.reshape(*new, *t.shape[n:]), new)

    def squeeze(self: TensorDictBase, dim: int | None = None) -> TensorDictBase:
        """Remove batch dims of size 1 (all of them, or ``dim`` if it has size 1)."""
        bs = self.batch_size
        if dim is None:
            dims = tuple(i for i, s in enumerate(bs) if s == 1)
        else:
            d = normalize_dim(dim, len(bs))
            dims = (d,) if bs[d] == 1 else ()
        new = torch.Size(s for i, s in enumerate(bs) if i not in dims)
        out = map_batch(self, lambda t: t.squeeze(dims) if dims else t, new)
        names = self._raw_names()
        return out if names is None else carry_names(out, names_after(names, drop=dims))

    def unsqueeze(self: TensorDictBase, dim: int) -> TensorDictBase:
        """Insert a batch dim of size 1 at ``dim`` (negative dims count from the batch end)."""
        bs = self.batch_size
        d = normalize_dim(dim, len(bs) + 1)
        new = torch.Size((*bs[:d], 1, *bs[d:]))
        out = map_batch(self, lambda t: t.unsqueeze(d), new)
        names = self._raw_names()
        return out if names is None else carry_names(out, names_after(names, insert=(d,)))

    def permute(self: TensorDictBase, *dims: Any) -> TensorDictBase:
        """Reorder the batch dims."""
        n = self.batch_dims
        order = tuple(normalize_dim(d, n) for d in shape_args(dims))
        if sorted(order) != list(range(n)):
            raise ValueError(
                f"permute needs a permutation of the {n} batch dims, got {list(shape_args(dims))}"
            )
        bs = self.batch_size
        new = torch.Size(bs[d] for d in order)
        out = map_batch(self, lambda t: t.permute(*order, *range(n, t.ndim)), new)
        names = self._raw_names()
        return out if names is None else carry_names(out, [names[d] for d in order])

    def transpose(self: TensorDictBase, dim0: int, dim1: int) -> TensorDictBase:
        """Swap two batch dims."""
        n = self.batch_dims
        d0, d1 = normalize_dim(dim0, n), normalize_dim(dim1, n)
        shape = list(self.batch_size)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        out = map_batch(self, lambda t: t.transpose(d0, d1), torch.Size(shape))
        names = self._raw_names()
        if names is None:
            return out
        swapped = list(names)
        swapped[d0], swapped[d1] = swapped[d1], swapped[d0]
        return carry_names(out, swapped)

    def expand(self: TensorDictBase, *shape: Any) -> TensorDictBase:
        """Broadcast to batch size ``shape`` without copying (``-1`` keeps a dim)."""
        target = list(shape_args(shape))
        bs = self.batch_size
        n = len(bs)
        if len(target) < n:
            raise BatchSizeError(f"cannot expand batch_size {list(bs)} to {target}: fewer dims")
        offset = len(target) - n
        for i, size in enumerate(bs):
            want = target[offset + i]
            if want == -1:
                target[offset + i] = size
            elif size not in (1, want):
                raise BatchSizeError(
                    f"cannot expand batch_size {list(bs)} to {list(shape_args(shape))}"
                )
        new = torch.Size(target)
        if not new:
            return map_batch(self, lambda t: t.expand(t.shape[n:]), new)
        out = map_batch(self, lambda t: t.expand(*new, *t.shape[n:]), new)
        names = self._raw_names()
        if names is None:
            return out
        return carry_names(out, names_after(names, insert=range(offset)))

    def expand_as(self: TensorDictBase, other: Any) -> TensorDictBase:
        return self.expand(other.batch_size if hasattr(other, "batch_size") else other.shape)

    def flatten(self: TensorDictBase, start_dim: int = 0, end_dim: int = -1) -> TensorDictBase:
        """Merge batch dims ``start_dim`` to ``end_dim`` (inclusive) into one."""
        bs = self.batch_size
        n = len(bs)
        if n == 0:
            return self.unsqueeze(0)
        s, e = normalize_dim(start_dim, n), normalize_dim(end_dim, n)
        if s > e:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        new = torch.Size((*bs[:s], math.prod(bs[s : e + 1]), *bs[e + 1 :]))
        return map_batch(self, lambda t: t.flatten(s, e), new)

    def unflatten(
        self: TensorDictBase, dim: int, unflattened_size: Sequence[int]
    ) -> TensorDictBase:
        """Split batch dim ``dim`` into ``unflattened_size``."""
        bs = self.batch_size
        d = normalize_dim(dim, len(bs))
        sizes = infer_shape(tuple(unflattened_size), bs[d], torch.Size([bs[d]]))
        new = torch.Size((*bs[:d], *sizes, *bs[d + 1 :]))
        return map_batch(self, lambda t: t.unflatten(d, sizes), new)

    def unbind(self: TensorDictBase, dim: int = 0) -> tuple[TensorDictBase, ...]:
        """The slices along batch dim ``dim``, as a tuple."""
        bs = self.batch_size
        d = normalize_dim(dim, len(bs))
        lead = torch.Size((*bs[:d], *bs[d + 1 :]))
        out = tuple(map_batch_multi(self, lambda t: t.unbind(d), [lead] * bs[d]))
        names = self._raw_names()
        return out if names is None else carry_names(out, names_after(names, drop=(d,)))

    def split(
        self: TensorDictBase, split_size: int | Sequence[int], dim: int = 0
    ) -> tuple[TensorDictBase, ...]:
        """Split along batch dim ``dim`` into chunks of ``split_size`` (or the listed sizes)."""
        bs = self.batch_size
        d = normalize_dim(dim, len(bs))
        total = bs[d]
        if isinstance(split_size, int):
            if split_size <= 0:
                raise ValueError(f"split_size must be positive, got {split_size}")
            sizes = [min(split_size, total - i) for i in range(0, total, split_size)] or [0]
        else:
            sizes = list(split_size)
            if sum(sizes) != total:
                raise BatchSizeError(
                    f"split sizes {sizes} do not sum to batch dim {d} of size {total}"
                )
        leads = [torch.Size((*bs[:d], s, *bs[d + 1 :])) for s in sizes]
        out = tuple(map_batch_multi(self, lambda t: t.split(sizes, d), leads))
        names = self._raw_names()
        return out if names is None else carry_names(out, names)

    def chunk(self: TensorDictBase, chunks: int, dim: int = 0) -> tuple[TensorDictBase, ...]:
        """Split along ``dim`` into at most ``chunks`` pieces, as ``torch.chunk`` does."""
        if chunks <= 0:
            raise ValueError(f"chunks must be positive, got {chunks}")
        d = normalize_dim(dim, self.batch_dims)
        size = self.batch_size[d]
        return self.split(max(1, math.ceil(size / chunks)), d)

    def flip(self: TensorDictBase, *dims: Any) -> TensorDictBase:
        """Reverse the order of elements along the given batch dims."""
        n = self.batch_dims
        ds = tuple(normalize_dim(d, n) for d in shape_args(dims))
        return map_batch(self, lambda t: t.flip(ds), self.batch_size)

    def roll(
        self: TensorDictBase, shifts: int | Sequence[int], dims: int | Sequence[int]
    ) -> TensorDictBase:
        """Roll the elements along the given batch dims, as ``torch.roll`` does."""
        n = self.batch_dims
        ds = tuple(normalize_dim(d, n) for d in ((dims,) if isinstance(dims, int) else dims))
        sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        return map_batch(self, lambda t: t.roll(sh, ds), self.batch_size)
