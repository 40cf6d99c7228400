"""The metadata file of one folder: building it for a save, validating it on load.

Validation is complete before any data is touched: the loader parses every
folder's metadata and checks every name, dtype, shape and file size first.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from typing import Any

import torch

from td_memmap._errors import (
    IncompleteSaveError,
    LeafSizeError,
    MemmapFormatError,
    MissingLeafError,
    UnsafePathError,
)
from td_memmap._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_NAME,
    check_component,
    dtype_from_name,
)
from td_memmap._io import read_json

__all__ = [
    "KINDS",
    "TensorEntry",
    "DirEntry",
    "NonTensorEntry",
    "FolderMeta",
    "header",
    "parse_folder",
]

#: Folder kinds this version reads. Later versions add e.g. "LazyStackedTensorDict"
#: (one sub-folder per stacked member plus "stack_dim") and "tensorclass" (a
#: "class" field naming an already-imported, registered class: never imported by name).
KINDS = frozenset({"TensorDict"})
#: Deepest nesting of sub-folders a loader follows (a hostile folder could recurse forever).
MAX_DEPTH = 200


@dataclass(slots=True)
class TensorEntry:
    key: str
    path: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int


@dataclass(slots=True)
class DirEntry:
    key: str
    folder: FolderMeta


@dataclass(slots=True)
class NonTensorEntry:
    key: str
    batch_size: tuple[int, ...]
    stacked: bool
    encoding: str  # "json" or "pickle"
    value: Any  # the JSON payload, for "json"
    path: str | None  # the pickle file, for "pickle"


@dataclass(slots=True)
class FolderMeta:
    path: str
    kind: str
    batch_size: tuple[int, ...]
    device: str | None
    entries: tuple[TensorEntry | DirEntry | NonTensorEntry, ...]


def header(kind: str, batch_size: tuple[int, ...], device: str | None) -> dict[str, Any]:
    """The fields every metadata file starts with."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": kind,
        "byteorder": sys.byteorder,
        "batch_size": list(batch_size),
        "device": device,
    }


class _Ctx:
    """What validating one folder needs to know: where it is and where the save's root is."""

    __slots__ = ("folder", "meta_path", "root_real", "folder_real")

    def __init__(self, folder: str, root_real: str, folder_real: str) -> None:
        self.folder = folder
        self.meta_path = folder + os.sep + META_NAME
        self.root_real = root_real
        self.folder_real = folder_real

    def fail(self, message: str, cls: type[Exception] = MemmapFormatError) -> Exception:
        return cls(f"{self.meta_path!r}: {message}")

    def inside(
        self, name: object, key: str | None, label: str
    ) -> tuple[str, os.stat_result, str | None]:
        """``folder/name`` after checking it stays in the save; its ``stat``; its real path if a link."""
        why = check_component(name)
        if why is not None:
            what = _what(key, label)
            raise self.fail(
                f"{what} {name!r} is not a plain name in the folder ({why})", UnsafePathError
            )
        path = self.folder + os.sep + name  # type: ignore[operator]
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            what = _what(key, label)
            raise self.fail(f"{what}: {path!r} is missing", MissingLeafError) from None
        if not stat.S_ISLNK(st.st_mode):
            return path, st, None
        what = _what(key, label)
        real = os.path.realpath(path)
        if os.path.commonpath([real, self.root_real]) != self.root_real:
            raise self.fail(
                f"{what} {path!r} is a link that leaves the saved folder", UnsafePathError
            )
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise self.fail(f"{what}: {path!r} is a dangling link", MissingLeafError) from None
        return path, st, real


def _what(key: str | None, label: str) -> str:
    return label if key is None else f"entry {key!r} {label}"


def _dims(value: object) -> tuple[int, ...] | None:
    if type(value) is not list:
        return None
    for d in value:
        if type(d) is not int or d < 0:
            return None
    return tuple(value)


def parse_folder(
    folder: str,
    *,
    root_real: str | None = None,
    folder_real: str | None = None,
    parent_batch: tuple[int, ...] = (),
    depth: int = 0,
) -> FolderMeta:
    """Read and validate ``folder``'s metadata and, recursively, its sub-folders'.

    Raises:
        IncompleteSaveError: no metadata file (not a save, or an interrupted one).
        MemmapFormatError: anything malformed, each naming the file at fault.
    """
    if folder_real is None:  # the folder asked for: anything goes, links included
        folder = os.path.abspath(folder)
        if not os.path.isdir(folder):
            raise IncompleteSaveError(f"{folder!r} is not a folder: nothing was saved there")
        folder_real = os.path.realpath(folder)
    ctx = _Ctx(folder, folder_real if root_real is None else root_real, folder_real)
    meta_path = ctx.meta_path
    if depth > MAX_DEPTH:
        raise ctx.fail(f"sub-folders are nested more than {MAX_DEPTH} deep", UnsafePathError)
    try:
        _, st, _ = ctx.inside(META_NAME, None, "metadata file")
    except MissingLeafError:
        raise IncompleteSaveError(
            f"{meta_path!r} not found: {folder!r} is not a td-memmap save, or its save was "
            "interrupted before it completed"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ctx.fail("the metadata is not a regular file")
    data = read_json(meta_path, st.st_size)
    if type(data) is not dict:
        raise ctx.fail(f"expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT_NAME:
        raise ctx.fail(f"'format' is {data.get('format')!r}, expected {FORMAT_NAME!r}")
    version = data.get("version")
    if type(version) is not int or version < 1:
        raise ctx.fail(f"'version' is {version!r}, expected a positive integer")
    if version > FORMAT_VERSION:
        raise ctx.fail(
            f"format version {version} is newer than this td-memmap reads ({FORMAT_VERSION}): upgrade td-memmap"
        )
    kind = data.get("kind")
    if kind not in KINDS:
        raise ctx.fail(f"'kind' {kind!r} is not one this version reads ({sorted(KINDS)})")
    if data.get("byteorder") != sys.byteorder:
        raise ctx.fail(
            f"'byteorder' is {data.get('byteorder')!r}, this machine is {sys.byteorder!r}"
        )
    batch_size = _dims(data.get("batch_size"))
    if batch_size is None:
        raise ctx.fail(
            f"'batch_size' {data.get('batch_size')!r} is not a list of non-negative ints"
        )
    if batch_size[: len(parent_batch)] != parent_batch:
        raise ctx.fail(
            f"batch_size {list(batch_size)} does not start with the parent's {list(parent_batch)}"
        )
    device = data.get("device")
    if device not in (None, "cpu"):  # memory-mapped data lives on the CPU
        raise ctx.fail(f"'device' is {device!r}, expected null or 'cpu'")
    raw_entries = data.get("entries")
    if type(raw_entries) is not list:
        raise ctx.fail("'entries' is missing or not a list")
    seen: set[str] = set()
    entries = []
    for raw in raw_entries:
        entry = _parse_entry(raw, ctx, batch_size, depth)
        if entry.key in seen:
            raise ctx.fail(f"key {entry.key!r} appears twice")
        seen.add(entry.key)
        entries.append(entry)
    return FolderMeta(folder, kind, batch_size, device, tuple(entries))


def _parse_entry(
    raw: object, ctx: _Ctx, batch_size: tuple[int, ...], depth: int
) -> TensorEntry | DirEntry | NonTensorEntry:
    if type(raw) is not dict:
        raise ctx.fail(f"an entry is a {type(raw).__name__}, expected an object")
    key, kind = raw.get("key"), raw.get("type")
    if type(key) is not str:
        raise ctx.fail(f"entry key {key!r} is not a string")
    if kind == "tensor":
        dtype = dtype_from_name(raw.get("dtype"))
        if dtype is None:
            raise ctx.fail(f"entry {key!r} has unknown dtype {raw.get('dtype')!r}")
        shape = _dims(raw.get("shape"))
        if shape is None:
            raise ctx.fail(
                f"entry {key!r} has shape {raw.get('shape')!r}, expected a list of non-negative ints"
            )
        if shape[: len(batch_size)] != batch_size:
            raise ctx.fail(
                f"entry {key!r} has shape {list(shape)}, which does not start with batch_size {list(batch_size)}"
            )
        path, st, _ = ctx.inside(raw.get("file"), key, "file")
        if not stat.S_ISREG(st.st_mode):
            raise ctx.fail(f"entry {key!r}: {path!r} is not a regular file")
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * dtype.itemsize
        if st.st_size != nbytes:
            raise ctx.fail(
                f"entry {key!r}: data file {path!r} has {st.st_size} bytes, but shape {list(shape)} of "
                f"{str(dtype).removeprefix('torch.')} needs {numel * dtype.itemsize} "
                "(truncated, or not from this save)",
                LeafSizeError,
            )
        return TensorEntry(key, path, dtype, shape, nbytes)
    if kind == "tensordict":
        name = raw.get("dir")
        path, st, real = ctx.inside(name, key, "folder")
        if not stat.S_ISDIR(st.st_mode):
            raise ctx.fail(f"entry {key!r}: {path!r} is not a folder")
        if real is None:
            real = ctx.folder_real + os.sep + name  # type: ignore[operator]
        elif (
            real == ctx.folder_real
            or os.path.commonpath([real, ctx.folder_real]) != ctx.folder_real
        ):
            raise ctx.fail(
                f"entry {key!r}: folder {path!r} is not strictly inside {ctx.folder_real!r}",
                UnsafePathError,
            )
        child = parse_folder(
            path,
            root_real=ctx.root_real,
            folder_real=real,
            parent_batch=batch_size,
            depth=depth + 1,
        )
        return DirEntry(key, child)
    if kind == "non_tensor":
        nt_batch = _dims(raw.get("batch_size"))
        if nt_batch is None or nt_batch[: len(batch_size)] != batch_size:
            raise ctx.fail(
                f"entry {key!r} has batch_size {raw.get('batch_size')!r}, expected a list starting with {list(batch_size)}"
            )
        stacked = raw.get("stacked", False)
        if type(stacked) is not bool:
            raise ctx.fail(f"entry {key!r} has 'stacked' {stacked!r}, expected a boolean")
        encoding = raw.get("encoding")
        if encoding == "json":
            if "value" not in raw:
                raise ctx.fail(f"entry {key!r} has no 'value'")
            return NonTensorEntry(key, nt_batch, stacked, "json", raw["value"], None)
        if encoding == "pickle":
            path, st, _ = ctx.inside(raw.get("file"), key, "file")
            if not stat.S_ISREG(st.st_mode):
                raise ctx.fail(f"entry {key!r}: {path!r} is not a regular file")
            return NonTensorEntry(key, nt_batch, stacked, "pickle", None, path)
        raise ctx.fail(f"entry {key!r} has unknown encoding {encoding!r}")
    raise ctx.fail(f"entry {key!r} has unknown type {kind!r}")
