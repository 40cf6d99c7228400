"""Writing a save as one packed folder (format version 2): one data file, one metadata file.

`_save.save_tree` plans a save as for the one-file-per-leaf layout, then hands
the plan here when the save is packed (see `packable`). Order of a packed save:

1. lay the leaves out in one data file, each at a `PACK_ALIGN`-aligned offset;
   or, when every leaf already is a distinct view of the previous packed save's
   data file of this folder, keep that file and its offsets (no data written);
2. otherwise write a new data file under a name the previous save does not
   use (`data.pack`, `data.b.pack`, ...): created at its full size (sparse
   zeros), then the leaves written at their offsets, several a system call, by
   the calling thread (see `_write_pack`);
3. commit: write `meta.json`, the whole tree, atomically (temporary file,
   rename);
4. remove what the previous save used and the new one does not (its data
   file, or the files and sub-folders of a one-file-per-leaf save).

A process killed before 3 leaves the previous save loadable and intact (plus
an unused data file that a later save replaces); after it, the new save loads.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
from collections.abc import Sequence
from typing import Any

import torch

from td_memmap._format import META_NAME, PACK_ALIGN, PACK_NAME, PACK_SUFFIX, PACKED_VERSION
from td_memmap._generation import Previous, candidates, first_free, remove_replaced
from td_memmap._io import (
    fill_file,
    fsync_dir,
    json_bytes,
    map_storage,
    remove_if_exists,
    tensor_bytes,
    views_at,
    write_json,
)
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import KIND_LAZY

__all__ = ["packable", "save_packed"]

#: Leaves written by one system call (`pwritev`), at most: fewer calls for many small
#: leaves (with the padding between them, within Linux's 1,024 buffers a call).
_BATCH_LEAVES = 512
#: ... and at most this many bytes a call, past one leaf.
_BATCH_BYTES = 8 << 20


def packable(jobs: Sequence[Any]) -> bool:
    """Whether a planned save fits the packed layout: tensor leaves and JSON values only.

    Nested (jagged) tensors keep the files layout, where their components' shapes live.
    """
    return all(
        job.action in ("write", "alloc", "reuse") and getattr(job, "nested", None) is None
        for job in jobs
    )


def _nbytes(job: Any) -> int:
    return job.dtype.itemsize * math.prod(job.shape)


def _align(n: int) -> int:
    return -(-n // PACK_ALIGN) * PACK_ALIGN


def _place_in(job: Any, pack: str) -> int | None:
    """Where `job`'s tensor already lies in the data file `pack`, if it is a whole contiguous view."""
    t = job.src
    if not isinstance(t, MemoryMappedTensor) or t._mm_file != pack or not t._mm_writable:
        return None
    plain = torch.Tensor._make_subclass(torch.Tensor, t)
    if not plain.is_contiguous() or tuple(plain.shape) != job.shape or plain.dtype != job.dtype:
        return None
    offset = int(plain.storage_offset()) * plain.element_size()
    return offset if offset % PACK_ALIGN == 0 else None


def _keep_places(jobs: list[Any], sizes: list[int], previous: Previous) -> list[int] | None:
    """The offsets of every leaf in the previous data file, when all can stay there; else None."""
    if previous.pack is None or not jobs or any(job.action == "alloc" for job in jobs):
        return None
    places = []
    for job in jobs:
        place = _place_in(job, previous.pack)
        if place is None:
            return None
        places.append(place)
    spans = sorted((p, p + n) for p, n in zip(places, sizes) if n)
    if any(start < end for (_, end), (start, _) in itertools.pairwise(spans)):
        return None  # two entries view the same bytes: each needs its own copy
    return places


def _raw(t: torch.Tensor, nbytes: int) -> Any:
    """The bytes of `t` in C order, without a copy where they already are (the common case).

    A contiguous CPU tensor's bytes are read in place through its data pointer
    (a third of `tensor_bytes`'s cost, which a checkpoint of small leaves pays per
    leaf); the caller keeps `t` alive until they are written.
    """
    if (
        (type(t) is torch.Tensor or isinstance(t, (torch.nn.Parameter, MemoryMappedTensor)))
        and t.is_cpu
        and t.is_contiguous()
        and not (t.is_conj() or t.is_neg())
    ):
        return (ctypes.c_char * nbytes).from_address(t.data_ptr())
    return memoryview(tensor_bytes(t)).cast("B")  # type: ignore[arg-type]  # numpy stubs


def _write_batch(fd: int, batch: list[tuple[int, memoryview]]) -> None:
    """Write contiguous-in-file leaves (`(offset, bytes)`, padding between them) with `pwritev`."""
    buffers: list[memoryview | bytes] = []
    start = batch[0][0]
    at = start
    for offset, data in batch:
        if offset > at:
            buffers.append(bytes(offset - at))
        buffers.append(data)
        at = offset + len(data)
    done = os.pwritev(fd, buffers, start)
    if done == at - start:
        return
    pos = start  # a short write (a call writes at most ~2 GB): the rest, buffer by buffer
    for buffer in buffers:
        view = memoryview(buffer).cast("B")
        written = min(max(done - (pos - start), 0), len(view))
        while written < len(view):
            written += os.pwrite(fd, view[written:], pos + written)
        pos += len(view)


def _batches(writes: list[tuple[int, memoryview]]) -> list[list[tuple[int, memoryview]]]:
    out: list[list[tuple[int, memoryview]]] = []
    size = 0
    for item in writes:
        if not out or len(out[-1]) >= _BATCH_LEAVES or size >= _BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item[1])
    return out


def _write_pack(
    path: str, jobs: list[Any], sizes: list[int], offsets: list[int], total: int, durable: bool
) -> None:
    """Write the data file `path`: created at `total` bytes, each job's leaf at its offset.

    `sizes`: the bytes of each job's leaf.

    One thread writes it: buffered writes to one file are serialized by the
    kernel (the file's lock), so threads only add contention (measured on 2
    CPUs: 256 MB in 8 leaves 1.6x slower with 2 threads than with one, the
    Transformer 1.07x slower).
    """
    writes = [
        (offset, _raw(job.src, nbytes))
        for job, nbytes, offset in zip(jobs, sizes, offsets)
        if nbytes and job.action != "alloc"
    ]

    def fill(fd: int) -> None:
        os.ftruncate(fd, total)
        for batch in _batches(writes):
            _write_batch(fd, batch)

    # "replace": a data file of a dead save, or a spare, is unlinked: mappings of it keep
    # their data; `like`: sparse, nothing reserved
    fill_file(path, total, fill, mode="replace", durable=durable, reserve=bool(writes))


def _map_result(
    jobs: list[Any], sizes: list[int], offsets: list[int], pack: str, total: int
) -> None:
    """Each job's leaf in the result: a view of one shared mapping of the new data file."""
    mapped = [(at, job.dtype, job.shape) for job, n, at in zip(jobs, sizes, offsets) if n]
    views = iter(views_at(map_storage(pack, True, total), mapped) if mapped else ())
    tensors = [
        next(views) if n else torch.empty(job.shape, dtype=job.dtype) for job, n in zip(jobs, sizes)
    ]
    leaves = MemoryMappedTensor._adopt(tensors, [job.shape for job in jobs], pack, True)
    for job, leaf in zip(jobs, leaves):
        job.out.entries[job.key] = leaf


def _inline(folder: Any) -> None:
    """Turn the planned metadata of `folder` and those below into one packed tree, in place."""
    meta = folder.meta
    meta["version"] = PACKED_VERSION
    if meta["kind"] == KIND_LAZY:
        meta["member_meta"] = [child.meta for child in folder.children]
    else:
        children = iter(folder.children)
        for entry in meta["entries"]:
            if entry["type"] == "tensordict":
                entry["meta"] = next(children).meta
    for child in folder.children:
        _inline(child)


def save_packed(
    plan: Any,
    jobs: list[Any],
    previous: Previous,
    *,
    durable: bool,
) -> None:
    """Write the planned save `plan` (its tensor `jobs`) packed into `plan.path`; see the module doc."""
    root = plan.path
    os.makedirs(root, exist_ok=True)
    sizes = [_nbytes(job) for job in jobs]
    places = _keep_places(jobs, sizes, previous)
    if places is not None:
        assert previous.pack is not None
        pack, offsets = previous.pack, places
        total = os.path.getsize(pack)
    else:
        offsets, total = [], 0
        for nbytes in sizes:
            offsets.append(total)
            total = _align(total + nbytes)
        pack = first_free(candidates(os.path.join(root, PACK_NAME), PACK_SUFFIX), previous.uses)
        _write_pack(pack, jobs, sizes, offsets, total, durable)
    try:
        for job, offset in zip(jobs, offsets):
            del job.entry["file"]
            job.entry["offset"] = offset
        _inline(plan)
        meta = {**plan.meta, "data": os.path.basename(pack), "data_size": total}
        write_json(root, META_NAME, None, durable=durable, payload=json_bytes(meta))
    except BaseException:
        if pack != previous.pack:
            remove_if_exists(pack)
        raise
    if places is not None:  # the leaves given are the folder's own: they stay the result's
        for job in jobs:
            job.out.entries[job.key] = job.src
    else:
        _map_result(jobs, sizes, offsets, pack, total)
    remove_replaced(previous, {root: {os.path.basename(pack)}})
    if durable:
        fsync_dir(root)
