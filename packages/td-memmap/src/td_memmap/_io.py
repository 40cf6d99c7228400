"""Low-level file operations: sequential leaf writes, checked mappings, atomic JSON.

Files are never truncated in place: a process that has one mapped would fault
on the lost pages. A file is either written whole under a temporary name and
renamed (`"atomic"`), unlinked and created again (`"replace"`), or rewritten
in place at the same size (`"overwrite"`); see `fill_file`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from td_memmap._errors import LeafSizeError, MemmapFormatError, MissingLeafError
from td_memmap._format import TMP_PREFIX

__all__ = [
    "tensor_bytes",
    "write_leaf",
    "allocate_leaf",
    "write_grown",
    "write_bytes",
    "fill_file",
    "check_leaf",
    "map_leaf",
    "map_leaves",
    "write_json",
    "json_bytes",
    "read_json",
    "read_json_bytes",
    "fsync_dir",
    "remove_if_exists",
    "clean_stale_tmp",
    "strides_of",
    "create_sized",
    "reserve_ahead",
    "view_at",
    "views_at",
    "map_storage",
]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CHUNK = 1 << 30  # Linux writes at most ~2 GiB per call
_MAX_META_BYTES = 256 << 20
_EXPERIMENTAL = frozenset(
    d
    for d in (getattr(torch, "complex32", None), getattr(torch, "bcomplex32", None))
    if d is not None
)


def tensor_bytes(tensor: torch.Tensor) -> np.ndarray:
    """The bytes of `tensor` in C order, as a 1-d uint8 array (a view when possible)."""
    if tensor.layout != torch.strided:
        raise TypeError(f"only strided tensors can be memory-mapped, got layout {tensor.layout}")
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy()


def _tmp_path(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{name}")


def _create(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_BINARY, 0o644)


def _write_all(fd: int, buffer: memoryview) -> None:
    total, done = len(buffer), 0
    while done < total:
        done += os.write(fd, buffer[done : done + _CHUNK])


def _libc_fallocate() -> Callable[[int, int, int], None] | None:
    """`fallocate(2)` (Linux), which fails where a filesystem lacks it instead of
    emulating it by writing zeros as `os.posix_fallocate` may; None elsewhere.

    The function returned takes `(fd, nbytes, mode)`.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):  # pragma: no cover - no usable libc
        return None
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
    fallocate.restype = ctypes.c_int

    def reserve(fd: int, nbytes: int, mode: int) -> None:
        fallocate(fd, mode, 0, nbytes)  # a failure only means no reservation: ignored

    return reserve


_fallocate = _libc_fallocate()
_KEEP_SIZE = 1  # FALLOC_FL_KEEP_SIZE: blocks reserved past the end, the size unchanged
#: New files at least this large get their blocks reserved before the write: the
#: filesystem then allocates one extent instead of growing the file write by write
#: (measured: a fresh 256 MB save 20% faster on ext4). Not done where the file is
#: rewritten in place (its blocks exist) or for small files (a syscall for nothing).
RESERVE_FROM = 1 << 20


def create_sized(path: str, nbytes: int, reserve: bool) -> int:
    """A new file `path` (refused if it exists) open for writing, its `nbytes` blocks reserved
    when `reserve` and worth it (see `RESERVE_FROM`)."""
    fd = _create(path)
    if reserve and nbytes >= RESERVE_FROM and _fallocate is not None:
        _fallocate(fd, nbytes, 0)
    return fd


def reserve_ahead(fd: int, nbytes: int) -> None:
    """Reserve blocks for about `nbytes` of a file about to be written sequentially, its size
    unchanged; the writer truncates what it did not use (`os.ftruncate` to its end).

    Besides giving the file one extent, this keeps ext4 from writing the file
    back when it is renamed over an older one (`auto_da_alloc` flushes a file
    whose blocks are not yet allocated: 100 ms for a 177 MB archive).
    """
    if nbytes >= RESERVE_FROM and _fallocate is not None:
        _fallocate(fd, nbytes, _KEEP_SIZE)


def _open_for_write(
    path: str, mode: str, nbytes: int, reserve: bool, fresh: bool = False
) -> tuple[int, str]:
    """An fd to write `nbytes` for `path` and the name it is written under (see `fill_file`)."""
    if fresh and mode != "atomic":
        try:
            return create_sized(path, nbytes, reserve), path
        except FileExistsError:
            pass  # created since its folder was: the mode's own way below
    if mode == "atomic":
        tmp = _tmp_path(path)
        return create_sized(tmp, nbytes, reserve), tmp
    if mode == "overwrite":
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return create_sized(path, nbytes, reserve), path
        if stat.S_ISREG(st.st_mode) and st.st_size == nbytes:
            return os.open(path, os.O_WRONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY), path
    remove_if_exists(path)  # a link is removed, never followed; a folder raises
    return create_sized(path, nbytes, reserve), path


def fill_file(
    path: str,
    nbytes: int,
    fill: Callable[[int], None],
    *,
    mode: str,
    durable: bool,
    reserve: bool = True,
    fresh: bool = False,
) -> None:
    """Write `nbytes` to `path` through `fill`, in one of three ways.

    - `"atomic"`: into a temporary file renamed over `path`: readers see the
      old or the new file, never a partial one.
    - `"replace"`: unlink `path`, then create it: processes that have the old
      file mapped keep its data (a truncated mapping would fault instead).
    - `"overwrite"`: write into `path` in place when it is a regular file of
      exactly `nbytes` bytes (no new inode: the fastest; mappings of the file
      see the new data, as after any write), else `"replace"`.

    A new file's blocks are reserved first (`reserve`, see `RESERVE_FROM`).
    `fresh`: `path`'s folder was just created by the caller, so `path` is
    created at once (no `lstat` or `unlink` first: a syscall a leaf on a
    fresh save); should it exist after all, `mode` applies as usual.
    On error the partial file is removed.
    """
    fd, target = _open_for_write(path, mode, nbytes, reserve, fresh)
    try:
        fill(fd)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        remove_if_exists(target)
        raise
    os.close(fd)
    if target != path:
        try:
            os.replace(target, path)
        except BaseException:
            remove_if_exists(target)
            raise


def write_bytes(
    path: str,
    data: bytes | memoryview | np.ndarray,
    *,
    mode: str = "atomic",
    durable: bool = False,
    fresh: bool = False,
) -> None:
    """Write `data` to `path` in large sequential writes (`mode`, `fresh`: see `fill_file`)."""
    view = memoryview(data).cast("B")  # type: ignore[arg-type]  # numpy stubs give ndarray __buffer__ only on 3.12+
    fill_file(
        path, len(view), lambda fd: _write_all(fd, view), mode=mode, durable=durable, fresh=fresh
    )


def write_leaf(
    path: str,
    tensor: torch.Tensor,
    *,
    mode: str = "atomic",
    durable: bool = False,
    fresh: bool = False,
) -> None:
    """Write the raw bytes of `tensor` (C order, native byte order) to `path`."""
    write_bytes(path, tensor_bytes(tensor), mode=mode, durable=durable, fresh=fresh)


def write_grown(
    path: str, head: str, tail: torch.Tensor, *, mode: str = "atomic", durable: bool = False
) -> None:
    """Write the content of the file `head` followed by the raw bytes of `tail` to `path`."""
    size = os.path.getsize(head)
    rest = memoryview(tensor_bytes(tail)).cast("B")  # type: ignore[arg-type]  # numpy stubs give ndarray __buffer__ only on 3.12+

    def fill(fd: int) -> None:
        with open(head, "rb") as src:
            _copy_file(src.fileno(), fd, size)
        _write_all(fd, rest)

    fill_file(path, size + len(rest), fill, mode=mode, durable=durable)


def _copy_file(src: int, dst: int, size: int) -> None:
    """Copy `size` bytes from `src` to `dst` (in the kernel where it can)."""
    copy_range = getattr(os, "copy_file_range", None)
    done = 0
    while done < size:
        if copy_range is not None:
            try:
                n = copy_range(src, dst, min(size - done, _CHUNK))
            except OSError:
                copy_range = None
                continue
        else:
            chunk = os.read(src, min(size - done, 16 << 20))
            n = len(chunk)
            _write_all(dst, memoryview(chunk))
        if n == 0:
            raise LeafSizeError(f"data file shrank while it was copied ({done} of {size} bytes)")
        done += n


def allocate_leaf(path: str, nbytes: int, *, mode: str = "atomic", durable: bool = False) -> None:
    """Create `path` as `nbytes` zero bytes without writing them (a sparse file)."""
    if mode == "overwrite":
        mode = "replace"  # the old contents must not survive
    fill_file(
        path,
        nbytes,
        lambda fd: os.ftruncate(fd, nbytes),
        mode=mode,
        durable=durable,
        reserve=False,  # stays sparse
    )


def check_leaf(path: str, nbytes: int, *, what: str) -> None:
    """Raise unless `path` is a regular file of exactly `nbytes` bytes."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MissingLeafError(f"{what}: data file {path!r} is missing") from None
    if not stat.S_ISREG(st.st_mode):
        raise MemmapFormatError(f"{what}: {path!r} is not a regular file")
    if st.st_size != nbytes:
        raise LeafSizeError(
            f"{what}: data file {path!r} has {st.st_size} bytes, the metadata's shape and "
            f"dtype need {nbytes} (the file is truncated, or does not belong to this save)"
        )


def map_leaf(
    path: str,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    *,
    writable: bool,
    nbytes: int | None = None,
) -> torch.Tensor:
    """Map `path` as a tensor; writable mappings write through, others are copy-on-write.

    The caller has checked the file size (`check_leaf`): a shared mapping of a
    short file would otherwise grow it.
    """
    if nbytes is None:
        nbytes = dtype.itemsize
        for s in shape:
            nbytes *= s
    if nbytes == 0:  # nothing to map (mmap refuses empty files)
        return torch.empty(shape, dtype=dtype, device="cpu")
    if dtype in _EXPERIMENTAL:  # creating an empty one warns; this path does not
        return torch.from_file(
            path, shared=writable, size=nbytes // dtype.itemsize, dtype=dtype, device="cpu"
        ).view(shape)
    storage = _from_file(path, writable, nbytes)
    return _empty(0, dtype=dtype, device="cpu").set_(storage, 0, shape, strides_of(shape))


_make_subclass = torch.Tensor._make_subclass
_from_file: Callable[[str, bool, int], torch.UntypedStorage] = torch.UntypedStorage.from_file  # type: ignore[assignment]  # torch stubs: from_file gives an UntypedStorage
_empty = torch.empty


#: Read-only leaves up to this size are read into memory rather than mapped: for a
#: process, a private copy of the bytes is indistinguishable from a copy-on-write
#: mapping, and reading a page costs half as much as mapping it (open, mmap, close).
SMALL_LEAF = 4096


def map_leaves(
    leaves: Iterable[tuple[str, torch.dtype, tuple[int, ...], int]], *, writable: bool
) -> list[torch.Tensor]:
    """`map_leaf` of many `(path, dtype, shape, nbytes)`, sizes already checked.

    The same as calling `map_leaf` on each, with the per-call overhead cut
    (loading a checkpoint maps hundreds of files); read-only leaves of at most
    `SMALL_LEAF` bytes are read instead of mapped.
    """
    out: list[torch.Tensor] = []
    append = out.append
    for path, dtype, shape, nbytes in leaves:
        if not nbytes or dtype in _EXPERIMENTAL:
            append(map_leaf(path, dtype, shape, writable=writable, nbytes=nbytes))
        elif nbytes <= SMALL_LEAF and not writable:
            small = _read_small(path, dtype, nbytes)
            append(small if len(shape) == 1 else small.view(shape))  # a view costs a microsecond
        else:
            storage = _from_file(path, writable, nbytes)
            append(_empty(0, dtype=dtype, device="cpu").set_(storage, 0, shape, strides_of(shape)))
    return out


def map_storage(path: str, writable: bool, nbytes: int) -> torch.UntypedStorage:
    """The first `nbytes` of file `path` mapped as one storage (shared when `writable`)."""
    return _from_file(path, writable, nbytes)


def view_at(
    storage: torch.UntypedStorage, offset: int, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    """The contiguous tensor of `dtype` and `shape` whose bytes start at `offset` of `storage`."""
    if dtype in _EXPERIMENTAL:  # creating an empty one warns; a view of bytes does not
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        raw = _empty(0, dtype=torch.uint8, device="cpu").set_(storage, offset, (nbytes,), (1,))
        return raw.view(dtype).view(shape)
    return _empty(0, dtype=dtype, device="cpu").set_(
        storage, offset // dtype.itemsize, shape, strides_of(shape)
    )


def views_at(
    storage: torch.UntypedStorage, places: Iterable[tuple[int, torch.dtype, tuple[int, ...]]]
) -> list[torch.Tensor]:
    """`view_at` of every `(offset, dtype, shape)` of `places`, in one pass.

    The same tensors, each its own tensor on `storage` (not a view of another,
    so `detach_` works on it), at half the per-leaf cost: the empty tensor each is set on comes from
    `Tensor.new` of one tensor per dtype, not from `torch.empty`'s argument
    parsing (a fresh save of 1,000 small leaves builds 1,000 of them).
    """
    protos: dict[torch.dtype, torch.Tensor] = {}
    out: list[torch.Tensor] = []
    append = out.append
    for offset, dtype, shape in places:
        proto = protos.get(dtype)
        if proto is None:
            if dtype in _EXPERIMENTAL:  # `view_at` gives a view of a byte tensor: made not one
                append(_make_subclass(torch.Tensor, view_at(storage, offset, dtype, shape)))
                continue
            proto = protos[dtype] = _empty(0, dtype=dtype, device="cpu")
        append(proto.new().set_(storage, offset // dtype.itemsize, shape, strides_of(shape)))
    return out


def _read_small(path: str, dtype: torch.dtype, nbytes: int) -> torch.Tensor:
    buffer = bytearray(nbytes)
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_BINARY)
    try:
        got = os.readv(fd, [buffer])
    finally:
        os.close(fd)
    if got != nbytes:  # shrunk since it was checked
        raise LeafSizeError(f"data file {path!r} has {got} bytes, {nbytes} were expected")
    return torch.frombuffer(buffer, dtype=dtype)


@functools.lru_cache(maxsize=4096)
def strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return tuple(strides)


def write_json(
    folder: str, name: str, data: Any, *, durable: bool = False, payload: bytes | None = None
) -> None:
    """Write `data` as `folder/name` atomically (temp file, rename).

    `payload` is `json_bytes(data)` if the caller has it already. `durable`
    adds an fsync of the file before the rename and of the folder after it.
    """
    if payload is None:
        payload = json_bytes(data)
    write_bytes(os.path.join(folder, name), payload, durable=durable)
    if durable:
        fsync_dir(folder)


# one encoder for every value: json.dumps with options builds a new one per call
# (a save of 128 folders encodes ~2,500 values)
_JSON = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))
_ENCODE = _JSON.encode
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


def _encoder() -> Callable[[Any], str]:
    """`_ENCODE`, for the values of one `json_bytes` call, at half its per-value cost.

    `JSONEncoder.encode` builds its C encoder anew for every value (most of
    its cost for a small value such as a leaf's entry: a packed save of 1,000
    leaves encodes 1,000 of them). This builds it once, with the options
    `_JSON` passes it and a circular-reference memo of its own (never shared
    between calls or threads), so it writes exactly what `_ENCODE` writes.
    Without the C encoder (another Python), `_ENCODE` itself.
    """
    if _c_make_encoder is None:
        return _ENCODE
    step = _c_make_encoder(
        {},  # the memo of containers being encoded, which catches circular references
        _JSON.default,
        json.encoder.encode_basestring_ascii,
        None,  # no indent
        _JSON.key_separator,
        _JSON.item_separator,
        _JSON.sort_keys,
        _JSON.skipkeys,
        _JSON.allow_nan,
    )
    join = "".join
    return lambda value: join(step(value, 0))


def json_bytes(data: Any) -> bytes:
    """Compact JSON: one line per top-level field and per item of `entries` and `index`."""
    one = _encoder()
    if type(data) is not dict:
        return (one(data) + "\n").encode("ascii")
    lines = []
    for key, value in data.items():
        if key == "entries" and type(value) is list and value:
            items = ",\n  ".join(map(one, value))
            lines.append(f" {one(key)}: [\n  {items}\n ]")
        elif key == "index" and type(value) is dict and value:
            items = ",\n".join(f"  {one(k)}: {one(v)}" for k, v in value.items())
            lines.append(f" {one(key)}: {{\n{items}\n }}")
        else:
            lines.append(f" {one(key)}: {one(value)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("ascii")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Duplicate keys in an object: the last one is taken, as Python's json does. Rejecting
# them cost a Python call per object, 5% of loading a 128-folder save, and guards
# nothing: whatever value is taken is validated like any other.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def read_json(path: str, size: int | None = None, *, fd: int | None = None) -> Any:
    """Parse the JSON file `path` strictly (no NaN or Infinity literals).

    `size` is the file's size if the caller has just stat-ed it (saves a
    syscall); `fd` an open descriptor of it to read from (closed here).
    """
    if fd is None:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_BINARY)
    try:
        if size is None:
            size = os.fstat(fd).st_size
        if size > _MAX_META_BYTES:
            raise MemmapFormatError(f"JSON file {path!r} is larger than {_MAX_META_BYTES} bytes")
        raw = os.read(fd, size + 1)
        if len(raw) > size:  # it grew since: read the rest, within the limit
            chunks = [raw]
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
                if sum(map(len, chunks)) > _MAX_META_BYTES:
                    raise MemmapFormatError(
                        f"JSON file {path!r} is larger than {_MAX_META_BYTES} bytes"
                    )
            raw = b"".join(chunks)
    finally:
        os.close(fd)
    return read_json_bytes(path, raw)


def read_json_bytes(path: str, raw: bytes) -> Any:
    """Parse `raw`, the content of the JSON file `path`, strictly (see `read_json`)."""
    if not raw:
        raise MemmapFormatError(f"JSON file {path!r} is empty (truncated)")
    try:
        return _DECODER.decode(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise MemmapFormatError(f"JSON file {path!r} is not valid JSON: {e}") from None


def fsync_dir(folder: str) -> None:
    """Make a rename in `folder` durable (no-op where directories cannot be opened)."""
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    fd = os.open(folder, os.O_RDONLY | flags | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_if_exists(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill would terminate the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_tmp(folder: str) -> None:
    """Remove temporary files (and staging folders) left in `folder` by saves whose process died."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    for name in names:
        if not name.startswith(TMP_PREFIX):
            continue
        pid_text = name[len(TMP_PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text)):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):  # an archive's staging folder
                shutil.rmtree(path, ignore_errors=True)
            else:
                remove_if_exists(path)
