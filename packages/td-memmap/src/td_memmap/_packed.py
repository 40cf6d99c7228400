"""Reading a packed save (format version 2): its data file, the leaves' places in it, its sub-trees.

A packed save is one folder holding one `meta.json` (the whole tree, every
sub-TensorDict inline) and one data file that holds every leaf at a
`PACK_ALIGN`-aligned offset. These checks run while `_meta` parses the
metadata, before anything is mapped: the data file has exactly the size the
metadata records, every leaf lies inside it, and no two leaves overlap.

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

from td_memmap._errors import IncompleteSaveError, LeafSizeError, MemmapFormatError
from td_memmap._format import PACK_ALIGN, PACK_SUFFIX
from td_memmap._meta_types import DirEntry, FolderMeta, Pack

__all__ = [
    "open_pack",
    "check_pack_name",
    "check_pack_size",
    "leaf_offset",
    "check_spans",
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


def open_pack(data: dict[str, Any], folder: str, inside: Callable[..., Any], fail: Fail) -> Pack:
    """The data file a packed save's top metadata `data` names, after checking its name and size.

    `inside(name, key, label)` checks that `folder/name` stays in the save and
    gives its path, `stat` and real path (see `_meta`).
    """
    name = data.get("data")
    why = check_pack_name(name)
    if why is not None:
        raise fail(f"'data' {name!r}: {why}")
    path, st, _ = inside(name, None, "data file")
    if not stat.S_ISREG(st.st_mode):
        raise fail(f"data file {path!r} is not a regular file")
    check_pack_size(data.get("data_size"), path, st.st_size, fail)
    return Pack(folder, path, st.st_size)


def leaf_offset(raw_offset: object, key: str, nbytes: int, pack: Pack, fail: Fail) -> int:
    """The checked offset of a leaf of `nbytes` bytes in `pack`; its span is recorded."""
    if type(raw_offset) is not int or raw_offset < 0 or raw_offset % PACK_ALIGN:
        raise fail(
            f"entry {key!r} has offset {raw_offset!r}, expected a non-negative multiple of "
            f"{PACK_ALIGN}"
        )
    end = raw_offset + nbytes
    if end > pack.size:
        raise fail(
            f"entry {key!r}: bytes {raw_offset}..{end} lie outside data file {pack.path!r} of "
            f"{pack.size} bytes (truncated, or not from this save)",
            LeafSizeError,
        )
    if nbytes:
        pack.spans.append((raw_offset, end, key))
    return raw_offset


def check_spans(pack: Pack, meta_path: str) -> None:
    """No two leaves of the save share a byte of the data file."""
    spans = sorted(pack.spans)
    for (_, end, key), (start, _, other) in itertools.pairwise(spans):
        if start < end:
            raise MemmapFormatError(
                f"{meta_path!r}: entries {key!r} and {other!r} overlap in data file "
                f"{pack.path!r} (a tampered or corrupt save)"
            )


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
