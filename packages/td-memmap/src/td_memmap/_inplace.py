"""Working on a TensorDict that lives in a folder: reload it in place, add leaves to it.

`TensorDict.load_memmap_`, `memmap_refresh_`, `make_memmap`,
`make_memmap_from_tensor`, `make_memmap_from_storage` and `saved_path`
delegate here. A folder is known from `saved_path`: the folder a
TensorDict (or any of its sub-TensorDicts) was last saved to or loaded from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from td_core import TensorDictBase
from td_memmap._api import load_memmap, memmap
from td_memmap._format import LEAF_SUFFIX, encode_key
from td_memmap._generation import candidates, first_free
from td_memmap._io import remove_if_exists
from td_memmap._paths import remember, saved_path
from td_memmap._tensor import MemoryMappedTensor

__all__ = [
    "load_memmap_",
    "memmap_refresh_",
    "make_memmap",
    "make_memmap_from_tensor",
    "make_memmap_from_storage",
    "saved_path",
]


def load_memmap_(
    td: TensorDictBase,
    prefix: str | os.PathLike,
    robust_key: bool | None = True,
    *,
    allow_pickle: bool | None = None,
    mode: str | None = None,
) -> TensorDictBase:
    """Replace `td`'s content, in place, by the save in `prefix`; returns `td`.

    Keys the save lacks are removed, the batch size becomes the save's, and
    every leaf is the memory-mapped leaf `load_memmap` gives (`mode`
    as there). Everything is loaded and checked before `td` changes.

    Raises:
        RuntimeError: `td` is locked (as for any in-place change).
    """
    loaded = load_memmap(prefix, robust_key=robust_key, allow_pickle=allow_pickle, mode=mode)
    if td.is_locked:
        raise RuntimeError("cannot load into a locked TensorDict: call unlock_() first")
    for key in list(td.keys()):
        td.del_(key)
    if td.batch_size != loaded.batch_size:
        td.batch_size = loaded.batch_size
    for key, value in loaded.items():
        td.set(key, value)
    if mode == "r":
        td.lock_()
    return remember(td, os.path.abspath(os.fspath(prefix)))


def memmap_refresh_(td: TensorDictBase, *, allow_pickle: bool | None = None) -> TensorDictBase:
    """Reload `td` in place from the folder it was saved to or loaded from (see `saved_path`).

    Raises:
        RuntimeError: `td` has no folder.
    """
    folder = saved_path(td)
    if folder is None:
        raise RuntimeError(
            "cannot refresh a TensorDict that was not saved with memmap/memmap_ or loaded with "
            "load_memmap: it has no folder"
        )
    was_locked = td.is_locked
    td.unlock_()
    try:
        load_memmap_(td, folder, allow_pickle=allow_pickle)
    finally:
        if was_locked:
            td.lock_()
    return td


def _folder_of(td: TensorDictBase, key: Any) -> tuple[TensorDictBase, str, str]:
    """The sub-TensorDict holding `key`, the last part of `key`, and its folder."""
    parts = (key,) if isinstance(key, str) else tuple(_flat(key))
    if not parts or not all(isinstance(p, str) for p in parts):
        raise TypeError(f"key must be a string or a tuple of strings, got {key!r}")
    parent = td if len(parts) == 1 else td.get(parts[:-1])
    folder = saved_path(parent)
    if folder is None:
        raise RuntimeError(
            f"cannot add {key!r}: the TensorDict holding it has no folder. Save it with "
            "memmap_(prefix) (or load it with load_memmap) first"
        )
    if os.path.isfile(folder):
        raise RuntimeError(
            f"cannot add {key!r}: the TensorDict holding it was loaded from the archive "
            f"{folder!r}, whose entries are fixed. Unpack it with unpack_memmap (or save it to a "
            "folder) first"
        )
    return parent, parts[-1], folder


def _flat(key: Any) -> list[Any]:
    if isinstance(key, tuple):
        return [p for k in key for p in _flat(k)]
    return [key]


def _add(td: TensorDictBase, key: Any, make: Any, *, existsok: bool = True) -> MemoryMappedTensor:
    """Create the leaf `make(path)` as `key` in its TensorDict's folder and re-save it there."""
    parent, name, folder = _folder_of(td, key)
    if not existsok and name in parent.keys():
        raise RuntimeError(f"{key!r} already exists: pass existsok=True to replace it")
    stem = os.path.join(folder, encode_key(name) + LEAF_SUFFIX)
    path = first_free(candidates(stem, LEAF_SUFFIX), os.path.lexists)
    tensor = make(path)
    # a sub-TensorDict of a locked TensorDict cannot be unlocked alone: unlock the root
    root_locked = td.is_locked and td is not parent
    try:
        if root_locked:
            td.unlock_()
        was_locked = parent.is_locked
        parent.unlock_()
        parent.set(name, tensor)
        memmap(parent, folder, inplace=True)  # every other leaf keeps its file
        if not was_locked:
            parent.unlock_()
    except BaseException:
        remove_if_exists(path)
        raise
    finally:
        if root_locked:
            td.lock_()
    return tensor


def make_memmap(
    td: TensorDictBase,
    key: Any,
    shape: Sequence[int] | torch.Size,
    *,
    dtype: torch.dtype | None = None,
    robust_key: bool | None = True,
) -> MemoryMappedTensor:
    """A new zero-filled memory-mapped leaf `key` of `td`, in `td`'s folder; it is saved too."""
    return _add(td, key, lambda path: MemoryMappedTensor.zeros(shape, dtype=dtype, filename=path))


def make_memmap_from_tensor(
    td: TensorDictBase,
    key: Any,
    tensor: torch.Tensor,
    *,
    copy_data: bool = True,
    existsok: bool = True,
    robust_key: bool | None = True,
) -> MemoryMappedTensor:
    """A new memory-mapped leaf `key` of `td` holding `tensor`'s data (zeros without `copy_data`)."""
    return _add(
        td,
        key,
        lambda path: MemoryMappedTensor.from_tensor(tensor, filename=path, copy_data=copy_data),
        existsok=existsok,
    )


def make_memmap_from_storage(
    td: TensorDictBase,
    key: Any,
    storage: torch.UntypedStorage,
    shape: Sequence[int] | torch.Size,
    *,
    dtype: torch.dtype | None = None,
    robust_key: bool | None = True,
) -> MemoryMappedTensor:
    """A new memory-mapped leaf `key` of `td` holding a copy of `storage` viewed as `shape`."""
    view = MemoryMappedTensor.from_storage(storage, shape=shape, dtype=dtype)
    return make_memmap_from_tensor(td, key, torch.Tensor._make_subclass(torch.Tensor, view))
