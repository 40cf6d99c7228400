"""TensorDicts in HDF5 files through h5py (needs `td-memmap[h5]`).

`PersistentTensorDict` is a view on an HDF5 file or group: groups are
nested TensorDicts, datasets are leaves. Reading a key reads that dataset;
indexing the batch dims (`ptd[2:5]`, `ptd[idx]`) reads only the rows asked
for and returns an in-memory `td_core.TensorDict`.

`to_h5` writes each group's batch size as the attribute
`td_batch_size` so that `from_h5` restores it. Dtypes numpy lacks
(`bfloat16`, float8) are stored as same-width integers with the attribute
`td_dtype`. Nothing is unpickled: datasets of object or opaque dtype are
refused with `MemmapFormatError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from td_core import TensorDict, TensorDictBase, is_tensor_collection
from td_memmap._errors import MemmapFormatError

__all__ = ["PersistentTensorDict", "to_h5", "from_h5"]

_BS_ATTR = "td_batch_size"
_DTYPE_ATTR = "td_dtype"
# dtypes numpy cannot hold, stored as the integer type of the same width
_VIEWED = {
    "bfloat16": (torch.bfloat16, torch.int16),
    "float8_e4m3fn": (torch.float8_e4m3fn, torch.uint8),
    "float8_e5m2": (torch.float8_e5m2, torch.uint8),
}


def _h5py() -> Any:
    try:
        import h5py  # type: ignore[import-untyped]
    except ImportError as err:
        raise ImportError(
            "HDF5 support needs the 'h5py' package: pip install 'td-memmap[h5]'"
        ) from err
    return h5py


def _fname(node: Any) -> str:
    return str(node.file.filename)


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or "/" in key or key in (".", ".."):
        raise ValueError(
            f"HDF5 keys must be non-empty strings without '/' (and not '.' or '..'), got {key!r}"
        )
    return key


def _read(ds: Any, index: Any = ()) -> torch.Tensor:
    if ds.dtype.kind in "OV" or ds.dtype.hasobject:
        raise MemmapFormatError(
            f"{_fname(ds)}: dataset {ds.name!r} has dtype {ds.dtype} that td does not load "
            "(object or opaque data could need unpickling)"
        )
    arr = np.asarray(ds[index])  # a 0-d array for a scalar row
    data = torch.from_numpy(np.ascontiguousarray(arr) if arr.ndim else arr.copy())
    name = ds.attrs.get(_DTYPE_ATTR)
    if name is not None:
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name not in _VIEWED:
            raise MemmapFormatError(
                f"{_fname(ds)}: dataset {ds.name!r} has unknown td_dtype {name!r}"
            )
        data = data.view(_VIEWED[name][0])
    return data


def _stored_batch_size(group: Any) -> torch.Size | None:
    bs = group.attrs.get(_BS_ATTR)
    if bs is None:
        return None
    bs = [int(s) for s in np.asarray(bs).reshape(-1)]
    if any(s < 0 for s in bs):
        raise MemmapFormatError(f"{_fname(group)}: group {group.name!r} has a negative batch size")
    return torch.Size(bs)


def _auto_batch_size(group: Any, batch_dims: int | None) -> torch.Size:
    shapes = [tuple(ds.shape) for ds in _datasets(group)]
    if not shapes:
        return torch.Size([])
    common: list[int] = []
    for dims in zip(*shapes):
        if len(set(dims)) != 1:
            break
        common.append(dims[0])
    if batch_dims is not None:
        common = common[:batch_dims]
    return torch.Size(common)


def _datasets(group: Any) -> Iterator[Any]:
    for value in group.values():
        if hasattr(value, "keys"):
            yield from _datasets(value)
        else:
            yield value


class PersistentTensorDict:
    """A TensorDict-like view on an HDF5 file or group (needs `td-memmap[h5]`).

    Args:
        batch_size: the leading dims shared by every dataset; defaults to the
            one stored by `to_h5`, else `[]`.
        filename: an HDF5 file to open (with `mode`).
        group: an open `h5py.File` or `h5py.Group` to wrap instead.
        mode: the h5py mode for `filename` (`"r"`, `"r+"`, `"w"`, `"a"`).
        device: where leaves are placed when read.
    """

    def __init__(
        self,
        *,
        batch_size: Any = None,
        filename: str | os.PathLike | None = None,
        group: Any = None,
        mode: str = "r",
        device: Any = None,
    ) -> None:
        h5py = _h5py()
        if (filename is None) == (group is None):
            raise ValueError("PersistentTensorDict needs exactly one of filename= or group=")
        if group is None:
            path = os.fspath(filename)  # type: ignore[arg-type]
            if mode in ("r", "r+") and not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: no such HDF5 file")
            try:
                group = h5py.File(path, mode)
            except OSError as err:
                raise MemmapFormatError(f"{path}: cannot be opened as HDF5 ({err})") from err
        self._group = group
        self.device = torch.device(device) if device is not None else None
        if batch_size is None:
            batch_size = _stored_batch_size(group) or torch.Size([])
        self.batch_size = torch.Size(batch_size)

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every leaf."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        value = torch.Size(value)
        n = len(value)
        for ds in _datasets(self._group):
            if tuple(ds.shape[:n]) != tuple(value):
                raise ValueError(
                    f"{_fname(self._group)}: batch size {list(value)} does not match dataset "
                    f"{ds.name!r} of shape {list(ds.shape)}"
                )
        self._batch_size = value

    @property
    def batch_dims(self) -> int:
        return len(self._batch_size)

    @property
    def file(self) -> Any:
        """The open `h5py.File`."""
        return self._group.file

    @classmethod
    def from_h5(
        cls,
        filename: Any,
        *,
        mode: str = "r",
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        batch_size: Any = None,
    ) -> PersistentTensorDict:
        """Open `filename` (a path, or an open h5py File/Group)."""
        return from_h5(
            filename,
            mode=mode,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            batch_size=batch_size,
        )

    # ---- keys and leaves ---------------------------------------------------
    def _split(self, key: Any) -> tuple[str, ...]:
        if isinstance(key, str):
            return (_check_key(key),)
        if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
            return tuple(_check_key(k) for k in key)
        raise TypeError(f"keys are strings or tuples of strings, got {key!r}")

    def _wrap(self, node: Any, bs: torch.Size) -> Any:
        if hasattr(node, "keys"):
            sub = _stored_batch_size(node)
            return PersistentTensorDict(group=node, batch_size=sub or bs, device=self.device)
        out = _read(node)
        return out if self.device is None else out.to(self.device)

    def get(self, key: Any, default: Any = None) -> Any:
        """The leaf tensor or sub-`PersistentTensorDict` at `key` (`default` if missing)."""
        path = "/".join(self._split(key))
        if path not in self._group:
            return default
        return self._wrap(self._group[path], self._batch_size)

    def set(self, key: Any, value: Any) -> PersistentTensorDict:
        """Write `value` (a tensor or TensorDict) at `key`; needs a writable file."""
        *parents, last = self._split(key)
        group = self._group
        for name in parents:
            group = group.require_group(name)
        _write(group, last, value, self._batch_size, {})
        return self

    def __contains__(self, key: Any) -> bool:
        return "/".join(self._split(key)) in self._group

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        """The keys, nested ones as tuples when `include_nested`."""
        out: list[Any] = []

        def walk(group: Any, prefix: tuple[str, ...]) -> None:
            for name, node in group.items():
                is_group = hasattr(node, "keys")
                key = prefix + (name,)
                if not (leaves_only and is_group):
                    out.append(key if len(key) > 1 else name)
                if include_nested and is_group:
                    walk(node, key)

        walk(self._group, ())
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    # ---- indexing ------------------------------------------------------------
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and isinstance(index[0], str)
        ):
            out = self.get(index, None)
            if out is None:
                raise KeyError(f"{index!r} not found in {_fname(self._group)}")
            return out
        return self._read_rows(index)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not isinstance(key, (str, tuple)):
            raise TypeError("PersistentTensorDict supports writing whole keys only")
        self.set(key, value)

    def _read_rows(self, index: Any) -> TensorDict:
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        if isinstance(index, (list, np.ndarray)):
            arr = np.asarray(index)
            if arr.dtype == bool:
                arr = np.nonzero(arr.reshape(-1) if arr.ndim == 1 else arr)[0]
            if arr.ndim != 1:
                raise IndexError("PersistentTensorDict indexes with 1-D indices only")
            n = self._batch_size[0] if self._batch_size else 0
            arr = np.where(arr < 0, arr + n, arr)
            # h5py reads increasing, unique rows: read those, then reorder
            rows, inverse = np.unique(arr, return_inverse=True)
            whole = self._read_rows_raw(rows)
            return whole[torch.from_numpy(inverse)]
        return self._read_rows_raw(index)

    def _read_rows_raw(self, index: Any) -> TensorDict:
        shape = torch.empty(self._batch_size, device="meta")[
            torch.from_numpy(index) if isinstance(index, np.ndarray) else index
        ].shape

        def build(group: Any) -> TensorDict:
            out = TensorDict(batch_size=shape, device=self.device)
            for name, node in group.items():
                if hasattr(node, "keys"):
                    out._set_str(name, build(node))
                else:
                    leaf = _read(node, index)
                    out._set_str(name, leaf if self.device is None else leaf.to(self.device))
            return out

        return build(self._group)

    def to_tensordict(self) -> TensorDict:
        """Read everything into an in-memory `td_core.TensorDict`."""

        def build(group: Any, bs: torch.Size) -> TensorDict:
            out = TensorDict(batch_size=bs, device=self.device)
            for name, node in group.items():
                if hasattr(node, "keys"):
                    out._set_str(name, build(node, _stored_batch_size(node) or bs))
                else:
                    leaf = _read(node)
                    out._set_str(name, leaf if self.device is None else leaf.to(self.device))
            return out

        return build(self._group, self._batch_size)

    to_local = to_tensordict

    def close(self) -> None:
        """Close the HDF5 file."""
        self._group.file.close()

    def __enter__(self) -> PersistentTensorDict:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PersistentTensorDict(filename={_fname(self._group)!r}, group={self._group.name!r}, "
            f"keys={self.keys()}, batch_size={self._batch_size})"
        )


def _write(group: Any, key: str, value: Any, bs: torch.Size, kwargs: dict) -> None:
    _check_key(key)
    if key in group:
        del group[key]
    if is_tensor_collection(value) or isinstance(value, PersistentTensorDict):
        if isinstance(value, PersistentTensorDict):
            value = value.to_tensordict()
        sub = group.create_group(key)
        sub.attrs[_BS_ATTR] = list(value.batch_size)
        for name, leaf in value._items_str():
            _write(sub, name, leaf, value.batch_size, kwargs)
        return
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"to_h5: the value at key {key!r} ({type(value).__name__}) is not a tensor; "
            "HDF5 files hold tensors only here (use memmap() for other values)"
        )
    tensor = value.detach().cpu().contiguous()
    name = str(tensor.dtype).removeprefix("torch.")
    if name in _VIEWED:
        tensor = tensor.view(_VIEWED[name][1])
    ds = group.create_dataset(key, data=tensor.numpy(), **kwargs)
    if name in _VIEWED:
        ds.attrs[_DTYPE_ATTR] = name


def _check_tree(td: Any, prefix: tuple[str, ...]) -> None:
    for name, value in td._items_str():
        _check_key(name)
        if is_tensor_collection(value):
            _check_tree(value, (*prefix, name))
        elif not isinstance(value, torch.Tensor):
            raise TypeError(
                f"to_h5: the non-tensor value at key {(*prefix, name)!r} "
                f"({type(value).__name__}) cannot be stored in HDF5; use memmap() for it"
            )
        elif value.requires_grad:
            raise RuntimeError(
                f"to_h5: the tensor at key {(*prefix, name)!r} requires grad; "
                "write td.detach() instead (as upstream, a file cannot hold the graph)"
            )


def to_h5(td: TensorDictBase, filename: str | os.PathLike, **kwargs: Any) -> PersistentTensorDict:
    """Write `td` to the HDF5 file `filename` (replaced) and return it opened `"r+"`.

    Args:
        td: the TensorDict; its leaves must be tensors.
        filename: the file to write.
        **kwargs: passed to `h5py.Group.create_dataset` (`compression=...`).

    Raises:
        TypeError: a leaf is not a tensor (nothing is written).
        ValueError: a key contains `/`.
    """
    h5py = _h5py()
    _check_tree(td, ())  # validate everything before the file is created
    path = os.fspath(filename)
    with h5py.File(path, "w") as file:
        file.attrs[_BS_ATTR] = list(td.batch_size)
        for name, value in td._items_str():
            _write(file, name, value, td.batch_size, kwargs)
    return PersistentTensorDict(filename=path, mode="r+")


def from_h5(
    h5_file: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> PersistentTensorDict:
    """Open an HDF5 file (path, or open h5py File/Group) as a `PersistentTensorDict`.

    The batch size is `batch_size` if given, else the one `to_h5`
    stored, else (with `auto_batch_size`) the leading dims every dataset
    shares (at most `batch_dims`), else `[]`.

    Raises:
        FileNotFoundError: the file does not exist.
        MemmapFormatError: the file is not HDF5; the message names it.
    """
    if isinstance(h5_file, (str, os.PathLike)):
        out = PersistentTensorDict(filename=h5_file, mode=mode, batch_size=batch_size or [])
    else:
        out = PersistentTensorDict(group=h5_file, batch_size=batch_size or [])
    if batch_size is None:
        stored = _stored_batch_size(out._group)
        if stored is not None:
            out.batch_size = stored
        elif auto_batch_size or batch_dims is not None:
            out.batch_size = _auto_batch_size(out._group, batch_dims)
    return out
