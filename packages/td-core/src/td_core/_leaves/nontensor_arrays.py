"""Object arrays and batch positions: the helpers behind the non-tensor leaves.

A non-tensor leaf moves its values under a batch op by running the op on an
index tensor (its positions) and gathering; a leaf whose every element holds
one value only needs the shapes of the results, worked out on a `meta` tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "device_name",
    "full",
    "gather",
    "member_parts",
    "positions",
    "result_shapes",
    "same_value",
]

_REFUSED = (RuntimeError, NotImplementedError, TypeError, IndexError, ValueError)


def full(shape: torch.Size, value: Any) -> np.ndarray:
    """An object array of `shape` whose every element is `value`."""
    out = np.empty(tuple(shape), dtype=object)
    out.fill(value)
    return out


def positions(shape: torch.Size) -> torch.Tensor:
    """`arange(numel)` laid out as `shape`: where each element sits in the flat values."""
    return torch.arange(shape.numel()).view(shape)


def on_cpu(index: Any) -> Any:
    """`index` (one index or a tuple of them) with its tensors on the CPU, where the values
    are (a mask on a GPU indexes a TensorDict there; its non-tensor leaves read it here)."""
    if type(index) is tuple:
        return tuple(p.cpu() if isinstance(p, torch.Tensor) else p for p in index)
    return index.cpu() if isinstance(index, torch.Tensor) else index


def positions_through(fn: Callable[[torch.Tensor], Any], shape: torch.Size, device: Any) -> Any:
    """`fn(positions(shape))`, where `fn` (an op of the TensorDict holding the leaf, whose
    index is not seen here) may index with tensors on the leaf's `device`: then on positions
    on that device, brought back to the CPU, where the values are."""
    try:
        return fn(positions(shape))
    except RuntimeError:
        if device is None or device.type in ("cpu", "meta"):
            raise
        out = fn(positions(shape).to(device))
        return out.cpu() if isinstance(out, torch.Tensor) else [t.cpu() for t in out]


def result_shapes(
    fn: Callable[[torch.Tensor], Sequence[torch.Tensor]], shape: torch.Size
) -> list[torch.Size]:
    """The shapes `fn` gives on a tensor of `shape`, worked out without its elements.

    A shared value only needs the shapes of the results: `fn` runs on a `meta`
    tensor (no memory, O(1) in the batch's element count). Where that fails (an
    op meta tensors refuse), it runs on the positions, as for a stack of values.
    """
    try:
        return [t.shape for t in fn(torch.empty(shape, device="meta"))]
    except _REFUSED:
        return [t.shape for t in fn(positions(shape))]


def gather(flat: np.ndarray, idx: torch.Tensor) -> np.ndarray:
    """`flat` at positions `idx`, always as an array of `idx`'s shape (0-d included)."""
    return flat[idx.reshape(-1).numpy()].reshape(tuple(idx.shape))


def member_parts(
    fn: Callable[[torch.Tensor], Sequence[torch.Tensor]],
    shape: torch.Size,
    member_dim: int,
    members: Sequence[Any],
) -> list[tuple[torch.Size, Any]] | None:
    """`fn`'s result shapes on a stack of one repeated value, each with the member it is.

    The stack holds `members` along `member_dim` of `shape`. No per-element work:
    `fn` runs on each member's index along that dim, expanded (stride 0) over the
    batch. A result of a member's batch size drawn from that member alone is the
    member (every element holds the same value), else None stands in its place.
    Returns None when `fn` refuses the expanded index.
    """
    grid = [1] * len(shape)
    grid[member_dim] = shape[member_dim]
    try:
        results = fn(torch.arange(shape[member_dim]).view(grid).expand(shape))
    except _REFUSED:
        return None
    member_bs = members[0].batch_size
    parts: list[tuple[torch.Size, Any]] = []
    for r in results:
        member = None
        if r.shape == member_bs and r.numel():
            i = int(r[(0,) * r.ndim])
            if not any(r.stride()) or bool((r == i).all()):
                member = members[i]
        parts.append((r.shape, member))
    return parts


def same_value(a: Any, b: Any) -> bool:
    """Whether `a` and `b` are one value (`is`, else `==` where it gives one bool)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # e.g. arrays, whose == is element-wise
        return False


def device_name(device: torch.device | None) -> str | None:
    """`device` as a string for a pickle (None stays None)."""
    return None if device is None else str(device)


def stack_elements(values: Sequence[Any], dim: int, batch_size: Sequence[int] | None) -> np.ndarray:
    """The object array of `values` (plain values or non-tensor leaves) stacked along `dim`."""
    if not values:
        shape = (0,) if batch_size is None else tuple(batch_size)
        return np.empty(shape, dtype=object)
    arrays = [v.as_array() if _is_leaf(v) else full(torch.Size(), v) for v in values]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(
            "NonTensorStack: the elements must have one batch size, got "
            f"{[list(a.shape) for a in arrays]}"
        )
    ndim = arrays[0].ndim + 1
    if not -ndim <= dim < ndim:
        raise IndexError(f"NonTensorStack: stack_dim {dim} is out of range for {ndim} dims")
    return np.stack(arrays, axis=dim)


def _is_leaf(value: Any) -> bool:
    """A non-tensor leaf (its values are `as_array()`), not a plain value."""
    return getattr(type(value), "_is_non_tensor", False) and hasattr(value, "as_array")
