"""`PersistentTensorDict`: a TensorDict whose entries live in an HDF5 file (needs `td-memmap[h5]`).

It is a full `td_core.TensorDictBase` kind: it implements the storage
primitives over an h5py group (groups are sub-TensorDicts, datasets are
leaves) and every op comes from the base. Reads return tensors read from the
file; ops that make new data (`td + 1`, `td.apply(fn)`, `td[2:5]`) return
in-memory `td_core.TensorDict`s. Writes go to the file: `set` creates or
replaces datasets, and in-place ops (`set_`, `update_`, `td[idx] = value`,
`add_`, `apply_`, `zero_`, ...) write into the existing datasets (see
`td_memmap._h5_stage`). Indexing the batch dims (`td[2]`, `td[2:5]`,
`td[[0, 3]]`) reads only the rows asked for.

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
    NonTensorData,
    TensorDict,
    TensorDictBase,
    is_leaf_nontensor,
    is_tensor_collection,
)
from td_core.errors import LockedError
from td_memmap._errors import MemmapFormatError, NotSupportedOnFileError, UnstorableValueError
from td_memmap._h5_format import (
    BS_ATTR,
    auto_batch_size_of,
    check_key,
    check_value,
    check_writable,
    create,
    create_text,
    datasets,
    fname,
    h5py,
    is_group,
    is_text,
    meta,
    read,
    read_text,
    stored_batch_size,
    write_at,
)
from td_memmap._h5_index import h5_rows, indexed_shape
from td_memmap._h5_stage import forget, is_staged, staged, staged_if_inplace, staged_read
from td_memmap._h5_views import FileViewsMixin
from td_memmap._h5_write import copy_file, write_file, write_group

__all__ = ["PersistentTensorDict"]

_NO_DEFAULT: Any = object()


class PersistentTensorDict(FileViewsMixin, TensorDictBase):
    """A TensorDict stored in an HDF5 file or group (needs `td-memmap[h5]`).

    Args:
        batch_size: the leading dims shared by every dataset; defaults to the
            one stored by `to_h5`/`from_dict`, else `[]`.
        filename: an HDF5 file to open (with `mode`).
        group: an open `h5py.File` or `h5py.Group` to wrap instead.
        mode: the h5py mode for `filename` (`"r"`, `"r+"`, `"w"`, `"a"`).
        device: where leaves are placed when read.
        **kwargs: passed to h5py's `create_dataset` when writing new datasets
            (`compression="gzip"`, ...).

    Raises:
        FileNotFoundError: `filename` does not exist (modes `"r"`, `"r+"`).
        MemmapFormatError: the file is not HDF5; the message names it.
        ValueError: a dataset does not start with `batch_size`.

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

    # a leaf read is an in-memory copy of the dataset: td-core's write-through views
    # (sub-TensorDicts, lazy views) write through the file's own primitives
    _file_backed = True

    def __init__(
        self,
        *,
        batch_size: Any = None,
        filename: str | os.PathLike | None = None,
        group: Any = None,
        mode: str = "r",
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        module = h5py()
        if (filename is None) == (group is None):
            raise ValueError(
                "PersistentTensorDict needs exactly one of filename= or group=, "
                f"got filename={filename!r} and group={group!r}"
            )
        if group is None:
            path = os.fspath(filename)  # type: ignore[arg-type]
            if mode in ("r", "r+") and not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: no such HDF5 file")
            try:
                group = module.File(path, mode)
            except OSError as err:
                raise MemmapFormatError(f"{path}: cannot be opened as HDF5 ({err})") from err
        self._init(group, mode, device, kwargs)
        if batch_size is None:  # opening reads the file, never writes it
            batch_size = stored_batch_size(group) or torch.Size([])
        self._set_size(self._checked_size(batch_size))

    def _init(self, group: Any, mode: str, device: Any, kwargs: dict[str, Any]) -> None:
        self._group = group
        self.filename = fname(group)
        self.mode = mode
        self.kwargs = kwargs
        self._device = torch.device(device) if device is not None else None
        self._batch_size = torch.Size([])
        self._is_locked = False
        self._names: tuple[str | None, ...] | None = None
        self._nested: dict[str, PersistentTensorDict] = {}
        self._lock_ctx: list[bool] = []
        self._lock_called = False

    @classmethod
    def _wrap(
        cls, group: Any, batch_size: torch.Size, device: Any, kwargs: dict[str, Any]
    ) -> PersistentTensorDict:
        out = cls.__new__(cls)
        out._init(group, "r" if group.file.mode == "r" else "r+", device, kwargs)
        out._batch_size = batch_size
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
        **kwargs: Any,
    ) -> PersistentTensorDict:
        """Write a mapping or TensorDict to a new HDF5 file `filename` and open it (`"r+"`).

        Args:
            input_dict: the data: a (nested) mapping of tensors, or a TensorDict.
            filename: the file to write (replaced if it exists).
            auto_batch_size: use the longest leading shape every leaf shares.
            batch_size: the batch size; default: the TensorDict's, or for a
                mapping the longest leading shape every leaf shares.
            device: where leaves are placed when read.
            **kwargs: passed to h5py's `create_dataset` (`compression="gzip"`, ...).

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
        write_file(td, filename, kwargs)
        return cls(filename=filename, mode="r+", device=device, **kwargs)

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
    ) -> PersistentTensorDict:
        """Open an HDF5 file (a path, or an open h5py File/Group); see `td_memmap.from_h5`."""
        if isinstance(h5_file, (str, os.PathLike)):
            out = cls(filename=h5_file, mode=mode, batch_size=batch_size)
        else:
            out = cls(group=h5_file, batch_size=batch_size)
        if batch_size is None and stored_batch_size(out._group) is None:
            if auto_batch_size or batch_dims is not None:
                out._set_size(auto_batch_size_of(out._group, batch_dims))
        return out

    # -------------------------------------------------------------- metadata
    @property
    def file(self) -> Any:
        """The h5py group (the `h5py.File` at the root) holding the entries."""
        return self._group

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every leaf."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        size = self._checked_size(value)
        if self._group.file.mode != "r" and stored_batch_size(self._group) != size:
            self._group.attrs[BS_ATTR] = list(size)  # so that from_h5 restores it
        self._set_size(size)

    def _checked_size(self, value: Any) -> torch.Size:
        size = torch.Size(value)
        n = len(size)
        for ds in datasets(self._group):
            if tuple(ds.shape[:n]) != tuple(size):
                raise ValueError(
                    f"{fname(self._group)}: batch size {list(size)} does not match dataset "
                    f"{ds.name!r} of shape {list(ds.shape)}"
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
        for sub in self._nested.values():
            sub._set_device(device)

    def close(self) -> None:
        """Close the HDF5 file (nothing happens if it is closed already)."""
        if self._group.id.valid:
            self._group.file.close()

    # ------------------------------------------------------------ primitives
    def _node(self, key: str) -> Any:
        if "/" in key or key in (".", ".."):
            return None
        return self._group.get(key)

    def _sub(self, key: str, node: Any) -> PersistentTensorDict:
        sub = self._nested.get(key)
        if sub is None or sub._group.name != node.name or not sub._group:
            bs = stored_batch_size(node)
            sub = PersistentTensorDict._wrap(
                node, self._batch_size if bs is None else bs, self._device, self.kwargs
            )
            sub._is_locked = self._is_locked
            self._nested[key] = sub
        return sub

    def _get_str(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        node = self._node(key)
        if node is None:
            return default
        if is_group(node):
            return self._sub(key, node)
        if is_text(node):
            return NonTensorData(read_text(node), batch_size=self._batch_size, device=self._device)
        return staged_read(node, self._device)

    def _set_str(self, key: str, value: Any) -> None:
        check_key(key)
        path = f"{self._group.name.rstrip('/')}/{key}"
        if isinstance(value, PersistentTensorDict):
            if value._group.file == self._group.file and value._group.name == path:
                return  # the entry itself, read back
            value = value.to_tensordict()
        parts = tuple(p for p in self._group.name.split("/") if p)
        full_key = (*parts, key) if parts else key  # the key from the file's root, for messages
        check_value(value, full_key)  # nothing is written if any leaf is refused
        check_writable(self._group, f"write key {full_key!r}")
        forget(self._group, key)
        self._nested.pop(key, None)
        if isinstance(value, torch.Tensor):
            create(self._group, key, value, self.kwargs)
            return
        if isinstance(value, NonTensorData):
            create_text(self._group, key, value.data, full_key)
            return
        write_group(self._group, key, value, self.kwargs)

    def _del_str(self, key: str) -> None:
        check_writable(self._group, f"delete key {key!r}")
        forget(self._group, key)
        self._nested.pop(key, None)
        del self._group[key]

    def _keys_str(self) -> list[str]:
        return list(self._group.keys())

    def _items_str(self) -> list[tuple[str, Any]]:
        return [(key, self._get_str(key)) for key in self._group.keys()]

    def _values_str(self) -> list[Any]:
        return [value for _, value in self._items_str()]

    def _key_items(self) -> list[tuple[str, Any]]:
        # walking keys reads no data: a dataset stands in as a meta tensor of its shape
        return [
            (
                key,
                self._sub(key, node)
                if is_group(node)
                else self._get_str(key)
                if is_text(node)
                else meta(node),
            )
            for key, node in self._group.items()
        ]

    def _subtrees(self) -> list[TensorDictBase]:
        return [self._sub(key, node) for key, node in self._group.items() if is_group(node)]

    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        if isinstance(dest, NonTensorData):  # a value read from the file: write the new one
            self._set_str(key, self._validate(item, full_key))
            return
        if not isinstance(dest, torch.Tensor):
            super()._copy_into(key, dest, item, full_key)
            return
        check_writable(self._group, f"write into key {full_key!r}")
        if isinstance(item, torch.Tensor) and item.requires_grad:
            raise UnstorableValueError(
                f"Cannot set a tensor that has requires_grad=True into key {full_key!r} of "
                "an HDF5 file: write value.detach() instead"
            )
        super()._copy_into(key, dest, item, full_key)  # checks the shape, copies into `dest`
        if not is_staged(dest):  # a staged tensor is written when its op returns
            write_at(self._node(key), (), dest)

    # ------------------------------------------------------------ reading
    def _dense(self, index: Any = ()) -> TensorDict:
        """The entries (only the rows `index` selects) read into a `TensorDict`."""
        shape = indexed_shape(self._batch_size, index)
        out = TensorDict(batch_size=shape, device=self._device)
        for key, node in self._group.items():
            if is_group(node):
                out._set_str(key, self._sub(key, node)._dense(index))
            elif is_text(node):
                out._set_str(key, NonTensorData(read_text(node), shape, self._device))
            else:
                out._set_str(key, read(node, index, self._device))
        if isinstance(index, tuple) and not index:
            out._names = self._names
        return out

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """Read everything into an in-memory `td_core.TensorDict`."""
        return self._dense(())

    to_local = to_tensordict

    def contiguous(self) -> TensorDict:
        """The entries read into an in-memory `td_core.TensorDict` (as `to_tensordict`)."""
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
        check_writable(self._group, f"write at index {index!r}")
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
        for key, leaf in after.items():
            if isinstance(leaf, torch.Tensor):
                path = "/".join((key,) if isinstance(key, str) else key)
                write_at(self._group[path], rows, leaf)

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

    # ------------------------------------------------------------ copies
    def clone(  # upstream's extra keyword
        self, recurse: bool = True, *, newfile: str | os.PathLike | None = None
    ) -> Any:
        """A copy.

        Args:
            recurse: with False, a new `PersistentTensorDict` on the same file.
            newfile: copy the file there and open the copy (`"r+"`). Without
                it, the copy is an in-memory `TensorDict`.
        """
        if not recurse:
            out = PersistentTensorDict._wrap(
                self._group, self._batch_size, self._device, self.kwargs
            )
            out._names = self._names
            return out
        if newfile is None:
            return self.to_tensordict()
        sizes: dict[str, Any] = {"": self._batch_size}
        _nested_sizes(self, "", sizes)
        copy_file(self._group, newfile, sizes)
        out = PersistentTensorDict(
            filename=newfile,
            mode="r+",
            batch_size=self._batch_size,
            device=self._device,
            **self.kwargs,
        )
        out._names = self._names
        return out

    # ------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "group": self._group.name,
            "mode": "r" if self._group.file.mode == "r" else "r+",
            "batch_size": tuple(self._batch_size),
            "device": None if self._device is None else str(self._device),
            "locked": self._is_locked,
            "names": self._names,
            "kwargs": self.kwargs,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        file = PersistentTensorDict(filename=state["filename"], mode=state["mode"]).file
        group = file if state["group"] == "/" else file[state["group"]]
        self._init(group, state["mode"], state["device"], state["kwargs"])
        self._batch_size = torch.Size(state["batch_size"])
        self._names = state["names"]
        if state["locked"]:
            self.lock_()

    # ------------------------------------------------------------ context
    def lock_(self) -> PersistentTensorDict:
        self._lock_called = True
        return super().lock_()

    def unlock_(self) -> PersistentTensorDict:
        self._lock_called = True
        return super().unlock_()

    def __enter__(self) -> PersistentTensorDict:
        """`with td.lock_():`/`with td.unlock_():` restore the lock on exit; `with td:` closes."""
        is_lock = self._lock_called
        self._lock_called = False
        self._lock_ctx.append(is_lock)
        return super().__enter__() if is_lock else self

    def __exit__(self, *exc: object) -> None:
        if self._lock_ctx and self._lock_ctx.pop():
            super().__exit__(*exc)
            return
        self.close()

    # ------------------------------------------------------------ structure
    def select(self, *keys: Any, inplace: bool = False, strict: bool = True) -> Any:
        """Only the given keys: a `TensorDict` of them (sub-TensorDicts stay on file);
        with `inplace=True` the other entries are deleted from the file."""
        result = super().select(*keys, strict=strict)
        if not inplace:
            return result
        self._check_restructure()
        _prune(self, result)
        return self

    def exclude(self, *keys: Any, inplace: bool = False) -> Any:
        """All but the given keys: a `TensorDict`; with `inplace=True` they are deleted
        from the file."""
        if not inplace:
            return super().exclude(*keys)
        self._check_restructure()
        present = self.keys(include_nested=True)
        for key in keys:
            if key in present:
                self.del_(key)
        return self

    def _check_restructure(self) -> None:
        if self._is_locked:
            raise LockedError(
                f"cannot restructure a locked PersistentTensorDict ({self.filename!r}) in "
                "place: unlock_() it first"
            )


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


def _prune(td: PersistentTensorDict, keep: Any) -> None:
    """Delete from `td` every entry that `keep` (a selection of it) does not hold."""
    kept = set(keep._keys_str())
    for key in td._keys_str():
        if key not in kept:
            td._del_str(key)
            continue
        sub, wanted = td._get_str(key), keep._get_str(key)
        if isinstance(sub, PersistentTensorDict) and wanted is not sub:
            _prune(sub, wanted)


def _nested_sizes(td: PersistentTensorDict, prefix: str, out: dict[str, Any]) -> None:
    for key, sub in td._nested.items():
        out[prefix + key] = sub.batch_size
        _nested_sizes(sub, prefix + key + "/", out)


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
for _name in ("apply", "named_apply"):
    setattr(PersistentTensorDict, _name, staged_if_inplace(getattr(TensorDictBase, _name)))
del _name
