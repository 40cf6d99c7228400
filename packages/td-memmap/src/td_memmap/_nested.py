"""Nested (ragged) memory-mapped tensors: the components one after another in one flat buffer.

A nested tensor's shape is a 2-d integer tensor, one row per component (as
`torch.nested`'s `_nested_tensor_size()`); its memory-mapped form is a flat
buffer of all components in C order, viewed as a nested tensor with torch's
nested-view constructor. These helpers work on plain tensors; `_tensor`
wraps the results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch

__all__ = [
    "parse_nested",
    "nested_arg",
    "shape_of",
    "sizes_tensor",
    "nested_numel",
    "nested_shape",
    "nested_view",
    "nested_values",
    "nested_summary",
]


def nested_shape(shape: torch.Tensor, where: str = "") -> torch.Tensor:
    """`shape` checked: a 2-d tensor of non-negative ints (one row per component), on the CPU.

    Raises:
        ValueError: another rank, a non-integer dtype or a negative size.
    """
    if shape.dim() != 2 or shape.dtype.is_floating_point or shape.dtype.is_complex:
        raise ValueError(
            f"a nested shape{where} is a 2-d integer tensor with one row per component, got "
            f"{shape.dim()}-d {shape.dtype}"
        )
    if shape.numel() and bool((shape < 0).any()):
        raise ValueError(f"nested shape {shape.tolist()}{where} has a negative size")
    return shape.detach().to("cpu", torch.int64)


def nested_numel(shape: torch.Tensor) -> int:
    """The number of elements of all components together."""
    return int(shape.prod(-1).sum()) if shape.numel() else 0


def nested_view(flat: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
    """A nested tensor of `shape` viewing the 1-d contiguous `flat` (no copy)."""
    strides, offsets = torch._nested_compute_contiguous_strides_offsets(shape)
    # the offsets count from the start of the storage, which `flat` may not start at
    # (a leaf of an archive is a view into the mapping of the whole archive)
    return torch._nested_view_from_buffer(flat, shape, strides, offsets + flat.storage_offset())


def nested_values(tensor: torch.Tensor) -> torch.Tensor:
    """The components of the nested `tensor`, flattened one after another (a copy)."""
    parts = [part.reshape(-1) for part in tensor.unbind()]
    if not parts:
        return torch.empty(0, dtype=tensor.dtype, device="cpu")
    return torch.cat(parts).cpu()


def nested_arg(args: tuple[Any, ...], shape: Any, where: str = "") -> torch.Tensor | None:
    """The nested shape given as the only argument or as `shape=`, checked; None for other shapes."""
    given = shape if shape is not None else (args[0] if len(args) == 1 else None)
    if not isinstance(given, torch.Tensor):
        return None
    if shape is not None and args:
        raise TypeError("give the shape either positionally or as shape=, not both")
    return nested_shape(given, where)


def shape_of(tensor: torch.Tensor) -> Any:
    """The shape to allocate a tensor like `tensor`: its sizes, or a nested tensor's shape tensor."""
    return tensor._nested_tensor_size() if tensor.is_nested else tuple(tensor.shape)


def sizes_tensor(nested: list[list[int]]) -> torch.Tensor:
    """The shape tensor of components' shapes given as lists (from a pickle), checked."""
    sizes = torch.tensor(nested, dtype=torch.int64)
    return nested_shape(sizes if sizes.dim() == 2 else sizes.reshape(0, 0))


def nested_summary(nested: Any) -> tuple[list[int], int] | None:
    """For components' shapes read from metadata (`[[2, 3], [4, 3]]`): the nested tensor's
    shape (the components' count, then each dim they share, -1 where they differ) and its
    number of elements; None unless it is a list of equally long lists of non-negative ints."""
    if type(nested) is not list or not all(
        type(row) is list and all(type(d) is int and d >= 0 for d in row) for row in nested
    ):
        return None
    if len({len(row) for row in nested}) > 1:
        return None
    first = nested[0] if nested else []
    dims = [len(nested)] + [
        d if all(row[i] == d for row in nested) else -1 for i, d in enumerate(first)
    ]
    return dims, sum(math.prod(row) for row in nested)


def parse_nested(
    nested: Any,
    key: str,
    shape: tuple[int, ...],
    numel: int,
    batch_size: tuple[int, ...],
    fail: Callable[[str], Exception],
) -> list[list[int]]:
    """A saved nested tensor's components' shapes (`nested`), checked against its flat
    file's `shape` and the folder's batch size; `fail(message)` makes the error to raise."""
    summary = nested_summary(nested)
    if summary is None:
        raise fail(
            f"entry {key!r} has nested={nested!r}, expected one list of non-negative ints per "
            "component, all of the same length"
        )
    dims, total = summary
    if len(shape) != 1 or total != numel:
        raise fail(
            f"entry {key!r}: nested components {nested!r} hold {total} elements, but the flat "
            f"file's shape is {list(shape)}"
        )
    if tuple(dims[: len(batch_size)]) != batch_size:
        raise fail(
            f"entry {key!r} is a nested tensor of shape {dims} (-1: ragged), which does not start "
            f"with batch_size {list(batch_size)}"
        )
    return cast(list[list[int]], nested)
