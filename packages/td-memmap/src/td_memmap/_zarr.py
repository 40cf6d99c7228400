"""`to_zarr` and `from_zarr`: TensorDicts over zarr stores (needs `td-memmap[zarr]`, zarr>=3.1).

Both give a `PersistentTensorDict` with the zarr backend (a
`LazyStackedTensorDict` of them for a stored lazy stack): leaves are read
from the store when asked for, and only the chunks holding the rows asked
for (`td[2:4]`, `td["a"][2:4]`, `td.get_at("a", idx)`); writes go to the
store. The layout is described in `td_memmap._zarr_format`. Stores written by
other tools open too, each level with the leading dims all its arrays share
as batch size (unless `batch_size` is given).
"""

from __future__ import annotations

from typing import Any

import torch

from td_core import TensorDictBase
from td_memmap._classes import like_source
from td_memmap._h5 import PersistentTensorDict

__all__ = ["to_zarr", "from_zarr"]


def to_zarr(data: TensorDictBase, filename: Any, **kwargs: Any) -> Any:
    """Write `data` to a zarr store and return it opened (`"r+"`) over the store.

    Args:
        data: a TensorDict or LazyStackedTensorDict (nested ones too).
        filename: a directory path, or a `zarr.abc.store.Store`. An existing
            store at that path is replaced.
        **kwargs: passed to `zarr.Group.create_array` (e.g. `compressors=...`).
            Each leaf is one uncompressed chunk unless told otherwise;
            `chunks=(16,)` chunks the leading dim of every leaf by 16 and leaves
            the trailing dims whole. New arrays written through the result
            get them too.

    Returns:
        A `PersistentTensorDict` (a `LazyStackedTensorDict` of them for a lazy stack);
        for a tensorclass, an instance of its class over it.

    Raises:
        UnstorableValueError: (a `TypeError`) a non-tensor value cannot be
            stored as JSON, or a tensor requires grad (nothing is written).
        ValueError: a key cannot name a zarr node (nothing is written).
    """
    out = PersistentTensorDict.from_dict(
        data, filename, batch_size=data.batch_size, backend="zarr", **kwargs
    )
    return like_source(data, out)


def from_zarr(
    filename: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> Any:
    """Open a zarr store as a `PersistentTensorDict` (leaves read on access).

    Args:
        filename: a directory path, a `zarr.abc.store.Store` or a `zarr.Group`.
        mode: the zarr mode to open the store with (`"r"`: read-only, `"r+"`, `"a"`).
        auto_batch_size: use the leading dims every leaf shares.
        batch_dims: with `auto_batch_size`, at most this many dims.
        batch_size: the batch size (default: the one `to_zarr` stored, else the
            leading dims every leaf shares).

    Returns:
        A `PersistentTensorDict` (a `LazyStackedTensorDict` of them for a
        stored lazy stack).

    Raises:
        TypeError: both `batch_size` and `auto_batch_size` were given.
        FileNotFoundError: the path does not exist.
        MemmapFormatError: the store's td metadata is malformed, or an entry
            would need unpickling.
    """
    if auto_batch_size and batch_size is not None:
        raise TypeError(
            "from_zarr: pass either batch_size or auto_batch_size=True, not both "
            "(conflicting batch sizes)"
        )
    out = PersistentTensorDict._open(
        filename,
        mode=mode,
        batch_size=None if batch_size is None else torch.Size(batch_size),
        backend="zarr",
    )
    if auto_batch_size and isinstance(out, PersistentTensorDict):
        out._set_size(out._backend.auto_batch_size(out.file, batch_dims))
    return out
