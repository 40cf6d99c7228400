"""`to_h5` and `from_h5`: the module functions behind `TensorDict.to_h5`/`from_h5`."""

from __future__ import annotations

import os
from typing import Any

from td_core import TensorDictBase
from td_memmap._classes import like_source
from td_memmap._h5 import PersistentTensorDict
from td_memmap._h5_write import write_file

__all__ = ["to_h5", "from_h5"]


def to_h5(td: TensorDictBase, filename: str | os.PathLike, **kwargs: Any) -> Any:
    """Write `td` to the HDF5 file `filename` (replaced) and return it opened `"r+"`
    (for a tensorclass, an instance of its class over it).

    Args:
        td: the TensorDict; its leaves must be tensors.
        filename: the file to write.
        **kwargs: passed to `h5py.Group.create_dataset` (`compression=...`).

    Raises:
        UnstorableValueError: (a `TypeError`) a leaf is not a tensor or requires
            grad; the message names its key and nothing is written.
        ValueError: a key contains `/`.
    """
    write_file(td, filename, kwargs)
    out = PersistentTensorDict(filename=filename, mode="r+", **kwargs)
    return like_source(td, out)


def from_h5(
    h5_file: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> PersistentTensorDict:
    """Open an HDF5 file (path, or open h5py File/Group) as a `PersistentTensorDict`.

    The batch size is `batch_size` if given, else the one `to_h5` stored, else
    (with `auto_batch_size`) the leading dims every dataset shares (at most
    `batch_dims`), else `[]`.

    Raises:
        FileNotFoundError: the file does not exist.
        MemmapFormatError: the file is not HDF5; the message names it.
    """
    return PersistentTensorDict._open(
        h5_file,
        mode=mode,
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
    )
