"""The metadata file of one folder: building it for a save, validating it on load.

Validation is complete before any data is touched: the loader parses every
folder's metadata and checks every name, dtype, shape and file size first.
Folders are parsed level by level, so a thread pool can read the folders of
one level in parallel. The top folder's metadata may hold an index of its
sub-folders' metadata (see `Index`), used where it is current.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable, Iterable
from typing import Any

from td_memmap._classes import check_class_name
from td_memmap._errors import (
    IncompleteSaveError,
    LeafSizeError,
    UnsafePathError,
)
from td_memmap._files import Files
from td_memmap._format import (
    DTYPES,
    FILES_VERSION,
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_DIMS,
    META_NAME,
    PACKED_VERSION,
)
from td_memmap._index import Index, generation_of, meta_stamp
from td_memmap._io import read_json
from td_memmap._meta_ctx import FolderContext
from td_memmap._meta_types import (
    DirEntry,
    FolderMeta,
    MetaEntry,
    NonTensorEntry,
    TensorEntry,
)
from td_memmap._nested import parse_nested
from td_memmap._packed import (
    check_spans,
    leaf_place,
    open_pack,
    packed_parent,
    subtree,
)
from td_memmap._tree import KIND_CLASS, KIND_LAZY, KIND_TD
from td_memmap._upstream_format import from_upstream

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "TensorEntry",
    "DirEntry",
    "NonTensorEntry",
    "FolderMeta",
    "Index",
    "header",
    "meta_stamp",
    "generation_of",
    "parse_folder",
]

#: Folder kinds this version reads.
KINDS = frozenset({KIND_TD, KIND_LAZY, KIND_CLASS})
#: Deepest nesting of sub-folders a loader follows (a hostile folder could recurse forever).
MAX_DEPTH = 200

# module-level names: the parsing loop runs once per leaf and folder
_DTYPES = DTYPES
_MAX_DIMS = MAX_DIMS
_S_ISREG = stat.S_ISREG
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO planted as meta.json must not hang
_META_FLAGS = os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK | getattr(os, "O_BINARY", 0)


def header(
    kind: str, batch_size: tuple[int, ...], device: str | None, version: int = FILES_VERSION
) -> dict[str, Any]:
    """The fields every metadata file (and every inline metadata of a packed save) starts with."""
    return {
        "format": FORMAT_NAME,
        "version": version,
        "kind": kind,
        "byteorder": sys.byteorder,
        "batch_size": list(batch_size),
        "shape": list(batch_size),  # the same, under the name upstream's metadata uses
        "device": device,
    }


def _names(
    value: object, batch_size: tuple[int, ...], ctx: FolderContext
) -> tuple[str | None, ...]:
    """The dim names `value` (checked: one str or null per batch dim, no name twice)."""
    if type(value) is list and len(value) == len(batch_size):
        names: list[str | None] = [n for n in value if n is None or type(n) is str]
        given = [n for n in names if n is not None]
        if len(names) == len(value) and len(given) == len(set(given)):
            return tuple(names)
    raise ctx.fail(
        f"'names' {value!r} is not a list of {len(batch_size)} distinct names (str or null), "
        f"one per dim of batch_size {list(batch_size)}"
    )


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
    map_fn: Callable[[Callable[[Any], Any], list[Any]], Iterable[Any]] = map,
    files: Files | None = None,
) -> FolderMeta:
    """Read and validate `folder`'s metadata and, recursively, its sub-folders'.

    Args:
        map_fn: how the folders of one level are parsed (`map`, or a thread
            pool's `map` to read them in parallel).
        files: read the save from there (an archive) rather than from the OS.

    Raises:
        IncompleteSaveError: no metadata file (not a save, or an interrupted one).
        MemmapFormatError: anything malformed, each naming the file at fault.
    """
    if files is None:
        folder = os.path.abspath(folder)
        if not os.path.isdir(folder):
            found = packed_parent(folder)
            if found is not None and os.path.isfile(os.path.join(found[0], META_NAME)):
                top = parse_folder(found[0], map_fn=map_fn)
                if top.pack is not None:  # a sub-TensorDict of a packed save
                    return subtree(top, found[1], folder)
            raise IncompleteSaveError(f"{folder!r} is not a folder: nothing was saved there")
        # the folder asked for may be or hold a link: anything goes (see FolderContext.root_real)
    elif not files.is_dir(folder):
        raise IncompleteSaveError(f"{folder!r} is not a folder: nothing was saved there")
    root: list[FolderMeta] = [None]  # type: ignore[list-item]
    level = [FolderContext(folder, None, folder, 0, (), False, (root, 0), files=files)]
    while level:
        parsed = map_fn(_parse_one, level)
        done, level = level, []
        for ctx, (meta, children) in zip(done, parsed):
            ctx.attach(meta)
            level.extend(children)
    top = root[0]
    if top.pack is not None:
        check_spans(top.pack, os.path.join(folder, META_NAME))
    return top


def _open_meta(ctx: FolderContext) -> Any:
    """The parsed JSON of the folder's metadata file (one open and one fstat when it is plain)."""
    path = ctx.meta_path
    if ctx.files is not None:
        return ctx.files.read_json(path)
    try:
        fd = os.open(path, _META_FLAGS)
    except FileNotFoundError:
        raise IncompleteSaveError(
            f"{path!r} not found: {ctx.folder!r} is not a td-memmap save, or its save was "
            "interrupted before it completed"
        ) from None
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.EMLINK):  # not "it is a link"
            raise
        ctx.inside(META_NAME, None, "metadata file")  # a link must stay in the save
        fd = os.open(path, _META_FLAGS & ~_O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ctx.fail("the metadata is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return read_json(path, st.st_size, fd=fd)


def _parse_one(ctx: FolderContext) -> tuple[FolderMeta, list[FolderContext]]:
    """Parse and check one folder's metadata; the sub-folders still to parse."""
    if ctx.depth > MAX_DEPTH:
        raise ctx.fail(f"sub-folders are nested more than {MAX_DEPTH} deep", UnsafePathError)
    data, own = None, True  # own: the folder's own file, not a record of an index above
    if ctx.pack is not None:  # a packed save's sub-folder: inline in its parent's metadata
        data, own = ctx.inline, False
    elif ctx.index is not None:
        data, current = ctx.index.lookup(ctx.rel, ctx.meta_path)
        own = data is None
        if data is not None and not current:
            disk = _open_meta(ctx)
            if generation_of(disk) >= generation_of(data):  # saved again on its own since
                data, own = disk, True
    if data is None and ctx.pack is None:
        data = _open_meta(ctx)
    if type(data) is not dict:
        raise ctx.fail(f"expected a JSON object, got {type(data).__name__}")
    data = from_upstream(data, ctx, own and ctx.pack is None, _open_meta)
    if own:  # its own index (or none) for the folders below; an index in a record is ignored
        ctx.index = None
        if "index" in data:
            records = data["index"]
            if type(records) is not dict:
                raise ctx.fail(f"'index' is a {type(records).__name__}, expected an object")
            ctx.index = Index(records, ctx.meta_path, ctx.rel, ctx.files)
    if data.get("format") != FORMAT_NAME:
        raise ctx.fail(f"'format' is {data.get('format')!r}, expected {FORMAT_NAME!r}")
    version = data.get("version")
    if type(version) is not int or version < 1:
        raise ctx.fail(f"'version' is {version!r}, expected a positive integer")
    if version > FORMAT_VERSION:
        raise ctx.fail(
            f"format version {version} is newer than this td-memmap reads ({FORMAT_VERSION}): upgrade td-memmap"
        )
    packed = version >= PACKED_VERSION
    if packed and ctx.pack is None:
        if not own:
            raise ctx.fail(
                f"a packed save (version {version}) is read from a folder's own meta.json only, "
                "not from an index record"
            )
        ctx.pack = open_pack(data, version, ctx.folder, ctx.inside, ctx.fail)
    elif (ctx.pack.version != version if ctx.pack is not None else packed) or (
        ctx.inline is not None and "data" in data
    ):
        raise ctx.fail(
            f"version {version} metadata cannot be part of a version {ctx.pack.version} (packed) save"
            if ctx.pack is not None
            else f"version {version} metadata cannot be part of a version 1 save"
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
    parent = ctx.parent_batch
    if ctx.exact_batch and batch_size != parent:
        raise ctx.fail(
            f"batch_size {list(batch_size)} of a stacked member is not the stack's without its "
            f"stack dim, {list(parent)}"
        )
    if batch_size[: len(parent)] != parent:
        raise ctx.fail(
            f"batch_size {list(batch_size)} does not start with the parent's {list(parent)}"
        )
    if "shape" in data and _dims(data["shape"]) != batch_size:
        raise ctx.fail(f"'shape' {data['shape']!r} differs from 'batch_size' {list(batch_size)}")
    generation = data.get("generation", 0)
    if type(generation) is not int or generation < 0:
        raise ctx.fail(f"'generation' is {generation!r}, expected a non-negative integer")
    device = data.get("device")
    if device not in (None, "cpu"):  # memory-mapped data lives on the CPU
        raise ctx.fail(f"'device' is {device!r}, expected null or 'cpu'")
    meta = FolderMeta(ctx.folder, kind, batch_size, device, generation=generation, pack=ctx.pack)
    meta.upstream = ctx.upstream
    if data.get("names") is not None:
        meta.names = _names(data["names"], batch_size, ctx)
    children: list[FolderContext] = []
    if kind == KIND_LAZY:
        _parse_members(data, meta, ctx, children)
        return meta, children
    if kind == KIND_CLASS:
        name = data.get("class")
        why = check_class_name(name)
        if why is not None:
            raise ctx.fail(f"'class' {name!r} is not a class name ({why})")
        meta.class_name = name
    raw_entries = data.get("entries")
    if type(raw_entries) is not list:
        raise ctx.fail("'entries' is missing or not a list")
    seen: set[str] = set()
    entries = []
    for raw in raw_entries:
        entry = _parse_entry(raw, ctx, batch_size)
        if entry.key in seen:
            raise ctx.fail(f"key {entry.key!r} appears twice")
        seen.add(entry.key)
        entries.append(entry)
        if type(entry) is DirEntry:
            inline = raw.get("meta") if ctx.pack is not None else None
            children.append(
                ctx.child(raw["dir"], entry.key, "folder", batch_size, False, entry, inline)
            )
    meta.entries = tuple(entries)
    return meta, children


def _parse_members(
    data: dict[str, Any], meta: FolderMeta, ctx: FolderContext, children: list[FolderContext]
) -> None:
    """A lazy stack's `stack_dim` and `members`: member `i` is the sub-folder `"i"`."""
    batch_size = meta.batch_size
    stack_dim, count = data.get("stack_dim"), data.get("members")
    if type(stack_dim) is not int or not 0 <= stack_dim < len(batch_size):
        raise ctx.fail(
            f"'stack_dim' {stack_dim!r} is not a batch dim of batch_size {list(batch_size)}"
        )
    if type(count) is not int or count < 1 or count != batch_size[stack_dim]:
        raise ctx.fail(
            f"'members' {count!r} is not batch_size[{stack_dim}] = {batch_size[stack_dim]} (at least 1)"
        )
    meta.stack_dim = stack_dim
    member_batch = batch_size[:stack_dim] + batch_size[stack_dim + 1 :]
    meta.members = [None] * count  # type: ignore[list-item]  # filled as the members are parsed
    inline = data.get("member_meta") if ctx.pack is not None else None
    if ctx.pack is not None and (type(inline) is not list or len(inline) != count):
        raise ctx.fail(f"'member_meta' is not a list of the {count} members' metadata")
    for i in range(count):
        name = str(i)
        children.append(
            ctx.child(
                name,
                name,
                "member folder",
                member_batch,
                True,
                (meta.members, i),
                None if inline is None else inline[i],
            )
        )


def _parse_entry(raw: object, ctx: FolderContext, batch_size: tuple[int, ...]) -> MetaEntry:
    if type(raw) is not dict:
        raise ctx.fail(f"an entry is a {type(raw).__name__}, expected an object")
    key, kind = raw.get("key"), raw.get("type")
    if type(key) is not str:
        raise ctx.fail(f"entry key {key!r} is not a string")
    if kind == "tensor":
        return _parse_tensor(raw, key, ctx, batch_size)
    if kind == "tensordict":
        return DirEntry(key)  # the caller checks and parses the sub-folder
    if kind == "non_tensor":
        return _parse_non_tensor(raw, key, ctx, batch_size)
    raise ctx.fail(f"entry {key!r} has unknown type {kind!r}")


def _parse_tensor(
    raw: dict[str, Any], key: str, ctx: FolderContext, batch_size: tuple[int, ...]
) -> TensorEntry:
    # called once per leaf of a load: the checks are inlined
    name = raw.get("dtype")
    dtype = _DTYPES.get(name) if type(name) is str else None
    if dtype is None:
        raise ctx.fail(f"entry {key!r} has unknown dtype {name!r}")
    shape = raw.get("shape")
    numel = 1
    if type(shape) is list:
        for d in shape:
            if type(d) is not int or d < 0:
                break
            numel *= d
        else:
            shape = tuple(shape)
    if type(shape) is not tuple:
        raise ctx.fail(f"entry {key!r} has shape {shape!r}, expected a list of non-negative ints")
    if len(shape) > _MAX_DIMS:
        raise ctx.fail(
            f"entry {key!r} ({'file' if ctx.pack is None else 'data file'} "
            f"{raw.get('file') if ctx.pack is None else ctx.pack.name_for(raw.get('part', 0))!r}) "
            f"has {len(shape)} dims; tensors have at most {_MAX_DIMS}"
        )
    unbatched = raw.get("unbatched", False)
    if type(unbatched) is not bool:
        raise ctx.fail(f"entry {key!r} has unbatched={unbatched!r}, expected true or false")
    nested = raw.get("nested")
    if nested is not None:
        nested = parse_nested(nested, key, shape, numel, batch_size, ctx.fail)
    elif not unbatched and shape[: len(batch_size)] != batch_size:
        raise ctx.fail(
            f"entry {key!r} has shape {list(shape)}, which does not start with batch_size {list(batch_size)}"
        )
    nbytes = numel * dtype.itemsize
    pack = ctx.pack
    if pack is not None:
        path, offset = leaf_place(raw, key, nbytes, pack, ctx.fail)
        return TensorEntry(key, path, dtype, shape, nbytes, unbatched, offset, nested)
    path, st, _ = ctx.inside(raw.get("file"), key, "file")
    if not _S_ISREG(st.st_mode):
        raise ctx.fail(f"entry {key!r}: {path!r} is not a regular file")
    if st.st_size != nbytes and not (ctx.upstream and st.st_size > nbytes):
        # upstream's loader maps the first bytes of a larger file: so does td, for its folders
        raise ctx.fail(
            f"entry {key!r}: data file {path!r} has {st.st_size} bytes, but shape {list(shape)} of "
            f"{str(dtype).removeprefix('torch.')} needs {nbytes} "
            "(truncated, or not from this save)",
            LeafSizeError,
        )
    return TensorEntry(key, path, dtype, shape, nbytes, unbatched, nested=nested)


def _parse_non_tensor(
    raw: dict[str, Any], key: str, ctx: FolderContext, batch_size: tuple[int, ...]
) -> NonTensorEntry:
    nt_batch = _dims(raw.get("batch_size"))
    if nt_batch != batch_size:
        raise ctx.fail(
            f"entry {key!r} has batch_size {raw.get('batch_size')!r}, expected the folder's {list(batch_size)}"
        )
    stacked = raw.get("stacked", False)
    if type(stacked) is not bool:
        raise ctx.fail(f"entry {key!r} has 'stacked' {stacked!r}, expected a boolean")
    encoding = raw.get("encoding")
    if ctx.pack is not None and (encoding != "json" or "shared" in raw):
        raise ctx.fail(
            f"entry {key!r}: a packed save holds non-tensor values as plain JSON only (pickled "
            "and shared values are saved with layout='files')"
        )
    if encoding == "json":
        if "value" not in raw:
            raise ctx.fail(f"entry {key!r} has no 'value'")
        shared = None
        if "shared" in raw:
            shared, st, _ = ctx.inside(raw["shared"], key, "shared value file")
            if not stat.S_ISREG(st.st_mode):
                raise ctx.fail(f"entry {key!r}: {shared!r} is not a regular file")
        return NonTensorEntry(key, nt_batch, stacked, "json", raw["value"], None, shared)
    if encoding == "pickle":
        path, st, _ = ctx.inside(raw.get("file"), key, "file")
        if not stat.S_ISREG(st.st_mode):
            raise ctx.fail(f"entry {key!r}: {path!r} is not a regular file")
        return NonTensorEntry(key, nt_batch, stacked, "pickle", None, path)
    raise ctx.fail(f"entry {key!r} has unknown encoding {encoding!r}")
