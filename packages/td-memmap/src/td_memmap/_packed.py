"""Reading a packed save (format versions 2 and 3): its data files, the leaves' places, its sub-trees.

A packed save is one folder holding one `meta.json` (the whole tree, every
sub-TensorDict inline) and the data files that hold the leaves, each leaf at a
`PACK_ALIGN`-aligned offset of one of them: one data file in version 2,
a list of them in version 3 (a save written by several threads, one file
each). These checks run while `_meta` parses the metadata, before anything is
mapped: each data file has exactly the size the metadata records, every leaf
lies inside its file, and no two leaves overlap.

A sub-TensorDict of a packed save has no folder of its own: loading
`root/encoder` finds `root` by walking up the path given, through parts that
do not exist only, and takes the sub-tree `encoder` of its metadata. So the
walk never passes an existing folder, and every byte read comes from the
save that holds the path.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Callable
from typing import Any

import torch

from td_memmap._errors import IncompleteSaveError, LeafSizeError, MemmapFormatError
from td_memmap._format import PACK_ALIGN, PACK_SUFFIX, PACKED_VERSION, SPLIT_VERSION
from td_memmap._io import map_storage, views_at
from td_memmap._meta_types import DirEntry, FolderMeta, Pack, PackPart
from td_memmap._tensor import MemoryMappedTensor

__all__ = [
    "open_pack",
    "check_pack_name",
    "check_pack_size",
    "leaf_place",
    "check_spans",
    "map_parts",
    "packed_parent",
    "subtree",
]

Fail = Callable[..., Exception]


def check_pack_name(name: object) -> str | None:
    """Why `name` cannot name a packed data file (beyond being a plain name), or None."""
    if type(name) is not str or not name.endswith(PACK_SUFFIX):
        return f"a packed save names its data file '<name>{PACK_SUFFIX}', got {name!r}"
    return None


def check_pack_size(recorded: object, path: str, size: int, fail: Fail) -> None:
    """The data file has exactly the size its save recorded (`LeafSizeError` if not)."""
    if type(recorded) is not int or recorded < 0:
        raise fail(f"'data_size' is {recorded!r}, expected a non-negative integer")
    if size != recorded:
        raise fail(
            f"data file {path!r} has {size} bytes, but the save recorded {recorded} (truncated, "
            "grown, or not from this save)",
            LeafSizeError,
        )


def _listed(data: dict[str, Any], version: int, fail: Fail) -> list[tuple[object, object]]:
    """The `(name, recorded size)` of each data file the top metadata `data` lists."""
    names, sizes = data.get("data"), data.get("data_size")
    if version == PACKED_VERSION:
        return [(names, sizes)]
    if type(names) is not list or not names:
        raise fail(f"'data' is {names!r}, expected a non-empty list of data file names")
    if type(sizes) is not list or len(sizes) != len(names):
        raise fail(
            f"'data_size' is {sizes!r}, expected a list of {len(names)} sizes (one per data file)"
        )
    if len(set(map(repr, names))) != len(names):
        raise fail(f"'data' names a data file twice: {names!r}")
    return list(zip(names, sizes))


def open_pack(
    data: dict[str, Any], version: int, folder: str, inside: Callable[..., Any], fail: Fail
) -> Pack:
    """The data files a packed save's top metadata `data` names, after checking names and sizes.

    `version`: 2 (`data` is one name, `data_size` one size) or 3 (a list of
    each). `inside(name, key, label)` checks that `folder/name` stays in the
    save and gives its path, `stat` and real path (see `_meta`).
    """
    parts = []
    files: dict[tuple[int, int], object] = {}  # (device, inode) -> name: the same file twice
    for name, recorded in _listed(data, version, fail):
        why = check_pack_name(name)
        if why is not None:
            raise fail(f"'data' {name!r}: {why}")
        path, st, _ = inside(name, None, "data file")
        if not stat.S_ISREG(st.st_mode):
            raise fail(f"data file {path!r} is not a regular file")
        check_pack_size(recorded, path, st.st_size, fail)
        if st.st_ino:  # 0: an archive's entry, which has no inode of its own
            other = files.setdefault((st.st_dev, st.st_ino), name)
            if other != name:
                raise fail(
                    f"data files {other!r} and {name!r} are the same file (a link): their "
                    "leaves would share bytes"
                )
        parts.append(PackPart(path, st.st_size))
    return Pack(folder, version, parts)


def leaf_place(
    raw: dict[str, Any], key: str, nbytes: int, pack: Pack, fail: Fail
) -> tuple[str, int]:
    """The data file and checked offset of the leaf `raw` of `nbytes` bytes; its span is recorded.

    A version 3 leaf names its data file by `part`, an index into the save's
    list; a version 2 save has one data file and no `part`.
    """
    part_index = raw.get("part", None if pack.version > PACKED_VERSION else 0)
    if (
        type(part_index) is not int
        or not 0 <= part_index < len(pack.parts)
        or (pack.version == PACKED_VERSION and "part" in raw)
    ):
        raise fail(
            f"entry {key!r} has part {part_index!r}, expected an index of the save's "
            f"{len(pack.parts)} data files"
            if pack.version > PACKED_VERSION
            else f"entry {key!r} has a 'part', which only version {SPLIT_VERSION} saves have"
        )
    part = pack.parts[part_index]
    raw_offset = raw.get("offset")
    if type(raw_offset) is not int or raw_offset < 0 or raw_offset % PACK_ALIGN:
        raise fail(
            f"entry {key!r} has offset {raw_offset!r}, expected a non-negative multiple of "
            f"{PACK_ALIGN}"
        )
    end = raw_offset + nbytes
    if end > part.size:
        raise fail(
            f"entry {key!r}: bytes {raw_offset}..{end} lie outside data file {part.path!r} of "
            f"{part.size} bytes (truncated, or not from this save)",
            LeafSizeError,
        )
    if nbytes:
        part.spans.append((raw_offset, end, key))
    return part.path, raw_offset


def check_spans(pack: Pack, meta_path: str) -> None:
    """No two leaves of the save share a byte of a data file."""
    for part in pack.parts:
        spans = sorted(part.spans)
        for (_, end, key), (start, _, other) in itertools.pairwise(spans):
            if start < end:
                raise MemmapFormatError(
                    f"{meta_path!r}: entries {key!r} and {other!r} overlap in data file "
                    f"{part.path!r} (a tampered or corrupt save)"
                )


#: A leaf of a packed save to map: its data file, dtype, shape and size in bytes.
Leaf = tuple[str, torch.dtype, tuple[int, ...], int]


def map_parts(
    parts: list[tuple[str, int]], leaves: list[Leaf], offsets: list[int], writable: bool
) -> list[MemoryMappedTensor]:
    """Each leaf (at its offset in its data file) as a view of one mapping of that file.

    `parts`: the data files with their sizes; every leaf's file is one of them.
    Empty leaves map nothing (a tensor of their own, marked as of their file).
    """
    if len(parts) == 1:
        groups: dict[str, list[int]] = {parts[0][0]: list(range(len(leaves)))}
    else:
        groups = {path: [] for path, _ in parts}
        for i, leaf in enumerate(leaves):
            groups[leaf[0]].append(i)
    out: list[Any] = [None] * len(leaves)
    for path, size in parts:
        rows = groups[path]
        mine = [leaves[i] for i in rows]
        places = [(offsets[i], dtype, shape) for i, (_, dtype, shape, n) in zip(rows, mine) if n]
        views = iter(views_at(map_storage(path, writable, size), places) if places else ())
        tensors = [
            next(views) if n else torch.empty(shape, dtype=dtype) for _, dtype, shape, n in mine
        ]
        shapes = [shape for _, _, shape, _ in mine]
        for i, mapped in zip(rows, MemoryMappedTensor._adopt(tensors, shapes, path, writable)):
            out[i] = mapped
    return out


def packed_parent(folder: str) -> tuple[str, list[str]] | None:
    """For a path that does not exist: the nearest existing folder above it, and the parts below.

    None when `folder` exists, or when no folder above it does.
    """
    parts: list[str] = []
    here = folder
    while not os.path.lexists(here):
        parent, name = os.path.split(here)
        if parent == here or not name:
            return None
        parts.append(name)
        here = parent
    if not parts or not os.path.isdir(here):
        return None
    return here, parts[::-1]


def subtree(meta: FolderMeta, parts: list[str], asked: str) -> FolderMeta:
    """The sub-TensorDict of packed save `meta` that the folder names `parts` lead to."""
    node = meta
    for i, part in enumerate(parts):
        below = list(node.members)
        below += [e.folder for e in node.entries if type(e) is DirEntry and e.folder is not None]
        found = next((m for m in below if os.path.basename(m.path) == part), None)
        if found is None:
            raise IncompleteSaveError(
                f"{asked!r} is not a folder, and the packed save in {meta.path!r} has no "
                f"sub-TensorDict {'/'.join(parts[: i + 1])!r}: nothing was saved there"
            )
        node = found
    return node
