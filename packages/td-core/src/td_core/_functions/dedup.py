"""`isin` and `remove_duplicates`: compare the elements of a TensorDict by one entry.

An *element* along a batch dimension `dim` is the slice of every entry at one
index of `dim`; two elements are equal when their slices of the entry `key`
are equal (every value of the slice, the entry's feature dims included).
Both functions find the equal slices with one `torch.unique` over the entry
flattened to one row per element, never a Python loop per element.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from td_core._core.keys import NestedKey
from td_core._core.predicates import is_tensor_collection
from td_core._kinds.base import TensorDictBase

__all__ = ["isin", "remove_duplicates"]


def _batch_dim(td: TensorDictBase, dim: Any, what: str) -> int:
    """`dim` as a non-negative batch dimension of `td`, or `ValueError`."""
    ndim = td.batch_dims
    if isinstance(dim, int) and -ndim <= dim < ndim:
        return dim % ndim
    raise ValueError(
        f"The specified dimension '{dim}' is invalid for {what} TensorDict with batch size "
        f"'{td.batch_size}': it must be an int in [-{ndim}, {ndim})."
    )


def _leaf(td: TensorDictBase, key: NestedKey) -> torch.Tensor | None:
    """The tensor stored at `key`, or None when `key` is missing or holds something else."""
    if key not in td.keys(include_nested=True):
        return None
    value = td.get(key)
    if not isinstance(value, torch.Tensor) or is_tensor_collection(value):
        return None
    return value


def _rows(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """One row per index of `dim`, holding that slice's values flattened."""
    moved = tensor.movedim(dim, 0)
    return moved.reshape(moved.shape[0], math.prod(moved.shape[1:]))


def _group_ids(rows: torch.Tensor) -> torch.Tensor:
    """For each row, the rank of its value among the distinct rows (equal rows, equal ids)."""
    if rows.numel() == 0:  # no rows, or rows without values: all equal
        return torch.zeros(rows.shape[0], dtype=torch.long, device=rows.device)
    return torch.unique(rows, dim=0, return_inverse=True)[1]


def isin(
    input: TensorDictBase,
    reference: TensorDictBase,
    key: NestedKey,
    dim: int = 0,
) -> torch.Tensor:
    """Tell which elements of `input` along `dim` also occur in `reference`.

    An element of `input` occurs in `reference` when its slice of
    `input[key]` equals one of the slices of `reference[key]` along the same
    dim (values are compared after promotion to a common dtype).

    Args:
        input: the TensorDict whose elements are looked up.
        reference: the TensorDict they are looked up in.
        key: the entry that identifies an element; it must hold a tensor in
            both TensorDicts.
        dim: the batch dimension along which elements are taken. Defaults to 0.

    Returns:
        A boolean tensor of length `input.batch_size[dim]`.

    Raises:
        KeyError: if `key` is missing from either TensorDict or does not hold
            a tensor there.
        ValueError: if the two TensorDicts have different numbers of batch
            dimensions, or `dim` is not a batch dimension.
        RuntimeError: if the two entries' shapes differ outside `dim`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, isin
        >>> td = TensorDict(x=torch.tensor([[1, 2], [3, 4], [1, 2]]), batch_size=[3])
        >>> ref = TensorDict(x=torch.tensor([[1, 2]]), batch_size=[1])
        >>> isin(td, ref, "x")
        tensor([ True, False,  True])
    """
    for name, td in (("input", input), ("reference", reference)):
        if _leaf(td, key) is None:
            raise KeyError(
                f"isin: Key '{key}' not found in {name} or not a tensor. "
                f"The entry compared must hold a tensor in both TensorDicts."
            )
    if input.batch_dims != reference.batch_dims:
        raise ValueError(
            "isin: The number of dimensions in the batch size of the input and reference must "
            f"be the same. Got {input.batch_size} and {reference.batch_size}."
        )
    dim = _batch_dim(input, dim, "an input")
    values = input.get(key)
    ref_values = reference.get(key)
    outside = values.shape[:dim] + values.shape[dim + 1 :]
    ref_outside = ref_values.shape[:dim] + ref_values.shape[dim + 1 :]
    if outside != ref_outside:
        raise RuntimeError(
            f"isin: the entry {key!r} has shape {tuple(values.shape)} in input and "
            f"{tuple(ref_values.shape)} in reference; they must match except along dim {dim}."
        )
    dtype = torch.result_type(values, ref_values)
    rows = _rows(values.to(dtype), dim)
    ref_rows = _rows(ref_values.to(dtype), dim)
    if rows.shape[0] == 0 or ref_rows.shape[0] == 0:
        return torch.zeros(rows.shape[0], dtype=torch.bool, device=values.device)
    ids = _group_ids(torch.cat([rows, ref_rows.to(rows.device)]))
    return torch.isin(ids[: rows.shape[0]], ids[rows.shape[0] :])


def remove_duplicates(
    input: TensorDictBase,
    key: NestedKey,
    dim: int = 0,
    *,
    return_indices: bool = False,
) -> TensorDictBase | tuple[TensorDictBase, torch.Tensor]:
    """Keep one element of `input` along `dim` per distinct value of `input[key]`.

    Of each group of equal slices of `input[key]` along `dim`, the first
    element is kept, with the same index in every other entry. The result is
    ordered by the value of `key` (as `torch.unique` sorts), not by position,
    and its entries are new tensors: `input` is not modified.

    Args:
        input: the TensorDict to deduplicate.
        key: the entry whose equal slices make duplicates; it must hold a tensor.
        dim: the batch dimension along which elements are taken. Defaults to 0.

    Keyword Args:
        return_indices: if True, also return, for every element of `input`
            along `dim`, the index of its value in the result. Defaults to False.

    Returns:
        The deduplicated TensorDict, or `(tensordict, indices)` when
        `return_indices=True`.

    Raises:
        KeyError: if `key` is missing or does not hold a tensor.
        ValueError: if `dim` is not a batch dimension of `input`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, remove_duplicates
        >>> td = TensorDict(x=torch.tensor([7, 1, 7, 3]), y=torch.arange(4), batch_size=[4])
        >>> out, indices = remove_duplicates(td, "x", return_indices=True)
        >>> out["x"], out["y"], indices
        (tensor([1, 3, 7]), tensor([1, 3, 0]), tensor([2, 0, 2, 1]))
    """
    if key not in input.keys(include_nested=True):
        raise KeyError(
            f"remove_duplicates: The key '{key}' does not exist in the TensorDict "
            f"(keys: {sorted(map(str, input.keys()))})."
        )
    values = _leaf(input, key)
    if values is None:
        raise KeyError(
            f"remove_duplicates: The key '{key}' does not point to a tensor in the TensorDict; "
            f"it holds a {type(input.get(key)).__name__}."
        )
    dim = _batch_dim(input, dim, "a")
    rows = _rows(values, dim)
    count = rows.shape[0]
    ids = _group_ids(rows)
    groups = int(ids.max()) + 1 if count else 0
    # the first position of each group: the smallest position holding its id
    first = torch.full((groups,), count, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, ids, torch.arange(count, device=ids.device), reduce="amin")
    result = input[(slice(None),) * dim + (first,)]
    if return_indices:
        return result, ids
    return result
