"""TensorDicts as `torch.utils.data` datasets and batches.

A TensorDict is a map-style dataset: `len` is its first batch dim,
`__getitem__` reads one row and `__getitems__` (which `DataLoader` calls
with a whole batch of indices) reads every row of the batch with ONE indexing
op. `default_collate` then receives that TensorDict and returns it as is; a
list of TensorDicts (a dataset that returns one per row) is stacked.

td registers `_collate_tensordicts` for `TensorDictBase` in torch's
`default_collate_fn_map` (torch's extension point for `default_collate`)
when `td_core` is imported; it changes nothing else in torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data._utils.collate import default_collate_fn_map

from td_core._core.contract import TensorDictContract
from td_core._core.predicates import is_tensor_collection

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["DataLoaderMixin", "register_collate"]


def _collate_tensordicts(
    batch: Any, *, collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] | None = None
) -> Any:
    """`default_collate` for TensorDicts: a batched one as is, a sequence of them stacked."""
    if is_tensor_collection(batch):
        return batch
    if isinstance(batch, Sequence) and batch and all(is_tensor_collection(b) for b in batch):
        return torch.stack(list(batch), 0)
    raise TypeError(
        f"default_collate: expected a TensorDict or a sequence of TensorDicts, got {type(batch).__name__}"
    )


def register_collate(cls: type) -> None:
    """Let `torch.utils.data.default_collate` batch instances of `cls` (stack them)."""
    default_collate_fn_map.setdefault(cls, _collate_tensordicts)


class DataLoaderMixin(TensorDictContract):
    """`__getitems__`: one indexing op per batch when used as a `DataLoader` dataset."""

    __slots__ = ()

    def __getitems__(self, indices: Sequence[int] | torch.Tensor) -> Self:
        """The rows at `indices` along the first batch dim, read with one indexing op."""
        if not isinstance(indices, torch.Tensor):
            indices = torch.as_tensor(indices, dtype=torch.long)
        return self[indices]
