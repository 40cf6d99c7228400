"""Loading a save from an archive: the folder loader's checks, run on the zip's entries.

The archive's directory is read and checked first (`_zip.read_index`), then
its metadata goes through the same parser as a folder's (`_meta.parse_folder`
with `ArchiveFiles`), so names, dtypes, shapes against entry sizes and
tensorclass names are validated exactly as on disk, and errors name the
archive and the entry (`'/data/run.tdz/nested/meta.json'`). Every metadata,
pickle and shared-value entry has its CRC-32 checked when read.

Leaves stored without compression at an offset their dtype allows are views
of one mapping of the whole archive: read-only (writes raise
`ReadOnlyMemmapError`) unless `mode="r+"`, where writes reach the archive
(its checksums are then stale until `refresh_archive_checksums`). Other
leaves (compressed, or not aligned) are read into memory, read-only.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import torch

from td_memmap._build import Builder, check_cls
from td_memmap._errors import IncompleteSaveError, ReadOnlyMemmapError
from td_memmap._format import META_NAME
from td_memmap._io import read_json_bytes, strides_of
from td_memmap._meta import parse_folder
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import Node
from td_memmap._zip import ZipEntry, ZipIndex, read_index

__all__ = ["ArchiveFiles", "archive_index", "load_archive_tree", "META_LIMIT"]

#: Largest metadata entry read (as for folders).
META_LIMIT = 256 << 20
_FILE = os.stat_result((stat.S_IFREG | 0o444, 0, 0, 1, 0, 0, 0, 0, 0, 0))
_DIR = os.stat_result((stat.S_IFDIR | 0o555, 0, 0, 1, 0, 0, 0, 0, 0, 0))


class ArchiveFiles:
    """The files of an archive as `parse_folder` reads them: paths under the archive's path."""

    def __init__(self, index: ZipIndex) -> None:
        self.index = index
        self.root = index.path

    def name(self, path: str) -> str | None:
        """The entry name of `path` ("" for the archive itself), None if not under it."""
        if path == self.root:
            return ""
        if not path.startswith(self.root + os.sep):
            return None
        return path[len(self.root) + 1 :].replace(os.sep, "/")

    def lstat(self, path: str) -> os.stat_result:
        name = self.name(path)
        if name is not None and name in self.index.dirs:
            return _DIR
        entry = self.index.entries.get(name) if name is not None else None
        if entry is None:
            raise FileNotFoundError(path)
        values = list(_FILE)
        values[stat.ST_SIZE] = entry.size
        return os.stat_result(values)

    def is_dir(self, path: str) -> bool:
        name = self.name(path)
        return name is not None and name in self.index.dirs

    def entry(self, path: str) -> ZipEntry:
        name = self.name(path)
        entry = self.index.entries.get(name) if name is not None else None
        if entry is None:
            raise FileNotFoundError(path)
        return entry

    def read(self, path: str, limit: int | None = None) -> bytes:
        """The checked content of the entry at `path`."""
        return self.index.read(self.entry(path).name, limit=limit)

    def read_json(self, path: str) -> Any:
        name = self.name(path)
        if name is None or name not in self.index.entries:
            raise IncompleteSaveError(
                f"{path!r} not found: archive {self.root!r} holds no save there (no "
                f"{META_NAME!r} entry)"
            )
        return read_json_bytes(path, self.read(path, META_LIMIT))


def archive_index(archive: str | os.PathLike[str]) -> ZipIndex:
    """The checked directory of `archive` (see `read_index`), which must hold a save."""
    index = read_index(archive)
    if META_NAME not in index.entries:
        raise IncompleteSaveError(
            f"{index.path!r} is not a memory-mapped TensorDict archive: it holds no top-level "
            f"{META_NAME!r} entry"
        )
    return index


def _whole(index: ZipIndex, writable: bool) -> torch.UntypedStorage:
    if writable and not os.access(index.path, os.W_OK):
        raise PermissionError(f"cannot open {index.path!r} with mode='r+': it is not writable")
    return torch.UntypedStorage.from_file(index.path, writable, index.size)  # type: ignore[return-value]


def _map_leaves(
    files: ArchiveFiles,
    leaves: list[tuple[str, Any, tuple[int, ...], int]],
    offsets: list[int],
    mode: str | None,
) -> list[MemoryMappedTensor]:
    """The leaves as tensors over the archive's bytes: views where a member is stored
    uncompressed and aligned, else read into memory (read-only).

    A leaf of a packed save (`offset >= 0`) lies at that offset inside its data file's
    member; other leaves are whole members.
    """
    writable = mode == "r+"
    storage: torch.UntypedStorage | None = None
    read: dict[str, bytes] = {}  # members read into memory, once each
    out = []
    for (path, dtype, shape, nbytes), within in zip(leaves, offsets):
        entry = files.entry(path)
        start = entry.offset + max(within, 0)
        if not nbytes:
            out.append(
                MemoryMappedTensor._wrap(
                    torch.empty(shape, dtype=dtype, device="cpu"), None, writable
                )
            )
            continue
        if entry.method == 0 and start % dtype.itemsize == 0:
            if storage is None:
                storage = _whole(files.index, writable)
            view = torch.empty(0, dtype=dtype, device="cpu").set_(
                storage, start // dtype.itemsize, shape, strides_of(shape)
            )
            out.append(MemoryMappedTensor._wrap(view, files.root, writable, shape))
            continue
        if writable:
            why = "compressed" if entry.method else "not aligned for its dtype"
            raise ReadOnlyMemmapError(
                f"cannot load {files.index.where(entry.name)} with mode='r+': it is {why}, so it "
                "is read into memory, where writes could not reach the archive. Load with "
                "mode=None or 'r', or pack the archive again without compression"
            )
        if within < 0:
            data = bytearray(files.read(path))
        else:
            if path not in read:
                read[path] = files.read(path)
            data = bytearray(read[path][within : within + nbytes])
        tensor = torch.frombuffer(data, dtype=dtype).view(shape)
        out.append(MemoryMappedTensor._wrap(tensor, None, False, shape))
    return out


def load_archive_tree(
    archive: str | os.PathLike[str],
    *,
    mode: str | None = None,
    allow_pickle: bool = False,
    cls: type | None = None,
    raw_classes: bool = False,
    skip_pickles: bool = False,
) -> Node:
    """Load the save in the archive `archive` as a tree.

    Args:
        mode: `"r+"`: leaves are shared views of the archive (writes reach
            it); None or `"r"`: read-only leaves.
        allow_pickle: unpickle values saved with pickle (trusted data only).
        cls: as for `load_tree`.
        raw_classes: keep tensorclass folders by name, without their classes.
        skip_pickles: give pickled values as None, never unpickled.
    """
    index = archive_index(archive)
    files = ArchiveFiles(index)
    meta = parse_folder(index.path, files=files)
    check_cls(cls, meta)
    builder = Builder(
        cls=cls,
        writable=False,
        allow_pickle=allow_pickle,
        read=files.read,
        raw_classes=raw_classes,
        skip_pickles=skip_pickles,
    )
    root = builder.build(meta, cls)
    mapped = _map_leaves(files, builder.leaves, builder.offsets, mode)
    builder.place(mapped)
    _forget_paths(root)
    root.path = index.path
    return root


def _forget_paths(node: Node) -> None:
    """Sub-folders of an archive are not folders: the loaded TensorDicts record no path."""
    node.path = None
    for value in node.entries.values():
        if type(value) is Node:
            _forget_paths(value)
