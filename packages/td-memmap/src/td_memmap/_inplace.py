"""Working on a TensorDict that lives in a folder: reload it in place, add leaves to it.

`TensorDict.load_memmap_`, `memmap_refresh_`, `make_memmap`,
`make_memmap_from_tensor`, `make_memmap_from_storage` and `saved_path`
delegate here. A folder is known from `saved_path`: the folder a
TensorDict (or any of its sub-TensorDicts) was last saved to or loaded from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, cast

import torch

from td_core import TensorDict, TensorDictBase, is_tensor_collection
from td_memmap._api import load_memmap, memmap
from td_memmap._format import LEAF_SUFFIX, encode_key
from td_memmap._generation import candidates, first_free, packed_root_of
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


def _folder_of(
    td: TensorDictBase, key: Any
) -> tuple[TensorDictBase, str, tuple[str, ...], tuple[str, ...]]:
    """Where `key` goes: the deepest existing TensorDict on its path, its folder, the parts below.

    The parts below are the sub-TensorDicts to create (all but the last) and
    the new leaf's name (the last).
    """
    parts = (key,) if isinstance(key, str) else tuple(_flat(key))
    if not parts or not all(isinstance(p, str) for p in parts):
        raise TypeError(f"key must be a string or a tuple of strings, got {key!r}")
    parent, depth = td, 0
    while depth < len(parts) - 1:
        child = parent.get(parts[depth], None)
        if child is None:
            break
        if not is_tensor_collection(child):
            raise RuntimeError(
                f"cannot add {key!r}: {parts[: depth + 1]!r} is a {type(child).__name__}, not a "
                "TensorDict"
            )
        parent, depth = child, depth + 1
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
    return parent, folder, parts[depth:], parts


def _flat(key: Any) -> list[Any]:
    if isinstance(key, tuple):
        return [p for k in key for p in _flat(k)]
    return [key]


def _add(
    td: TensorDictBase, key: Any, make: Any, fallback: Any, *, existsok: bool = False
) -> MemoryMappedTensor:
    """Create the leaf `key` in its TensorDict's folder and re-save that TensorDict there.

    `make(path)` creates the leaf's file when the TensorDict holding it
    exists; otherwise the missing sub-TensorDicts are created (with the batch
    size of the one above) and the leaf `fallback()` is written by the save.
    """
    parent, folder, below, parts = _folder_of(td, key)
    packed = packed_root_of(folder)
    if packed is not None and saved_path(td) != packed:
        raise RuntimeError(
            f"cannot add {key!r}: the TensorDict holding it is part of the packed save in "
            f"{packed!r}, which is written whole: add it through the TensorDict saved to or "
            f"loaded from {packed!r}"
        )
    name = below[-1]
    if len(below) == 1 and name in parent.keys():
        if not existsok:
            raise RuntimeError(
                f"cannot add {key!r}: The key {name!r} already exists within the target "
                "tensordict. Delete that entry first (or pass existsok=True where accepted)"
            )
    # a sub-TensorDict of a locked TensorDict cannot be unlocked alone: unlock the root
    root_locked = td.is_locked and td is not parent
    if root_locked:
        td.unlock_()
    try:
        path = None
        was_locked = parent.is_locked
        before = parent.get(name, None) if len(below) == 1 else None
        try:
            parent.unlock_()
            if len(below) == 1 and packed is None:
                stem = os.path.join(folder, encode_key(name) + LEAF_SUFFIX)
                path = first_free(candidates(stem, LEAF_SUFFIX), os.path.lexists)
                parent.set(name, make(path))
            else:
                holder = parent
                for part in below[:-1]:
                    holder.set(part, TensorDict({}, batch_size=holder.batch_size))
                    holder = holder.get(part)
                holder.set(name, fallback())
            if packed is None:
                memmap(parent, folder, inplace=True)  # every other leaf keeps its file
            else:  # the whole save is written again, with the new leaf
                memmap(td, packed, inplace=True)  # locks td: back to the locks found
                td.unlock_()
                if was_locked:
                    parent.lock_()
            if not was_locked:
                parent.unlock_()
        except BaseException:
            if path is not None:
                remove_if_exists(path)
            parent.unlock_()
            if before is not None:  # the failed op changes nothing
                parent.set(name, before)
            elif below[0] in parent.keys():
                parent.del_(below[0])
            if was_locked:
                parent.lock_()
            raise
    finally:
        if root_locked:
            td.lock_()
    return cast(MemoryMappedTensor, td.get(parts))


def make_memmap(
    td: TensorDictBase,
    key: Any,
    shape: Sequence[int] | torch.Size,
    *,
    dtype: torch.dtype | None = None,
    robust_key: bool | None = True,
) -> MemoryMappedTensor:
    """A new zero-filled memory-mapped leaf `key` of `td`, in `td`'s folder; it is saved too.

    Missing sub-TensorDicts on the way to `key` are created. An existing
    `key` is refused (`RuntimeError`), as upstream.
    """
    return _add(
        td,
        key,
        lambda path: MemoryMappedTensor.zeros(shape, dtype=dtype, filename=path),
        lambda: MemoryMappedTensor.zeros(shape, dtype=dtype),
    )


def make_memmap_from_tensor(
    td: TensorDictBase,
    key: Any,
    tensor: torch.Tensor,
    *,
    copy_data: bool = True,
    existsok: bool = False,
    robust_key: bool | None = True,
) -> MemoryMappedTensor:
    """A new memory-mapped leaf `key` of `td` holding `tensor`'s data (zeros without `copy_data`).

    Missing sub-TensorDicts on the way to `key` are created. An existing
    `key` is refused (`RuntimeError`, as upstream) unless `existsok`.
    """
    return _add(
        td,
        key,
        lambda path: MemoryMappedTensor.from_tensor(
            tensor, filename=path, copy_existing=True, copy_data=copy_data
        ),
        lambda: MemoryMappedTensor._copy_of(tensor, None, False, copy_data),
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
