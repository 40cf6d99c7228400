"""Writing TensorDicts into HDF5 files and groups, checked before anything is written."""

from __future__ import annotations

import os
from typing import Any

import torch

from td_core import NonTensorData
from td_memmap._h5_format import (
    BS_ATTR,
    check_key,
    check_value,
    create,
    create_text,
    h5py,
    is_group,
)

__all__ = ["write_group", "write_file", "copy_file"]


def _fill(group: Any, td: Any, kwargs: dict[str, Any]) -> None:
    group.attrs[BS_ATTR] = list(td.batch_size)
    for name, value in td.items():
        if isinstance(value, torch.Tensor):
            create(group, name, value, kwargs)
        elif isinstance(value, NonTensorData):
            create_text(group, name, value.data, name)
        else:
            write_group(group, name, value, kwargs, checked=True)


def write_group(
    parent: Any, key: str, td: Any, kwargs: dict[str, Any], *, checked: bool = False
) -> None:
    """Write the TensorDict `td` as the group `parent[key]` (replacing an existing node)."""
    if not checked:
        check_value(td, key)
    if key in parent:
        del parent[key]
    _fill(parent.create_group(check_key(key)), td, kwargs)


def write_file(td: Any, filename: str | os.PathLike, kwargs: dict[str, Any]) -> None:
    """Write `td` to the HDF5 file `filename` (replaced); nothing is created if a value
    is refused (`UnstorableValueError`, `ValueError` for a key with `/`)."""
    module = h5py()
    check_value(td, ())  # validate everything before the file is created
    with module.File(os.fspath(filename), "w") as file:
        _fill(file, td, kwargs)


def copy_file(group: Any, newfile: str | os.PathLike, batch_sizes: dict[str, Any]) -> None:
    """Copy every node of `group` into the new HDF5 file `newfile` (replaced).

    `batch_sizes` maps group paths (relative, `""` for `group` itself) to the
    batch size to record there.
    """
    module = h5py()
    with module.File(os.fspath(newfile), "w") as dest:
        for name in group:
            group.copy(group[name], dest, name=name)
        for path, size in batch_sizes.items():
            node = dest[path] if path else dest
            if is_group(node):
                node.attrs[BS_ATTR] = list(size)
