"""The public functions: save, load, memory-map and inspect TensorDicts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import unset_fake_temporarily

from td_core import (
    LazyStackedTensorDict,
    TensorDict,
    TensorDictBase,
    TensorDictParams,
    is_tensor_collection,
    is_tensorclass,
    unravel_key_to_tuple,
)
from td_memmap._anon import share_tree
from td_memmap._archive import ARCHIVE_SUFFIX, save_archive
from td_memmap._convert import (
    assign_leaves,
    from_tree,
    move_device_to_cpu,
    tensor_leaves,
    to_tree,
)
from td_memmap._load import load_tree
from td_memmap._options import SaveOptions
from td_memmap._save import save_tree
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._threads import resolve_threads
from td_memmap._tree import Node, NonTensorLeaf
from td_memmap._zip import compression_method

__all__ = ["memmap", "memmap_", "memmap_like", "save", "load_memmap", "load", "is_memmap"]

_Prefix = str | os.PathLike | None


def _as_td(td: Any) -> TensorDictBase:
    if isinstance(td, Mapping) and not is_tensor_collection(td):
        return TensorDict(td)
    return td


def _has_non_tensor(node: Node) -> bool:
    return any(
        isinstance(v, NonTensorLeaf) or (isinstance(v, Node) and _has_non_tensor(v))
        for v in node.entries.values()
    )


def _as_archive(prefix: _Prefix, archive: bool | None, compression: str | int | None) -> bool:
    """Whether a save to `prefix` writes an archive (checking the options that go with one)."""
    if archive is None:
        archive = prefix is not None and os.fspath(prefix).endswith(ARCHIVE_SUFFIX)
    if archive and prefix is None:
        raise ValueError("archive=True needs a prefix: the path of the archive to write")
    if compression is not None:
        if not archive:
            raise ValueError(
                f"compression={compression!r}: compression is only supported for archives; pass "
                f"archive=True or a prefix ending in {ARCHIVE_SUFFIX!r}"
            )
        compression_method(compression)  # an unknown one raises before anything is written
    return bool(archive)


def _check_share(share_non_tensor: bool, prefix: _Prefix, as_archive: bool, tree: Node) -> None:
    """Shared non-tensor values need a folder to live in."""
    if not share_non_tensor or not _has_non_tensor(tree):
        return
    if as_archive:
        raise ValueError(
            "share_non_tensor=True needs a folder: the values live in files that every process "
            "rewrites, which an archive cannot hold. Save to a folder, or pass "
            "share_non_tensor=False"
        )
    if prefix is None:
        raise ValueError(
            "share_non_tensor=True needs a prefix: shared non-tensor values live in files of the "
            "saved folder (a folder under /dev/shm keeps them in memory)"
        )


def _prepare(
    td: Any, prefix: _Prefix, options: SaveOptions, archive: bool | None
) -> tuple[TensorDictBase, bool, Node]:
    """Check a save's options before anything is written.

    Returns `td` (a mapping wrapped), whether the save writes an archive, and the tree to save.
    """
    resolve_threads(options.num_threads)  # checked now; None is resolved by the save
    as_archive = _as_archive(prefix, archive, options.compression)
    td = _as_td(td)
    tree = to_tree(td)
    _check_share(options.share_non_tensor, prefix, as_archive, tree)
    return td, as_archive, tree


def _refuse_params_in_place(td: Any, where: tuple[str, ...] = ()) -> None:
    """`memmap_` cannot turn parameters into memory-mapped tensors: refuse before writing."""
    if isinstance(td, TensorDictParams):
        at = f" (at {where!r})" if where else ""
        raise RuntimeError(
            f"Cannot build a memmap TensorDict in-place from a TensorDictParams{at}: its entries "
            "are nn.Parameters, which cannot be memory-mapped tensors. Use memmap or memmap_like "
            "instead, for a memory-mapped copy"
        )
    if isinstance(td, LazyStackedTensorDict):  # its members, without stacking anything
        for i, member in enumerate(td.tensordicts):
            _refuse_params_in_place(member, (*where, f"<member {i}>"))
    elif is_tensorclass(td):
        _refuse_params_in_place(td._tensordict, where)
    elif isinstance(td, TensorDictBase):
        for key, value in td.items():
            if is_tensor_collection(value):
                _refuse_params_in_place(value, (*where, key))


def _refuse_mapped_views(td: Any, prefix: _Prefix) -> None:
    """A write-through view (a legacy lazy view) of a memory-mapped TensorDict reads views of
    its source's files: saving it elsewhere needs `copy_existing=True`, as for a mapped leaf."""
    if prefix is None or not getattr(td, "_writes_through", False):
        return
    target = os.path.realpath(os.fspath(prefix))
    for key, leaf in td.items(include_nested=True, leaves_only=True):
        base = leaf._base if isinstance(leaf, torch.Tensor) else None
        if not isinstance(base, MemoryMappedTensor) or base._mm_file is None:
            continue
        folder = os.path.realpath(os.path.dirname(base._mm_file))
        if folder != target and not folder.startswith(target + os.sep):
            raise RuntimeError(
                f"entry {key!r} of the view is a view of {base._mm_file!r}. A filename was "
                "provided but the tensor already has a file associated: pass "
                f"copy_existing=True to copy it to {os.fspath(prefix)!r}"
            )


def _run(job: Callable[[], Any], return_early: bool) -> Any:
    """`job()`, or with `return_early` a `Future` of it, run by a thread of its own."""
    if not return_early:
        return job()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="td-memmap-save")
    try:
        return pool.submit(job)
    finally:
        pool.shutdown(wait=False)


def _save(
    td: Any,
    prefix: _Prefix,
    options: SaveOptions,
    *,
    archive: bool | None,
    inplace: bool,
    return_early: bool,
) -> Any:
    """What `memmap` and `memmap_like` (`options.like`) do once their own checks pass.

    The options are checked first; the leaves then go to anonymous shared memory
    (no `prefix`), an archive or a folder, copied or (`like`) only allocated.
    `inplace`: `td`'s own leaves are replaced by the memory-mapped ones.
    """
    td, as_archive, tree = _prepare(td, prefix, options, archive)

    def run() -> Any:
        if prefix is None:
            out = share_tree(tree, options)
        elif as_archive:
            out = save_archive(tree, prefix, options)
        else:
            out = save_tree(tree, prefix, options)
        if inplace:
            td.unlock_()
            move_device_to_cpu(td)  # before the leaves: `set` would move them to its device
            assign_leaves(td, out)
            return td.lock_()
        return from_tree(out).lock_()

    return _run(run, return_early)


def memmap(
    td: TensorDictBase | Mapping[str, Any],
    prefix: _Prefix = None,
    copy_existing: bool = False,
    *,
    num_threads: int | None = None,
    return_early: bool = False,
    share_non_tensor: bool = False,
    existsok: bool = True,
    robust_key: bool | None = True,
    archive: bool | None = None,
    compression: str | int | None = None,
    atomic: bool = False,
    inplace: bool = False,
    allow_pickle: bool = False,
    durable: bool = False,
    layout: str | None = None,
) -> Any:
    """Write `td` to memory-mapped files under `prefix`; a locked copy of `td` on them.

    By default (`layout=None`, into a new folder, for a tree without lazy
    stacks; or over a packed save) the save is packed: every tensor leaf goes into one data file, at a
    64-byte aligned offset (into one data file per writer thread for a large
    save, see `num_threads`), and the whole tree (sub-TensorDicts, lazy stacks,
    tensorclasses, non-tensor values as JSON) into one `meta.json`, written
    last and atomically. `load_memmap(folder / "sub")` still loads a
    sub-TensorDict. With `layout="files"` (and over a save of that layout)
    each leaf is a raw file and each sub-TensorDict a folder. Without `prefix`
    the leaves move to anonymous shared memory instead.

    Saving over an earlier save is atomic: the earlier save stays loadable
    and intact until the new metadata is committed (one rename). A packed
    save whose leaves all still are the folder's own leaves rewrites only
    its metadata; otherwise it writes a new data file and removes the old one
    once committed (processes that mapped it keep its data, no longer the
    folder's). In the files layout the earlier save's files are kept as
    spares that the next save rewrites in place, and a leaf already
    memory-mapped from a whole file of the folder keeps that file.

    Args:
        td: a TensorDict, lazy stack or tensorclass instance (a plain mapping is
            wrapped with `batch_size=[]`). The result is of the same kind.
        prefix: destination folder (created); None for shared memory.
        copy_existing: copy leaves that are already memory-mapped elsewhere
            (otherwise that raises a `RuntimeError`, as upstream).
        num_threads: threads writing the leaves (0: all in the calling
            thread). None (the default): for a save of large leaves (4 MB
            on average, 32 MB in all), one per CPU this process may run on,
            at most 4, and 0 where it may run on one CPU only (see
            `td_memmap.default_threads`); 0 for other saves, whose time goes
            to creating files rather than copying bytes. Upstream's default
            is 0. A packed save (the default layout) gets one data file per
            thread (at most one per CPU and per 16 MB to write, at least
            one; None gives `default_threads()` there, whatever the leaves'
            sizes): the kernel serializes buffered writes to one file, not to
            several.
        return_early: return a `concurrent.futures.Future` of the result at once.
        share_non_tensor: share the non-tensor values between processes: each
            is also written to its own file, and the result's non-tensor leaves
            (`SharedNonTensorData`, `SharedNonTensorStack`) re-read
            it on every access; `td.get(key).data = value` writes it, for
            every process holding the leaf or loading the folder. Values must
            have a JSON form, and `prefix` must be given.
        existsok: overwrite an existing save in `prefix`; otherwise a
            `MemmapExistsError` (a `FileExistsError`) is raised.
        robust_key: accepted for upstream compatibility: keys are always
            encoded into safe file names.
        archive: write one archive file at `prefix` (a zip of the folder's
            files, see `pack_memmap`) instead of a folder. None (the
            default): an archive when `prefix` ends in `".tdz"`. The result's
            leaves are views of the archive: writes reach it (run
            `refresh_archive_checksums` before handing it to zip tools).
        compression: archives only: compress the tensor payloads
            (`"deflate"`, `"bzip2"`, `"lzma"` or a `zipfile` constant);
            the leaves are then read into memory, read-only, when loaded.
        atomic: accepted for upstream compatibility: every save is atomic.
        inplace: replace `td`'s own leaves (what `memmap_` does).
        allow_pickle: store values that have no JSON form with pickle (the
            folder then only loads with `allow_pickle=True`).
        durable: also fsync every data file, so the save survives power loss.
        layout: `"packed"`: data files holding every leaf and one
            `meta.json` holding the whole tree (format versions 2 and 3, the fastest
            to write and load); `"files"`: one file per leaf and one folder per
            sub-TensorDict (version 1). None (the default): the layout of the
            save already in the folder; in a new folder packed, unless the tree
            holds a lazy stack (whose members are the sub-folders `0`, `1`, ...,
            as upstream's) or pickled or shared non-tensor values (which need
            files of their own). See docs/memmap-format.md.

    Raises:
        PickleNotAllowedError: (a `ValueError` and a `RuntimeError`) a non-tensor value has no
            JSON form and `allow_pickle` is False.
        TypeError: an entry cannot be memory-mapped (sparse, quantized, ...),
            or a shared non-tensor value has no JSON form.
        ValueError: `share_non_tensor=True` without a folder `prefix` while
            `td` holds non-tensor values; `compression` without an archive,
            or unknown; `archive=True` without a `prefix`.

    Examples:
        >>> import tempfile, torch
        >>> from td_core import TensorDict
        >>> td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3, 2)}}, batch_size=[3])
        >>> folder = tempfile.mkdtemp()
        >>> saved = memmap(td, folder, num_threads=2)
        >>> type(saved["b", "c"]).__name__, saved.is_locked
        ('MemoryMappedTensor', True)
        >>> load(folder)["b", "c"].sum().item()
        6.0
    """
    options = SaveOptions.of(locals())  # first: the parameters only
    if inplace:
        _refuse_params_in_place(td)
    if not copy_existing:
        _refuse_mapped_views(td, prefix)
    return _save(td, prefix, options, archive=archive, inplace=inplace, return_early=return_early)


def memmap_(
    td: TensorDictBase,
    prefix: _Prefix = None,
    copy_existing: bool = False,
    *,
    num_threads: int | None = None,
    return_early: bool = False,
    share_non_tensor: bool = False,
    existsok: bool = True,
    robust_key: bool | None = True,
    atomic: bool = False,
    allow_pickle: bool = False,
    durable: bool = False,
    layout: str | None = None,
) -> Any:
    """`memmap` in place: `td`'s leaves become memory-mapped tensors; returns `td`."""
    return memmap(**locals(), inplace=True)  # its parameters are all `memmap`'s, by name


def memmap_like(
    td: TensorDictBase | Mapping[str, Any],
    prefix: _Prefix = None,
    copy_existing: bool = False,
    *,
    existsok: bool = True,
    num_threads: int | None = None,
    return_early: bool = False,
    share_non_tensor: bool = False,
    robust_key: bool | None = True,
    archive: bool | None = None,
    durable: bool = False,
    layout: str | None = None,
) -> Any:
    """Allocate zero-filled memory-mapped files shaped like `td`'s leaves, without copying data.

    The files are created sparse, so a huge data set costs no write time and no
    disk space until it is filled (expanded leaves allocate the expanded size).
    Non-tensor values are copied into the metadata. `num_threads`,
    `return_early`, `existsok`, `robust_key`, `share_non_tensor`,
    `archive`, `durable` and `layout` are as for `memmap` (an archive is written with
    its zeros, and the result's leaves write into it); `copy_existing` is
    accepted for upstream compatibility (nothing is copied).

    Examples:
        >>> import tempfile, torch
        >>> from td_core import TensorDict
        >>> data = TensorDict({"images": torch.zeros(8, 8, 3, dtype=torch.uint8)}, batch_size=[]).expand(1000)
        >>> data = memmap_like(data, tempfile.mkdtemp())
        >>> data[torch.tensor([1, 500])]["images"].shape
        torch.Size([2, 8, 8, 3])
    """
    options = SaveOptions.of(locals(), like=True, copy_existing=False)  # nothing is copied
    return _save(td, prefix, options, archive=archive, inplace=False, return_early=return_early)


def load_memmap(
    prefix: str | os.PathLike,
    device: torch.device | str | None = None,
    non_blocking: bool = False,
    *,
    out: TensorDictBase | None = None,
    robust_key: bool | None = True,
    subpath: str | tuple[Any, ...] | None = None,
    mode: str | None = None,
    num_threads: int = 0,
    allow_pickle: bool | None = None,
    cls: type | None = None,
) -> Any:
    """Load what `memmap` saved (or any of its sub-folders).

    Every metadata file is validated, and every data file's size checked,
    before anything is mapped; the loader never writes, truncates or grows a
    file. Leaves are memory-mapped: data is read from disk only when touched.
    By default they are mapped read-write and shared, as upstream: an
    in-place write to a leaf reaches the file, and every process mapping the
    folder sees it. With `mode="r"` the result is locked and its leaves
    refuse writes (`ReadOnlyMemmapError`). A saved lazy stack loads as
    a lazy stack of memory-mapped members, a saved tensorclass instance as an
    instance of its class.

    A tensorclass is only restored if it is already imported: the loader
    looks its recorded `module:qualname` up in `sys.modules` and never
    imports a module or runs code named by the folder. Otherwise the load
    raises `UnknownClassError` before mapping anything, unless `cls`
    says what to build.

    Args:
        prefix: the saved folder, or one of its sub-folders (in a packed save,
            which has no sub-folders: the path one would have, e.g.
            `folder / "encoder"`, is found in the save above it).
        device: move the result there (a copy, no longer memory-mapped).
        non_blocking: passed to `.to(device)`.
        out: copy the loaded values into this TensorDict (in place) and return it.
        robust_key: accepted for upstream compatibility (keys are always encoded).
        subpath: load only this sub-TensorDict of the save: a `"a/b"` path or a
            (nested) key; the members of a lazy stack are `"0"`, `"1"`, ...
            `ValueError` if it names no saved TensorDict.
        mode: `"r+"`: leaves are mapped shared, writes reach the files.
            `"r"`: read-only: the result is locked and every write to a leaf
            (or a view of one) raises `ReadOnlyMemmapError`, never a
            silent private copy. None (the default): `"r+"` for files this
            process may write, `"r"` for others. Values saved with
            `share_non_tensor=True` load as shared leaves unless `"r"`,
            then as their current values.
        num_threads: threads reading the folders and mapping the leaves (0:
            the calling thread), each taking a share of at least 256 folders
            or leaves. The default stays 0, unlike `memmap`'s: loading is
            mostly Python work holding the GIL, and on a local disk threads
            measured no faster (a network file system may gain).
        allow_pickle: load values that were saved with pickle. Unpickling
            runs code chosen by whoever wrote the folder: only for trusted data.
        cls: a tensorclass: the folder loaded becomes an instance of it,
            whatever class it recorded (its entries must be fields of `cls`);
            tensorclasses in its sub-folders are still looked up.
            `TensorDict`: no class is restored; every tensorclass of the save
            loads as a plain TensorDict of its fields. None (the default): the
            recorded classes.

    Raises:
        IncompleteSaveError: (a `FileNotFoundError`) no metadata: not a save,
            or an interrupted one.
        MissingLeafError, LeafSizeError, UnsafePathError, MemmapFormatError:
            (`ValueError`) malformed content, naming the file at fault.
        PickleNotAllowedError: (a `ValueError` and a `RuntimeError`) the folder holds pickled
            values and `allow_pickle` is False.
        UnknownClassError: (a `LookupError`, `RuntimeError`) the save holds a tensorclass
            that is not imported, and `cls` does not replace it.
        TypeError: `allow_pickle` is neither a bool nor None.

    Examples:
        >>> import tempfile, torch
        >>> from td_core import lazy_stack, TensorDict
        >>> stack = lazy_stack([TensorDict({"a": torch.zeros(2)}, [2]),
        ...                     TensorDict({"a": torch.ones(2), "b": torch.ones(2, 5)}, [2])])
        >>> folder = tempfile.mkdtemp()
        >>> _ = memmap(stack, folder)
        >>> back = load_memmap(folder)
        >>> type(back).__name__, back.batch_size, back.exclusive_keys()
        ('LazyStackedTensorDict', torch.Size([2, 2]), [[], ['b']])
    """
    if not isinstance(num_threads, int) or num_threads < 0:
        raise ValueError(f"num_threads must be a non-negative int, got {num_threads!r}")
    if mode not in (None, "r", "r+"):
        raise ValueError(f"mode must be None, 'r' or 'r+', got {mode!r}")
    if allow_pickle is not None and type(allow_pickle) is not bool:
        # a truthy stand-in (1, np.bool_, "no") must not switch unpickling on by accident
        raise TypeError(
            f"load_memmap: allow_pickle must be a bool or None, got {allow_pickle!r} "
            f"({type(allow_pickle).__module__}.{type(allow_pickle).__qualname__})"
        )
    fake = detect_fake_mode()
    with unset_fake_temporarily() if fake is not None else contextlib.nullcontext():
        tree = load_tree(
            prefix,
            num_threads=num_threads,
            mode=mode,
            allow_pickle=bool(allow_pickle),
            cls=cls,
        )
        td = from_tree(tree if subpath is None else _subtree(tree, subpath, prefix))
    if fake is not None:  # under a FakeTensorMode: fake leaves of the same shapes and dtypes
        td = td.apply(fake.from_tensor)
    if mode == "r" or tree.read_only:  # or a folder saved by upstream tensordict loaded by default
        td = td.lock_()
    if device is not None:
        td = td.to(device, non_blocking=non_blocking)
    if out is not None:
        out.update_(td)
        return out
    return td


def _subtree(tree: Node, subpath: Any, prefix: str | os.PathLike) -> Node:
    """The folder `subpath` names: a `"a/b"` path, or a (nested) key; members of stacks by index."""
    if isinstance(subpath, str):
        parts = tuple(part for part in subpath.split("/") if part)
    else:
        parts = unravel_key_to_tuple(subpath)
        if not parts:
            raise ValueError(
                f"subpath must be a '/'-separated string or a (nested) tuple of strings, got "
                f"{subpath!r}"
            )
    node = tree
    for i, part in enumerate(parts):
        child = node.entries.get(part)
        if type(child) is not Node:
            what = "nothing" if child is None else f"a {type(child).__name__}"
            raise ValueError(
                f"No tensordict found under subpath {'/'.join(parts)!r} of {os.fspath(prefix)!r}: "
                f"{'/'.join(parts[: i + 1])!r} is {what}, not a saved TensorDict (stack members "
                "are named by their index)"
            )
        node = child
    return node


save = memmap
load = load_memmap


def is_memmap(td: Any) -> bool:
    """Whether `td` has tensor leaves and every one of them is a `MemoryMappedTensor`.

    Lazy stacks are looked at member by member, tensorclasses field by field.
    """
    found = False
    for value in tensor_leaves(to_tree(td)):
        if not isinstance(value, MemoryMappedTensor):
            return False
        found = True
    return found
