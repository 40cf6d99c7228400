"""How td lays TensorDicts out in HDF5, and how it reads and writes one dataset.

Groups are (sub-)TensorDicts, datasets are tensor leaves. A group's batch size
is its attribute `td_batch_size`. Dtypes numpy lacks (`bfloat16`, float8) are
stored as the integer type of the same width with the attribute `td_dtype`.
Non-tensor values are stored in string datasets: a `str` as is (upstream's
layout; read back as `bytes`, as upstream), other values as JSON with the
attribute `td_json` (decoded on read). Nothing is ever unpickled: datasets of object or opaque dtype are
refused with `MemmapFormatError`, and values that JSON cannot hold exactly are
refused with `UnstorableValueError` before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from td_core import NonTensorData, is_tensor_collection
from td_memmap._errors import MemmapFormatError, ReadOnlyMemmapError, UnstorableValueError
from td_memmap._format import VIEWED, exact_json
from td_memmap._optional import optional_module

__all__ = [
    "BS_ATTR",
    "h5py",
    "fname",
    "check_key",
    "is_group",
    "is_text",
    "read",
    "read_text",
    "create_text",
    "json_value",
    "meta",
    "to_array",
    "create",
    "write_at",
    "stored_batch_size",
    "datasets",
    "auto_batch_size_of",
    "check_value",
    "check_writable",
]

BS_ATTR = "td_batch_size"
_DTYPE_ATTR = "td_dtype"
_JSON_ATTR = "td_json"


def h5py() -> Any:
    """The `h5py` module, or an `ImportError` naming the extra to install."""
    return optional_module("h5py", "HDF5 support", "the 'h5py' package", "h5")


def fname(node: Any) -> str:
    """The file name of an h5py node (for messages)."""
    return str(node.file.filename)


def check_key(key: Any) -> str:
    """`key` if it can name an HDF5 node, else `ValueError` naming it."""
    if not isinstance(key, str) or not key or "/" in key or key in (".", ".."):
        raise ValueError(
            f"HDF5 keys must be non-empty strings without '/' (and not '.' or '..'), got {key!r}"
        )
    return key


def is_group(node: Any) -> bool:
    """Whether an h5py node is a group (a sub-TensorDict) rather than a dataset."""
    return hasattr(node, "keys")


def is_text(ds: Any) -> bool:
    """Whether the dataset `ds` holds strings (a non-tensor value), not numbers."""
    return ds.dtype.kind in "SU" or h5py().check_string_dtype(ds.dtype) is not None


def read_text(ds: Any) -> Any:
    """The value of a string dataset: JSON-decoded if td wrote it so, else the raw
    strings as h5py reads them (`bytes`, as upstream)."""
    raw = ds[()]
    if not ds.attrs.get(_JSON_ATTR):
        return raw
    try:
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError) as err:
        raise MemmapFormatError(
            f"{fname(ds)}: dataset {ds.name!r} is marked as JSON but does not decode ({err})"
        ) from err


def json_value(value: Any, path: Any) -> str | None:
    """`value` (a non-tensor leaf's data) as JSON, if JSON gives it back exactly; None
    for a `str`, which is stored as a plain HDF5 string (upstream's layout)."""
    if isinstance(value, str):
        return None
    text = exact_json(value, same_type=True)
    if text is None:
        raise UnstorableValueError(
            f"the non-tensor value at key {path!r} ({type(value).__name__}) cannot be stored in "
            "an HDF5 file: td stores strings, and other non-tensor values as JSON (numbers, "
            "lists, dicts), and never pickles; use memmap() with allow_pickle for it"
        )
    return text


def create_text(group: Any, key: str, value: Any, path: Any) -> None:
    """Write the non-tensor `value` as the new string dataset `key` of `group`."""
    text = json_value(value, path)
    if key in group:
        del group[key]
    ds = group.create_dataset(key, data=value if text is None else text)
    if text is not None:
        ds.attrs[_JSON_ATTR] = 1


def _dtype_name(ds: Any) -> str | None:
    name = ds.attrs.get(_DTYPE_ATTR)
    if name is None:
        return None
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name not in VIEWED:
        raise MemmapFormatError(f"{fname(ds)}: dataset {ds.name!r} has unknown td_dtype {name!r}")
    return name


def _check_readable(ds: Any) -> None:
    if ds.dtype.kind in "OVSU" or ds.dtype.hasobject:
        raise MemmapFormatError(
            f"{fname(ds)}: dataset {ds.name!r} has dtype {ds.dtype} that td does not load "
            "(object or opaque data could need unpickling; strings are not tensors)"
        )


def read(ds: Any, index: Any = (), device: torch.device | None = None) -> torch.Tensor:
    """The tensor stored in the dataset `ds` (only the rows `index` selects)."""
    _check_readable(ds)
    arr = np.asarray(ds[index])  # a 0-d array for a scalar row
    data = torch.from_numpy(np.ascontiguousarray(arr) if arr.ndim else arr.copy())
    name = _dtype_name(ds)
    if name is not None:
        data = data.view(VIEWED[name][0])
    return data if device is None else data.to(device)


def meta(ds: Any) -> torch.Tensor:
    """A `meta` tensor with the shape and dtype of the dataset `ds` (no data read)."""
    _check_readable(ds)
    name = _dtype_name(ds)
    dtype = VIEWED[name][0] if name is not None else torch.from_numpy(np.empty(0, ds.dtype)).dtype
    return torch.empty(tuple(ds.shape), dtype=dtype, device="meta")


def to_array(tensor: torch.Tensor) -> tuple[np.ndarray, str | None]:
    """`tensor` as a numpy array h5py can store, and the `td_dtype` to record (or None)."""
    tensor = tensor.detach().cpu().contiguous()
    name = str(tensor.dtype).removeprefix("torch.")
    if name in VIEWED:
        return tensor.view(VIEWED[name][1]).numpy(), name
    return tensor.numpy(), None


def create(group: Any, key: str, tensor: torch.Tensor, kwargs: dict[str, Any]) -> Any:
    """Write `tensor` as the new dataset `key` of `group` (replacing an existing node)."""
    array, name = to_array(tensor)
    if key in group:
        del group[key]
    ds = group.create_dataset(key, data=array, **(kwargs if array.ndim else {}))
    if name is not None:
        ds.attrs[_DTYPE_ATTR] = name
    return ds


def write_at(ds: Any, index: Any, tensor: torch.Tensor) -> None:
    """Write `tensor` into the rows `index` of the dataset `ds` (all of it for `()`)."""
    array, _ = to_array(tensor)
    if isinstance(index, tuple) and not index and tuple(array.shape) == tuple(ds.shape):
        ds.write_direct(np.ascontiguousarray(array)) if array.ndim else ds.__setitem__((), array)
        return
    ds[index] = array


def stored_batch_size(group: Any) -> torch.Size | None:
    """The batch size recorded on `group`, or None."""
    bs = group.attrs.get(BS_ATTR)
    if bs is None:
        return None
    dims = [int(s) for s in np.asarray(bs).reshape(-1)]
    if any(s < 0 for s in dims):
        raise MemmapFormatError(f"{fname(group)}: group {group.name!r} has a negative batch size")
    return torch.Size(dims)


def datasets(group: Any) -> Iterator[Any]:
    """Every tensor dataset under `group`, at any depth (string datasets are not batched)."""
    for value in group.values():
        if is_group(value):
            yield from datasets(value)
        elif not is_text(value):
            yield value


def auto_batch_size_of(group: Any, batch_dims: int | None = None) -> torch.Size:
    """The longest leading shape every dataset under `group` shares (at most `batch_dims`)."""
    shapes = [tuple(ds.shape) for ds in datasets(group)]
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


def check_value(value: Any, path: Any) -> None:
    """Refuse, before anything is written, a value an HDF5 file cannot hold safely.

    Raises:
        UnstorableValueError: a non-tensor value JSON cannot hold, or a tensor
            that requires grad; the message names the key `path`.
    """
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            raise UnstorableValueError(
                f"Cannot set a tensor that has requires_grad=True at key {path!r} of an HDF5 "
                "file (a file cannot hold the autograd graph): write value.detach() instead"
            )
        return
    if isinstance(value, NonTensorData):
        json_value(value.data, path)
        return
    if is_tensor_collection(value) and not getattr(type(value), "_is_non_tensor", False):
        for name, sub in value.items():
            check_key(name)
            child = (
                name if path == () else (*path, name) if isinstance(path, tuple) else (path, name)
            )
            check_value(sub, child)
        return
    raise UnstorableValueError(
        f"the value at key {path!r} ({type(value).__name__}) cannot be stored in an HDF5 file: "
        "it holds tensors, TensorDicts and one JSON value per non-tensor entry (a stack of "
        "different values would need pickle; use memmap() for it)"
    )


def check_writable(group: Any, what: str) -> None:
    """Raise `ReadOnlyMemmapError` if `group`'s file was opened read-only."""
    if group.file.mode == "r":
        raise ReadOnlyMemmapError(
            f"cannot {what}: the HDF5 file {fname(group)!r} is open read-only; "
            "open it with mode='r+' (PersistentTensorDict.from_h5(path, mode='r+'))"
        )
