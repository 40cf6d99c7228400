"""Archives: a save packed into one zip file, loadable in place.

An archive's entries are the files of the saved folder (`meta.json` first in
each folder, then the leaves in entry order, then the sub-folders), each
under its path relative to the folder. Tensor payloads are stored
uncompressed and 64-byte aligned (see `_zip`), so `load_memmap` maps them
straight from the archive; `compression=` trades that for size.

Writing an archive is atomic: it is written under a temporary name beside
the target and renamed over it. Extracting one (`unpack_memmap`) checks every
name, CRC-32 and size, writes into a fresh folder beside the target, checks
that it loads, and only then moves it into place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import torch

from td_memmap._archive_load import archive_index, load_archive_tree
from td_memmap._build import raw_tree
from td_memmap._convert import tensor_leaves
from td_memmap._errors import (
    MemmapExistsError,
    MemmapFormatError,
    PickleNotAllowedError,
    UnsafePathError,
)
from td_memmap._format import META_NAME, TMP_PREFIX
from td_memmap._io import (
    clean_stale_tmp,
    fsync_dir,
    map_storage,
    remove_if_exists,
    reserve_ahead,
    tensor_bytes,
    view_at,
)
from td_memmap._meta import DirEntry, FolderMeta, NonTensorEntry, TensorEntry, parse_folder
from td_memmap._nested import nested_values
from td_memmap._options import SaveOptions
from td_memmap._save import save_tree
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import Node, NonTensorLeaf
from td_memmap._zip import ZipIndex, ZipWriter, compression_method, crc_of

__all__ = [
    "ARCHIVE_SUFFIX",
    "pack_memmap",
    "unpack_memmap",
    "is_memmap_archive",
    "refresh_archive_checksums",
    "save_archive",
]

#: A `prefix` with this suffix is saved as an archive unless `archive=False`.
ARCHIVE_SUFFIX = ".tdz"
_CHUNK = 16 << 20
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
#: How a folder is copied, one file per leaf, before it is packed or after it is unpacked.
_COPY_AS_FILES = SaveOptions(copy_existing=True, layout="files")


def is_memmap_archive(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a memory-mapped TensorDict archive.

    An archive is a zip file with a top-level `meta.json` entry, as written
    by `pack_memmap` or by `memmap`/`save` with a `".tdz"` prefix (or
    `archive=True`). A folder, a missing path or any other file gives False.
    Only the zip directory is read: `load_memmap` checks the rest.

    Args:
        path: the path to look at.

    Returns:
        True for an archive.

    Example:
        ```python
        import tempfile, torch
        from td_core import TensorDict
        from td_memmap import is_memmap_archive

        folder = tempfile.mkdtemp()
        TensorDict(a=torch.zeros(3)).memmap(folder + "/td.tdz")
        assert is_memmap_archive(folder + "/td.tdz")
        assert not is_memmap_archive(folder)
        ```
    """
    path = os.fspath(path)
    try:
        if not os.path.isfile(path) or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as zf:
            return any(info.orig_filename == META_NAME for info in zf.infolist())
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
        return False


# ------------------------------------------------------------------------------------- packing


def _tree_files(meta: FolderMeta, root: str, out: list[tuple[str, str | None, bool]]) -> None:
    """`(entry name, source path or None for a folder entry, is data)` of the save, in order."""
    if meta.pack is not None:  # a packed save: its one meta.json and its data files
        out.append((META_NAME, os.path.join(meta.path, META_NAME), False))
        out.extend((os.path.basename(part.path), part.path, True) for part in meta.pack.parts)
        return
    rel = os.path.relpath(meta.path, root).replace(os.sep, "/")
    prefix = "" if rel == "." else rel + "/"
    if prefix:
        out.append((prefix[:-1], None, False))
    own = os.path.join(meta.path, META_NAME)
    if os.path.isfile(own):  # a sub-folder's may be missing: the top's index has it
        out.append((prefix + META_NAME, own, False))
    subs = list(meta.members)
    for entry in meta.entries:
        if type(entry) is TensorEntry:
            out.append((prefix + os.path.basename(entry.path), entry.path, True))
        elif type(entry) is NonTensorEntry:
            for path in (entry.path, entry.shared):
                if path is not None:
                    out.append((prefix + os.path.basename(path), path, False))
        elif type(entry) is DirEntry and entry.folder is not None:
            subs.append(entry.folder)
    for sub in subs:
        _tree_files(sub, root, out)


def _file_chunks(path: str) -> Iterable[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _tensor_chunks(tensor: torch.Tensor) -> Iterable[memoryview]:
    view = tensor_bytes(tensor).data.cast("B")
    for i in range(0, len(view), _CHUNK):
        yield view[i : i + _CHUNK]


#: The tensors a staged file is filled from: `(offset in the file, tensor)`, one at offset 0
#: for a file per leaf, one per leaf of a packed data file.
Placed = list[tuple[int, torch.Tensor]]


def _placed_chunks(placed: Placed, size: int) -> Iterable[bytes | memoryview]:
    """The `size` bytes of a staged file: each tensor's bytes at its offset, zeros between."""
    at = 0
    for offset, tensor in sorted(placed, key=lambda item: item[0]):
        if offset > at:
            yield bytes(offset - at)  # the padding to a leaf's alignment
        yield from _tensor_chunks(tensor)
        at = offset + tensor.numel() * tensor.element_size()
    if size > at:
        yield bytes(size - at)


def _target(archive_path: str | os.PathLike[str], prefix: str | None = None) -> str:
    """Where the archive goes (a link is followed), after checking it is not in `prefix`."""
    target = os.path.realpath(os.fspath(archive_path))
    if os.path.isdir(target):
        raise ValueError(f"cannot write an archive at {target!r}: it is a folder")
    if prefix is not None:
        real = os.path.realpath(prefix)
        if os.path.commonpath([target, real]) == real:
            raise ValueError(
                f"the archive {target!r} must be outside the folder it packs, {real!r}"
            )
    return target


def _write(
    target: str,
    items: list[tuple[str, str | None, bool]],
    *,
    method: int,
    level: int | None,
    sources: dict[str, Placed] | None = None,
    durable: bool = False,
) -> None:
    """Write `items` (see `_tree_files`) to a temporary file, then rename it to `target`.

    `sources`: the tensors a staged file's bytes come from (the staging save
    writes no data, so its files are never read).

    `durable`: fsync the file before the rename, and the folder after.
    """
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            if method == zipfile.ZIP_STORED:  # the payloads' bytes, each with its headers
                reserve_ahead(fd, sum(_size(path) + _ENTRY for _, path, _ in items))
            writer = ZipWriter(f, method, level)
            try:
                for name, path, data in items:
                    if path is None:
                        writer.folder(name)
                        continue
                    size = _size(path)
                    source = None if sources is None else sources.get(path)
                    if sources is not None and data and source is None:
                        if size:  # never pack the zeros of a staged leaf
                            raise RuntimeError(
                                f"internal: no source tensor for the staged leaf {path!r}"
                            )
                        source = []  # an empty data file: a save of non-tensor entries only
                    chunks = (
                        _placed_chunks(source, size) if source is not None else _file_chunks(path)
                    )
                    writer.file(name, size, chunks, data=data)
            except BaseException:
                writer.abandon()
                raise
            writer.close()
            f.flush()
            os.ftruncate(fd, f.tell())  # what was reserved past the end
            if durable:
                os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, target)
        if durable:
            fsync_dir(folder)
    except BaseException:
        remove_if_exists(tmp)
        raise


#: Bytes an entry adds to its payload, at most: local header with its zip64 and padding
#: extra fields, central directory record, the name twice (up to 255 bytes a part).
_ENTRY = 4096


def _size(path: str | None) -> int:
    """The payload bytes of an item of `_tree_files` (0 for a folder): its staged file's size."""
    return 0 if path is None else os.path.getsize(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _pack(
    prefix: str,
    target: str,
    method: int,
    level: int | None,
    sources: dict[str, Placed] | None = None,
    durable: bool = False,
) -> None:
    root = os.path.abspath(prefix)
    meta = parse_folder(root)  # a complete, valid save, or an error naming what is wrong
    items: list[tuple[str, str | None, bool]] = []
    _tree_files(meta, root, items)
    _write(target, items, method=method, level=level, sources=sources, durable=durable)


def pack_memmap(
    prefix: str | os.PathLike[str],
    archive_path: str | os.PathLike[str],
    *,
    compression: str | int | None = None,
    compresslevel: int | None = None,
) -> Path:
    """Pack the save in the folder `prefix` into the single-file archive `archive_path`.

    The archive holds the files the save uses (its metadata, one entry per
    leaf, sub-folders as paths), each under its path in the folder: spare files
    of earlier saves and temporary files are left out. Tensor payloads are
    stored uncompressed and 64-byte aligned, so `load_memmap(archive_path)`
    maps them without a copy. The archive is written under a temporary name
    and renamed into place: an existing archive is replaced whole, or stays
    as it was if packing fails.

    Args:
        prefix: a folder written by `memmap`/`save` (validated as
            `load_memmap` would).
        archive_path: the archive to write, outside `prefix` (a link is
            followed). By convention it ends in `".tdz"`.
        compression: the compression of the tensor payloads: `"stored"` (the
            default, None), `"deflate"`, `"bzip2"`, `"lzma"` or a `zipfile`
            constant. Compressed leaves are decompressed into memory when
            loaded instead of being mapped.
        compresslevel: the level passed to `zipfile` (None: its default).

    Returns:
        The path of the archive.

    Raises:
        IncompleteSaveError: (a `ValueError` and `FileNotFoundError`) `prefix`
            holds no save.
        ValueError: `archive_path` is inside `prefix` or is a folder, or
            `compression` is unknown.

    Example:
        ```python
        import tempfile, torch
        from td_core import TensorDict
        from td_memmap import load_memmap, pack_memmap

        folder = tempfile.mkdtemp()
        td = TensorDict(a=torch.zeros(3), b={"c": torch.ones(3, 2)}, batch_size=[3])
        td.memmap(folder + "/saved")
        archive = pack_memmap(folder + "/saved", folder + "/saved.tdz")
        assert (load_memmap(archive) == td).all()
        ```
    """
    method = compression_method(compression)
    target = _target(archive_path, os.fspath(prefix))
    _pack(os.fspath(prefix), target, method, compresslevel)
    return Path(archive_path)


# ----------------------------------------------------------------------------------- unpacking


def _extract(index: ZipIndex, staging: str) -> None:
    """Write every entry of `index` under the fresh folder `staging`, checking each CRC-32."""
    for name in sorted(index.dirs - {""}, key=lambda n: n.count("/")):
        os.mkdir(os.path.join(staging, *name.split("/")))
    with open(index.path, "rb") as src:
        for name, entry in index.entries.items():
            path = os.path.join(staging, *name.split("/"))
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
            fd = os.open(path, flags, 0o644)
            with os.fdopen(fd, "wb") as out:
                for chunk in index.chunks(src, entry):
                    out.write(chunk)


def _move_into(staging: str, prefix: str) -> None:
    """Make the extracted save in `staging` the save in `prefix`, atomically."""
    with contextlib.suppress(FileNotFoundError, OSError):
        os.rmdir(prefix)  # an empty folder is replaced; a non-empty one stays
    if not os.path.lexists(prefix):
        os.rename(staging, prefix)
        return
    if os.path.islink(prefix) or not os.path.isdir(prefix):
        raise UnsafePathError(f"cannot unpack into {prefix!r}: it is a link or a file")
    # a non-empty folder: save over it, which switches atomically (see `_save`)
    try:
        tree = _raw_tree(staging)
    except PickleNotAllowedError:
        raise PickleNotAllowedError(
            f"the archive holds pickled values and {prefix!r} is not empty: unpacking over a "
            "folder saves the archive's content again, which would unpickle them. Unpack into "
            "a new or empty folder"
        ) from None
    save_tree(tree, prefix, _COPY_AS_FILES)


def _raw_tree(folder: str) -> Node:
    """The extracted save in `folder` as a tree, its leaves read-only views of its files."""
    meta = parse_folder(folder)
    packs = {} if meta.pack is None else {p.path: p.size for p in meta.pack.parts}
    mapped: dict[str, torch.UntypedStorage] = {}  # a packed save's data files, mapped once

    def leaf(path: str, dtype: torch.dtype, shape: tuple[int, ...], offset: int) -> Any:
        if offset < 0:
            return MemoryMappedTensor.from_filename(path, dtype, shape, mode="r")
        if path not in mapped:
            mapped[path] = map_storage(path, False, packs[path])
        return view_at(mapped[path], offset, dtype, shape)

    return raw_tree(meta, leaf)


def unpack_memmap(archive_path: str | os.PathLike[str], prefix: str | os.PathLike[str]) -> Path:
    """Extract the archive `archive_path` into the folder `prefix`.

    The inverse of `pack_memmap`: `load_memmap(prefix)` then loads what
    `load_memmap(archive_path)` loads. Nothing is written outside `prefix`:
    entry names must be relative paths of plain names (no `..`, absolute
    or drive names, backslashes), links are refused, and every entry's CRC-32
    and size are checked, as is the extracted save's metadata, before
    `prefix` changes. The archive is extracted into a new folder beside
    `prefix`, which then becomes `prefix` (a missing or empty folder) or is
    saved over it (a folder holding an earlier save: the switch is atomic,
    as for any save). Nothing is unpickled.

    Args:
        archive_path: an archive written by `pack_memmap` or by
            `memmap`/`save` with a `".tdz"` prefix.
        prefix: the folder to extract into (created if needed).

    Returns:
        The path of the folder.

    Raises:
        MemmapFormatError: (a `ValueError`) not an archive, or a damaged or
            tampered one (bad CRC-32, sizes that disagree with the metadata,
            overlapping entries), naming the archive and the entry.
        UnsafePathError: (a `ValueError`) an entry that would land outside
            `prefix`, or a link.

    Example:
        ```python
        import os, tempfile, torch
        from td_core import TensorDict
        from td_memmap import unpack_memmap

        folder = tempfile.mkdtemp()
        TensorDict(a=torch.zeros(3)).memmap(folder + "/td.tdz")
        out = unpack_memmap(folder + "/td.tdz", folder + "/td")
        assert sorted(os.listdir(out)) == ["a.memmap", "meta.json"]
        ```
    """
    index = archive_index(archive_path)
    target = os.path.abspath(os.fspath(prefix))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=parent)
    try:
        _extract(index, staging)
        try:
            parse_folder(staging)
        except MemmapFormatError as e:
            message = str(e).replace(staging, index.path)
            raise type(e)(f"archive {index.path!r} does not hold a valid save: {message}") from None
        _move_into(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Path(prefix)


# ---------------------------------------------------------------------------------- checksums


def _patch_crc(f: IO[bytes], index: ZipIndex, crcs: dict[str, int]) -> None:
    """Write the CRC-32s `crcs` (entry -> value) into the local headers and the central directory."""
    for name, crc in crcs.items():
        entry = index.entries[name]
        f.seek(entry.header + 14)
        f.write(struct.pack("<I", crc))
        if entry.descriptor:  # also after the payload, with or without its signature
            f.seek(entry.offset + entry.stored_size)
            at = entry.offset + entry.stored_size + (4 if f.read(4) == b"PK\x07\x08" else 0)
            f.seek(at)
            f.write(struct.pack("<I", crc))
    position = index.central
    f.seek(position)
    while True:
        head = f.read(46)
        if len(head) < 46 or head[:4] != b"PK\x01\x02":
            break
        flags = struct.unpack_from("<H", head, 8)[0]
        name_len, extra_len, comment_len = struct.unpack_from("<3H", head, 28)
        raw = f.read(name_len)
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        if name in crcs:
            f.seek(position + 16)
            f.write(struct.pack("<I", crcs[name]))
        position += 46 + name_len + extra_len + comment_len
        f.seek(position)


def refresh_archive_checksums(archive_path: str | os.PathLike[str]) -> Path:
    """Recompute the CRC-32 of the archive's uncompressed entries after writes into it.

    Writes through `load_memmap(archive, mode="r+")` (or the result of
    `memmap`/`memmap_like` into an archive) change entries in place without
    updating the CRC-32 the zip format records for each: `unpack_memmap`,
    `unzip` and `zipfile` then refuse those entries as damaged. Call this once
    the writes are done, with no other process writing. `load_memmap` does not
    check the CRC-32 of mapped leaves, so loading needs no refresh. The
    archive is changed in place; only checksums that differ are written.

    Args:
        archive_path: the archive.

    Returns:
        The path of the archive.

    Raises:
        MemmapFormatError: (a `ValueError`) not a readable archive.

    Example:
        ```python
        import tempfile, zipfile, torch
        from td_core import TensorDict
        from td_memmap import load_memmap, refresh_archive_checksums

        archive = tempfile.mkdtemp() + "/td.tdz"
        TensorDict(a=torch.zeros(3)).memmap(archive)
        load_memmap(archive, mode="r+")["a"].add_(1)
        with zipfile.ZipFile(archive) as zf:
            assert zf.testzip() == "a.memmap"  # a stale checksum
        refresh_archive_checksums(archive)
        with zipfile.ZipFile(archive) as zf:
            assert zf.testzip() is None
        ```
    """
    index = archive_index(archive_path)
    with open(index.path, "r+b") as f:
        crcs = {}
        for name, entry in index.entries.items():
            if entry.method != zipfile.ZIP_STORED:
                continue  # compressed entries are never written in place
            try:
                crc = crc_of(f, entry.offset, entry.size)
            except EOFError:
                raise MemmapFormatError(f"{index.where(name)}: the archive is truncated") from None
            if crc != entry.crc:
                crcs[name] = crc
        if crcs:
            _patch_crc(f, index, crcs)
            f.flush()
            os.fsync(f.fileno())
    return Path(archive_path)


# ------------------------------------------------------------------------ saving TensorDicts


def save_archive(tree: Node, archive_path: str | os.PathLike[str], options: SaveOptions) -> Node:
    """Write `tree` as an archive; the archive loaded again (leaves writable if stored).

    The folder layout is planned by a sparse save into a temporary folder
    beside the archive (metadata and empty leaf files, no data written), then
    each tensor's bytes are streamed from `tree` into the archive (`options.like`:
    the zeros of the sparse files). Of `options`, `like`, `compression`,
    `existsok`, `allow_pickle` and `durable` apply.
    """
    method = compression_method(options.compression)
    target = _target(archive_path)
    if not options.existsok and os.path.lexists(target):
        raise MemmapExistsError(
            f"{target!r} already exists: pass existsok=True to replace the archive"
        )
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    clean_stale_tmp(parent)  # what saves killed before us left beside their archive
    staging = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=parent)
    try:
        # `layout` None: what a new folder gets (packed unless the tree needs files)
        staging_options = SaveOptions(
            like=True, allow_pickle=options.allow_pickle, layout=options.layout
        )
        staged = save_tree(tree, staging, staging_options)
        sources: dict[str, Placed] | None = None
        if not options.like:
            # the staged files' paths, spelled as the pack spells them (both start from
            # the absolute path of `staging`, itself in a folder without links)
            sources = {}
            for source, mapped in zip(tensor_leaves(tree), tensor_leaves(staged)):
                if isinstance(mapped, MemoryMappedTensor) and mapped._mm_file is not None:
                    if source.is_nested:  # its file holds its components one after another
                        data, at = nested_values(source), 0
                    else:  # where it lies in its file (a packed data file holds them all)
                        data, at = source, int(mapped.storage_offset()) * mapped.element_size()
                    sources.setdefault(mapped._mm_file, []).append((at, data))
        _pack(staging, target, method, None, sources, options.durable)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    mode = "r+" if method == zipfile.ZIP_STORED else None
    out = load_archive_tree(target, mode=mode, raw_classes=True, skip_pickles=True)
    _restore(tree, out)
    return out


def _restore(source: Node, loaded: Node) -> None:
    """Give the loaded tree the classes and non-tensor values of the tree it was saved from."""
    loaded.cls = source.cls
    for key, value in source.entries.items():
        other = loaded.entries.get(key)
        if type(value) is Node and type(other) is Node:
            _restore(value, other)
        elif type(value) is NonTensorLeaf and type(other) is NonTensorLeaf:
            loaded.entries[key] = value
