"""The previous save in a folder: which files it uses, and removing them once replaced.

A save never writes into a file the previous save uses (unless the leaf being
saved is memory-mapped from that very file), so that save stays loadable
until the new one commits. What "uses" means is what the loader would load:
the previous save is parsed with the loader's own validation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from td_memmap._errors import MemmapError
from td_memmap._format import LEAF_SUFFIX, META_NAME, PICKLE_SUFFIX, SHARED_SUFFIX
from td_memmap._io import remove_if_exists
from td_memmap._meta import DirEntry, FolderMeta, NonTensorEntry, TensorEntry, parse_folder
from td_memmap._packed import packed_parent

__all__ = [
    "Previous",
    "previous_save",
    "packed_root_of",
    "candidates",
    "first_free",
    "remove_replaced",
]

#: The infixes tried, in order, to name a file beside the one the previous save uses.
_INFIXES = ("", ".b", ".c", ".d")
_SUFFIXES = (SHARED_SUFFIX, LEAF_SUFFIX, PICKLE_SUFFIX)


@dataclass
class Previous:
    """What the save loadable from a folder uses: files per folder, folders, its generation."""

    files: dict[str, set[str]] = field(default_factory=dict)  # folder -> names in it
    folders: list[str] = field(default_factory=list)  # top folder first
    generation: int = 0
    packs: tuple[str, ...] = ()  # a packed save's data files

    def uses(self, path: str) -> bool:
        folder, name = os.path.split(path)
        return name in self.files.get(folder, ())


def _collect(meta: FolderMeta, out: Previous) -> None:
    out.folders.append(meta.path)
    names = out.files.setdefault(meta.path, set())
    for member in meta.members:
        _collect(member, out)
    for entry in meta.entries:
        if type(entry) is TensorEntry:
            names.add(os.path.basename(entry.path))
        elif type(entry) is NonTensorEntry:
            for path in (entry.path, entry.shared):
                if path is not None:
                    names.add(os.path.basename(path))
        elif type(entry) is DirEntry and entry.folder is not None:
            _collect(entry.folder, out)


def previous_save(root: str) -> Previous:
    """What the save in `root` uses; empty if nothing there loads."""
    out = Previous()
    if not os.path.isfile(os.path.join(root, META_NAME)):
        return out
    try:
        meta = parse_folder(root)
    except (MemmapError, OSError, ValueError):
        return out  # not loadable: nothing to keep intact
    out.generation = meta.generation
    if meta.pack is None:
        _collect(meta, out)
    else:  # its data files; its sub-TensorDicts' paths are no folders of the save
        out.packs = tuple(part.path for part in meta.pack.parts)
        out.files[root] = {os.path.basename(path) for path in out.packs}
        out.folders.append(root)
    return out


def packed_root_of(folder: str) -> str | None:
    """The packed save (format version 2 or 3) that `folder` is, or is a sub-TensorDict of; None if none.

    A path that does not exist is looked up in the nearest existing folder
    above it (see `_packed.packed_parent`).
    """
    found = packed_parent(folder)
    top = found[0] if found is not None else folder
    if not os.path.isfile(os.path.join(top, META_NAME)):
        return None
    try:
        meta = parse_folder(top)
    except (MemmapError, OSError, ValueError):
        return None
    return top if meta.pack is not None else None


def candidates(path: str, suffix: str) -> list[str]:
    """Names for the file `path` (ending in `suffix`): itself first, then `stem.b`+suffix, ..."""
    stem = path[: -len(suffix)]
    return [stem + infix + suffix for infix in _INFIXES]


def first_free(names: Iterable[str], taken: Callable[[str], bool]) -> str:
    """The first of `names` not `taken`."""
    for name in names:
        if not taken(name):
            return name
    raise MemmapError(f"no free file name among {list(names)}: all are in use")


def _siblings(name: str) -> list[str]:
    """`name` and the other names `candidates` gives for the same entry."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            for infix in _INFIXES[1:]:
                base = base.removesuffix(infix) if base.endswith(infix) else base
            return candidates(base + suffix, suffix)
    return [name]


def remove_replaced(previous: Previous, files: dict[str, set[str]]) -> None:
    """Remove what the previous save used and the new one (`files`) neither uses nor keeps.

    `files` holds, per folder, the names the new save uses and the spares it
    keeps. Only files and folders that the previous save named are touched; a
    folder that still holds something else stays.
    """
    for folder, names in previous.files.items():
        new_kept = files.get(folder)
        kept = set() if new_kept is None else new_kept
        for name in names - kept:
            for sibling in _siblings(name):  # the spares of an entry the new save lacks
                if sibling not in kept:
                    remove_if_exists(os.path.join(folder, sibling))
        if new_kept is None:  # a folder the new save does not have: it must not load alone
            remove_if_exists(os.path.join(folder, META_NAME))
    for folder in reversed(previous.folders):  # deepest first
        if folder not in files:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
