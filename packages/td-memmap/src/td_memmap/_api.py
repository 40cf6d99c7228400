"""The public functions: save, load, memory-map and inspect TensorDicts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from td_core import TensorDict, is_tensor_collection
from td_memmap._convert import assign_leaves, from_tree, to_tree
from td_memmap._load import load_tree
from td_memmap._save import save_tree, share_tree
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import Node, NonTensorLeaf

__all__ = ["memmap", "memmap_", "memmap_like", "save", "load_memmap", "load", "is_memmap"]

_Prefix = str | os.PathLike | None


def _as_td(td: Any) -> TensorDict:
    if isinstance(td, Mapping) and not is_tensor_collection(td):
        return TensorDict(td)
    return td


def _has_non_tensor(node: Node) -> bool:
    return any(
        isinstance(v, NonTensorLeaf) or (isinstance(v, Node) and _has_non_tensor(v))
        for v in node.entries.values()
    )


def _check_threads(num_threads: int) -> None:
    if not isinstance(num_threads, int) or num_threads < 0:
        raise ValueError(f"num_threads must be a non-negative int, got {num_threads!r}")


def _background(job: Any) -> Future[Any]:
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="td-memmap-save")
    try:
        return pool.submit(job)
    finally:
        pool.shutdown(wait=False)


def memmap(
    td: TensorDict | Mapping[str, Any],
    prefix: _Prefix = None,
    *,
    copy_existing: bool = False,
    num_threads: int = 0,
    return_early: bool = False,
    share_non_tensor: bool = False,
    existsok: bool = True,
    inplace: bool = False,
    allow_pickle: bool = False,
    durable: bool = False,
) -> Any:
    """Write ``td`` to memory-mapped files under ``prefix``; a locked TensorDict of them.

    Each tensor leaf becomes one raw file written sequentially (in parallel
    with ``num_threads > 0``); each (sub-)TensorDict a folder with a
    ``meta.json`` written last and atomically. Without ``prefix`` the leaves
    move to anonymous shared memory instead. Non-tensor values are stored as
    JSON in the metadata.

    Args:
        td: a TensorDict (a plain mapping is wrapped with ``batch_size=[]``).
        prefix: destination folder (created); None for shared memory.
        copy_existing: copy leaves that are already memory-mapped elsewhere
            (otherwise that raises a ``RuntimeError``, as upstream).
        num_threads: threads writing leaves; 0 writes in the calling thread.
        return_early: return a ``concurrent.futures.Future`` of the result at once.
        share_non_tensor: not supported (raises ``NotImplementedError`` when
            the TensorDict holds non-tensor data).
        existsok: overwrite an existing save in ``prefix``; otherwise a
            ``MemmapExistsError`` (a ``FileExistsError``) is raised.
        inplace: replace ``td``'s own leaves (what ``memmap_`` does).
        allow_pickle: store values that have no JSON form with pickle (the
            folder then only loads with ``allow_pickle=True``).
        durable: also fsync every data file, so the save survives power loss.

    Raises:
        PickleNotAllowedError: (a ``ValueError``) a non-tensor value has no
            JSON form and ``allow_pickle`` is False.
        TypeError: an entry cannot be memory-mapped (sparse, quantized, ...).

    Examples:
        >>> import tempfile, torch
        >>> from td_core import TensorDict
        >>> td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3, 2)}}, batch_size=[3])
        >>> folder = tempfile.mkdtemp()
        >>> saved = memmap(td, folder, num_threads=2)
        >>> type(saved["b", "c"]).__name__, saved.is_locked
        ('MemoryMappedTensor', True)
        >>> load(folder)["b", "c"].sum().item()
        6.0
    """
    _check_threads(num_threads)
    td = _as_td(td)
    tree = to_tree(td)
    if share_non_tensor and _has_non_tensor(tree):
        raise NotImplementedError(
            "share_non_tensor=True is not supported by td-memmap: non-tensor values are saved in the "
            "metadata and each process holds its own copy"
        )

    def run() -> TensorDict:
        if prefix is None:
            out = share_tree(tree, copy_existing=copy_existing)
        else:
            out = save_tree(
                tree,
                prefix,
                copy_existing=copy_existing,
                num_threads=num_threads,
                allow_pickle=allow_pickle,
                existsok=existsok,
                durable=durable,
            )
        if inplace:
            if td.device is not None and td.device.type != "cpu":
                td.clear_device_()
            td.unlock_()
            assign_leaves(td, out)
            return td.lock_()
        return from_tree(out).lock_()

    return _background(run) if return_early else run()


def memmap_(td: TensorDict, prefix: _Prefix = None, **kwargs: Any) -> Any:
    """:func:`memmap` in place: ``td``'s leaves become memory-mapped tensors; returns ``td``."""
    return memmap(td, prefix, inplace=True, **kwargs)


def memmap_like(
    td: TensorDict | Mapping[str, Any],
    prefix: _Prefix = None,
    *,
    copy_existing: bool = False,
    num_threads: int = 0,
    return_early: bool = False,
    existsok: bool = True,
    durable: bool = False,
) -> Any:
    """Allocate zero-filled memory-mapped files shaped like ``td``'s leaves, without copying data.

    The files are created sparse, so a huge data set costs no write time and no
    disk space until it is filled (expanded leaves allocate the expanded size).
    Non-tensor values are copied into the metadata. ``num_threads``,
    ``return_early``, ``existsok`` and ``durable`` are as for :func:`memmap`;
    ``copy_existing`` is accepted for upstream compatibility (nothing is copied).

    Examples:
        >>> import tempfile, torch
        >>> from td_core import TensorDict
        >>> data = TensorDict({"images": torch.zeros(8, 8, 3, dtype=torch.uint8)}, batch_size=[]).expand(1000)
        >>> data = memmap_like(data, tempfile.mkdtemp())
        >>> data[torch.tensor([1, 500])]["images"].shape
        torch.Size([2, 8, 8, 3])
    """
    _check_threads(num_threads)
    tree = to_tree(_as_td(td))

    def run() -> TensorDict:
        if prefix is None:
            out = share_tree(tree, like=True)
        else:
            out = save_tree(
                tree, prefix, like=True, num_threads=num_threads, existsok=existsok, durable=durable
            )
        return from_tree(out).lock_()

    return _background(run) if return_early else run()


def load_memmap(
    prefix: str | os.PathLike,
    *,
    num_threads: int = 0,
    device: torch.device | str | None = None,
    non_blocking: bool = False,
    out: TensorDict | None = None,
    writable: bool = False,
    allow_pickle: bool = False,
) -> TensorDict:
    """Load a TensorDict saved with :func:`memmap` (or any of its sub-folders).

    Every metadata file is validated, and every data file's size checked,
    before anything is mapped; nothing is written. Leaves are memory-mapped:
    data is read from disk only when touched.

    Args:
        prefix: the saved folder, or one of its sub-folders.
        num_threads: threads mapping leaves (0: the calling thread).
        device: move the result there (a copy, no longer memory-mapped).
        non_blocking: passed to ``.to(device)``.
        out: copy the loaded values into this TensorDict (in place) and return it.
        writable: map leaves so that in-place writes reach the files. By
            default files are opened read-only and leaves are copy-on-write:
            writes stay in this process.
        allow_pickle: load values that were saved with pickle. Unpickling
            runs code chosen by whoever wrote the folder: only for trusted data.

    Raises:
        IncompleteSaveError: (a ``FileNotFoundError``) no metadata: not a save,
            or an interrupted one.
        MissingLeafError, LeafSizeError, UnsafePathError, MemmapFormatError:
            (``ValueError``) malformed content, naming the file at fault.
        PickleNotAllowedError: (a ``ValueError``) the folder holds pickled
            values and ``allow_pickle`` is False.
    """
    _check_threads(num_threads)
    td = from_tree(
        load_tree(prefix, num_threads=num_threads, writable=writable, allow_pickle=allow_pickle)
    )
    if device is not None:
        td = td.to(device, non_blocking=non_blocking)
    if out is not None:
        out.update_(td)
        return out
    return td


save = memmap
load = load_memmap


def is_memmap(td: Any) -> bool:
    """Whether ``td`` has tensor leaves and every one of them is a :class:`MemoryMappedTensor`."""
    found = False
    for value in td.values(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor):
            if not isinstance(value, MemoryMappedTensor):
                return False
            found = True
    return found
