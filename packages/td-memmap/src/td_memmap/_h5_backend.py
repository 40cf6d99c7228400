"""The HDF5 backend of `PersistentTensorDict` (h5py; layout in `td_memmap._h5_format`)."""

from __future__ import annotations

import os
from typing import Any

import torch

from td_memmap import _h5_format as fmt
from td_memmap._errors import MemmapFormatError
from td_memmap._h5_write import copy_file, write_file, write_group
from td_memmap._persist_backend import StoreBackend

__all__ = ["H5Backend"]


class H5Backend(StoreBackend):
    """HDF5 files through h5py: groups, datasets, attribute `td_batch_size`."""

    name = "h5"
    what = "HDF5 file"
    reopen = "PersistentTensorDict.from_h5(path, mode='r+')"

    def open(self, filename: Any, mode: str) -> Any:
        path = os.fspath(filename)
        if mode in ("r", "r+") and not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such HDF5 file")
        try:
            return fmt.h5py().File(path, mode)
        except OSError as err:
            raise MemmapFormatError(f"{path}: cannot be opened as HDF5 ({err})") from err

    def write_new(self, td: Any, filename: Any, kwargs: dict[str, Any]) -> Any:
        write_file(td, filename, kwargs)
        return self.open(filename, "r+")

    def close(self, group: Any) -> None:
        if group.id.valid:
            group.file.close()

    def getstate(self, group: Any) -> dict[str, Any]:
        return {
            "filename": fmt.fname(group),
            "group": group.name,
            "mode": "r" if group.file.mode == "r" else "r+",
        }

    def setstate(self, state: dict[str, Any]) -> Any:
        file = self.open(state["filename"], state["mode"])
        return file if state["group"] == "/" else file[state["group"]]

    def filename(self, node: Any) -> str:
        return fmt.fname(node)

    def path(self, node: Any) -> str:
        return str(node.name)

    def readonly(self, node: Any) -> bool:
        return bool(node.file.mode == "r")

    def child(self, group: Any, key: str) -> Any:
        if "/" in key or key in (".", ".."):
            return None
        return group.get(key)

    def children(self, group: Any) -> list[tuple[str, Any]]:
        return list(group.items())

    def keys(self, group: Any) -> list[str]:
        return list(group.keys())

    def is_group(self, node: Any) -> bool:
        return fmt.is_group(node)

    def is_text(self, node: Any) -> bool:
        return fmt.is_text(node)

    def delete(self, group: Any, key: str) -> None:
        del group[key]

    def check_key(self, key: Any) -> str:
        return fmt.check_key(key)

    def check_value(self, value: Any, path: Any) -> None:
        fmt.check_value(value, path)

    def stored_batch_size(self, group: Any) -> torch.Size | None:
        return fmt.stored_batch_size(group)

    def store_batch_size(self, group: Any, size: torch.Size) -> None:
        group.attrs[fmt.BS_ATTR] = list(size)

    def read(self, node: Any, index: Any = (), device: Any = None) -> torch.Tensor:
        return fmt.read(node, index, device)

    def read_text(self, node: Any) -> Any:
        return fmt.read_text(node)

    def meta(self, node: Any) -> torch.Tensor:
        return fmt.meta(node)

    def create(self, group: Any, key: str, tensor: torch.Tensor, kwargs: dict[str, Any]) -> None:
        fmt.create(group, key, tensor, kwargs)

    def create_text(self, group: Any, key: str, value: Any, path: Any) -> None:
        fmt.create_text(group, key, value, path)

    def write_group(self, group: Any, key: str, td: Any, kwargs: dict[str, Any]) -> None:
        write_group(group, key, td, kwargs)

    def write_at(self, node: Any, index: Any, tensor: torch.Tensor) -> None:
        fmt.write_at(node, index, tensor)

    def copy_to(self, group: Any, newfile: Any, batch_sizes: dict[str, Any]) -> None:
        copy_file(group, newfile, batch_sizes)
