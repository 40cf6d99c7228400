"""TensorDicts to MosaicML Streaming (MDS) datasets (needs `td-memmap[mds]`).

Each row of the first batch dim becomes one MDS sample (a TensorDict with no
batch dims is one sample): tensor leaves become numpy arrays (0-d ones Python
numbers) and non-tensor leaves their value. Columns are inferred from the first
row unless given. MDS columns are flat, so nested TensorDicts are refused with
a message pointing at `flatten_keys()`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from td_core import NonTensorData, NonTensorStack, TensorDictBase, is_tensor_collection
from td_memmap._optional import optional_module

__all__ = ["to_mds"]


def _writer_class() -> Any:
    streaming = optional_module("streaming", "to_mds", "the 'mosaicml-streaming' package", "mds")
    return streaming.MDSWriter


def _row(td: TensorDictBase) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            array = value.detach().cpu().numpy()
            row[key] = array.item() if array.shape == () else array
        elif isinstance(value, NonTensorStack):
            row[key] = value.tolist()
        elif isinstance(value, NonTensorData):
            row[key] = value.data
        elif is_tensor_collection(value):
            raise ValueError(
                f"to_mds: the entry {key!r} is a nested TensorDict; MDS columns are flat, "
                "call flatten_keys() before writing and unflatten_keys() after reading"
            )
        else:
            row[key] = value
    return row


def _column(key: str, value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "ndarray"
    if isinstance(value, bool | int | np.integer | np.bool_):
        return "int"
    if isinstance(value, float | np.floating):
        return "float64"  # MDS has no plain "float" encoding
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list | dict):
        return "json"
    raise ValueError(
        f"to_mds: cannot infer an MDS column type for the entry {key!r} "
        f"({type(value).__name__}); pass columns={{{key!r}: ...}}"
    )


def to_mds(
    data: TensorDictBase,
    *,
    columns: dict[str, str] | None = None,
    out: str | tuple[str, str],
    keep_local: bool = False,
    compression: str | None = None,
    hashes: list[str] | None = None,
    size_limit: int | str | None = 1 << 26,
    writer: Any = None,
    **kwargs: Any,
) -> None:
    """Write `data` as an MDS dataset readable by `streaming.StreamingDataset`.

    Args:
        data: the TensorDict (or lazy stack); each row of its first batch dim is a sample.
        columns: column name to MDS encoding (inferred from the first row if omitted).
        out: the output directory, or `(local, remote)`.
        keep_local: keep the local copy after uploading to a remote.
        compression: MDS shard compression (e.g. `"zstd"`).
        hashes: hash algorithms for the shards.
        size_limit: shard size limit (bytes, or a string such as `"64mb"`).
        writer: an `MDSWriter` to use instead of making one from the arguments above.
        **kwargs: passed to `MDSWriter`.

    Raises:
        ValueError: `data` is empty, has a nested TensorDict, or a column type
            cannot be inferred (nothing is written).
    """
    writer_class = _writer_class()
    if not data.numel():
        raise ValueError(
            f"to_mds: cannot write an empty TensorDict (batch size {list(data.batch_size)}) "
            "to a streaming dataset"
        )
    rows = [_row(data[i]) for i in range(data.batch_size[0])] if data.ndim else [_row(data)]
    if writer is None:
        if columns is None:
            columns = {key: _column(key, value) for key, value in rows[0].items()}
        writer = writer_class(
            out=out,
            columns=columns,
            keep_local=keep_local,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            **kwargs,
        )
    with writer as w:
        for row in rows:
            w.write(row)
