"""Upstream's legacy lazy views: the op a view applies, its inverse, and when shape ops refuse.

Under `set_lazy_legacy(True)`, `permute`, `transpose`, `squeeze`, `unsqueeze`
and `view` return a lazy view of the TensorDict (the `LazyViewTensorDict`
kind): each read applies the op to the source's entry, each write applies the
inverse op and goes into the source. A `ViewOp` is that op over the leading
batch dims: `forward` maps a source leaf to the view's layout, `backward` maps
a leaf of the view's layout back. An op applied to a view whose op it undoes
gives the view's source itself (`td.permute(1, 0).permute(1, 0) is td`).

Outside legacy mode a shape op on a write-through view (a sub-TensorDict or
a lazy view) raises `NotDenseError`: its dense result could not write
through, so a later `set` on it would be lost without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from td_core._core.contract import TensorDictContract, provided
from td_core.errors import NotDenseError

__all__ = ["ViewOp", "legacy_view", "chained_view", "refuse_dense_first", "refuse_inplace"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class ViewOp:
    """A batch-dim op of a lazy view: `kind` with `args`, from batch size `before` to `after`.

    `kind` is `"permute"` (`args`: the order; transposes are permutes),
    `"unsqueeze"`/`"squeeze"` (`args`: the dim) or `"view"` (no args: the
    batch size goes from `before` to `after`). Leaves keep their feature dims.
    """

    kind: str
    args: tuple[int, ...]
    before: torch.Size
    after: torch.Size

    @classmethod
    def permute(cls, order: tuple[int, ...], before: torch.Size) -> ViewOp:
        """Batch dims reordered by `order` (normalised)."""
        return cls("permute", order, before, torch.Size([before[d] for d in order]))

    @classmethod
    def unsqueeze(cls, dim: int, before: torch.Size) -> ViewOp:
        """A batch dim of size 1 inserted at `dim` (normalised)."""
        sizes = list(before)
        sizes.insert(dim, 1)
        return cls("unsqueeze", (dim,), before, torch.Size(sizes))

    @classmethod
    def squeeze(cls, dim: int, before: torch.Size) -> ViewOp:
        """The batch dim `dim` (normalised, of size 1) removed."""
        return cls(
            "squeeze", (dim,), before, torch.Size(s for i, s in enumerate(before) if i != dim)
        )

    @classmethod
    def view(cls, after: torch.Size, before: torch.Size) -> ViewOp:
        """The batch dims viewed as `after` (same number of elements)."""
        return cls("view", (), before, after)

    def inverse(self) -> ViewOp:
        """The op that takes the view back to its source's layout."""
        if self.kind == "permute":
            order = tuple(sorted(range(len(self.args)), key=self.args.__getitem__))
            return ViewOp("permute", order, self.after, self.before)
        flipped = {"unsqueeze": "squeeze", "squeeze": "unsqueeze", "view": "view"}[self.kind]
        return ViewOp(flipped, self.args, self.after, self.before)

    def forward(self, t: Tensor) -> Tensor:
        """A leaf of the source (leading dims `before`) in the view's layout."""
        return _apply(self, t, len(self.before), reshape=False)

    def backward(self, t: Tensor) -> Tensor:
        """A leaf in the view's layout (leading dims `after`) in the source's layout.

        A `view` is undone with `reshape`: a value written through the view may
        be laid out in any way (it becomes a new entry of the source).
        """
        return _apply(self.inverse(), t, len(self.after), reshape=True)

    def names(self, names: list[str | None] | None) -> list[str | None] | None:
        """The view's dim names given the source's (`None`: no names)."""
        if names is None or self.kind == "view":
            return None
        if self.kind == "permute":
            return [names[d] for d in self.args]
        out = list(names)
        if self.kind == "unsqueeze":
            out.insert(self.args[0], None)
        else:
            del out[self.args[0]]
        return out

    def describe(self) -> str:
        """The op as a call, for `repr`: `permute(dims=[1, 0])`."""
        if self.kind == "permute":
            return f"permute(dims={list(self.args)})"
        if self.kind == "view":
            return f"view(size={list(self.after)})"
        return f"{self.kind}(dim={self.args[0]})"


def _apply(op: ViewOp, t: Tensor, n: int, *, reshape: bool) -> Tensor:
    if op.kind == "permute":
        return t.permute(*op.args, *range(n, t.ndim))
    if op.kind == "unsqueeze":
        return t.unsqueeze(op.args[0])
    if op.kind == "squeeze":
        return t.squeeze(op.args[0])
    shape = (*op.after, *t.shape[n:])
    return t.reshape(shape) if reshape else t.view(shape)


def legacy_view(td: TensorDictContract, op: ViewOp) -> Any:
    """`td` seen through `op`: `td`'s source if `td` is a lazy view that `op` undoes,
    else a new lazy view of `td`."""
    own: ViewOp | None = getattr(td, "_view_op", None)
    if own is not None and op == own.inverse():
        return td._source  # type: ignore[attr-defined]  # a LazyViewTensorDict's source
    return chained_view(td, op)


def chained_view(td: TensorDictContract, op: ViewOp) -> Any:
    """A new lazy view of `td` through `op` (never simplified)."""
    return provided("lazy_view")(td, op)


def refuse_dense_first(td: TensorDictContract, what: str) -> NotDenseError:
    """The error of shape op `what` on a write-through view outside legacy mode."""
    kind = type(td).__name__
    if what == "view":
        return NotDenseError(
            f"Cannot call `view` on a {kind}, a write-through view of another TensorDict: the "
            "result could not write through to it, so writes to it would be lost. Call "
            "`reshape` instead (a copy), make it dense with to_tensordict(), or call view() "
            "under set_lazy_legacy(True) for a lazy view"
        )
    return NotDenseError(
        f"Cannot call `{what}` on a {kind}, a write-through view of another TensorDict: the "
        "result could not write through to it, so writes to it would be lost. Make it dense "
        f"before calling this method by calling `to_tensordict()`, or call {what}() under "
        "set_lazy_legacy(True) for a lazy view"
    )


def refuse_inplace(td: TensorDictContract, what: str, during: str | None = None) -> NotDenseError:
    """The error of an in-place `select`/`exclude` on a write-through view (`during`: the
    method that would call it, such as `flatten_keys`)."""
    how = "" if during is None else f" (as {during}(inplace=True) does)"
    return NotDenseError(
        f"Cannot call {what} inplace{how} on a {type(td).__name__}, a lazy write-through view "
        "of another TensorDict: it would delete entries of that TensorDict. Call it with "
        "inplace=False, or make the view dense first with to_tensordict()"
    )
