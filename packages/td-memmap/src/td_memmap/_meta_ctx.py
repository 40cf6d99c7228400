"""The context of one folder while a save's metadata is parsed (see `_meta.parse_folder`).

It says where the folder is, where the save's root is and where the parsed
result goes, and it checks every path the metadata names (`inside`,
`subfolder`, `child`). The parser of folders saved by upstream tensordict
(`_upstream_format`) walks the same contexts.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from td_memmap._errors import MemmapFormatError, MissingLeafError, UnsafePathError
from td_memmap._files import Files
from td_memmap._format import META_NAME, check_component
from td_memmap._index import Index
from td_memmap._meta_types import DirEntry, FolderMeta, Pack

__all__ = ["FolderContext"]

_SEP = os.sep
_lstat = os.lstat
_S_ISDIR, _S_ISLNK = stat.S_ISDIR, stat.S_ISLNK


@dataclass(slots=True, eq=False)
class FolderContext:
    """One folder to parse: where it is, where the save's root is, and where its result goes."""

    folder: str
    real: str | None  # the folder's real path if known (None: found when needed)
    root: str  # the top folder loaded
    depth: int
    parent_batch: tuple[int, ...]
    exact_batch: bool  # a lazy stack's member: its batch size is given, not a prefix
    target: DirEntry | tuple[list[FolderMeta], int]  # the entry, or (members, index)
    rel: str = ""  # the path from the top folder, "/"-separated
    index: Index | None = None
    files: Files | None = None  # None: the OS's
    inline: Any = None  # a packed save's sub-folder: its metadata, from the parent's
    pack: Pack | None = None  # the packed save this folder belongs to
    meta_path: str = field(init=False)
    upstream: bool = field(
        init=False, default=False
    )  # saved by upstream tensordict (see `_upstream_format`)

    def __post_init__(self) -> None:
        self.meta_path = self.folder + os.sep + META_NAME

    # Real paths are only needed where a link is met (rare): resolving them for every
    # load cost a system call per component of the path (10% of opening 8 leaves).
    def root_real(self) -> str:
        return self.root if self.files is not None else os.path.realpath(self.root)

    def folder_real(self) -> str:
        if self.real is None:
            self.real = self.folder if self.files is not None else os.path.realpath(self.folder)
        return self.real

    def attach(self, meta: FolderMeta) -> None:
        """Put the parsed `meta` where the parent expects it."""
        if isinstance(self.target, DirEntry):
            self.target.folder = meta
        else:
            members, index = self.target
            members[index] = meta

    def fail(self, message: str, cls: type[Exception] = MemmapFormatError) -> Exception:
        if self.pack is not None and self.rel:  # inline in the packed save's one meta.json
            where = os.path.join(self.pack.root, META_NAME)
            return cls(f"{where!r} (sub-TensorDict {self.rel!r}): {message}")
        return cls(f"{self.meta_path!r}: {message}")

    def inside(
        self, name: object, key: str | None, label: str
    ) -> tuple[str, os.stat_result, str | None]:
        """`folder/name` after checking it stays in the save; its `stat`; its real path if a link."""
        why = _component(name) if type(name) is str else check_component(name)
        if why is not None:
            what = _what(key, label)
            raise self.fail(
                f"{what} {name!r} is not a plain name in the folder ({why})", UnsafePathError
            )
        path = self.folder + _SEP + name  # type: ignore[operator]
        try:
            st = _lstat(path) if self.files is None else self.files.lstat(path)
        except FileNotFoundError:
            what = _what(key, label)
            raise self.fail(f"{what}: {path!r} is missing", MissingLeafError) from None
        if not _S_ISLNK(st.st_mode):
            return path, st, None
        what = _what(key, label)
        real = os.path.realpath(path)
        root_real = self.root_real()
        if os.path.commonpath([real, root_real]) != root_real:
            raise self.fail(
                f"{what} {path!r} is a link that leaves the saved folder", UnsafePathError
            )
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise self.fail(f"{what}: {path!r} is a dangling link", MissingLeafError) from None
        return path, st, real

    def child(
        self,
        name: str,
        key: str,
        label: str,
        batch: tuple[int, ...],
        exact_batch: bool,
        target: DirEntry | tuple[list[FolderMeta], int],
        inline: Any = None,
    ) -> FolderContext:
        """The context of sub-folder `name`, after checking it (see `subfolder`).

        In a packed save (`inline`: the sub-folder's metadata) nothing is on
        disk: `name` is only checked to be a plain name.
        """
        if self.pack is not None:
            why = _component(name) if type(name) is str else check_component(name)
            if why is not None:
                what = _what(key, label)
                raise self.fail(f"{what} {name!r} is not a plain name ({why})", UnsafePathError)
            path, real = self.folder + _SEP + name, None
        else:
            path, real = self.subfolder(name, key, label)
        rel = name if not self.rel else self.rel + "/" + name
        child = FolderContext(
            path,
            real,
            self.root,
            self.depth + 1,
            batch,
            exact_batch,
            target,
            rel,
            self.index,
            self.files,
            inline,
            self.pack,
        )
        child.upstream = self.upstream  # what its metadata must be (see `_parse_one`)
        return child

    def subfolder(self, name: object, key: str, label: str) -> tuple[str, str | None]:
        """`folder/name` and its real path if it is a link, after checking it is a folder strictly inside this one."""
        path, st, real = self.inside(name, key, label)
        if not _S_ISDIR(st.st_mode):
            raise self.fail(f"entry {key!r}: {path!r} is not a folder")
        if real is None:
            return path, None
        folder_real = self.folder_real()
        if real == folder_real or os.path.commonpath([real, folder_real]) != folder_real:
            raise self.fail(
                f"entry {key!r}: folder {path!r} is not strictly inside {folder_real!r}",
                UnsafePathError,
            )
        return path, real


# the same few names ("weight.memmap", "meta.json", ...) come back in every folder
_component = functools.lru_cache(maxsize=4096)(check_component)


def _what(key: str | None, label: str) -> str:
    return label if key is None else f"entry {key!r} {label}"
