"""Reading a saved folder back as a tree of memory-mapped leaves.

Every folder's metadata is parsed and checked (names, dtypes, shapes against
file sizes) before any leaf is mapped; nothing is ever written.
"""

from __future__ import annotations

import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from td_memmap._errors import MemmapFormatError, PickleNotAllowedError
from td_memmap._format import META_NAME, value_from_json
from td_memmap._meta import DirEntry, FolderMeta, NonTensorEntry, TensorEntry, parse_folder
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import Node, NonTensorLeaf

__all__ = ["load_tree"]


def _object_array(nested: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    """An object array of ``shape`` from nested lists, without numpy guessing the depth."""
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    items: list[Any] = [nested]
    for depth, size in enumerate(shape):
        nxt: list[Any] = []
        for item in items:
            if type(item) is not list or len(item) != size:
                raise MemmapFormatError(
                    f"{where}: stacked value does not have batch_size {list(shape)} (level {depth})"
                )
            nxt.extend(item)
        items = nxt
    for i, item in enumerate(items):
        flat[i] = item
    return out


def _nontensor(entry: NonTensorEntry, meta_path: str) -> NonTensorLeaf:
    where = f"{meta_path!r}, entry {entry.key!r}"
    if entry.encoding == "pickle":
        assert entry.path is not None
        with open(entry.path, "rb") as f:
            value = pickle.load(f)
        if entry.stacked and (not isinstance(value, np.ndarray) or value.shape != entry.batch_size):
            raise MemmapFormatError(
                f"{where}: pickled stacked value is not an array of shape {list(entry.batch_size)}"
            )
        return NonTensorLeaf(value, entry.batch_size, entry.stacked)
    try:
        value = value_from_json(entry.value)
    except (ValueError, TypeError, RecursionError) as e:
        raise MemmapFormatError(f"{where}: bad value ({e})") from None
    if entry.stacked:
        value = _object_array(value, entry.batch_size, where)
    return NonTensorLeaf(value, entry.batch_size, entry.stacked)


def _check_pickle(meta: FolderMeta, allow_pickle: bool) -> None:
    for entry in meta.entries:
        if isinstance(entry, DirEntry):
            _check_pickle(entry.folder, allow_pickle)
        elif isinstance(entry, NonTensorEntry) and entry.encoding == "pickle" and not allow_pickle:
            raise PickleNotAllowedError(
                f"entry {entry.key!r} of {meta.path!r} is stored with pickle ({entry.path!r}), which "
                "can run arbitrary code: pass allow_pickle=True only if you trust this folder"
            )


def _build(meta: FolderMeta, leaves: list[tuple[Node, TensorEntry]]) -> Node:
    node = Node(meta.batch_size, meta.device, {}, meta.kind)
    meta_path = meta.path + os.sep + META_NAME
    for entry in meta.entries:
        if isinstance(entry, TensorEntry):
            node.entries[entry.key] = None  # type: ignore[assignment]  # placeholder keeps the order
            leaves.append((node, entry))
        elif isinstance(entry, DirEntry):
            node.entries[entry.key] = _build(entry.folder, leaves)
        else:
            node.entries[entry.key] = _nontensor(entry, meta_path)
    return node


def load_tree(
    prefix: str | os.PathLike,
    *,
    num_threads: int = 0,
    writable: bool = False,
    allow_pickle: bool = False,
) -> Node:
    """Load the save in ``prefix`` (or in any of its sub-folders) as a tree.

    Args:
        writable: map leaves for writing (in-place writes reach the files);
            by default they are copy-on-write and the files are opened read-only.
        allow_pickle: unpickle non-tensor values saved with pickle (runs code
            from the folder: only for trusted data).
    """
    meta = parse_folder(os.fspath(prefix))
    _check_pickle(meta, allow_pickle)
    leaves: list[tuple[Node, TensorEntry]] = []
    root = _build(meta, leaves)

    mapper = MemoryMappedTensor._map

    def one(item: tuple[Node, TensorEntry]) -> None:
        node, e = item
        node.entries[e.key] = mapper(e.path, e.dtype, e.shape, writable=writable, nbytes=e.nbytes)

    if num_threads > 0 and len(leaves) > 1:
        with ThreadPoolExecutor(max_workers=num_threads) as pool:
            for _ in pool.map(one, leaves):
                pass
    else:
        for item in leaves:
            one(item)
    return root
