"""`PersistentTensorDict`: a TensorDict whose entries live in an HDF5 file or a zarr store.

HDF5 needs `td-memmap[h5]`, zarr `td-memmap[zarr]`; the format is a backend
(`backend="h5"` or `"zarr"`, see `td_memmap._persist_backend`), the container
logic here is shared. It is a full `td_core.TensorDictBase` kind: it implements the
storage primitives over a group of the store (groups are sub-TensorDicts, arrays are
leaves) and every op comes from the base. Reads return tensors read from the file; ops
that make new data (`td + 1`, `td.apply(fn)`, `td[2:5]`) return in-memory
`td_core.TensorDict`s. Writes go to the file: `set` creates or replaces datasets, and
in-place ops (`set_`, `update_`, `td[idx] = value`, `add_`, `apply_`, `zero_`, ...) write
into the existing datasets (see `td_memmap._h5_stage`). Indexing the batch dims (`td[2]`,
`td[2:5]`, `td[[0, 3]]`) reads only the rows asked for (with zarr, only the chunks holding
them). A zarr group holding a lazy stack (`to_zarr` of a `LazyStackedTensorDict`) reads as
a `LazyStackedTensorDict` of PersistentTensorDicts, one per member group.

Views that would have to write through to the file (`permute`, `transpose`,
`squeeze`, `unsqueeze`, `view`, `movedim`) raise `NotSupportedOnFileError`, as
upstream, unless they move nothing (see `td_memmap._h5_views`). `select` and
`exclude` give in-memory results, or delete entries from the file with
`inplace=True`. Values that would need pickle are refused (`_h5_format`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
    is_leaf_nontensor,
    is_tensor_collection,
    unravel_key,
)
from td_memmap._backends import backend_named as _backend
from td_memmap._errors import NotSupportedOnFileError, UnstorableValueError
from td_memmap._h5_index import h5_rows, indexed_shape
from td_memmap._h5_life import FileLifecycleMixin
from td_memmap._h5_stage import (
    forget,
    is_staged,
    staged,
    staged_if_inplace,
    staged_read,
    staging,
)
from td_memmap._h5_views import FileViewsMixin
from td_memmap._persist_backend import Snapshot, StoreBackend, whole

__all__ = ["PersistentTensorDict"]

_NO_DEFAULT: Any = object()


class PersistentTensorDict(FileLifecycleMixin, FileViewsMixin, TensorDictBase):
    """A TensorDict stored in an HDF5 file or a zarr store, or one of their groups.

    Args:
        batch_size: the leading dims shared by every array; defaults to the
            one stored by `to_h5`/`to_zarr`/`from_dict`, else `[]` (for a zarr
            store written by another tool: the dims every array shares).
        filename: the file (HDF5) or store (zarr: a directory path or a
            `zarr.abc.store.Store`) to open with `mode`.
        group: an open `h5py.File`/`h5py.Group` or `zarr.Group` to wrap instead.
        mode: the mode for `filename` (`"r"`, `"r+"`, `"w"`, `"a"`).
        device: where leaves are placed when read.
        backend: `"h5"` (needs `td-memmap[h5]`) or `"zarr"` (needs `td-memmap[zarr]`).
        **kwargs: passed to h5py's `create_dataset` or zarr's `create_array`
            when writing new arrays (`compression="gzip"`, `chunks=(16,)`, ...).

    Raises:
        FileNotFoundError: `filename` does not exist (modes `"r"`, `"r+"`).
        MemmapFormatError: the file is not HDF5 (not zarr); the message names it.
        ValueError: an array does not start with `batch_size`; an unknown backend.

    Examples:
        >>> import tempfile, torch
        >>> from td_core import TensorDict
        >>> from td_memmap import PersistentTensorDict
        >>> path = tempfile.mkdtemp() + "/data.h5"
        >>> ptd = PersistentTensorDict.from_dict({"obs": torch.zeros(4, 3)}, path)
        >>> ptd.batch_size
        torch.Size([4, 3])
        >>> ptd[1:3] = TensorDict({"obs": torch.ones(2, 3)}, [2, 3])
        >>> ptd["obs"].sum().item()
        6.0
        >>> ptd.close()
    """

    # a leaf read is an in-memory copy of the dataset: views of the file, and in-place ops
    # reaching a group past its staged methods (in a tensorclass), write back per entry
    _file_backed = True
    _reads_are_copies = True

    def __init__(
        self,
        *,
        batch_size: Any = None,
        filename: str | os.PathLike | None = None,
        group: Any = None,
        mode: str = "r",
        device: Any = None,
        backend: str = "h5",
        **kwargs: Any,
    ) -> None:
        store = _backend(backend)
        if (filename is None) == (group is None):
            raise ValueError(
                "PersistentTensorDict needs exactly one of filename= or group=, "
                f"got filename={filename!r} and group={group!r}"
            )
        if group is None:
            group = store.open(filename, mode)
        self._init(group, store, mode, device, kwargs)
        if batch_size is None:  # opening reads the store, never writes it
            batch_size = store.stored_batch_size(group)
            if batch_size is None:
                batch_size = store.sub_batch_size(group, torch.Size([]))
        self._set_size(self._checked_size(batch_size))
        names = store.stored_names(group)
        if names is not None and len(names) == len(self._batch_size):
            self._names = tuple(names)

    def _init(
        self, group: Any, backend: StoreBackend, mode: str, device: Any, kwargs: dict[str, Any]
    ) -> None:
        self._group = group
        self._backend = backend
        self.backend = backend.name
        self.filename = backend.filename(group)
        self.mode = mode
        self.kwargs = kwargs
        self._device = torch.device(device) if device is not None else None
        self._batch_size = torch.Size([])
        self._is_locked = False
        self._names: tuple[str | None, ...] | None = None
        # key -> (node id of the group, the sub-TensorDict over it)
        self._nested: dict[str, tuple[tuple[str, str], Any]] = {}
        self._lock_ctx: list[bool] = []
        self._lock_called = False

    @classmethod
    def _wrap(
        cls,
        group: Any,
        backend: StoreBackend,
        batch_size: torch.Size,
        device: Any,
        kwargs: dict[str, Any],
    ) -> PersistentTensorDict:
        out = cls.__new__(cls)
        out._init(group, backend, "r" if backend.readonly(group) else "r+", device, kwargs)
        out._batch_size = batch_size
        names = backend.stored_names(group)
        if names is not None and len(names) == len(batch_size):
            out._names = tuple(names)
        return out

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_dict(  # type: ignore[override]  # upstream's signature: the file comes second
        cls,
        input_dict: Any,
        filename: str | os.PathLike,
        *,
        auto_batch_size: bool = False,
        batch_size: Any = None,
        device: Any = None,
        backend: str = "h5",
        **kwargs: Any,
    ) -> Any:
        """Write a mapping or TensorDict to a new HDF5 file (zarr store) and open it (`"r+"`).

        Args:
            input_dict: the data: a (nested) mapping of tensors, or a TensorDict.
            filename: the file (store) to write (replaced if it exists).
            auto_batch_size: use the longest leading shape every leaf shares.
            batch_size: the batch size; default: the TensorDict's, or for a
                mapping the longest leading shape every leaf shares.
            device: where leaves are placed when read.
            backend: `"h5"` or `"zarr"`.
            **kwargs: passed to h5py's `create_dataset` (`compression="gzip"`, ...)
                or zarr's `create_array` (`chunks=...`, `compressors=...`).

        Returns:
            A `PersistentTensorDict` (with zarr, a `LazyStackedTensorDict` of
            them for a lazy stack).

        Raises:
            UnstorableValueError: (a `TypeError`) a value is not a tensor, or
                requires grad; the message names the key. No file is written.
        """
        infer = auto_batch_size or batch_size is None  # None: TensorDict infers it
        if not is_tensor_collection(input_dict):
            td = TensorDict(input_dict, batch_size=None if infer else batch_size)
        elif auto_batch_size or (batch_size is not None and batch_size != input_dict.batch_size):
            td = TensorDict(input_dict.to_dict(), batch_size=None if infer else batch_size)
        else:
            td = input_dict
        store = _backend(backend)
        return cls._over(store.write_new(td, filename, kwargs), store, device=device, kwargs=kwargs)

    @classmethod
    def from_h5(  # type: ignore[override]  # upstream's signature
        cls, filename: Any, *, mode: str = "r", batch_size: Any = None
    ) -> PersistentTensorDict:
        """Open an HDF5 file; without `batch_size`, the stored one or the longest shared one."""
        return cls._open(filename, mode=mode, batch_size=batch_size, auto_batch_size=True)

    @classmethod
    def _open(
        cls,
        h5_file: Any,
        *,
        mode: str = "r",
        batch_size: Any = None,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        backend: str = "h5",
    ) -> Any:
        """Open a store (a path, a zarr store, or an open h5py File/Group or zarr Group);
        see `td_memmap.from_h5`. A zarr group holding a lazy stack opens as a
        `LazyStackedTensorDict` of PersistentTensorDicts."""
        store = _backend(backend)
        group = store.open(h5_file, mode) if not store.is_group(h5_file) else h5_file
        if store.stack_of(group) is not None:
            out: Any = cls._over(group, store)
            if batch_size is not None:
                out.batch_size = batch_size
            return out
        out = cls(group=group, batch_size=batch_size, backend=backend)
        out.mode = mode
        if batch_size is None and store.stored_batch_size(group) is None:
            if auto_batch_size or batch_dims is not None:
                out._set_size(store.auto_batch_size(group, batch_dims))
        return out

    @classmethod
    def _over(
        cls,
        group: Any,
        backend: StoreBackend,
        parent: torch.Size = torch.Size([]),  # noqa: B008 - immutable
        device: Any = None,
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """The TensorDict over `group`: a PersistentTensorDict, or a lazy stack of them."""
        stack = backend.stack_of(group)
        if stack is None:
            size = backend.sub_batch_size(group, parent)
            return cls._wrap(group, backend, size, device, kwargs or {})
        dim, count = stack
        members = [
            cls._over(backend.child(group, str(i)), backend, parent, device, kwargs)
            for i in range(count)
        ]
        out = LazyStackedTensorDict(*members, stack_dim=dim)
        names = backend.stored_names(group)
        if names is not None and len(names) == out.batch_dims:
            out.names = names
        return out

    # -------------------------------------------------------------- metadata
    @property
    def file(self) -> Any:
        """The group holding the entries (`h5py.File`/`zarr.Group` at the root)."""
        return self._group

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every leaf."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        size = self._checked_size(value)
        store = self._backend
        if not store.readonly(self._group) and store.stored_batch_size(self._group) != size:
            store.store_batch_size(self._group, size)  # so that opening it restores it
        self._set_size(size)

    def _checked_size(self, value: Any) -> torch.Size:
        size = torch.Size(value)
        n = len(size)
        for path, shape in self._backend.tensor_leaves(self._group):
            if tuple(shape[:n]) != tuple(size):
                raise ValueError(
                    f"{self.filename}: batch size {list(size)} does not match array "
                    f"{path!r} of shape {list(shape)}"
                )
        return size

    def _set_size(self, size: torch.Size) -> None:
        self._batch_size = size
        if self._names is not None and len(self._names) != len(size):
            self._names = None

    @property
    def device(self) -> torch.device | None:
        """Where leaves are placed when read (None: the CPU, as read)."""
        return self._device

    def _set_device(self, device: Any) -> None:
        self._device = torch.device(device) if device is not None else None
        for _, sub in self._nested.values():
            for member in getattr(sub, "tensordicts", [sub]):
                member._set_device(device)

    def close(self) -> None:
        """Close the file or store (nothing happens if it is closed already)."""
        self._backend.close(self._group)

    # ------------------------------------------------------------ primitives
    def _node(self, key: str) -> Any:
        return self._backend.child(self._group, key)

    def _sub(self, key: str, node: Any) -> Any:
        """The sub-TensorDict over the group `node` (cached while it is the same group)."""
        node_id = self._backend.node_id(node)
        hit = self._nested.get(key)
        if hit is not None and hit[0] == node_id:
            return hit[1]
        sub = PersistentTensorDict._over(
            node, self._backend, self._batch_size, self._device, self.kwargs
        )
        if isinstance(sub, PersistentTensorDict):
            sub._is_locked = self._is_locked
        elif self._is_locked:
            sub.lock_()
        self._nested[key] = (node_id, sub)
        return sub

    def _get_str(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        node = self._node(key)
        if node is None:
            return default
        store = self._backend
        if store.is_group(node):
            return self._sub(key, node)
        if store.is_text(node):
            return store.text_entry(node, self._batch_size, self._device)
        return staged_read(store, node, self._device)

    def _set_str(self, key: str, value: Any) -> None:
        store, group = self._backend, self._group
        store.check_key(key)
        name, where = store.node_id(group)
        path = f"{where.rstrip('/')}/{key}"
        if isinstance(value, PersistentTensorDict):
            if value._backend.node_id(value._group) == (name, path):
                return  # the entry itself, read back
            value = value.to_tensordict()
        parts = tuple(p for p in where.split("/") if p)
        full_key = (*parts, key) if parts else key  # the key from the store's root, for messages
        store.check_value(value, full_key)  # nothing is written if any leaf is refused
        store.check_writable(group, f"write key {full_key!r}")
        forget(store, group, key)
        self._nested.pop(key, None)
        if isinstance(value, torch.Tensor):
            store.create(group, key, value, self.kwargs)
        elif isinstance(value, NonTensorData):
            store.create_text(group, key, value.data, full_key)
        elif isinstance(value, NonTensorStack):  # a backend that holds one checked it
            store.create_text(group, key, value, full_key)
        else:
            store.write_group(group, key, value, self.kwargs)
        store.structure_changed(group)

    def _del_str(self, key: str) -> None:
        self._backend.check_writable(self._group, f"delete key {key!r}")
        forget(self._backend, self._group, key)
        self._nested.pop(key, None)
        self._backend.delete(self._group, key)
        self._backend.structure_changed(self._group)

    def _keys_str(self) -> list[str]:
        return self._backend.keys(self._group)

    def _items_str(self) -> list[tuple[str, Any]]:
        return [(key, self._get_str(key)) for key in self._keys_str()]

    def _values_str(self) -> list[Any]:
        return [value for _, value in self._items_str()]

    def _key_items(self) -> list[tuple[str, Any]]:
        # walking keys reads no data: an array stands in as a meta tensor of its shape
        store = self._backend
        return [
            (
                key,
                self._sub(key, node)
                if store.is_group(node)
                else self._get_str(key)
                if store.is_text(node)
                else store.meta(node),
            )
            for key, node in store.children(self._group)
        ]

    def _subtrees(self) -> list[TensorDictBase]:
        store = self._backend
        return [
            self._sub(key, node)
            for key, node in store.children(self._group)
            if store.is_group(node)
        ]

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        if isinstance(dest, NonTensorData):  # a value read from the file: write the new one
            self._set_str(key, self._validate(item, full_key))
            return
        if not isinstance(dest, torch.Tensor):
            super()._copy_into(key, dest, item, full_key)
            return
        self._backend.check_writable(self._group, f"write into key {full_key!r}")
        if isinstance(item, torch.Tensor) and item.requires_grad:
            raise UnstorableValueError(
                f"Cannot set a tensor that has requires_grad=True into key {full_key!r} of "
                f"a {self._backend.what}: write value.detach() instead"
            )
        super()._copy_into(key, dest, item, full_key)  # checks the shape, copies into `dest`
        if not is_staged(dest):  # a staged tensor is written when its op returns
            self._backend.write_at(self._node(key), (), dest)

    # ------------------------------------------------------------ reading
    def _dense(self, index: Any = (), view: Snapshot | None = None) -> TensorDict:
        """The entries (only the rows `index` selects) read into a `TensorDict`.

        `view`: the snapshot of the whole read (taken here for the top call).
        """
        shape = indexed_shape(self._batch_size, index)
        out = TensorDict(batch_size=shape, device=self._device)
        store = self._backend
        if view is None:
            view = store.snapshot(self._group, index)
        for key, node in view.children(self._group):
            if store.is_group(node):
                out._set_str(key, _dense_of(self._sub(key, node), index, view))
            elif store.is_text(node):
                out._set_str(key, store.text_entry(node, self._batch_size, self._device, index))
            else:
                out._set_str(key, view.read(node, index, self._device))
        if whole(index):
            out._names = self._names
        return out

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """Read everything into an in-memory `td_core.TensorDict`."""
        return self._dense(())

    to_local = to_tensordict

    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> TensorDict:
        """The entries read into an in-memory `td_core.TensorDict` (as `to_tensordict`).

        `inplace=True` is refused: the entries are in a file, not in memory.
        """
        if inplace:
            raise RuntimeError(
                f"contiguous(inplace=True) on a PersistentTensorDict ({self.filename!r}): its "
                "entries are in a file, not in memory; call contiguous() for an in-memory copy"
            )
        return self._dense(())

    def is_contiguous(self) -> bool:
        """False: the entries are in a file, not in memory."""
        return False

    def _index(self, index: Any) -> Any:
        rows = h5_rows(index, self._batch_size)
        if rows is None:
            return super()._index(index)  # any other index: read, then index in memory
        if isinstance(rows, np.ndarray):
            # h5py reads increasing, unique rows: read those, then reorder
            unique, inverse = np.unique(rows, return_inverse=True)
            return self._dense(unique)[torch.from_numpy(inverse.reshape(-1))]
        return self._dense(rows)

    # ------------------------------------------------------------ writing
    _setitem_staged = staged(TensorDictBase._setitem_index)

    def _setitem_index(self, index: Any, value: Any) -> None:
        """`td[index] = value`: only the rows `index` selects are read and written back
        when h5py can address them (an int, a slice, increasing positions or a mask over
        the first batch dim); any other index goes through a staged copy."""
        rows = h5_rows(index, self._batch_size)
        if rows is None or (isinstance(rows, np.ndarray) and (np.diff(rows) <= 0).any()):
            self._setitem_staged(index, value)
            return
        self._backend.check_writable(self._group, f"write at index {index!r}")
        part = self._dense(rows)  # those rows, in memory: the write is done there first
        # the non-tensor values as they are (in-place writes may change the leaf objects)
        before = {
            key: leaf.data if isinstance(leaf, NonTensorData) else None
            for key, leaf in part.items(True, True, is_leaf=is_leaf_nontensor)
        }
        part[...] = value
        after = dict(part.items(True, True, is_leaf=is_leaf_nontensor))
        if after.keys() != before.keys() or any(
            not isinstance(leaf, torch.Tensor)
            and not (isinstance(leaf, NonTensorData) and leaf.data == before[key])
            for key, leaf in after.items()
        ):  # new entries, or a non-tensor value changed at some rows: the general route
            self._setitem_staged(index, value)
            return
        nodes = {
            key: self._walk(key) for key, leaf in after.items() if isinstance(leaf, torch.Tensor)
        }
        if any(node is None for node in nodes.values()):  # e.g. a lazy stack: the general route
            self._setitem_staged(index, value)
            return
        for key, node in nodes.items():
            self._backend.write_at(node, rows, after[key])

    def get_at(self, key: Any, index: Any, default: Any = _NO_DEFAULT) -> Any:
        """`td.get(key)[index]`; for an array reached through groups, with an index over its
        first dim that the store addresses (an int, a slice, positions, a mask), only
        those rows are read (with zarr, only the chunks holding them)."""
        node = self._walk(unravel_key(key))
        store = self._backend
        if node is not None and not staging() and not store.is_group(node):
            if not store.is_text(node):
                rows = h5_rows(index, torch.Size(store.shape(node)[:1]))
                if isinstance(rows, np.ndarray):  # read increasing, unique rows, then reorder
                    unique, inverse = np.unique(rows, return_inverse=True)
                    out = store.read(node, unique, self._device)
                    return out[torch.from_numpy(inverse.reshape(-1))]
                if rows is not None:
                    return store.read(node, rows, self._device)
        if default is _NO_DEFAULT:  # this module's sentinel means "no default": get's rule
            return super().get_at(key, index)
        return super().get_at(key, index, default)

    def _walk(self, key: Any) -> Any:
        """The array at the nested `key`, if reached through groups of this kind only."""
        node, store = self._group, self._backend
        for part in (key,) if isinstance(key, str) else key:
            if not store.is_group(node) or store.stack_of(node) is not None:
                return None
            node = store.child(node, part)
        return node

    def set_non_tensor(self, key: Any, value: Any) -> PersistentTensorDict:
        """Refused, as upstream; `set(key, value)` stores a JSON-able value."""
        raise UnstorableValueError(
            "set_non_tensor is not compatible with the tensordict type PersistentTensorDict "
            f"(key {key!r}, file {self.filename!r}): use set(key, value), which stores a "
            "JSON-able value as JSON"
        )

    def detach_(self) -> PersistentTensorDict:
        """Nothing to do: values read from a file carry no gradient."""
        return self


def _no_pytree(td: PersistentTensorDict) -> Any:
    raise NotSupportedOnFileError(
        f"Persistent tensordicts cannot be used with vmap or other pytree transforms "
        f"(the data of {td.filename!r} is on disk): pass td.to_tensordict() instead"
    )


def _no_unflatten(children: Any, context: Any) -> Any:
    raise NotSupportedOnFileError("Persistent tensordicts cannot be rebuilt from a pytree")


# vmap and the other torch.func transforms see a PersistentTensorDict through pytree:
# refuse there with a clear error rather than as an opaque non-tensor argument
pytree.register_pytree_node(PersistentTensorDict, _no_pytree, _no_unflatten)


def _dense_of(sub: Any, index: Any, view: Snapshot) -> Any:
    """An in-memory copy of the sub-TensorDict `sub` (only the rows `index` selects)."""
    if isinstance(sub, PersistentTensorDict):
        return sub._dense(index, view)
    members = [_dense_of(m, (), view) for m in sub.tensordicts]
    out = LazyStackedTensorDict(*members, stack_dim=sub.stack_dim)
    names = sub._raw_names()
    if names is not None:
        out.names = list(names)
    return out if whole(index) else out[index]


# In-place ops of the base write into the tensors they read: run them staged, so
# that what they write reaches the file (and nothing does if they fail).
for _name in (
    *(
        "abs_ acos_ add_ addcdiv_ addcmul_ apply_ asin_ atan_ bitwise_and_ bitwise_or_ "
        "bitwise_xor_ ceil_ clamp_ clamp_max_ clamp_min_ copy_ copy_at_ cos_ cosh_ div_ erf_ "
        "erfc_ exp_ expm1_ fill_ floor_ frac_ lerp_ lgamma_ log10_ log1p_ log2_ log_ "
        "masked_fill_ maximum_ minimum_ mod_ mul_ neg_ pow_ reciprocal_ round_ rsqrt_ "
        "set_at_ sigmoid_ sign_ sin_ sinh_ sqrt_ sub_ tan_ tanh_ trunc_ update_ update_at_ "
        "zero_ __iadd__ __isub__ __imul__ __itruediv__ __ipow__ __iand__ __ior__ __ixor__"
    ).split(),
):
    setattr(PersistentTensorDict, _name, staged(getattr(TensorDictBase, _name)))
for _name in ("apply", "named_apply", "_fast_apply"):
    setattr(PersistentTensorDict, _name, staged_if_inplace(getattr(TensorDictBase, _name)))
del _name
