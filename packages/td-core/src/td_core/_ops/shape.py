"""Shape operations over the batch dims (view, reshape, permute, unbind, split, ...).

Each op is a tensor function on the leading `batch_dims` dims plus the new
batch size, handed to `map_batch`; feature dims are never touched. A lazy
stack is rearranged member by member and stays lazy (`_lazy_shape`), so
stacks of ragged members support these ops too.

The keyword spellings upstream accepts are accepted here too:
`view(size=...)`, `reshape(size=...)`, `expand(size=...)`,
`permute(dims=...)`, `flip(dims=...)`, and `inplace=True` where
upstream has it (`flatten`, `unflatten`, `roll`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

from td_core._core.contract import TD, TensorDictContract
from td_core._core.flags import lazy_legacy
from td_core._core.traverse import is_td, map_batch, map_batch_multi, map_leaves
from td_core._core.utils import infer_shape, normalize_dim, shape_args
from td_core._ops import lazy_shape as lazy
from td_core._ops.legacy_views import ViewOp, chained_view, legacy_view, refuse_dense_first
from td_core._ops.locked_results import locked_like_source
from td_core._ops.names import carry_names, names_after, renamed_like
from td_core._ops.views import dtype_viewed, flipped, permuted, remember, reshaped, rolled
from td_core.errors import BatchSizeError, DimError, LockedError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = [
    "ShapeMixin",
    "assign_reshaped",
    "batch_dim",
    "expanded_shape",
    "permute_order",
    "permuted_view",
    "size_arg",
    "split_sizes",
]

Tensor = torch.Tensor


def batch_dim(dim: Any, batch_size: torch.Size, *, extra: int = 0) -> int:
    """`dim` normalised to `[0, len(batch_size) + extra)`, or a `DimError` naming both."""
    n = len(batch_size) + extra
    if type(dim) is int and -n <= dim < n:  # the usual case, without the checks below
        return dim + n if dim < 0 else dim
    try:
        return normalize_dim(int(dim) if isinstance(dim, Tensor) else dim, n)
    except IndexError:
        raise DimError(
            f"dim {dim} is out of range for batch_size {list(batch_size)}: expected a dim in "
            f"[{-n}, {n - 1}]"
        ) from None


def size_arg(args: tuple[Any, ...], size: Any, what: str) -> tuple[int, ...]:
    """The shape given as `f(2, 3)`, `f((2, 3))` or `f(size=(2, 3))` (not both)."""
    if size is None:
        return shape_args(args)
    if args:
        raise TypeError(f"{what}: pass the shape positionally or as size=, not both")
    return shape_args((size,))


def assign_reshaped(td: TD, result: TensorDictContract, what: str = "reshape") -> TD:
    """Make `td` hold `result`'s entries and batch size (the `inplace=True` forms).

    The leaves are rebound (the old storage is released, as upstream), and the
    sub-TensorDicts of `td` are kept (the same objects, holding the new
    leaves). All or nothing: if the batch size of `td` cannot change
    (`TensorDictParams`, a locked TensorDict), `td` is left as it was; a lazy
    stack, whose batch size follows its members, refuses with a
    `NotImplementedError` naming `what`.
    """
    if lazy.parts(td) is not None:
        raise NotImplementedError(
            f"{what}(..., inplace=True) is not supported on a LazyStackedTensorDict: its batch "
            f"size follows its members; call {what} with inplace=False (or on each member)"
        )
    if td.is_locked:
        raise LockedError(
            "cannot change the batch_size of a locked TensorDict in place; unlock_() it first"
        )
    _assign(td, result)
    return td


def _assign(td: Any, result: TensorDictContract) -> None:
    old = dict(td._items_str())
    for key in old:
        td._del_str(key)
    try:
        td.batch_size = result.batch_size
    except Exception:
        for key, value in old.items():
            td._set_str(key, value)
        raise
    for key, value in result._items_str():
        prev = old.get(key)
        if (
            prev is not None
            and type(prev) is type(value)
            and not isinstance(prev, Tensor)
            and not prev._is_non_tensor
            and lazy.parts(prev) is None
            and not prev.is_locked
        ):
            try:  # keep the sub-TensorDict itself, holding the new leaves
                _assign(prev, value)
                value = prev
            except Exception:  # its batch size cannot change: it is replaced instead
                pass
        td._set_str(key, value)
    names = result._raw_names()  # the op's names, not the old ones of the dims kept in number
    if names is not None or td._raw_names() is not None:
        td._store_names(names)


def expanded_shape(bs: torch.Size, target: Sequence[int], what: str) -> torch.Size:
    """`target` with `-1` resolved, after checking `bs` broadcasts to it."""
    out = list(target)
    n = len(bs)
    if len(out) < n:
        raise BatchSizeError(
            f"{what}: cannot broadcast batch_size {list(bs)} to {list(target)}, which has fewer dims"
        )
    offset = len(out) - n
    for i, s in enumerate(bs):
        want = out[offset + i]
        if want == -1:
            out[offset + i] = s
        elif s not in (1, want):
            raise BatchSizeError(
                f"{what}: cannot broadcast batch_size {list(bs)} to {list(target)}: dim {i} has "
                f"size {s}, which is neither 1 nor {want}"
            )
    return torch.Size(out)


def _view_shape(td: TensorDictContract, args: tuple[Any, ...], size: Any, what: str) -> torch.Size:
    bs = td.batch_size
    return infer_shape(size_arg(args, size, what), bs.numel(), bs)


def _reshape(td: TD, new: torch.Size, *, copy: bool) -> TD | Any:
    """`td` viewed (`copy=False`) or reshaped to batch size `new`."""
    if new == td.batch_size:
        return td
    n = td.batch_dims
    # sizes as separate ints: torch parses `t.reshape(2, 3)` ~1.5 us faster than
    # `t.reshape((2, 3))`; an empty `new` needs the tuple (`t.reshape()` is an error)
    fn: Callable[[Tensor], Tensor]
    stacked = lazy.parts(td) is not None
    reshape = copy or stacked
    if reshape and not stacked and len(new) == 1 and n > 1:
        # every batch dim into one (`reshape(-1)`): flatten needs no leaf's shape (it
        # views where it can and copies otherwise, as reshape)
        last = n - 1
        return map_batch(td, lambda t: t.flatten(0, last), new)
    if new:
        full_for: dict[torch.Size, tuple[int, ...]] = {}  # leaf shape -> its new shape

        def fn(t: Tensor) -> Tensor:
            # leaves mostly share a few shapes: build each new shape once, not per leaf
            shape = t.shape
            full = full_for.get(shape)
            if full is None:
                full = full_for[shape] = (*new, *shape[n:])
            return t.reshape(*full) if reshape else t.view(*full)
    elif reshape:
        fn = lambda t: t.reshape(t.shape[n:])  # noqa: E731
    else:
        fn = lambda t: t.view(t.shape[n:])  # noqa: E731
    if stacked:
        try:  # members that stack give the dense result, as upstream
            return map_batch(td, fn, new)
        except BatchSizeError:
            out = lazy.reshape(td, new)
            if out is None:
                raise
            return out
    return map_batch(td, fn, new)


def permute_order(td: TensorDictContract, order: Sequence[int]) -> Any:
    """`td` with its batch dims in the (validated) `order`; `td` itself for the identity, as upstream."""
    bs = td.batch_size
    n = len(bs)
    if _is_identity(order):
        return td
    out = lazy.permute(td, order)
    if out is not None:
        return out
    new = torch.Size([bs[d] for d in order])  # a list: torch.Size of a generator is slower
    if not order:  # `t.permute()` of a 0-d leaf is an error: one tuple there
        return map_batch(td, lambda t: t.permute(tuple(range(t.ndim))), new)
    order = tuple(order)
    moved = [i for i, d in enumerate(order) if i != d]
    if len(moved) == 2:  # two dims swapped (`permute(1, 0)`): a transpose needs no leaf's ndim
        i, j = moved
        return map_batch(td, lambda t: t.transpose(i, j), new)
    dims_for: dict[int, tuple[int, ...]] = {}  # leaf ndim -> its full permutation

    def permute(t: Tensor) -> Tensor:
        # leaves mostly share a few ndims: build each full permutation once, not per leaf;
        # separate ints, not one tuple: faster to parse (see `_reshape`)
        dims = dims_for.get(t.ndim)
        if dims is None:
            dims = dims_for[t.ndim] = (*order, *range(n, t.ndim))
        return t.permute(*dims)

    return map_batch(td, permute, new)


def _is_identity(order: Sequence[int]) -> bool:
    """Whether the permutation `order` leaves every dim in place."""
    return list(order) == list(range(len(order)))  # (compared in C)


def _legacy(td: TensorDictContract) -> bool:
    """Whether a shape op on `td` gives a lazy view (legacy mode; tensorclasses stay dense)."""
    return lazy_legacy() and not getattr(td, "_td_tensorclass", False)


def permuted_view(td: TensorDictContract, order: Sequence[int], what: str) -> Any:
    """`td` with its batch dims in the (validated) `order`, as the op `what` gives it.

    A write-through view refuses (`NotDenseError`) outside legacy mode, even
    the identity `permute` (as upstream; an identity `transpose`/`movedim`
    gives `td`); else the identity gives `td`, and legacy mode a lazy view.
    """
    identity = _is_identity(order)
    if identity and what != "permute":  # as upstream: only permute refuses the identity
        return td
    legacy = _legacy(td)
    if td._writes_through and not legacy:
        raise refuse_dense_first(td, what)
    if identity:
        return td
    if legacy:
        return legacy_view(td, ViewOp.permute(tuple(order), td.batch_size))
    out = permute_order(td, order)
    names = td._raw_names()
    if names is not None:
        out = carry_names(out, [names[d] for d in order])
    return remember(td, out, permuted, tuple(order))


class ShapeMixin(TensorDictContract):
    """Batch-dim shape operations; every result shares storage with the input when torch's op does."""

    __slots__ = ()

    @locked_like_source
    def view(
        self,
        *shape: Any,
        size: Sequence[int] | None = None,
        batch_size: Sequence[int] | None = None,
    ) -> Self:
        """A view with batch size `shape` (one dim may be -1), or of every leaf as a dtype.

        Args:
            shape: the new batch size, as ints or one sequence; or a `torch.dtype`
                to view every tensor leaf as that dtype (`Tensor.view(dtype)`).
            size: the new batch size, as a keyword.
            batch_size: the new batch size, checked against `shape` when both are given.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2, 3, 4)}, [2, 3])
            >>> td.view(-1).batch_size, td.view(size=(3, 2))["a"].shape
            (torch.Size([6]), torch.Size([3, 2, 4]))
        """
        if len(shape) == 1 and isinstance(shape[0], torch.dtype):
            dtype = shape[0]
            return remember(self, map_leaves(self, lambda t: t.view(dtype)), dtype_viewed)
        if batch_size is not None and not shape and size is None:
            raise BatchSizeError(
                f"view(batch_size={list(batch_size)}) needs the shape too: view(shape, batch_size=...)"
            )
        new = _view_shape(self, shape, size, "view")
        if batch_size is not None and torch.Size(batch_size) != new:
            raise BatchSizeError(
                f"view: batch_size {list(batch_size)} does not match the shape {list(new)}"
            )
        legacy = _legacy(self)
        if self._writes_through and not legacy:
            if size_arg(shape, size, "view") == tuple(self.batch_size):
                return self  # the batch size itself, spelled out: as upstream, no view at all
            raise refuse_dense_first(self, "view")
        if new == self.batch_size:
            return self
        if legacy:
            return legacy_view(self, ViewOp.view(new, self.batch_size))
        return remember(self, _reshape(self, new, copy=False), reshaped)

    @locked_like_source
    def reshape(
        self, *shape: Any, size: Sequence[int] | None = None, inplace: bool = False
    ) -> Self:
        """Like `view`, copying where a view is impossible (`size=` as a keyword).

        With `inplace=True` this TensorDict holds the result (its leaves are
        rebound, its sub-TensorDicts kept) and is returned.
        """
        out = _reshape(self, _view_shape(self, shape, size, "reshape"), copy=True)
        return assign_reshaped(self, out, "reshape") if inplace else remember(self, out, reshaped)

    @locked_like_source
    def squeeze(self, dim: int | None = None) -> Self:
        """Remove batch dims of size 1 (all of them, or `dim` if it has size 1)."""
        bs = self.batch_size
        if dim is None:
            dims = tuple(i for i, s in enumerate(bs) if s == 1)
        else:
            d = batch_dim(dim, bs)
            dims = (d,) if bs[d] == 1 else ()
        legacy = _legacy(self)
        if self._writes_through and not legacy:
            raise refuse_dense_first(self, "squeeze")
        if not dims:
            return self
        if legacy and lazy.parts(self) is None:
            if dim is not None:
                return legacy_view(self, ViewOp.squeeze(dims[0], bs))
            viewed: Any = self  # one view per dim, from the first, as upstream
            while 1 in viewed.batch_size:
                viewed = chained_view(
                    viewed, ViewOp.squeeze(viewed.batch_size.index(1), viewed.batch_size)
                )
            return viewed
        out = lazy.squeeze(self, dims)
        if out is None:
            new = torch.Size(s for i, s in enumerate(bs) if i not in dims)
            out = map_batch(self, lambda t: t.squeeze(dims), new)
            names = self._raw_names()
            if names is not None:
                out = carry_names(out, names_after(names, drop=dims))
        return remember(self, out, reshaped)

    @locked_like_source
    def unsqueeze(self, dim: int) -> Self:
        """Insert a batch dim of size 1 at `dim` (negative dims count from the batch end)."""
        bs = self.batch_size
        d = batch_dim(dim, bs, extra=1)
        legacy = _legacy(self)
        if legacy and lazy.parts(self) is None:
            return legacy_view(self, ViewOp.unsqueeze(d, bs))
        if self._writes_through and not legacy:
            raise refuse_dense_first(self, "unsqueeze")
        out = lazy.unsqueeze(self, d)
        if out is None:
            sizes = list(bs)  # slicing a torch.Size costs ~0.5 us a slice
            sizes.insert(d, 1)
            out = map_batch(self, lambda t: t.unsqueeze(d), torch.Size(sizes))
            names = self._raw_names()
            if names is not None:
                out = carry_names(out, names_after(names, insert=(d,)))
        return remember(self, out, reshaped)

    @locked_like_source
    def permute(self, *order: Any, dims: Sequence[int] | None = None) -> Self:
        """Reorder the batch dims: `td.permute(1, 0)`, `td.permute([1, 0])` or `td.permute(dims=[1, 0])`."""
        given = size_arg(order, dims, "permute")
        bs = self.batch_size
        if len(given) != len(bs):
            raise DimError(
                f"permute needs one dim per batch dim of batch_size {list(bs)}, got {list(given)}"
            )
        resolved = [batch_dim(d, bs) for d in given]
        if sorted(resolved) != list(range(len(bs))):
            raise DimError(
                f"permute needs a permutation of the {len(bs)} batch dims, got {list(given)}"
            )
        return permuted_view(self, resolved, "permute")

    @locked_like_source
    def transpose(self, dim0: int, dim1: int) -> Self:
        """Swap two batch dims."""
        bs = self.batch_size
        try:
            d0, d1 = batch_dim(dim0, bs), batch_dim(dim1, bs)
        except DimError as err:
            raise DimError(
                f"transpose({dim0}, {dim1}): {err}. dim0 and dim1 must be within the range of the "
                "number of dimensions. The provided dimensions are incompatible with this batch size"
            ) from None
        order = list(range(len(bs)))
        order[d0], order[d1] = order[d1], order[d0]
        return permuted_view(self, order, "transpose")

    @locked_like_source
    def expand(self, *shape: Any, size: Sequence[int] | None = None) -> Self:
        """Broadcast to batch size `shape` without copying (`-1` keeps a dim)."""
        bs = self.batch_size
        n = len(bs)
        new = expanded_shape(bs, size_arg(shape, size, "expand"), "expand")
        out = lazy.expand(self, new)
        if out is None:
            out = map_batch(
                self,
                (lambda t: t.expand(*new, *t.shape[n:]))
                if new
                else (lambda t: t.expand(t.shape[n:])),
                new,
            )
        names = self._raw_names()
        if names is None:
            return out
        return carry_names(out, names_after(names, insert=range(len(new) - n)))

    def expand_as(self, other: Any) -> Self:
        """Expand to the shape of a tensor (the batch dims), or leaf by leaf to a TensorDict.

        With a TensorDict (or tensorclass) each leaf is expanded as the leaf of
        `other` at the same key (`Tensor.expand_as`, feature dims included) and
        the result has `other`'s batch size, as upstream.
        """
        if is_td(other):
            return self.apply(lambda x, y: x.expand_as(y), other, batch_size=other.batch_size)
        return self.expand(other.shape)

    @locked_like_source
    def flatten(self, start_dim: int = 0, end_dim: int = -1, *, inplace: bool = False) -> Self:
        """Merge batch dims `start_dim` to `end_dim` (inclusive) into one."""
        bs = self.batch_size
        out: Self
        if not bs:
            out = self.unsqueeze(0)
        else:
            s, e = batch_dim(start_dim, bs), batch_dim(end_dim, bs)
            if s > e:
                raise DimError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
            new = torch.Size((*bs[:s], math.prod(bs[s : e + 1]), *bs[e + 1 :]))
            out = _reshape(self, new, copy=True)
            out = renamed_like(self, out, drop=range(s, e + 1), insert=(s,))  # the merged dim
        return assign_reshaped(self, out, "flatten") if inplace else remember(self, out, reshaped)

    @locked_like_source
    def unflatten(
        self,
        dim: int,
        unflattened_size: Sequence[int],
        *,
        inplace: bool = False,
    ) -> Self:
        """Split batch dim `dim` into `unflattened_size`."""
        bs = self.batch_size
        d = batch_dim(dim, bs)
        sizes = infer_shape(tuple(unflattened_size), bs[d], torch.Size([bs[d]]))
        out = _reshape(self, torch.Size((*bs[:d], *sizes, *bs[d + 1 :])), copy=True)
        out = renamed_like(self, out, drop=(d,), insert=range(d, d + len(sizes)))  # the new dims
        return assign_reshaped(self, out, "unflatten") if inplace else remember(self, out, reshaped)

    def unbind(self, dim: int = 0) -> tuple[Any, ...]:
        """The slices along batch dim `dim`, as a tuple."""
        bs = self.batch_size
        d = batch_dim(dim, bs)
        if lazy.parts(self) is not None:
            lead = (slice(None),) * d
            out = tuple(self._index((*lead, i)) for i in range(bs[d]))
        else:
            new = torch.Size((*bs[:d], *bs[d + 1 :]))
            out = tuple(map_batch_multi(self, lambda t: t.unbind(d), [new] * bs[d]))
        names = self._raw_names()
        return out if names is None else carry_names(out, names_after(names, drop=(d,)))

    @locked_like_source
    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Split along batch dim `dim` into chunks of `split_size` (or the listed sizes)."""
        bs = self.batch_size
        try:
            d = batch_dim(dim, bs)
        except DimError as err:  # upstream's words first
            raise DimError(f"split: Incompatible dim: {err}") from None
        total = bs[d]
        if _is_int(split_size):
            if split_size <= 0:
                raise ValueError(
                    f"split_size must be positive, got {split_size}. Give the size of each chunk"
                )
            sizes = [min(split_size, total - i) for i in range(0, total, split_size)] or [0]
        elif isinstance(split_size, (list, tuple)) and all(_is_int(s) for s in split_size):
            sizes = [int(s) for s in split_size]
            if not sizes:
                raise BatchSizeError(
                    f"split: Insufficient number of elements in split_size: got none for batch "
                    f"dim {d} of size {total}"
                )
            if sum(sizes) != total:
                raise BatchSizeError(
                    f"split expects split_size to sum exactly to {total} (batch dim {d}), got "
                    f"sizes {sizes} summing to {sum(sizes)}"
                )
        else:
            raise TypeError(f"split: split_size must be int or list of ints, got {split_size!r}")
        out = split_sizes(self, d, sizes)
        names = self._raw_names()
        return out if names is None else carry_names(out, names)

    @locked_like_source
    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """Split along `dim` into at most `chunks` pieces, as `torch.chunk` does."""
        if chunks <= 0:
            raise ValueError(f"chunks must be positive, got {chunks}")
        bs = self.batch_size
        d = batch_dim(dim, bs)
        size = bs[d]
        step = max(1, -(size // -chunks))  # torch.chunk's piece size (an int ceil, no float)
        # split's int case, without its second check of the arguments and lock wrapper
        out = split_sizes(self, d, [min(step, size - i) for i in range(0, size, step)] or [0])
        names = self._raw_names()
        return out if names is None else carry_names(out, names)

    @locked_like_source
    def flip(self, *order: Any, dims: Any = None) -> Self:
        """Reverse the order of elements along the given batch dims (ints, a sequence, or `dims=`)."""
        if dims is not None and isinstance(dims, int):
            dims = (dims,)
        bs = self.batch_size
        ds = tuple(batch_dim(d, bs) for d in size_arg(order, dims, "flip"))
        return remember(self, map_batch(self, lambda t: t.flip(ds), bs), flipped, ds)

    @locked_like_source
    def roll(
        self,
        shifts: int | Sequence[int],
        dims: int | Sequence[int] | None = None,
        *,
        inplace: bool = False,
    ) -> Self:
        """Roll the elements along the given batch dims, as `torch.roll` does.

        Without `dims` the batch is flattened, rolled and restored, as for a tensor.
        """
        bs = self.batch_size
        n = len(bs)
        sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if dims is None:
            if len(sh) != 1:
                raise DimError(f"roll without dims takes one shift, got {list(sh)}")
            out = map_batch(
                self, lambda t: t.flatten(0, n - 1).roll(sh[0], 0).view(t.shape) if n else t, bs
            )
        else:
            ds = tuple(batch_dim(d, bs) for d in ((dims,) if isinstance(dims, int) else dims))
            if len(ds) != len(sh):
                raise DimError(f"roll: {len(sh)} shifts for {len(ds)} dims; pass one shift per dim")
            out = map_batch(self, lambda t: t.roll(sh, ds), bs)
        if not inplace:
            return remember(self, out, rolled, sh, None if dims is None else ds)
        if lazy.parts(self) is None and not self.is_locked:
            return assign_reshaped(self, out, "roll")  # rebound: the old storage is released
        self.update_(out)  # written member by member (or into a locked TensorDict's leaves)
        return self


def split_sizes(td: TensorDictContract, d: int, sizes: Sequence[int]) -> tuple[Any, ...]:
    """`td` cut along batch dim `d` into consecutive pieces of `sizes`."""
    bounds, start = [], 0
    for s in sizes:
        bounds.append((start, start + s))
        start += s
    pieces = lazy.slices(td, d, bounds)
    if pieces is not None:
        return pieces
    bs = td.batch_size
    leads = [torch.Size((*bs[:d], s, *bs[d + 1 :])) for s in sizes]
    cut = list(sizes)
    try:
        # the tensor method, not `split(sizes)` (a Python wrapper that calls it), nor `chunk`
        # (its sizes are these): three quarters of chunk's time a leaf, half of split's
        return tuple(map_batch_multi(td, lambda t: t.split_with_sizes(cut, d), leads))
    except RuntimeError:
        n, first = len(sizes), sizes[0]
        if n > 1 and -(bs[d] // -n) == first and all(s == first for s in sizes[:-1]):
            # the pieces `chunk(n)` cuts: torch cuts some leaves (a jagged nested tensor
            # along its batch dim) with `chunk` only
            return tuple(map_batch_multi(td, lambda t: t.chunk(n, d), leads))
        raise


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
