"""The tree of a parsed save (folder or archive), before its leaves are mapped.

`Builder` turns the checked metadata of `_meta.parse_folder` into a `Node`
tree: tensorclasses are resolved (never imported), non-tensor values decoded
(pickles only with `allow_pickle`), and each tensor leaf recorded for the
loader (`_load` for folders, `_archive_load` for archives) to map.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from td_core import TensorDict, is_tensorclass
from td_memmap._classes import find_class
from td_memmap._errors import MemmapFormatError, PickleNotAllowedError, UnknownClassError
from td_memmap._format import META_NAME, object_array, value_from_json
from td_memmap._meta import DirEntry, FolderMeta, NonTensorEntry, TensorEntry
from td_memmap._nested import sizes_tensor
from td_memmap._shared import read_value, shared_value
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._tree import KIND_CLASS, KIND_LAZY, KIND_TD, Node, NonTensorLeaf

__all__ = ["Builder", "check_cls", "raw_tree"]


def _meta_file(meta: FolderMeta) -> str:
    """The metadata file describing `meta`, quoted, for errors (a packed save has one)."""
    if meta.pack is None:
        return repr(meta.path + os.sep + META_NAME)
    sub = os.path.relpath(meta.path, meta.pack.root).replace(os.sep, "/")
    top = repr(meta.pack.root + os.sep + META_NAME)
    return top if sub == "." else f"{top} (sub-TensorDict {sub!r})"


def _nontensor(
    entry: NonTensorEntry, meta_path: str, writable: bool, read: Callable[[str], bytes] | None
) -> NonTensorLeaf:
    where = f"{meta_path}, entry {entry.key!r}"
    if entry.encoding == "pickle":
        assert entry.path is not None
        if read is not None:
            value = pickle.loads(read(entry.path))
        else:
            with open(entry.path, "rb") as f:
                value = pickle.load(f)
        if entry.stacked and (not isinstance(value, np.ndarray) or value.shape != entry.batch_size):
            raise MemmapFormatError(
                f"{where}: pickled stacked value is not an array of shape {list(entry.batch_size)}"
            )
        return NonTensorLeaf(value, entry.batch_size, entry.stacked)
    if entry.shared is not None and read is not None:  # in an archive: the value, not live
        return NonTensorLeaf(
            shared_value(read(entry.shared), entry.shared, entry.stacked, entry.batch_size),
            entry.batch_size,
            entry.stacked,
        )
    if entry.shared is not None:  # the live value, not the one at save time
        value = read_value(entry.shared, entry.stacked, entry.batch_size)
        shared = entry.shared if writable else None
        return NonTensorLeaf(value, entry.batch_size, entry.stacked, shared)
    try:
        value = value_from_json(entry.value)
        if entry.stacked:
            value = object_array(value, entry.batch_size)
    except (ValueError, TypeError, RecursionError) as e:
        raise MemmapFormatError(f"{where}: bad value ({e})") from None
    return NonTensorLeaf(value, entry.batch_size, entry.stacked)


class Builder:
    """Builds the tree of a parsed save, resolving tensorclasses; leaves are mapped later.

    Nothing is unpickled unless `allow_pickle`: a pickled entry raises first.
    `read` reads the bytes of a file the metadata names (None: the OS's files);
    `raw_classes` keeps tensorclass folders as named, without looking the
    classes up (to save the tree again as it is); `skip_pickles` gives
    pickled values as None without reading them (the caller has the values).
    """

    def __init__(
        self,
        *,
        cls: type | None,
        writable: bool,
        allow_pickle: bool,
        read: Callable[[str], bytes] | None = None,
        raw_classes: bool = False,
        skip_pickles: bool = False,
    ) -> None:
        self.plain = cls is TensorDict  # no class restored anywhere
        self.writable = writable
        self.allow_pickle = allow_pickle
        self.read = read
        self.raw_classes = raw_classes
        self.skip_pickles = skip_pickles  # pickled values become None, unread
        self.slots: list[tuple[Node, str]] = []  # where each leaf goes
        self.leaves: list[tuple[str, Any, tuple[int, ...], int]] = []  # what to map there
        self.nested: dict[int, list[list[int]]] = {}  # leaf index -> components' shapes
        self.offsets: list[int] = []  # where each leaf starts in a packed data file (-1: a file)

    def build(self, meta: FolderMeta, cls: type | None = None) -> Node:
        node = Node(meta.batch_size, meta.device, {}, meta.kind, meta.stack_dim, meta.class_name)
        node.path = meta.path
        node.names = meta.names
        if meta.kind == KIND_LAZY:
            for i, member in enumerate(meta.members):
                node.entries[str(i)] = self.build(member)
            return node
        if cls is not None and not self.plain:  # the caller's class for the top folder
            node.kind, node.cls = KIND_CLASS, cls
        elif meta.kind == KIND_CLASS and not self.raw_classes:
            if self.plain:
                node.kind = KIND_TD
            else:
                node.cls = self._find(meta)
        if node.cls is not None:
            fields = node.cls._fields  # type: ignore[attr-defined]
            unknown = [e.key for e in meta.entries if e.key not in fields]
            if unknown:
                raise MemmapFormatError(
                    f"{_meta_file(meta)}: entries {unknown} are not fields of "
                    f"tensorclass {node.cls.__qualname__} (fields: {list(fields)})"
                )
        meta_path: str | None = None  # for non-tensor entries' errors: built once, when needed
        for entry in meta.entries:
            if type(entry) is TensorEntry:
                node.entries[entry.key] = None  # type: ignore[assignment]  # keeps the order
                if entry.unbatched:
                    node.unbatched.add(entry.key)
                if entry.nested is not None:
                    self.nested[len(self.leaves)] = entry.nested
                self.slots.append((node, entry.key))
                self.leaves.append((entry.path, entry.dtype, entry.shape, entry.nbytes))
                self.offsets.append(entry.offset)
            elif type(entry) is DirEntry:
                assert entry.folder is not None
                node.entries[entry.key] = self.build(entry.folder)
            else:
                assert type(entry) is NonTensorEntry
                if entry.encoding == "pickle" and self.skip_pickles:
                    node.entries[entry.key] = NonTensorLeaf(None, entry.batch_size, entry.stacked)
                    continue
                if entry.encoding == "pickle" and not self.allow_pickle:
                    raise PickleNotAllowedError(
                        f"entry {entry.key!r} of {meta.path!r} is stored with pickle "
                        f"({entry.path!r}), which can run arbitrary code: pass allow_pickle=True "
                        "only if you trust this folder"
                    )
                if meta_path is None:
                    meta_path = _meta_file(meta)
                node.entries[entry.key] = _nontensor(entry, meta_path, self.writable, self.read)
        return node

    def place(self, mapped: list[Any]) -> None:
        """Put the mapped leaves (one per `leaves` row) in their slots, nested ones as such."""
        nested = self.nested
        for i, ((node, key), tensor) in enumerate(zip(self.slots, mapped)):
            sizes = nested.get(i) if nested else None
            if sizes is not None:
                if not isinstance(tensor, MemoryMappedTensor):
                    raise MemmapFormatError(
                        f"entry {key!r} of {node.path!r} is a nested tensor, which cannot be "
                        "read this way (appending to it is not supported)"
                    )
                tensor = tensor._nested(sizes_tensor(sizes))
            node.entries[key] = tensor

    @staticmethod
    def _find(meta: FolderMeta) -> type:
        name = meta.class_name
        assert name is not None
        found = find_class(name)
        if found is None:
            module = name.partition(":")[0]
            raise UnknownClassError(
                f"{_meta_file(meta)} holds an instance of tensorclass {name!r}, "
                f"which is not imported: td-memmap never imports a module named by a file. Import "
                f"{module!r} before loading, pass cls=<the class> (for the folder loaded), or "
                "cls=TensorDict to load every tensorclass as a plain TensorDict of its fields"
            )
        return found


def check_cls(cls: type | None, meta: FolderMeta) -> None:
    if cls is None or cls is TensorDict:
        return
    if not isinstance(cls, type) or not is_tensorclass(cls):
        raise TypeError(f"cls must be a tensorclass or TensorDict, got {cls!r}")
    if meta.kind == KIND_LAZY:
        raise TypeError(
            f"cls={cls.__qualname__} was given, but {meta.path!r} holds a lazy stack, not a "
            "TensorDict or a tensorclass"
        )


def raw_tree(
    meta: FolderMeta,
    leaf: Callable[[str, Any, tuple[int, ...], int], Any],
    *,
    allow_pickle: bool = False,
    read: Callable[[str], bytes] | None = None,
) -> Node:
    """The tree of a parsed save as it is on disk: classes by name only, leaves
    `leaf(path, dtype, shape, offset)` (`offset`: where the leaf starts in the data file
    `path` of a packed save, -1 for a file of its own).

    For saving the tree again (unpacking over a save, appending rows): no
    class is looked up, and nothing is mapped unless `leaf` maps it.
    """
    builder = Builder(
        cls=None, writable=False, allow_pickle=allow_pickle, read=read, raw_classes=True
    )
    root = builder.build(meta)
    builder.place(
        [
            leaf(path, dtype, shape, offset)
            for (path, dtype, shape, _), offset in zip(builder.leaves, builder.offsets)
        ]
    )
    return root
