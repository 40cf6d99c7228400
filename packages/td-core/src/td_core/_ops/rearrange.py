"""Batch-dim rearrangements beyond views (`repeat`, `tile`, `narrow`, `movedim`, `rot90`, `pad`, ...).

Every op here validates its arguments against the batch size, then hands one
tensor function of the leading batch dims to the shared traversals in
`_map` (or to the lazy-stack translation in `_lazy_shape` where upstream
keeps lazy stacks lazy). Non-tensor leaves follow through their batch
positions, so per-element values stay aligned with the tensors.

The `new_*` constructors and the per-leaf queries (`entry_class`,
`get_item_shape`, `data_ptr`, `is_cpu`, ...) live in `_layout_new`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from td_core._core.traverse import map_batch, map_batch_multi
from td_core._leaves.nontensor import NonTensorStack
from td_core._leaves.unbatched import is_unbatched
from td_core._ops import lazy_shape as lazy
from td_core._ops.locked_results import locked_like_source
from td_core._ops.names import carry_names
from td_core._ops.new_like import NewMixin
from td_core._ops.shape import assign_reshaped, batch_dim, expanded_shape, permuted_view, size_arg
from td_core._ops.views import remember, reshaped, rotated
from td_core.errors import BatchSizeError, DimError, LockedError

if TYPE_CHECKING:
    from typing_extensions import Self

    from td_core._core.contract import TD, TensorDictContract

__all__ = ["LayoutMixin", "pad_pairs", "padded_values"]

Tensor = torch.Tensor


def _counts(repeats: Any, size: int, d: int) -> tuple[list[int] | int, int]:
    """The repeats of `repeat_interleave` (an int or one count per element) and the new size."""
    if isinstance(repeats, Tensor) and repeats.numel() != 1:
        counts = repeats.reshape(-1).tolist()
        if len(counts) != size:
            raise BatchSizeError(
                f"repeat_interleave: {len(counts)} repeats for batch dim {d} of size {size}; "
                "pass one count per element or a single int"
            )
        if any(c < 0 for c in counts):
            raise BatchSizeError(f"repeat_interleave: repeats must be non-negative, got {counts}")
        return counts, sum(counts)
    r = int(repeats)
    if r < 0:
        raise BatchSizeError(f"repeat_interleave: repeats must be non-negative, got {r}")
    return r, size * r


def _move_order(source: Any, destination: Any, n: int, bs: torch.Size) -> list[int]:
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise DimError(
            f"movedim: source {src} and destination {dst} must have the same number of elements"
        )
    src = [batch_dim(d, bs) for d in src]
    dst = [batch_dim(d, bs) for d in dst]
    for what, dims in (("source", src), ("destination", dst)):
        if len(set(dims)) != len(dims):
            raise DimError(
                f"movedim: repeated dim in {what} {dims} (batch_size {list(bs)}); "
                "each dim may appear once"
            )
    order: list[int | None] = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    return [next(rest) if o is None else o for o in order]


def _pad_leaf(t: Tensor, pairs: list[int], n: int, value: float) -> Tensor:
    # F.pad lists (before, after) pairs from the last dim backwards; feature dims get none
    spec = [0, 0] * (t.ndim - n)
    for d in reversed(range(n)):
        spec += pairs[2 * d : 2 * d + 2] if 2 * d < len(pairs) else [0, 0]
    if t.dtype == torch.bool:  # F.pad refuses bool: pad as float, any non-zero value is True
        return F.pad(t.float(), spec, value=float(value)) != 0
    return F.pad(t, spec, value=value)


def pad_pairs(pad_size: Sequence[int], batch_size: torch.Size) -> list[int]:
    """`pad_size` as ints, checked: `(before, after)` pairs, at most one per batch dim."""
    pairs = [int(p) for p in pad_size]
    if len(pairs) % 2:
        raise DimError(f"pad: pad_size needs (before, after) pairs, got {pairs}")
    if len(pairs) > 2 * len(batch_size):
        raise DimError(
            f"pad: pad_size {pairs} has more than 2 entries per batch dim of batch_size "
            f"{list(batch_size)}"
        )
    return pairs


def padded_values(leaf: Any, pads: Sequence[tuple[int, int]]) -> np.ndarray:
    """The values of a non-tensor leaf padded with `None` along its first `len(pads)` dims.

    `pads` holds one `(before, after)` pair per dim, from the first; negative sizes crop.
    The values are copied by slices: no index over every position is built.
    """
    values = leaf.as_array()
    shape = values.shape
    new = [n + before + after for n, (before, after) in zip(shape, pads)]
    new += shape[len(pads) :]
    for i, n in enumerate(new):
        if n < 0:
            raise BatchSizeError(
                f"pad: pad_size {list(pads[i])} crops batch dim {i} of size {shape[i]} below "
                f"zero (negative output size {n}); nothing was changed"
            )
    out = np.empty(tuple(new), dtype=object)
    out.fill(None)
    src, dst = [], []
    for n, m, (before, after) in zip(shape, new, pads):
        src.append(slice(max(-before, 0), n - max(-after, 0)))
        dst.append(slice(max(before, 0), m - max(after, 0)))
    out[tuple(dst)] = values[tuple(src)]
    return out


def _pad_values(leaf: Any, pairs: list[int], n: int) -> Any:
    """A non-tensor leaf padded with `None` (`pairs` as `pad` takes them)."""
    full = pairs + [0] * (2 * n - len(pairs))
    pads = [(full[2 * d], full[2 * d + 1]) for d in range(n)]
    return NonTensorStack(padded_values(leaf, pads), device=leaf.device)


def _pad_tree(td: TensorDictContract, pairs: list[int], value: float, new: torch.Size) -> Any:
    n = len(new)
    out: dict[str, Any] = {}
    for key, entry in td._items_str():
        if is_unbatched(entry):  # no batch dims to pad: the same data, at the new batch size
            out[key] = entry.with_batch_size(new)
        elif isinstance(entry, Tensor):
            out[key] = _pad_leaf(entry, pairs, n, value)
        elif entry._is_non_tensor:
            out[key] = _pad_values(entry, pairs, n)
        else:
            out[key] = _pad_tree(entry, pairs, value, new + entry.batch_size[n:])
    return td._new(out, new)


def _split_bounds(ios: Any, size: int) -> list[tuple[int, int]]:
    """`(start, stop)` of each piece of `tensor_split(indices_or_sections)` over `size`."""
    if isinstance(ios, Tensor):
        ios = ios.item() if ios.ndim == 0 else ios.tolist()
    if isinstance(ios, int):
        if ios <= 0:
            raise ValueError(f"tensor_split: the number of sections must be positive, got {ios}")
        base, extra = divmod(size, ios)
        sizes = [base + (i < extra) for i in range(ios)]
        starts = [sum(sizes[:i]) for i in range(ios)]
        return [(s, s + k) for s, k in zip(starts, sizes)]
    points = [min(max(i + size if i < 0 else i, 0), size) for i in ios]
    edges = [0, *points, size]
    return [(a, max(a, b)) for a, b in itertools.pairwise(edges)]


class LayoutMixin(NewMixin):
    """Methods of `td_core.TensorDictBase` from this family."""

    __slots__ = ()

    # ------------------------------------------------------------- repeating
    @locked_like_source
    def repeat(self, *repeats: Any, inplace: bool = False) -> Self:
        """Tile the batch: batch dim `i` is repeated `repeats[i]` times, as `Tensor.repeat`.

        Args:
            repeats: one count per batch dim, as ints or one sequence.
            inplace: make this TensorDict hold the result (returns self).

        Raises:
            DimError: (a `ValueError`) if there is not one count per batch dim.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.tensor([1, 2])}, [2])
            >>> td.repeat(2)["a"]
            tensor([1, 2, 1, 2])
        """
        reps = size_arg(repeats, None, "repeat")
        bs = self.batch_size
        if len(reps) != len(bs):
            raise DimError(
                f"repeat needs one count per batch dim: got {len(reps)} counts {list(reps)} for "
                f"batch_size {list(bs)} ({len(bs)} dims)"
            )
        if any(r < 0 for r in reps):
            raise BatchSizeError(f"repeat: counts must be non-negative, got {list(reps)}")
        n = len(bs)
        out = lazy.repeat(self, reps)
        if out is None:
            new = torch.Size(s * r for s, r in zip(bs, reps))
            out = map_batch(self, lambda t: t.repeat((*reps, *(1,) * (t.ndim - n))), new)
        names = self._raw_names()
        if names is not None:  # every batch dim stays where it is: its name too
            carry_names(out, names)
        return assign_reshaped(self, out, "repeat") if inplace else out

    @locked_like_source
    def repeat_interleave(
        self,
        repeats: Tensor | int,
        dim: int | None = None,
        *,
        output_size: int | None = None,
        inplace: bool = False,
    ) -> Self:
        """Repeat each element along batch dim `dim`, as `torch.repeat_interleave`.

        Without `dim` the batch is flattened first. `repeats` is an int or one
        count per element of the dim.
        """
        if dim is None:
            out = self.reshape(-1).repeat_interleave(repeats, 0, output_size=output_size)
            return assign_reshaped(self, out, "repeat_interleave") if inplace else out
        bs = self.batch_size
        d = batch_dim(dim, bs)
        _, size = _counts(repeats, bs[d], d)
        out = lazy.repeat_interleave(self, repeats, d, output_size)
        if out is None:
            new = torch.Size((*bs[:d], size, *bs[d + 1 :]))
            out = map_batch(
                self, lambda t: t.repeat_interleave(repeats, d, output_size=output_size), new
            )
        names = self._raw_names()
        if names is not None:  # every batch dim stays where it is: its name too
            carry_names(out, names)
        return assign_reshaped(self, out, "repeat_interleave") if inplace else out

    @locked_like_source
    def tile(self, dims: int | Sequence[int]) -> Self:
        """Repeat the batch as `torch.tile`: missing leading counts are 1, extra ones add batch dims."""
        reps = (dims,) if isinstance(dims, int) else tuple(int(r) for r in dims)
        if any(r < 0 for r in reps):
            raise BatchSizeError(f"tile: counts must be non-negative, got {list(reps)}")
        bs = self.batch_size
        n = len(bs)
        m = max(n, len(reps))
        full = (1,) * (m - len(reps)) + reps
        lead = torch.Size((1,) * (m - n) + tuple(bs))
        new = torch.Size(s * r for s, r in zip(lead, full))
        pre = (1,) * (m - n)
        return map_batch(
            self, lambda t: t.reshape((*pre, *t.shape)).repeat((*full, *(1,) * (t.ndim - n))), new
        )

    # ------------------------------------------------------------ selecting
    @locked_like_source
    def narrow(self, dim: int, start: int | Tensor, length: int) -> Self:
        """The elements `start` to `start + length` of batch dim `dim` (a view)."""
        bs = self.batch_size
        d = batch_dim(dim, bs)
        size = bs[d]
        first = int(start)
        if not -size <= first <= size:
            raise DimError(
                f"narrow: start {first} is out of range for batch dim {d} of size {size}"
            )
        if first < 0:
            first += size
        if length < 0 or first + length > size:
            raise BatchSizeError(
                f"narrow: start {first} + length {length} does not fit batch dim {d} of size {size}"
            )
        new = torch.Size((*bs[:d], length, *bs[d + 1 :]))
        return map_batch(self, lambda t: t.narrow(d, first, length), new)

    @locked_like_source
    def tensor_split(
        self, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0
    ) -> tuple[Self, ...]:
        """Split along batch dim `dim` as `torch.tensor_split`: into N near-equal pieces, or at indices."""
        bs = self.batch_size
        d = batch_dim(dim, bs)
        bounds = _split_bounds(indices_or_sections, bs[d])
        pieces = lazy.slices(self, d, bounds)
        if pieces is not None:
            return pieces
        leads = [torch.Size((*bs[:d], b - a, *bs[d + 1 :])) for a, b in bounds]
        cuts = [b for _, b in bounds[:-1]]
        if any(a != b for (_, b), (a, _) in itertools.pairwise(bounds)):  # overlapping indices
            return tuple(self._index((*(slice(None),) * d, slice(a, b))) for a, b in bounds)
        return tuple(map_batch_multi(self, lambda t: t.tensor_split(cuts, d), leads))

    # ------------------------------------------------------------ reordering
    @locked_like_source
    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Self:
        """Move batch dims `source` to positions `destination`, as `torch.movedim`."""
        bs = self.batch_size
        order = _move_order(source, destination, len(bs), bs)
        return permuted_view(self, order, "movedim")

    def moveaxis(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Self:
        """Alias of `movedim`."""
        return self.movedim(source, destination)

    def swapaxes(self, axis0: int, axis1: int) -> Self:
        """Swap two batch dims (alias of `transpose`)."""
        return self.transpose(axis0, axis1)

    def swapdims(self, axis0: int, axis1: int) -> Self:
        """Swap two batch dims (alias of `transpose`)."""
        return self.transpose(axis0, axis1)

    def fliplr(self) -> Self:
        """Reverse batch dim 1 (needs at least 2 batch dims), as `torch.fliplr`."""
        if self.batch_dims < 2:
            raise DimError(
                f"fliplr requires at least 2 batch dims, batch_size is {list(self.batch_size)}"
            )
        return self.flip(1)

    def flipud(self) -> Self:
        """Reverse batch dim 0 (needs at least 1 batch dim), as `torch.flipud`."""
        if self.batch_dims < 1:
            raise DimError("flipud requires at least 1 batch dim, batch_size is []")
        return self.flip(0)

    @locked_like_source
    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Self:
        """Rotate by 90 degrees `k` times in the plane of batch dims `dims`, as `torch.rot90`."""
        bs = self.batch_size
        if len(dims) != 2:
            raise DimError(f"rot90 needs exactly 2 dims, got {list(dims)}")
        if len(bs) < 2:
            raise DimError(f"rot90 requires at least 2 batch dims, batch_size is {list(bs)}")
        d0, d1 = batch_dim(dims[0], bs), batch_dim(dims[1], bs)
        if d0 == d1:
            raise DimError(f"rot90 needs two different dims, got {list(dims)}")
        new = list(bs)
        if k % 2:
            new[d0], new[d1] = new[d1], new[d0]
        out = map_batch(self, lambda t: t.rot90(k, (d0, d1)), torch.Size(new))
        return remember(self, out, rotated, k, (d0, d1))

    # ------------------------------------------------------------- reshaping
    def atleast_1d(self) -> Self:
        """This TensorDict with leading batch dims of size 1 added until it has at least 1."""
        return _at_least(self, 1)

    def atleast_2d(self) -> Self:
        """This TensorDict with leading batch dims of size 1 added until it has at least 2."""
        return _at_least(self, 2)

    def atleast_3d(self) -> Self:
        """This TensorDict with leading batch dims of size 1 added until it has at least 3."""
        return _at_least(self, 3)

    @locked_like_source
    def broadcast_to(self, shape: Sequence[int]) -> Self:
        """Broadcast to batch size `shape` without copying (`-1` keeps a dim), as `torch.broadcast_to`."""
        bs = self.batch_size
        new = expanded_shape(bs, tuple(shape), "broadcast_to")
        n = len(bs)
        return map_batch(self, lambda t: t.expand((*new, *t.shape[n:])), new)

    def pad(
        self,
        pad_size: Sequence[int],
        value: float = 0.0,
        inplace: bool = False,
        safe: bool = True,
    ) -> Self:
        """Pad the batch dims with `value` (`None` for non-tensor leaves).

        Args:
            pad_size: `(dim0_before, dim0_after, dim1_before, ...)`, from the
                FIRST batch dim (`torch.nn.functional.pad` starts from the last);
                negative sizes crop.
            value: the value of the padded elements.
            inplace: make this TensorDict hold the result (returns self).
            safe: accepted for compatibility; the arguments are always checked
                before anything changes.

        Raises:
            DimError: (a `RuntimeError`) if `pad_size` has an odd length or
                more than two entries per batch dim.
        """
        bs = self.batch_size
        pairs = pad_pairs(pad_size, bs)
        full = pairs + [0] * (2 * len(bs) - len(pairs))
        new = torch.Size(s + full[2 * i] + full[2 * i + 1] for i, s in enumerate(bs))
        if any(s < 0 for s in new):
            raise BatchSizeError(
                f"pad: pad_size {pairs} crops batch_size {list(bs)} below zero (negative output "
                f"size {list(new)}); nothing was changed"
            )
        if inplace and lazy.parts(self) is not None:
            return _pad_stack_(self, full, value)
        out = _pad_tree(self, pairs, value, new)
        names = self._raw_names()  # padding keeps every dim, and its name
        if names is not None:
            carry_names(out, names)
        return assign_reshaped(self, out, "pad") if inplace else out


def _pad_stack_(td: TD, full: list[int], value: float) -> TD:
    """Pad a lazy stack in place: members are padded in place, and along the stack
    dim members filled with `value` are added (or members dropped, for a crop)."""
    members, s = lazy.parts(td)  # type: ignore[misc]
    locked = [i for i, m in enumerate(members) if m.is_locked]
    if td.is_locked or locked:
        raise LockedError(f"pad(inplace=True): the lazy stack (or its members {locked}) is locked")
    before, after = full[2 * s], full[2 * s + 1]
    inner = full[: 2 * s] + full[2 * s + 2 :]
    if any(inner):
        for m in members:
            m.pad(inner, value, inplace=True)
    template = members[0]
    stack: list[TensorDictContract] = td.tensordicts  # type: ignore[attr-defined]
    fill = [_filled(template, value) for _ in range(max(before, 0))]
    stack[:0] = fill
    if before < 0:
        del stack[:-before]
    if after > 0:
        stack.extend(_filled(template, value) for _ in range(after))
    elif after < 0:
        del stack[after:]
    return td


def _filled(template: TensorDictContract, value: float) -> Any:
    """A member shaped like `template` holding only padding: `value`, `None` for non-tensors."""
    bs = template.batch_size
    entries: dict[str, Any] = {}
    for key, entry in template._items_str():
        if isinstance(entry, Tensor):
            entries[key] = entry.new_full(entry.shape, value)
        elif entry._is_non_tensor:
            nones = np.empty(tuple(entry.batch_size), dtype=object)
            entries[key] = NonTensorStack(nones, device=entry.device)
        else:
            entries[key] = _filled(entry, value)
    return template._new(entries, bs)


def _at_least(td: TD, n: int) -> TD:
    out = td
    while out.batch_dims < n:
        out = out.unsqueeze(0)
    return remember(td, out, reshaped)
