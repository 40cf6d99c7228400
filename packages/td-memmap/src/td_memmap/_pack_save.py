"""Writing a save as one packed folder: its data files, one metadata file.

`_save.save_tree` plans a save as for the one-file-per-leaf layout, then hands
the plan here when the save is packed (see `packable`). Order of a packed save:

1. lay the leaves out in data files, each at a `PACK_ALIGN`-aligned offset of
   one: one file (format version 2), or, for a large save with threads, one
   file per thread (version 3, see `part_count`); or, when every leaf already
   is a distinct view of the previous packed save's data files of this
   folder, keep those files and offsets (no data written);
2. otherwise write new data files under names the previous save does not use
   (`data.pack`, `data.1.pack`, ...; else `data.b.pack`, `data.b.1.pack`,
   ...): each created at its full size (sparse zeros), then its leaves written
   at their offsets, several a system call, one thread per file (see
   `_write_pack`);
3. commit: write `meta.json`, the whole tree, atomically (temporary file,
   rename);
4. remove what the previous save used and the new one does not (its data
   files, or the files and sub-folders of a one-file-per-leaf save).

A process killed before 3 leaves the previous save loadable and intact (plus
unused data files that the next save replaces or removes); after it, the new
save loads.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from td_memmap._errors import MemmapError
from td_memmap._format import (
    META_NAME,
    PACK_ALIGN,
    PACK_NAME,
    PACK_SUFFIX,
    PACKED_VERSION,
    SPLIT_VERSION,
)
from td_memmap._generation import Previous, candidates, remove_replaced
from td_memmap._io import (
    fill_file,
    fsync_dir,
    json_bytes,
    remove_if_exists,
    tensor_bytes,
    write_json,
)
from td_memmap._packed import map_parts
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._threads import default_threads, run_parallel, usable_cpus
from td_memmap._tree import KIND_LAZY

__all__ = ["packable", "part_count", "save_packed"]

#: Leaves written by one system call (`pwritev`), at most: fewer calls for many small
#: leaves (with the padding between them, within Linux's 1,024 buffers a call).
_BATCH_LEAVES = 512
#: ... and at most this many bytes a call, past one leaf.
_BATCH_BYTES = 8 << 20
#: The least data a data file of its own (and its thread) is worth. Buffered writes to
#: one file are serialized by the kernel (the file's lock), to two files they are not:
#: measured on 2 CPUs, 256 MB took 67 ms as one file and 35 ms as two, by two threads.
MIN_PART = 16 << 20


@dataclass
class _Layout:
    """Where a packed save's leaves lie: its data files and, per leaf, one of them and an offset."""

    paths: list[str]  # the data files
    sizes: list[int]  # their sizes in bytes
    parts: list[int]  # per leaf, the index of its data file
    offsets: list[int]  # per leaf, where it starts in that file


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


def _place_in(job: Any, packs: Sequence[str]) -> int | None:
    """Where `job`'s tensor already lies in its data file, one of `packs`, if a whole contiguous view."""
    t = job.src
    if not isinstance(t, MemoryMappedTensor) or t._mm_file not in packs or not t._mm_writable:
        return None
    plain = torch.Tensor._make_subclass(torch.Tensor, t)
    if not plain.is_contiguous() or tuple(plain.shape) != job.shape or plain.dtype != job.dtype:
        return None
    offset = int(plain.storage_offset()) * plain.element_size()
    return offset if offset % PACK_ALIGN == 0 else None


def _keep_places(jobs: list[Any], sizes: list[int], previous: Previous) -> _Layout | None:
    """The places of every leaf in the previous data files, when all can stay there; else None."""
    if not previous.packs or not jobs or any(job.action == "alloc" for job in jobs):
        return None
    files, offsets = [], []
    for job in jobs:
        offset = _place_in(job, previous.packs)
        if offset is None:
            return None
        files.append(job.src._mm_file)
        offsets.append(offset)
    spans = sorted((f, p, p + n) for f, p, n in zip(files, offsets, sizes) if n)
    if any(f == g and start < end for (f, _, end), (g, start, _) in itertools.pairwise(spans)):
        return None  # two entries view the same bytes: each needs its own copy
    paths = [path for path in previous.packs if path in files]
    parts = [paths.index(f) for f in files]
    return _Layout(paths, [os.path.getsize(path) for path in paths], parts, offsets)


def part_count(nbytes: int, num_threads: int | None) -> int:
    """How many data files a packed save of `nbytes` to write gets: one per writer thread.

    At most `num_threads` (None: `default_threads()`) and the CPUs this
    process may use, each file holding at least `MIN_PART`; at least one.
    """
    threads = default_threads() if num_threads is None else num_threads
    return max(1, min(threads, usable_cpus(), nbytes // MIN_PART))


def _lay_out(sizes: list[int], count: int) -> tuple[list[int], list[int], list[int]]:
    """The leaves in order, cut into at most `count` runs of about equal bytes, one per data file.

    Gives each leaf's file and offset, and each file's size. A file starts at a
    leaf with bytes, so none holds only empty leaves.
    """
    share = sum(sizes) / count
    parts, offsets, totals = [], [], [0]
    done = 0  # bytes laid out in the files before the current one and in it
    for nbytes in sizes:
        if nbytes and len(totals) < count and done >= share * len(totals):
            totals.append(0)
        parts.append(len(totals) - 1)
        offsets.append(totals[-1])
        totals[-1] = _align(totals[-1] + nbytes)
        done += nbytes
    return parts, offsets, totals


def _names(root: str, count: int, previous: Previous) -> list[str]:
    """`count` data file names in `root`, none of which the previous save uses."""
    for first in candidates(os.path.join(root, PACK_NAME), PACK_SUFFIX):
        stem = first[: -len(PACK_SUFFIX)]
        names = [first] + [f"{stem}.{i}{PACK_SUFFIX}" for i in range(1, count)]
        if not any(previous.uses(name) for name in names):
            return names
    raise MemmapError(f"no free data file names in {root!r}: all are in use")


#: Every name `_names` may give (no leaf file's name has a "." before its suffix).
_DATA_NAME = re.compile(
    "|".join(
        re.escape(os.path.basename(name)[: -len(PACK_SUFFIX)]) + r"(\.[1-9][0-9]*)?"
        for name in candidates(PACK_NAME, PACK_SUFFIX)
    ).join(("(?:", ")"))
    + re.escape(PACK_SUFFIX)
)


def _remove_dead_parts(root: str, names: set[str]) -> None:
    """Remove the data files in `root` that no save uses: those of saves killed before their commit.

    The next save picks the names of a killed save's files, which replaces them,
    but a killed save of more files than the next one would leave the others.
    """
    with os.scandir(root) as found:
        dead = [e.path for e in found if e.name not in names and _DATA_NAME.fullmatch(e.name)]
    for path in dead:
        remove_if_exists(path)


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

    `sizes`: the bytes of each job's leaf. One thread writes one file: buffered
    writes to one file are serialized by the kernel (the file's lock), so more
    threads on it only add contention (measured on 2 CPUs: 256 MB in 8 leaves
    1.6x slower with 2 threads than with one); several files are written by a
    thread each (see `MIN_PART`).
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


def _write_all(layout: _Layout, jobs: list[Any], sizes: list[int], durable: bool) -> None:
    """Write every data file of `layout`, a thread each; on error none is left."""
    count = len(layout.paths)
    mine: list[list[int]] = [[] for _ in range(count)]
    for i, part in enumerate(layout.parts):
        mine[part].append(i)

    def write(part: int) -> None:
        rows = mine[part]
        _write_pack(
            layout.paths[part],
            [jobs[i] for i in rows],
            [sizes[i] for i in rows],
            [layout.offsets[i] for i in rows],
            layout.sizes[part],
            durable,
        )

    try:
        run_parallel(count, write, range(count), layout.sizes, min_share=1)
    except BaseException:
        for path in layout.paths:
            remove_if_exists(path)
        raise


def _map_result(jobs: list[Any], sizes: list[int], layout: _Layout) -> None:
    """Each job's leaf in the result: a view of one shared mapping of its new data file."""
    leaves = [
        (layout.paths[part], job.dtype, job.shape, n)
        for job, n, part in zip(jobs, sizes, layout.parts)
    ]
    mapped = map_parts(list(zip(layout.paths, layout.sizes)), leaves, layout.offsets, True)
    for job, leaf in zip(jobs, mapped):
        job.out.entries[job.key] = leaf


def _inline(folder: Any, version: int) -> None:
    """Turn the planned metadata of `folder` and those below into one packed tree, in place."""
    meta = folder.meta
    meta["version"] = version
    if meta["kind"] == KIND_LAZY:
        meta["member_meta"] = [child.meta for child in folder.children]
    else:
        children = iter(folder.children)
        for entry in meta["entries"]:
            if entry["type"] == "tensordict":
                entry["meta"] = next(children).meta
    for child in folder.children:
        _inline(child, version)


def save_packed(
    plan: Any,
    jobs: list[Any],
    previous: Previous,
    *,
    durable: bool,
    num_threads: int | None,
) -> None:
    """Write the planned save `plan` (its tensor `jobs`) packed into `plan.path`; see the module doc.

    `num_threads`: at most this many data files, a thread each (see `part_count`).
    """
    root = plan.path
    os.makedirs(root, exist_ok=True)
    sizes = [_nbytes(job) for job in jobs]
    layout = _keep_places(jobs, sizes, previous)
    kept = layout is not None
    if layout is None:
        written = sum(n for job, n in zip(jobs, sizes) if job.action != "alloc")
        parts, offsets, totals = _lay_out(sizes, part_count(written, num_threads))
        layout = _Layout(_names(root, len(totals), previous), totals, parts, offsets)
        _write_all(layout, jobs, sizes, durable)
    names = [os.path.basename(path) for path in layout.paths]
    split = len(names) > 1
    try:
        for job, part, offset in zip(jobs, layout.parts, layout.offsets):
            del job.entry["file"]
            job.entry["offset"] = offset
            if split:
                job.entry["part"] = part
        _inline(plan, SPLIT_VERSION if split else PACKED_VERSION)
        data: Any = names if split else names[0]
        data_size: Any = layout.sizes if split else layout.sizes[0]
        meta = {**plan.meta, "data": data, "data_size": data_size}
        write_json(root, META_NAME, None, durable=durable, payload=json_bytes(meta))
    except BaseException:
        if not kept:
            for path in layout.paths:
                remove_if_exists(path)
        raise
    if kept:  # the leaves given are the folder's own: they stay the result's
        for job in jobs:
            job.out.entries[job.key] = job.src
    else:
        _map_result(jobs, sizes, layout)
    remove_replaced(previous, {root: set(names)})
    _remove_dead_parts(root, set(names))
    if durable:
        fsync_dir(root)
