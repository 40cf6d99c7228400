"""Indices over a `PersistentTensorDict`'s batch dims that h5py can address directly."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from td_core._shared.kinds import stand_in

__all__ = ["indexed_shape", "h5_rows"]


def indexed_shape(batch_size: torch.Size, index: Any) -> torch.Size:
    """The batch size after indexing with `index` (`()`: all of it)."""
    if isinstance(index, tuple) and index == ():
        return batch_size
    item = torch.from_numpy(index) if isinstance(index, np.ndarray) else index
    return stand_in(batch_size, item)[item].shape


def h5_rows(index: Any, batch_size: torch.Size) -> Any:
    """`index` as rows of the first batch dim that h5py reads directly, else None."""
    if not batch_size:
        return None
    n = batch_size[0]
    if type(index) is int:
        return index + n if -n <= index < 0 else index if 0 <= index < n else None
    if type(index) is slice:
        return index if index.step is None or index.step > 0 else None
    if isinstance(index, torch.Tensor):
        index = index.cpu().numpy()
    if isinstance(index, (list, range)) and all(type(i) is int for i in index):
        index = np.asarray(index, dtype=np.int64)
    if not isinstance(index, np.ndarray) or index.ndim != 1 or not index.size:
        return None
    if index.dtype == bool:
        return np.nonzero(index)[0] if index.shape[0] == n else None
    if index.dtype.kind not in "iu" or index.max() >= n or index.min() < -n:
        return None
    return np.where(index < 0, index + n, index).astype(np.int64)
