"""Reading a saved folder back as a tree of memory-mapped leaves.

Every folder's metadata is parsed and checked (names, dtypes, shapes against
file sizes, tensorclass names) before any leaf is mapped; the loader never
writes, truncates or grows a file. Leaves are mapped shared (writes reach the
files) unless the load is read-only (`mode="r"`), or the default mode meets
a file this process may not write. With `num_threads > 0` and enough work (see `MIN_SHARE`) the
folders of each nesting level are read, and the leaves mapped, by threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from td_memmap._archive_load import load_archive_tree
from td_memmap._build import Builder, check_cls
from td_memmap._meta import parse_folder
from td_memmap._meta_types import Pack
from td_memmap._packed import map_parts
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import Node

__all__ = ["load_tree"]


#: Fewest folders or leaves worth a thread of their own. Loading is mostly Python work
#: holding the GIL, with short system calls between: on a local disk, threads contending
#: for the GIL are slower than one (measured: 2x slower with 4 threads on 512 folders).
#: Threads pay off where the system calls are slow (network file systems) and many.
MIN_SHARE = 256


class _Threads:
    """Runs work in contiguous shares, one per thread, when there is enough of it."""

    def __init__(self, num_threads: int) -> None:
        self.num_threads = num_threads
        self.pool: ThreadPoolExecutor | None = None

    def chunks(self, fn: Callable[[list[Any]], list[Any]], items: list[Any]) -> list[Any]:
        """`fn(items)`, computed as `fn` of contiguous shares of `items` in parallel."""
        n = min(self.num_threads, len(items) // MIN_SHARE)
        if n < 2:
            return fn(items)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="td-memmap-load")
        size = -(-len(items) // n)
        parts = self.pool.map(fn, [items[i : i + size] for i in range(0, len(items), size)])
        return [result for part in parts for result in part]

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return self.chunks(lambda share: [fn(item) for item in share], items)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def _map_all(
    leaves: list[tuple[str, Any, tuple[int, ...], int]], threads: _Threads, mode: str | None
) -> list[MemoryMappedTensor]:
    writable = mode != "r"
    try:
        return threads.chunks(
            lambda share: MemoryMappedTensor._map_many(share, writable=writable), leaves
        )
    except (PermissionError, RuntimeError) as e:
        if not writable or "ermission" not in str(e):
            raise
        if mode == "r+":
            raise PermissionError(f"mode='r+': cannot map a leaf for writing ({e})") from None
    # the default mode on files this process may not write: those load read-only
    return [
        MemoryMappedTensor._map_many([leaf], writable=os.access(leaf[0], os.W_OK))[0]
        for leaf in leaves
    ]


def _map_packed(pack: Pack, builder: Builder, mode: str | None) -> list[MemoryMappedTensor]:
    """Every leaf as a view of one mapping of its data file (checked by `_meta`)."""
    writable = mode != "r"
    denied = writable and next((p.path for p in pack.parts if not os.access(p.path, os.W_OK)), None)
    if denied:
        if mode == "r+":
            raise PermissionError(f"mode='r+': cannot map {denied!r} for writing")
        writable = False  # the default mode on a file this process may not write
    parts = [(part.path, part.size) for part in pack.parts]
    return map_parts(parts, builder.leaves, builder.offsets, writable)


def load_tree(
    prefix: str | os.PathLike,
    *,
    num_threads: int = 0,
    mode: str | None = None,
    allow_pickle: bool = False,
    cls: type | None = None,
) -> Node:
    """Load the save in `prefix` (or in any of its sub-folders) as a tree.

    Args:
        num_threads: at most this many threads read the folders of each
            nesting level and map the leaves, each taking a contiguous share of
            at least `MIN_SHARE` of them.
        mode: `"r+"`: leaves are mapped shared (in-place writes reach the
            files, seen by every process mapping them); `"r"`: read-only
            leaves that refuse writes; None: `"r+"` where this process may
            write the file, else `"r"`, and `"r"` for a folder saved by
            upstream tensordict (see `_upstream_format`).
        allow_pickle: unpickle non-tensor values saved with pickle (runs code
            from the folder: only for trusted data).
        cls: the top folder's tensorclass, or `TensorDict` to restore no class.

    `prefix` may also be an archive (see `_archive_load`).
    """
    if os.path.isfile(prefix):  # an archive
        return load_archive_tree(prefix, mode=mode, allow_pickle=allow_pickle, cls=cls)
    threads = _Threads(num_threads)
    try:
        meta = parse_folder(os.fspath(prefix), map_fn=threads.map)
        check_cls(cls, meta)
        if mode is None and meta.upstream:  # a folder td did not write: read-only by default
            mode = "r"
        builder = Builder(cls=cls, writable=mode != "r", allow_pickle=allow_pickle)
        root = builder.build(meta, cls)
        if meta.pack is not None:
            mapped = _map_packed(meta.pack, builder, mode)
        else:
            mapped = _map_all(builder.leaves, threads, mode)
    finally:
        threads.close()
    builder.place(mapped)
    root.read_only = mode == "r"
    return root
