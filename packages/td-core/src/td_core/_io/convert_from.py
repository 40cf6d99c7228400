"""Building TensorDicts from other containers (`from_any`, `from_tuple`, `from_pytree`, ...).

Every `from_*` builds a dense `td_core.TensorDict` (a tensorclass
with `from_dataclass(..., as_tensorclass=True)`) and ends in one tail,
`finish`: an explicit `batch_size` wins, else `auto_batch_size` /
`batch_dims` infer one, else it stays empty.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from td_core._core.contract import dense, provided
from td_core._core.contract import lazy as lazy_stack_of
from td_core._core.traverse import is_td
from td_core._core.utils import as_device, as_size
from td_core._io.formats import from_h5
from td_core._leaves.lists import stack_of_values
from td_core._leaves.nontensor import NonTensorStack
from td_core._ops.stack import stack
from td_core.errors import BatchSizeError, TDError

__all__ = [
    "ConversionError",
    "finish",
    "from_any",
    "from_dataclass",
    "from_json",
    "from_list",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "from_schema",
]

Tensor = torch.Tensor
PYTREE_TYPE = "_pytree_type"
PYTREE_KEYS = "_pytree_keys"  # a dict node's keys that are not strings, by their str()


class ConversionError(TDError, TypeError, AttributeError):
    """The input is not the kind of container the converter reads."""


def _dense(source: Mapping[str, Any] | None = None, batch_size: Any = ()) -> Any:
    return dense(source, batch_size)


def finish(
    td: Any,
    batch_size: Any = None,
    auto_batch_size: bool | None = False,
    batch_dims: int | None = None,
    device: Any = None,
    names: Sequence[str | None] | None = None,
) -> Any:
    """The tail every `from_*` shares: `td` given its batch size, device and dim names."""
    if batch_size is not None:
        td.batch_size = as_size(batch_size)
    elif auto_batch_size or batch_dims is not None:
        td.auto_batch_size_(batch_dims)
    if device is not None:
        td = td.to(device)
    if names is not None:
        td.names = names
    return td


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


# ---------------------------------------------------------------- from python
def _from_struct(arr: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    assert arr.dtype.names is not None
    for name in arr.dtype.names:
        field = arr[name]
        if field.dtype.names is not None:
            out[name] = _dense(_from_struct(field), field.shape)
        elif field.dtype.kind in "US":
            out[name] = NonTensorStack(field.astype(object)) if field.shape else str(field)
        else:
            try:
                out[name] = torch.from_numpy(field)
            except (ValueError, RuntimeError, TypeError):  # unaligned field: copy it
                out[name] = torch.from_numpy(np.ascontiguousarray(field))
    return out


def _tuple_entries(obj: Sequence[Any]) -> dict[str, Any]:
    return {str(i): _value(v) for i, v in enumerate(obj)}


def _is_h5_group(obj: Any) -> bool:
    """Whether `obj` is an h5py File or Group (checked without importing h5py)."""
    return type(obj).__module__.startswith("h5py") and hasattr(obj, "visit")


def _value(value: Any) -> Any:
    """An entry for `from_any`-style builders: containers become TensorDicts."""
    if is_td(value) or isinstance(value, Tensor):
        return value
    if _is_h5_group(value):  # an HDF5 file or group: a PersistentTensorDict (td-memmap[h5])
        return from_h5(value, auto_batch_size=True)
    if isinstance(value, Mapping):
        return _dense({k: _value(v) for k, v in value.items()})
    if _is_namedtuple(value):
        return _dense({k: _value(v) for k, v in value._asdict().items()})
    if isinstance(value, tuple):
        return _dense(_tuple_entries(value))
    if _is_dataclass_instance(value):
        return _dense({f.name: _value(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, np.ndarray) and value.dtype.names is not None:
        return _dense(_from_struct(value), value.shape)
    return value


def _pytree_node(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj
    if isinstance(obj, (bool, int, float)):
        return torch.as_tensor(obj)
    if is_td(obj):
        return obj  # a TensorDict in the tree stays one: `to_pytree` gives it back
    keys = None
    if isinstance(obj, Mapping):
        items = {str(k): _pytree_node(v) for k, v in obj.items()}
        if not all(type(k) is str for k in obj):
            keys = {str(k): k for k in obj}
            if len(keys) != len(obj):
                raise ValueError(
                    f"from_pytree: the keys {list(obj)!r} of a dict node do not have distinct "
                    "str() forms, which the TensorDict keys need"
                )
    elif _is_namedtuple(obj):
        items = {k: _pytree_node(v) for k, v in obj._asdict().items()}
    elif isinstance(obj, (tuple, list)):
        items = {str(i): _pytree_node(v) for i, v in enumerate(obj)}
    else:
        raise NotImplementedError(
            f"from_pytree: unsupported leaf type {type(obj).__name__!r}; leaves must be "
            "tensors or numbers, nodes dicts, lists, tuples or namedtuples"
        )
    td = _dense(items)
    td.set_non_tensor(PYTREE_TYPE, type(obj))
    if keys is not None:
        td.set_non_tensor(PYTREE_KEYS, keys)
    return td


def from_pytree(
    pytree: Any,
    *,
    batch_size: Any = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
) -> Any:
    """A TensorDict from a tree of dicts, lists, tuples and namedtuples (see `to_pytree`).

    Each node records its type under `"_pytree_type"` (and the keys of a dict
    whose keys are not all strings under `"_pytree_keys"`) so `to_pytree` can
    rebuild the tree; a TensorDict in the tree is kept as it is. A tensor
    passed alone is returned as it is.

    Raises:
        NotImplementedError: (a `RuntimeError`) for a leaf that is not a tensor or a number.
    """
    if isinstance(pytree, Tensor):
        return pytree
    return finish(_pytree_node(pytree), batch_size, auto_batch_size, batch_dims)


def from_namedtuple(
    named_tuple: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict whose keys are the fields of `named_tuple` (nested namedtuples nest)."""
    if not _is_namedtuple(named_tuple):
        raise ConversionError(
            f"from_namedtuple expects a namedtuple instance, got {type(named_tuple).__name__}"
        )
    td = _dense({k: _value(v) for k, v in named_tuple._asdict().items()})
    return finish(td, batch_size, auto_batch_size, batch_dims, device)


def from_tuple(
    obj: Sequence[Any],
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict with keys `"0"`, `"1"`, ... for the items of `obj` (nested tuples nest)."""
    if not isinstance(obj, (tuple, list)):
        raise TypeError(f"from_tuple expects a tuple, got {type(obj).__name__}")
    return finish(_dense(_tuple_entries(obj)), batch_size, auto_batch_size, batch_dims, device)


def from_dataclass(
    dataclass: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    as_tensorclass: bool = False,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict (or an instance of `dest_cls`) holding the fields of a dataclass instance.

    With `as_tensorclass=True` and a dataclass *type*, returns a tensorclass
    type with the same fields; with an instance, an instance of that tensorclass.
    """
    tensorclass = provided("tensorclass")
    if as_tensorclass and isinstance(dataclass, type):
        if not dataclasses.is_dataclass(dataclass):
            raise TypeError(f"from_dataclass expects a dataclass, got {dataclass!r}")
        return tensorclass(type(f"{dataclass.__name__}_tc", (dataclass,), {}))
    if not _is_dataclass_instance(dataclass):
        if isinstance(dataclass, type) and dataclasses.is_dataclass(dataclass):
            raise TypeError(
                f"from_dataclass got the dataclass type {dataclass.__name__}, not an instance; "
                "pass an instance, or as_tensorclass=True to convert the type"
            )
        raise TypeError(f"from_dataclass expects a dataclass instance, got {type(dataclass)!r}")
    fields = {f.name: _value(getattr(dataclass, f.name)) for f in dataclasses.fields(dataclass)}
    td = finish(_dense(fields), batch_size, auto_batch_size, batch_dims, device)
    if as_tensorclass:
        dest_cls = from_dataclass(type(dataclass), as_tensorclass=True)
    if dest_cls is not None:
        if hasattr(dest_cls, "from_tensordict"):
            return dest_cls.from_tensordict(td)
        return dest_cls(**dict(td.items()))
    return td


def from_struct_array(
    struct_array: np.ndarray,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict over a numpy structured array: one entry per field (nested dtypes nest).

    The batch size is the array's shape unless `batch_size` or
    `auto_batch_size` say otherwise. Numeric fields share memory with the
    array where their layout allows it.
    """
    if not isinstance(struct_array, np.ndarray) or struct_array.dtype.names is None:
        raise TypeError(
            f"from_struct_array expects a numpy structured array, got {type(struct_array).__name__}"
        )
    td = _dense(_from_struct(struct_array), struct_array.shape)
    if batch_size is None and (auto_batch_size or batch_dims is not None):
        td.batch_size = torch.Size()
    return finish(td, batch_size, auto_batch_size, batch_dims, device)


def from_list(input: Sequence[Any], lazy: bool | None) -> Any:
    """The rows of `TensorDict.from_list` stacked (see there); `finish` then sizes them."""
    if not isinstance(input, (list, tuple)):
        raise TypeError(f"from_list expects a list, got {type(input).__name__}")
    if not input:
        raise ValueError("from_list needs at least one element")
    items = []
    for i, item in enumerate(input):
        if is_td(item):
            items.append(item)
        elif isinstance(item, Mapping):
            items.append(_dense({k: _value(v) for k, v in item.items()}))
        else:
            raise TypeError(f"from_list: item {i} is a {type(item).__name__}, not a mapping")
    same = all(set(t.keys(True, True)) == set(items[0].keys(True, True)) for t in items)
    if lazy or not same:
        return lazy_stack_of(items, 0)
    if lazy is None:  # dense where the rows' entries share shapes, else lazy (as upstream)
        try:
            return stack(items, 0)
        except BatchSizeError:
            return lazy_stack_of(items, 0)
    return stack(items, 0)


def from_json(
    path: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    lines: bool = False,
    **kwargs: Any,
) -> Any:
    """Read what `to_json` wrote (a list of records, one per row).

    Keys joined with `separator` (default `"."`) become nested keys. Numbers
    become tensors (`dtype` if given), other values non-tensor leaves.
    """
    with open(path, encoding="utf-8") as f:
        if lines:
            records = [json.loads(line, **kwargs) for line in f if line.strip()]
        else:
            records = json.load(f, **kwargs)
    if isinstance(records, dict):
        records = [records]
        squeeze = True
    else:
        squeeze = False
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"from_json: {path!r} does not hold a list of JSON objects")
    columns: dict[str, list[Any]] = {}
    for record in records:
        for key, value in record.items():
            columns.setdefault(key, []).append(value)
    entries: dict[str, Any] = {}
    for key, values in columns.items():
        if len(values) != len(records):
            raise ValueError(f"from_json: key {key!r} is missing from some records")
        arr = np.asarray(values)
        if arr.dtype.kind in "biuf":
            entries[key] = torch.as_tensor(arr, dtype=dtype)
        else:
            entries[key] = stack_of_values(values)
    td = _dense(entries, [len(records)]).unflatten_keys(separator or ".")
    if squeeze:
        td = td[0]
    return finish(td, batch_size, auto_batch_size, batch_dims, device)


_STORAGES = (None, "memmap", "h5", "zarr", "shared", "redis", "dragonfly")


def from_schema(
    schema: Mapping[Any, tuple[Sequence[int], torch.dtype]],
    *,
    batch_size: Sequence[int] | torch.Size | None = None,
    storage: str | None = None,
    device: Any = None,
    **kwargs: Any,
) -> Any:
    """A zero-filled TensorDict from `{key: (element_shape, dtype)}` (see `TensorDict.from_schema`)."""
    if storage not in _STORAGES:
        raise ValueError(
            f"from_schema: Unknown storage backend {storage!r}; expected one of {list(_STORAGES)}"
        )
    bs = torch.Size(()) if batch_size is None else as_size(batch_size)
    # the backend writes the zeros: do not allocate them
    lazy_alloc = storage in ("memmap", "h5", "zarr")
    td = dense(None, bs, None if storage == "memmap" else as_device(device))
    for key, spec in schema.items():
        try:
            shape, dtype = spec
        except (TypeError, ValueError):
            raise TypeError(
                f"from_schema: the entry {key!r} must be a pair (element_shape, dtype), got {spec!r}"
            ) from None
        full = (*bs, *shape)
        if lazy_alloc:
            value = torch.zeros((), dtype=dtype).expand(full)
        else:
            value = torch.zeros(full, dtype=dtype, device=device)
        td.set(key, value)
    if storage == "memmap":
        return td.memmap_like(kwargs.pop("prefix", None), **kwargs)
    if storage == "h5":
        return td.to_h5(kwargs.pop("filename"), **kwargs)
    if storage == "zarr":  # needs td-memmap[zarr]; a PersistentTensorDict over the store
        return td.to_zarr(kwargs.pop("filename"), **kwargs)
    if storage == "shared":
        return td.share_memory_()
    if storage in ("redis", "dragonfly"):  # needs td-memmap[redis]; kwargs say where the server is
        return td.to_store(backend=storage, device=device, **kwargs)
    return td


def from_any(
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """Convert `obj` with the matching `from_*`: mappings, namedtuples, tuples,
    dataclasses, structured arrays, pandas DataFrames (as `from_pandas`), h5py
    files and groups (a `PersistentTensorDict`, with td-memmap[h5]); TensorDicts
    are returned as they are, as are tensors and other values. A list of numbers of one type (nested lists
    too, rectangular) becomes a tensor, any other list a non-tensor stack of its items.
    """
    kwargs = {
        "auto_batch_size": auto_batch_size,
        "batch_dims": batch_dims,
        "device": device,
        "batch_size": batch_size,
    }
    if is_td(obj) or isinstance(obj, Tensor):
        return obj
    if _is_h5_group(obj):
        return from_h5(obj, auto_batch_size=True, batch_dims=batch_dims, batch_size=batch_size)
    if isinstance(obj, Mapping):
        return finish(_dense({k: _value(v) for k, v in obj.items()}), **kwargs)
    if _is_namedtuple(obj):
        return from_namedtuple(obj, **kwargs)
    if isinstance(obj, tuple):
        return from_tuple(obj, **kwargs)
    if _is_dataclass_instance(obj):
        return from_dataclass(obj, **kwargs)
    if isinstance(obj, np.ndarray) and obj.dtype.names is not None:
        return from_struct_array(obj, **kwargs)
    if _is_dataframe(obj):
        return provided("from_pandas")(obj, **kwargs)
    if isinstance(obj, list):
        if _number_grid(obj) is not None:  # nested lists of numbers of one type: a tensor
            return torch.tensor(obj, device=as_device(device) if device is not None else None)
        return NonTensorStack.from_list(obj)
    return obj


def _is_dataframe(obj: Any) -> bool:
    """Whether `obj` is a pandas DataFrame; pandas is never imported for the check (an object
    can only be a DataFrame once pandas is imported)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def _number_grid(values: list[Any]) -> tuple[tuple[int, ...], type | None] | None:
    """`(shape, number type)` of rectangular nested lists of numbers of one Python type;
    `None` for anything else (as upstream, `[1, 2.0]` is no tensor)."""
    kinds: set[type] = set()
    shapes: set[tuple[int, ...]] = set()
    for v in values:
        if isinstance(v, list):
            inner = _number_grid(v)
            if inner is None:
                return None
            shapes.add(inner[0])
            if inner[1] is not None:
                kinds.add(inner[1])
        elif isinstance(v, (bool, int, float, complex)):
            kinds.add(type(v))
            shapes.add(())
        else:
            return None
        if len(kinds) > 1 or len(shapes) > 1:
            return None
    return (len(values), *(shapes.pop() if shapes else ())), (kinds.pop() if kinds else None)
