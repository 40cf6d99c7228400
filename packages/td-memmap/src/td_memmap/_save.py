"""Writing a tree to disk, as a new generation beside the previous save.

Order of a save, which is what makes it crash-safe:

1. plan everything (metadata, JSON forms of non-tensor values) and raise on
   any problem before the disk is touched;
2. read what the previous save in the folder (if any) uses: its files stay
   untouched until the new save is complete;
3. name every file: a leaf already memory-mapped from a whole file of its
   folder keeps it; any other gets the first of `a.memmap`, `a.b.memmap`,
   `a.c.memmap`, ... that the previous save does not use;
4. make the folders, parents first, then write every leaf (one sequential
   write each, straight from the tensor's memory); with `num_threads > 0` and
   enough work (`MIN_SHARE`) threads take the leaves in turn;
5. stage the sub-folders' metadata under temporary names, deepest first;
6. commit: write the top folder's metadata atomically (temporary file,
   rename). It indexes every sub-folder's metadata, so it alone decides what
   loads (see `_meta.Index`); every metadata file records the save's
   `generation` (larger is newer);
7. publish the staged metadata files by renaming them into place, then
   remove the files and folders of entries the new save lacks. The previous
   save's other files stay as spares, rewritten in place by the next save.

A process killed before 6 leaves the previous save loadable and intact
(plus unused files that a later save reuses or removes); killed after, the
new save loads.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from td_memmap._errors import MemmapExistsError, PickleNotAllowedError, SymlinkTargetError
from td_memmap._format import (
    LEAF_SUFFIX,
    META_NAME,
    PACK_SUFFIX,
    PICKLE_SUFFIX,
    SHARED_SUFFIX,
    TMP_PREFIX,
    dtype_name,
    file_stems,
    value_to_json,
)
from td_memmap._generation import (
    Previous,
    candidates,
    first_free,
    packed_root_of,
    previous_save,
    remove_replaced,
)
from td_memmap._io import (
    allocate_leaf,
    clean_stale_tmp,
    fsync_dir,
    json_bytes,
    remove_if_exists,
    write_bytes,
    write_grown,
    write_json,
    write_leaf,
)
from td_memmap._meta import MAX_DEPTH, header, meta_stamp
from td_memmap._nested import nested_numel, nested_values
from td_memmap._options import SaveOptions
from td_memmap._pack_save import packable, save_packed
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._threads import default_threads, run_parallel
from td_memmap._tree import KIND_CLASS, KIND_LAZY, Node, NonTensorLeaf

__all__ = ["save_tree", "nontensor_json", "Grown", "MIN_SHARE"]


@dataclass
class Grown:
    """A leaf that grows along its first dim: the rows of the file `head`, then `tail`'s."""

    head: str
    dtype: torch.dtype
    shape: tuple[int, ...]  # the grown shape
    tail: torch.Tensor


@dataclass(slots=True)
class _Job:
    action: str  # "write", "alloc", "reuse", "bytes", "shared" or "grow"
    src: Any
    path: str
    out: Node
    key: str
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] = ()
    entry: dict[str, Any] = field(default_factory=dict)  # its metadata entry
    name_field: str = "file"  # the entry's field naming the file
    nested: torch.Tensor | None = None  # a nested tensor's components' shapes (flat file)


@dataclass
class _Folder:
    path: str
    meta: dict[str, Any]
    out: Node
    depth: int
    children: list[_Folder] = field(default_factory=list)


def nontensor_json(leaf: NonTensorLeaf) -> Any:
    """The JSON form of a non-tensor leaf's value (`TypeError` if it has none)."""
    if leaf.stacked:
        return value_to_json(np.asarray(leaf.value, dtype=object).tolist())
    return value_to_json(leaf.value)


def _tensor_entry(key: str, name: str, dtype: str, shape: Any) -> dict[str, Any]:
    """The metadata entry of a tensor leaf saved in the file `name` of its folder."""
    return {"key": key, "type": "tensor", "file": name, "dtype": dtype, "shape": list(shape)}


def _folder_of(mmt: MemoryMappedTensor) -> str | None:
    """The real path of the folder holding `mmt`'s file."""
    if mmt._mm_file is None:
        return None
    return os.path.realpath(os.path.dirname(mmt._mm_file))


def _whole_file(mmt: MemoryMappedTensor) -> bool:
    plain = torch.Tensor._make_subclass(torch.Tensor, mmt)
    return (
        plain.storage_offset() == 0  # type: ignore[return-value]  # torch stubs: SymInt comparisons give SymBool
        and plain.is_contiguous()
        and plain.untyped_storage().nbytes() == plain.numel() * plain.element_size()
    )


class _Planner:
    def __init__(self, options: SaveOptions, root: str = "") -> None:
        self.root = os.path.realpath(root) if root else ""
        self.options = options
        self.jobs: list[_Job] = []

    def folder(self, node: Node, path: str, where: tuple[str, ...] = ()) -> _Folder:
        if len(where) > MAX_DEPTH:
            raise ValueError(f"entry {where[:3]!r}... is nested more than {MAX_DEPTH} deep")
        if where and os.path.islink(path):  # checked before anything is written
            raise SymlinkTargetError(
                f"refusing to write TensorDict through symlink {path!r} (entry {where!r}): a "
                "sub-folder of a save must be a real folder; remove the link"
            )
        out = node.empty_like()
        out.path = path
        meta = header(node.kind, node.batch_size, node.device)
        if node.names is not None:
            meta["names"] = list(node.names)
        plan = _Folder(path, meta, out, len(where))
        if node.kind == KIND_LAZY:
            meta["stack_dim"] = node.stack_dim
            meta["members"] = len(node.entries)
            for i, (name, member) in enumerate(node.entries.items()):
                assert type(member) is Node and name == str(i)
                child = self.folder(member, os.path.join(path, name), (*where, f"<member {i}>"))
                plan.children.append(child)
                out.entries[name] = child.out
            return plan
        if node.kind == KIND_CLASS:
            meta["class"] = node.class_name
        for key in node.entries:
            if type(key) is not str:
                raise TypeError(f"keys must be strings, got {key!r} in {where!r}")
        entries: list[dict[str, Any]] = []
        meta["entries"] = entries
        stems = file_stems(node.entries)
        base = path + os.sep  # the start of every leaf's path (os.path.join per leaf costs)
        for key, value in node.entries.items():
            stem = stems[key]
            if isinstance(value, torch.Tensor):  # the most common first
                entry = self._tensor(value, base, stem, out, key, where)
                if key in node.unbatched:
                    entry["unbatched"] = True
                    out.unbatched.add(key)
                entries.append(entry)
                out.entries[key] = value
            elif isinstance(value, Node):
                child = self.folder(value, os.path.join(path, stem), (*where, key))
                plan.children.append(child)
                out.entries[key] = child.out
                entries.append({"key": key, "type": "tensordict", "dir": stem})
            elif isinstance(value, NonTensorLeaf):
                stem_path = os.path.join(path, stem)
                entries.append(self._nontensor(value, stem_path, out, key, (*where, key)))
            elif isinstance(value, Grown):
                leaf = base + stem + LEAF_SUFFIX
                name = dtype_name(value.dtype, key=(*where, key))
                entry = _tensor_entry(key, stem + LEAF_SUFFIX, name, value.shape)
                self.jobs.append(
                    _Job("grow", value, leaf, out, key, value.dtype, value.shape, entry)
                )
                entries.append(entry)
            else:
                raise TypeError(f"entry {(*where, key)!r}: cannot save a {type(value).__name__}")
        return plan

    def _tensor(
        self, t: torch.Tensor, base: str, stem: str, out: Node, key: str, where: tuple[str, ...]
    ) -> dict[str, Any]:
        """Plan the tensor leaf `key` of the folder `base` (its path and a separator)."""
        name = stem + LEAF_SUFFIX
        path = base + name
        if t.layout != torch.strided:
            raise TypeError(
                f"entry {(*where, key)!r}: only strided tensors can be saved, got layout {t.layout}"
            )
        dtype = dtype_name(t.dtype, key=(*where, key))
        if t.is_nested:  # one flat file: the components one after another
            return self._nested_tensor(t, path, out, key, dtype)
        shape = tuple(t.shape)
        action = "alloc" if self.options.like else "write"
        if isinstance(t, MemoryMappedTensor) and t._mm_file is not None and not self.options.like:
            folder = _folder_of(t)
            packed = t._mm_file.endswith(PACK_SUFFIX)  # a leaf of a packed save: never reused
            if folder == os.path.realpath(os.path.dirname(path)):
                if t._mm_writable and not packed and _whole_file(t):
                    action = "reuse"  # if no other entry keeps that file (see _name_files)
            elif not self.options.copy_existing and not (packed and folder == self.root):
                raise RuntimeError(
                    f"entry {(*where, key)!r} is already memory-mapped from {t._mm_file!r}. A "
                    "filename was provided but the tensor already has a file associated: pass "
                    f"copy_existing=True to copy it to {path!r}"
                )
        entry = _tensor_entry(key, name, dtype, shape)
        self.jobs.append(_Job(action, t, path, out, key, t.dtype, shape, entry))
        return entry

    def _nested_tensor(
        self, t: torch.Tensor, path: str, out: Node, key: str, name: str
    ) -> dict[str, Any]:
        sizes = t._nested_tensor_size()
        flat = torch.empty(0, dtype=t.dtype) if self.options.like else nested_values(t.detach())
        shape = (nested_numel(sizes),)
        entry = {
            **_tensor_entry(key, os.path.basename(path), name, shape),
            "nested": sizes.tolist(),
        }
        action = "alloc" if self.options.like else "write"
        self.jobs.append(_Job(action, flat, path, out, key, t.dtype, shape, entry, nested=sizes))
        return entry

    def _nontensor(
        self, leaf: NonTensorLeaf, stem_path: str, out: Node, key: str, full_key: tuple[str, ...]
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "key": key,
            "type": "non_tensor",
            "batch_size": list(leaf.batch_size),
            "stacked": leaf.stacked,
        }
        out.entries[key] = leaf
        try:
            value = nontensor_json(leaf)
        except TypeError as e:
            if self.options.share_non_tensor:
                raise TypeError(
                    f"non-tensor entry {full_key!r} cannot be shared: share_non_tensor=True stores "
                    f"values as JSON ({e})"
                ) from None
            if not self.options.allow_pickle:
                raise PickleNotAllowedError(
                    f"non-tensor entry {full_key!r} ({e}) can only be saved with pickle: pass "
                    "allow_pickle=True to td_memmap.save, and to load it later"
                ) from None
        else:
            entry["encoding"] = "json"
            entry["value"] = value
            if self.options.share_non_tensor:
                path = stem_path + SHARED_SUFFIX
                payload = json.dumps(value, allow_nan=False).encode("utf-8")
                self.jobs.append(
                    _Job("shared", payload, path, out, key, entry=entry, name_field="shared")
                )
                entry["shared"] = os.path.basename(path)
                out.entries[key] = NonTensorLeaf(leaf.value, leaf.batch_size, leaf.stacked, path)
            return entry
        try:
            payload = pickle.dumps(leaf.value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise TypeError(f"non-tensor entry {full_key!r} cannot be pickled: {e}") from e
        path = stem_path + PICKLE_SUFFIX
        self.jobs.append(_Job("bytes", payload, path, out, key, entry=entry))
        entry["encoding"] = "pickle"
        entry["file"] = os.path.basename(path)
        return entry


def _preorder(folder: _Folder) -> list[_Folder]:
    out = [folder]
    for child in folder.children:
        out.extend(_preorder(child))
    return out


def _run(job: _Job, durable: bool, fresh: frozenset[str]) -> None:
    # No file the previous save uses is written (see _name_files), so no temporary
    # names are needed: a file left by a crashed save, of the same size, is
    # rewritten in place (the fastest); any other is unlinked and created again.
    # In a folder this save created (`fresh`) the file is created at once.
    if job.action == "reuse":
        return
    new = os.path.dirname(job.path) in fresh
    if job.action in ("bytes", "shared"):
        write_bytes(job.path, job.src, mode="replace", durable=durable, fresh=new)
        return
    assert job.dtype is not None
    if job.action == "write":
        write_leaf(job.path, job.src, mode="overwrite", durable=durable, fresh=new)
    elif job.action == "grow":
        write_grown(job.path, job.src.head, job.src.tail, mode="overwrite", durable=durable)
    else:
        numel = 1
        for d in job.shape:
            numel *= d
        allocate_leaf(job.path, numel * job.dtype.itemsize, mode="replace", durable=durable)
    mapped = MemoryMappedTensor._map(job.path, job.dtype, job.shape, writable=True)
    job.out.entries[job.key] = mapped if job.nested is None else mapped._nested(job.nested)


_SUFFIXES = {"bytes": PICKLE_SUFFIX, "shared": SHARED_SUFFIX}


def _name_files(
    jobs: list[_Job], previous: Previous
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Give each job its file (see the module docstring); the names used, and the spares, per folder.

    A spare is a file of the previous save that is another name of a file this
    save writes: it is kept, and the next save rewrites it in place (same size:
    no new allocation, and no writeback of one generation competing with the
    writes of the next), which is what keeps re-saving fast.
    """
    used: dict[str, set[str]] = {}
    spares: dict[str, set[str]] = {}
    fresh = []
    first_save = not previous.files  # nothing to keep intact, no spares to keep
    for job in jobs:
        if job.action == "reuse":  # the file is in the job's folder (see _Planner._tensor)
            folder = os.path.dirname(job.path)
            name = os.path.basename(job.src._mm_file)
            if name.startswith(TMP_PREFIX) or name in used.get(folder, ()):
                job.action = (
                    "write"  # another entry keeps that file, or a later save would remove it
                )
            else:
                job.path = os.path.join(folder, name)
                job.entry[job.name_field] = name
                used.setdefault(folder, set()).add(name)
                continue
        fresh.append(job)
    for job in fresh:
        folder = os.path.dirname(job.path)
        taken = used.setdefault(folder, set())
        if first_save:
            name = os.path.basename(job.path)
            if name not in taken:  # the entry's own name (stems are unique per folder)
                taken.add(name)
                job.entry[job.name_field] = name
                continue
        names = candidates(job.path, _SUFFIXES.get(job.action, LEAF_SUFFIX))
        path = first_free(
            names,
            lambda p, taken=taken: os.path.basename(p) in taken or previous.uses(p),  # type: ignore[misc]  # mypy cannot infer a lambda with a default
        )
        name = os.path.basename(path)
        taken.add(name)
        spares.setdefault(folder, set()).update(os.path.basename(p) for p in names)
        job.path = path
        job.entry[job.name_field] = name
    return used, spares


def _payload(folder: _Folder, stamps: dict[str, list[int]]) -> bytes:
    """`folder`'s metadata, with the index of every folder below it (see `_meta.Index`)."""
    below = _preorder(folder)[1:]
    if not below:
        return json_bytes(folder.meta)
    index = {}
    for sub in below:
        rel = os.path.relpath(sub.path, folder.path).replace(os.sep, "/")
        index[rel] = [stamps[sub.path], sub.meta]
    return json_bytes({**folder.meta, "index": index})


def _stage(folder: _Folder, stamps: dict[str, list[int]], durable: bool) -> str:
    """Write a sub-folder's metadata under a temporary name; that name (its stamp in `stamps`)."""
    tmp = os.path.join(folder.path, f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{META_NAME}")
    write_bytes(tmp, _payload(folder, stamps), mode="replace", durable=durable)
    stamps[folder.path] = meta_stamp(os.lstat(tmp))
    return tmp


def _prepare(folder: _Folder, top: bool) -> bool:
    """Make `folder` if needed and clean it of dead saves' temporary files; whether it was made."""
    if top and not os.path.lexists(folder.path):
        os.makedirs(os.path.dirname(folder.path), exist_ok=True)
    try:  # the parent exists by now
        os.mkdir(folder.path)
    except FileExistsError:
        if not os.path.isdir(folder.path):
            raise  # a file in the way, as os.makedirs(exist_ok=True) says it
        clean_stale_tmp(folder.path)
        return False
    return True  # nothing in it to clean


#: What creating a file weighs against writing bytes, when sharing the work between
#: threads: on a file system without a journal, creating one can cost as much as
#: writing 1 MB (a scan of the inodes freed in the last minutes).
FILE_WEIGHT = 256 << 10
#: The least work worth a thread: 16 MB to write, or 64 files to create.
MIN_SHARE = 16 << 20


#: The average bytes per file from which `num_threads=None` uses threads. Measured on
#: 2 CPUs (alternate runs of the old and new code): 256 MB in 8 files saved 1.2x
#: faster with 2 threads; 256 MB in 256 files (or 128 folders) were no faster, and
#: in runs where creating files was slow (see `FILE_WEIGHT`) slower.
LARGE_LEAF = 4 << 20


def _default_threads(weights: list[int]) -> int:
    files = sum(1 for w in weights if w)
    copied = sum(weights) - files * FILE_WEIGHT
    return default_threads() if files and copied >= files * LARGE_LEAF else 0


def _weight(job: _Job) -> int:
    if job.action == "reuse":
        return 0
    if job.action in ("bytes", "shared"):
        return FILE_WEIGHT + len(job.src)
    if job.action == "alloc" or job.dtype is None:
        return FILE_WEIGHT
    numel = 1
    for d in job.shape:
        numel *= d
    return FILE_WEIGHT + numel * job.dtype.itemsize


def save_tree(node: Node, prefix: str | os.PathLike, options: SaveOptions) -> Node:
    """Save `node` under `prefix`; the same tree with memory-mapped leaves.

    `options` (`compression` aside) say how; of them:

    - `num_threads`: threads writing the leaves (0: all in the calling
      thread); None: `default_threads()` for a save of large leaves (see
      `LARGE_LEAF`), else 0.
    - `like`: allocate zero-filled files of the right size without copying data.
    - `durable`: also fsync every data file (survive power loss, not only a crash).
    - `share_non_tensor`: also write each non-tensor value to its own file, which
      the returned tree's shared leaves read and write (see `_shared`).
    - `layout`: `"packed"`: data files (one per writer thread) and one metadata
      file (format versions 2 and 3, see `_pack_save`); `"files"`: one file per leaf and one folder per
      sub-TensorDict (version 1). None: the layout of the save already in the
      folder; in a new folder packed, unless the tree holds a lazy stack.
      Pickled and shared values need the files layout.
    """
    layout, durable, num_threads = options.layout, options.durable, options.num_threads
    if layout not in (None, "packed", "files"):
        raise ValueError(f"layout must be None, 'packed' or 'files', got {layout!r}")
    root = os.path.abspath(os.fspath(prefix))
    if not os.path.lexists(root):
        above = packed_root_of(root)
        if above is not None:  # its own save there would never be seen by a load of `above`
            raise ValueError(
                f"{root!r} is a sub-TensorDict of the packed save in {above!r}, which is written "
                f"whole: save the whole TensorDict to {above!r} instead"
            )
    planner = _Planner(options, root)
    plan = planner.folder(node, root)
    folders = _preorder(plan)
    if not options.existsok:
        taken = [os.path.join(root, META_NAME)] + [j.path for j in planner.jobs]
        clash = next((p for p in taken if os.path.lexists(p)), None)
        if clash is not None:
            raise MemmapExistsError(
                f"{clash!r} already exists: pass existsok=True to overwrite the save in {root!r}"
            )
    previous = previous_save(root)
    generation = max(time.time_ns(), previous.generation + 1)
    for folder in folders:
        folder.meta["generation"] = generation
    if layout == "packed" and not packable(planner.jobs):
        raise ValueError(
            f"cannot save {root!r} packed: pickled, shared or appended values need files of "
            "their own (pass layout='files')"
        )
    # a new folder is packed unless it holds a lazy stack, whose members are the
    # sub-folders 0, 1, ... as upstream's (tools and tests look there); a save
    # over an existing save keeps its layout
    stacks = any(folder.meta["kind"] == KIND_LAZY for folder in folders)
    if layout == "packed" or (
        layout is None
        and packable(planner.jobs)
        and (previous.packs or not (previous.files or stacks))
    ):
        _prepare(plan, True)
        save_packed(plan, planner.jobs, previous, durable=durable, num_threads=num_threads)
        return plan.out
    used, spares = _name_files(planner.jobs, previous)
    staged: list[tuple[str, str]] = []
    stamps: dict[str, list[int]] = {}
    try:
        fresh = frozenset(  # parents first
            folder.path for folder in folders if _prepare(folder, folder is plan)
        )
        jobs = planner.jobs
        weights = [_weight(job) for job in jobs]
        if num_threads is None:
            num_threads = _default_threads(weights)
        run_parallel(
            num_threads,
            lambda job: _run(job, durable, fresh),
            jobs,
            weights,
            min_share=MIN_SHARE,
        )
        if durable:  # the new leaves' directory entries, before any metadata names them
            syncs = [folder.path for folder in folders]
            run_parallel(num_threads, fsync_dir, syncs, [1] * len(syncs), min_share=1)
        # deepest first: a folder indexes those below. In the calling thread: building
        # the JSON holds the GIL (measured: threads made a re-save of 128 folders slower)
        for folder in reversed(folders[1:]):
            staged.append((_stage(folder, stamps, durable), folder.path))
        write_json(plan.path, META_NAME, None, durable=durable, payload=_payload(plan, stamps))
    except BaseException:
        for tmp, _ in staged:
            remove_if_exists(tmp)
        for job in planner.jobs:  # what this save wrote: the previous save never uses it
            if job.action != "reuse" and not os.path.isdir(job.path):
                remove_if_exists(job.path)
        raise
    # committed: publish each sub-folder's metadata (it loads on its own), then clean up
    for tmp, folder_path in reversed(staged):
        os.replace(tmp, os.path.join(folder_path, META_NAME))
    for folder in folders:
        used.setdefault(folder.path, set()).update(spares.get(folder.path, ()))
    remove_replaced(previous, used)
    if durable:
        for folder in folders:
            fsync_dir(folder.path)
    return plan.out
