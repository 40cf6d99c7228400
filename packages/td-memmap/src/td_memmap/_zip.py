"""The zip container of an archive: reading its directory safely, writing aligned entries.

An archive is a plain zip file. Reading trusts nothing in it: every entry name
must be a relative path of safe components (no `..`, no absolute or drive
names, no backslashes), entries may not be links, encrypted, duplicated or
overlap one another, and each local header must agree with the central
directory. Payloads are located once, so tensor entries stored without
compression can be memory-mapped in place.

Writing stores tensor payloads uncompressed by default and pads each local
header with an extra field (id `0x6474`, "td") so the payload starts at a
multiple of `ALIGN` bytes: any dtype can then be viewed straight from a
mapping of the whole file.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import struct
import time
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

from td_memmap._errors import IncompleteSaveError, MemmapFormatError, UnsafePathError
from td_memmap._format import check_component

__all__ = [
    "ALIGN",
    "ZipEntry",
    "ZipIndex",
    "read_index",
    "compression_method",
    "ZipWriter",
    "crc_of",
]

#: Alignment of stored payloads: a multiple of every itemsize, and of a cache line.
ALIGN = 64
_PAD_ID = 0x6474
_LOCAL = struct.Struct("<4s5H3I2H")  # signature ... name length, extra length
_LOCAL_SIG = b"PK\x03\x04"
_ZIP64_EXTRA = 20  # what zipfile adds to a local header written with force_zip64=True
_CHUNK = 16 << 20
_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}
_NAMES = {"stored": zipfile.ZIP_STORED, "deflate": zipfile.ZIP_DEFLATED}
_NAMES.update({"deflated": zipfile.ZIP_DEFLATED, "bzip2": zipfile.ZIP_BZIP2})
_NAMES["lzma"] = zipfile.ZIP_LZMA
_pread = getattr(os, "pread", None)  # not on Windows: buffered reads there
_O_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes of `fd` from `offset`, fewer only at the end of the file."""
    assert _pread is not None
    data = _pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]  # a short read (the kernel caps one call near 2 GB): the rest
    done = len(data)
    while done < size:
        more = _pread(fd, size - done, offset + done)
        if not more:
            break
        parts.append(more)
        done += len(more)
    return b"".join(parts)


def compression_method(compression: str | int | None) -> int:
    """The zipfile constant for `compression` (a name, a constant, or None for stored)."""
    if compression is None:
        return zipfile.ZIP_STORED
    if isinstance(compression, bool) or not isinstance(compression, (str, int)):
        raise ValueError(f"compression must be a name or a zipfile constant, got {compression!r}")
    if isinstance(compression, int):
        if compression not in _METHODS:
            raise ValueError(
                f"unknown compression {compression!r}: expected one of {sorted(_METHODS)} "
                f"(zipfile constants) or {sorted(_NAMES)}"
            )
        return compression
    method = _NAMES.get(compression.lower())
    if method is None:
        raise ValueError(
            f"unknown compression {compression!r}: expected one of {sorted(_NAMES)} or a "
            "zipfile constant"
        )
    return method


@dataclass(frozen=True, slots=True)
class ZipEntry:
    """One file of an archive: where its payload is, its sizes, method and CRC-32."""

    name: str
    header: int  # offset of the local header
    offset: int  # offset of the payload
    size: int  # uncompressed
    stored_size: int  # in the file
    method: int
    crc: int
    descriptor: bool  # the CRC is (also) in a data descriptor after the payload


@dataclass
class ZipIndex:
    """The checked directory of an archive: its files, and the folders they imply."""

    path: str
    size: int
    central: int  # offset of the central directory
    entries: dict[str, ZipEntry] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {""})

    def where(self, name: str) -> str:
        """How errors name entry `name` of this archive."""
        return f"archive {self.path!r}, entry {name!r}"

    def read(self, name: str, *, limit: int | None = None) -> bytes:
        """The content of entry `name`, its CRC-32 checked.

        Raises:
            MemmapFormatError: the CRC-32 does not match, or the entry is
                larger than `limit` bytes.
        """
        entry = self.entries[name]
        if limit is not None and entry.size > limit:
            raise MemmapFormatError(
                f"{self.where(name)}: {entry.size} bytes, more than the {limit} allowed"
            )
        if entry.method == zipfile.ZIP_STORED and _pread is not None:
            # one system call for the metadata entries a load reads by the hundred
            fd = os.open(self.path, _O_READ)
            try:
                data = _pread_all(fd, entry.size, entry.offset)
            finally:
                os.close(fd)
            self._check_content(entry, len(data), zlib.crc32(data))
            return data
        with open(self.path, "rb") as f:
            data = b"".join(self.chunks(f, entry))
        return data

    def chunks(self, f: IO[bytes], entry: ZipEntry) -> Iterable[bytes]:
        """The content of `entry` in pieces, read from `f` (this archive); the CRC is checked at the end."""
        if entry.method == zipfile.ZIP_STORED:
            f.seek(entry.offset)
            pieces: Iterable[bytes] = _stored(f, entry.size)
        else:
            pieces = self._inflated(entry)
        crc = produced = 0
        for piece in pieces:
            produced += len(piece)
            if produced > entry.size:
                break
            crc = zlib.crc32(piece, crc)
            yield piece
        self._check_content(entry, produced, crc)

    def _check_content(self, entry: ZipEntry, produced: int, crc: int) -> None:
        """The bytes read for `entry` (`produced` of them, with CRC-32 `crc`) are its own."""
        if produced != entry.size:
            raise MemmapFormatError(
                f"{self.where(entry.name)}: holds {'more' if produced > entry.size else 'fewer'} "
                f"bytes than its recorded {entry.size} (the archive is truncated or damaged)"
            )
        if crc != entry.crc:
            raise MemmapFormatError(
                f"{self.where(entry.name)}: bad CRC-32 ({crc:08x}, recorded {entry.crc:08x}): "
                "the archive was modified or damaged (after writes through mode='r+', run "
                "refresh_archive_checksums)"
            )

    def _inflated(self, entry: ZipEntry) -> Iterable[bytes]:
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(entry.name) as src:
                while piece := src.read(_CHUNK):
                    yield piece
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as e:
            raise MemmapFormatError(
                f"{self.where(entry.name)}: bad or damaged compressed data ({e})"
            ) from None


def _stored(f: IO[bytes], size: int) -> Iterable[bytes]:
    while size:
        piece = f.read(min(size, _CHUNK))
        if not piece:
            return
        size -= len(piece)
        yield piece


def crc_of(f: IO[bytes], offset: int, size: int) -> int:
    """The CRC-32 of `size` bytes of `f` from `offset`."""
    f.seek(offset)
    crc = 0
    while size:
        chunk = f.read(min(size, _CHUNK))
        if not chunk:
            raise EOFError
        crc = zlib.crc32(chunk, crc)
        size -= len(chunk)
    return crc


def _check_name(index: ZipIndex, name: str, safe: set[str]) -> None:
    """Check that each component of entry `name` is a plain name.

    `safe`: components already checked (an archive repeats them: `layers`, `0`, ...).
    """
    parts = name.split("/")
    for part in parts:
        if part in safe:
            continue
        safe.add(part)
        why = check_component(part)
        if why is not None:
            raise UnsafePathError(
                f"{index.where(name)}: {part!r} is not a plain name ({why}); archives are "
                "never read or extracted outside their folder"
            )


def _same_name(raw: bytes, name: str, utf8: int) -> bool:
    """Whether a local header's name bytes `raw` are those of the central directory's `name`.

    `zipfile` decoded `name` from the central directory's bytes (UTF-8 if the
    `utf8` flag is set, else cp437, both strictly), so encoding it back gives
    those bytes exactly.
    """
    try:
        return raw == name.encode("utf-8" if utf8 else "cp437")
    except UnicodeEncodeError:
        return False


def _add_folders(dirs: set[str], folder: str) -> None:
    """Add `folder` (a `/`-separated path) and the folders above it to `dirs`.

    A folder in `dirs` always comes with those above it (`""` is always there),
    so the walk up stops at the first one already there.
    """
    while folder not in dirs:
        dirs.add(folder)
        folder = folder.rpartition("/")[0]


def _local_header(f: IO[bytes], info: zipfile.ZipInfo) -> tuple[bytes, bytes]:
    """The fixed part of `info`'s local header, and the name bytes after it (as many as
    the central directory's name has: the caller compares the two)."""
    want = _LOCAL.size + len(info.orig_filename.encode("utf-8", "surrogatepass"))
    if _pread is not None:  # one system call, not a seek and two buffered reads
        raw = _pread_all(f.fileno(), want, info.header_offset)
    else:
        f.seek(info.header_offset)
        raw = f.read(want)
    head = raw[: _LOCAL.size]
    if len(head) == _LOCAL.size and head[:4] == _LOCAL_SIG:
        name_len = _LOCAL.unpack(head)[9]
        if name_len > len(raw) - _LOCAL.size:  # a longer name than the central one: read it
            if _pread is not None:
                raw = _pread_all(f.fileno(), _LOCAL.size + name_len, info.header_offset)
            else:
                f.seek(info.header_offset)
                raw = f.read(_LOCAL.size + name_len)
    return head, raw[_LOCAL.size :]


def read_index(path: str | os.PathLike[str]) -> ZipIndex:
    """Read and check the directory of the archive `path`.

    Raises:
        IncompleteSaveError: (a `ValueError`, `FileNotFoundError`) no such file.
        MemmapFormatError: not a zip file, or a malformed or tampered one
            (overlapping entries, headers that disagree, unknown methods),
            naming the archive and the entry.
        UnsafePathError: an entry name that is not a relative path of plain
            names, or an entry that is a link.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise IncompleteSaveError(f"{path!r} is not an archive: there is no such file")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            central = zf.start_dir
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        raise MemmapFormatError(
            f"{path!r} is a file but not a memory-mapped tensordict archive (not a readable zip "
            f"archive: {e})"
        ) from None
    size = os.stat(path).st_size
    index = ZipIndex(path, size, central)
    spans: list[tuple[int, int, str]] = []
    safe: set[str] = set()
    with open(path, "rb") as f:
        for info in infos:
            name = info.orig_filename
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode) or (
                mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR)
            ):
                raise UnsafePathError(f"{index.where(name)}: is a link or a special file")
            if info.flag_bits & 0x1:
                raise MemmapFormatError(f"{index.where(name)}: is encrypted")
            if name.endswith("/"):
                _check_name(index, name[:-1], safe)
                if info.file_size:
                    raise MemmapFormatError(f"{index.where(name)}: a folder entry with data")
                _add_folders(index.dirs, name[:-1])
                continue
            _check_name(index, name, safe)
            if name in index.entries:
                raise MemmapFormatError(f"{index.where(name)}: appears twice")
            if info.compress_type not in _METHODS:
                raise MemmapFormatError(
                    f"{index.where(name)}: unsupported compression method {info.compress_type}"
                )
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise MemmapFormatError(
                    f"{index.where(name)}: stored with {info.compress_size} bytes but recorded "
                    f"as {info.file_size}"
                )
            head, raw_name = _local_header(f, info)
            if len(head) != _LOCAL.size or head[:4] != _LOCAL_SIG:
                raise MemmapFormatError(f"{index.where(name)}: no local header where recorded")
            fields = _LOCAL.unpack(head)
            method, name_len, extra_len = fields[3], fields[9], fields[10]
            if len(raw_name) != name_len:
                raw_name = raw_name[:name_len]
            if not _same_name(raw_name, name, info.flag_bits & 0x800) or (
                method != info.compress_type
            ):
                raise MemmapFormatError(
                    f"{index.where(name)}: the local header disagrees with the central directory"
                )
            offset = info.header_offset + _LOCAL.size + name_len + extra_len
            end = offset + info.compress_size
            if end > central:
                raise MemmapFormatError(
                    f"{index.where(name)}: its data runs past the end of the entries"
                )
            spans.append((info.header_offset, end, name))
            index.entries[name] = ZipEntry(
                name,
                info.header_offset,
                offset,
                info.file_size,
                info.compress_size,
                info.compress_type,
                info.CRC,
                bool(info.flag_bits & 0x8),
            )
            _add_folders(index.dirs, name.rpartition("/")[0])
    spans.sort()
    for (_, end, before), (start, _, name) in itertools.pairwise(spans):
        if start < end:
            raise MemmapFormatError(
                f"{index.where(name)}: overlaps entry {before!r} (a tampered archive)"
            )
    clash = next((n for n in index.entries if n in index.dirs), None)
    if clash is not None:
        raise MemmapFormatError(f"{index.where(clash)}: is both a file and a folder")
    return index


def _padding(start: int, name: str) -> bytes:
    """An extra field that makes the payload of an entry whose header starts at `start` aligned."""
    payload = start + _LOCAL.size + len(name.encode("utf-8")) + 4 + _ZIP64_EXTRA
    pad = -payload % ALIGN
    return struct.pack("<HH", _PAD_ID, pad) + bytes(pad)


class ZipWriter:
    """Writes an archive entry by entry: metadata stored, data aligned or compressed."""

    def __init__(self, fileobj: IO[bytes], method: int, level: int | None) -> None:
        self.zf = zipfile.ZipFile(fileobj, "w", compression=method, compresslevel=level)
        self.method = method
        self.stamp = time.localtime()[:6]

    def folder(self, name: str) -> None:
        """A folder entry (`name` without the trailing `/`)."""
        info = zipfile.ZipInfo(name + "/", self.stamp)
        info.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10
        self.zf.writestr(info, b"", compress_type=zipfile.ZIP_STORED)

    def file(
        self, name: str, size: int, chunks: Iterable[bytes | memoryview], *, data: bool
    ) -> None:
        """An entry of `size` bytes; `data` entries get the archive's compression (aligned if none)."""
        method = self.method if data else zipfile.ZIP_STORED
        info = zipfile.ZipInfo(name, self.stamp)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        info.compress_type = method
        info.file_size = size
        if method != zipfile.ZIP_STORED:
            info._compresslevel = self.zf.compresslevel  # type: ignore[attr-defined]
        aligned = method == zipfile.ZIP_STORED and data
        if aligned:
            info.extra = _padding(self.zf.start_dir, name)
        with self.zf.open(info, "w", force_zip64=True) as out:
            if aligned and self.zf.fp.tell() % ALIGN:  # type: ignore[union-attr]
                raise RuntimeError(f"archive entry {name!r} could not be aligned")
            written = 0
            for chunk in chunks:
                out.write(chunk)
                written += len(chunk)
        if written != size:
            raise RuntimeError(f"archive entry {name!r}: wrote {written} bytes, expected {size}")

    def close(self) -> None:
        self.zf.close()

    def abandon(self) -> None:
        """Close after a failed write (the file is discarded): nothing is left open or raised."""
        with contextlib.suppress(Exception):
            self.zf.close()
