"""TensorDicts to and from zarr stores (needs `td-memmap[zarr]`, zarr>=3.1).

Layout: a TensorDict is a zarr group, each tensor leaf an array and each
sub-TensorDict a sub-group. The group attribute `"__tensordict__"` (the name
upstream tensordict uses) holds `{"batch_size", "version", "names"}`, plus
`"dtypes"` (torch dtypes numpy lacks, e.g. bfloat16, stored as raw bits)
and, for a `LazyStackedTensorDict`, `"lazy_stack": {"stack_dim", "count"}`
with its members in sub-groups `"0"`, `"1"`, .... A non-tensor value is, as
upstream, a uint8 array of its JSON text marked by the array attribute
`"__tensordict_non_tensor__": {"encoding": "json"}`.

Safety: nothing is pickled or unpickled; a non-tensor value that JSON cannot
represent raises `TypeError` before anything is written, and an entry upstream
pickled raises `MemmapFormatError` naming it. Stores written by
other tools load too, each level with the leading dims all its entries share
as batch size (unless `batch_size` is given).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    TensorDict,
    TensorDictBase,
    is_tensor_collection,
)
from td_memmap._errors import MemmapFormatError

__all__ = ["to_zarr", "from_zarr"]

_META = "__tensordict__"
_NON_TENSOR = "__tensordict_non_tensor__"
_VERSION = 1
# torch dtypes numpy has no type for: stored as same-width unsigned ints
_RAW_BITS = {torch.bfloat16: torch.int16}


def _zarr() -> Any:
    try:
        import zarr
    except ImportError as err:  # pragma: no cover - zarr is a dev dependency
        raise ImportError(
            "zarr support needs the 'zarr' package (>=3.1): pip install 'td-memmap[zarr]'"
        ) from err
    return zarr


def _check_key(key: str, where: str) -> str:
    if not key or "/" in key or key.startswith("__"):
        raise ValueError(
            f"to_zarr: the key {where + key!r} cannot name a zarr node "
            "(zarr keys are non-empty, contain no '/' and do not start with '__')"
        )
    return key


def _json_value(value: Any, path: str) -> Any:
    data = value.data if isinstance(value, NonTensorData) else value
    try:
        ok = json.loads(json.dumps(data)) == data
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise TypeError(
            f"to_zarr: the non-tensor value at key {path!r} ({type(data).__name__}) "
            "cannot be stored as JSON; zarr stores hold arrays and JSON attributes only "
            "(td never pickles)"
        )
    return data


def _chunks(shape: tuple[int, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    chunks = out.pop("chunks", None)
    if chunks is None:
        out["chunks"] = tuple(max(s, 1) for s in shape) if shape else ()
    else:
        lead = tuple(chunks)[: len(shape)]
        out["chunks"] = tuple(max(min(c, s), 1) for c, s in zip(lead, shape)) + tuple(
            max(s, 1) for s in shape[len(lead) :]
        )
    out.setdefault("compressors", None)
    return out


def _check_tree(td: TensorDictBase, path: str) -> None:
    """Refuse what cannot be stored before anything is written."""
    if isinstance(td, LazyStackedTensorDict):
        for sub in td.tensordicts:
            _check_tree(sub, path)
        return
    for key, value in td._items_str():
        _check_key(key, path)
        if is_tensor_collection(value) and not isinstance(value, NonTensorData):
            _check_tree(value, f"{path}{key}/")
        elif not isinstance(value, torch.Tensor):
            _json_value(value, path + key)


def _write(group: Any, td: TensorDictBase, kwargs: dict[str, Any]) -> None:
    meta: dict[str, Any] = {"batch_size": list(td.batch_size), "version": _VERSION}
    names = getattr(td, "names", None)
    if names is not None and any(n is not None for n in names):
        meta["names"] = list(names)
    if isinstance(td, LazyStackedTensorDict):
        meta["lazy_stack"] = {"stack_dim": td.stack_dim, "count": len(td.tensordicts)}
        for i, sub in enumerate(td.tensordicts):
            _write(group.create_group(str(i)), sub, kwargs)
        group.attrs[_META] = meta
        return
    dtypes: dict[str, str] = {}
    for key, value in td._items_str():
        if is_tensor_collection(value) and not isinstance(value, NonTensorData):
            _write(group.create_group(key), value, kwargs)
        elif isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu")
            if tensor.dtype in _RAW_BITS:
                dtypes[key] = str(tensor.dtype).removeprefix("torch.")
                tensor = tensor.view(_RAW_BITS[tensor.dtype])
            array = tensor.contiguous().numpy()
            node = group.create_array(
                key, shape=array.shape, dtype=array.dtype, **_chunks(array.shape, kwargs)
            )
            if array.size:
                node[...] = array
        else:
            text = json.dumps(_json_value(value, key)).encode("utf-8")
            payload = np.frombuffer(text, dtype=np.uint8)
            node = group.create_array(key, shape=payload.shape, dtype=np.uint8)
            node[...] = payload
            node.attrs[_NON_TENSOR] = {"encoding": "json"}
    if dtypes:
        meta["dtypes"] = dtypes
    group.attrs[_META] = meta


def to_zarr(data: TensorDictBase, filename: Any, **kwargs: Any) -> TensorDictBase:
    """Write `data` to a zarr store and return it read back (see `from_zarr`).

    Args:
        data: a TensorDict or LazyStackedTensorDict (nested ones too).
        filename: a directory path, or a `zarr.abc.store.Store`. An existing
            store at that path is replaced.
        **kwargs: passed to `zarr.Group.create_array` (e.g. `compressors=...`).
            Each leaf is one uncompressed chunk unless told otherwise;
            `chunks=(16,)` chunks the leading dim of every leaf by 16 and leaves
            the trailing dims whole.

    Raises:
        TypeError: a non-tensor value cannot be stored as JSON (nothing is written).
        ValueError: a key cannot name a zarr node (nothing is written).
    """
    zarr = _zarr()
    _check_tree(data, "")
    store = os.fspath(filename) if isinstance(filename, (str, os.PathLike)) else filename
    root = zarr.open_group(store, mode="w")
    _write(root, data, kwargs)
    return _read(root, "")


def _meta_of(group: Any, where: str) -> dict[str, Any]:
    meta = group.attrs.get(_META)
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not isinstance(meta.get("batch_size", []), list):
        raise MemmapFormatError(f"from_zarr: the {_META!r} attribute of {where!r} is malformed")
    return dict(meta)


def _read_non_tensor(node: Any, where: str) -> Any:
    marker = node.attrs.get(_NON_TENSOR)
    if not isinstance(marker, dict) or marker.get("encoding") != "json":
        raise MemmapFormatError(
            f"from_zarr: the non-tensor entry {where!r} is stored with encoding "
            f"{marker.get('encoding') if isinstance(marker, dict) else marker!r}; td reads "
            "JSON only and never unpickles"
        )
    try:
        return json.loads(node[...].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise MemmapFormatError(f"from_zarr: the non-tensor entry {where!r} is not JSON") from err


def _read(group: Any, where: str) -> TensorDictBase:
    meta = _meta_of(group, where)
    stack = meta.get("lazy_stack")
    if stack is not None:
        members = [_read(group[str(i)], f"{where}{i}/") for i in range(int(stack["count"]))]
        out: TensorDictBase = LazyStackedTensorDict(*members, stack_dim=int(stack["stack_dim"]))
    else:
        zarr = _zarr()
        dtypes = meta.get("dtypes", {})
        entries: dict[str, Any] = {}
        for key, node in group.members():
            if isinstance(node, zarr.Group):
                entries[key] = _read(node, f"{where}{key}/")
            elif node.attrs.get(_NON_TENSOR) is not None:
                entries[key] = NonTensorData(_read_non_tensor(node, f"{where}{key}"))
            else:
                tensor = torch.from_numpy(np.ascontiguousarray(node[...]))
                if key in dtypes:
                    tensor = tensor.view(getattr(torch, dtypes[key]))
                entries[key] = tensor
        out = TensorDict(entries, batch_size=[])
        if "batch_size" in meta:
            out.batch_size = torch.Size(meta["batch_size"])
        else:  # a store written by another tool: the dims every leaf shares
            out.auto_batch_size_()
    names = meta.get("names")
    if names is not None:
        out.names = names
    return out


def from_zarr(
    filename: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> TensorDictBase:
    """Read a zarr store into a TensorDict (a LazyStackedTensorDict for a stored lazy stack).

    Args:
        filename: a directory path, or a `zarr.abc.store.Store`.
        mode: the zarr mode to open the store with (`"r"`, `"r+"`, `"a"`).
        auto_batch_size: use the leading dims every leaf shares.
        batch_dims: with `auto_batch_size`, at most this many dims.
        batch_size: the batch size (default: the one `to_zarr` stored, else `[]`).

    Raises:
        TypeError: both `batch_size` and `auto_batch_size` were given.
        MemmapFormatError: the store's td metadata is malformed.
    """
    if auto_batch_size and batch_size is not None:
        raise TypeError(
            "from_zarr: pass either batch_size or auto_batch_size=True, not both "
            "(conflicting batch sizes)"
        )
    zarr = _zarr()
    store = os.fspath(filename) if isinstance(filename, (str, os.PathLike)) else filename
    root = zarr.open_group(store, mode=mode)
    out = _read(root, "")
    if batch_size is not None:
        out.batch_size = torch.Size(batch_size)
    elif auto_batch_size:
        out.auto_batch_size_(batch_dims=batch_dims)
    return out
