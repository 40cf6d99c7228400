"""How td lays TensorDicts out in zarr stores (zarr>=3.1, `td-memmap[zarr]`).

A TensorDict is a zarr group, each tensor leaf an array and each
sub-TensorDict a sub-group. The group attribute `"__tensordict__"` (the name
upstream tensordict uses) holds `{"batch_size", "version", "names"}` and, for
a `LazyStackedTensorDict`, `"lazy_stack": {"stack_dim", "count"}` with its
members in sub-groups `"0"`, `"1"`, .... Dtypes numpy lacks (bfloat16,
float8) are stored as the unsigned integer type of the same width, with the
array attribute `"__tensordict_dtype__"` naming the torch dtype. A
non-tensor value is, as upstream, a uint8 array of its JSON text marked by
the array attribute `"__tensordict_non_tensor__": {"encoding": "json"}`. A
stack of different values (`NonTensorStack`) is, as upstream, marked by the
array attribute `"__tensordict_stack__": shape`: a zarr string array of that
shape when every element is a string, else the JSON text of its nested lists.

Safety: nothing is pickled or unpickled; a non-tensor value that JSON cannot
represent is refused before anything is written, and an entry upstream
pickled raises `MemmapFormatError` naming it.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import torch

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDictBase,
    is_tensor_collection,
)
from td_memmap._errors import MemmapFormatError, UnstorableValueError
from td_memmap._format import VIEWED, exact_json, object_array
from td_memmap._optional import optional_module

__all__ = [
    "META",
    "NON_TENSOR",
    "STACK",
    "DTYPE",
    "VERSION",
    "VIEWED",
    "zarr_module",
    "check_key",
    "json_value",
    "chunk_kwargs",
    "check_tree",
    "write_tree",
    "write_tensor",
    "write_text",
    "stack_values",
    "write_stack",
    "read_stack",
    "meta_of",
    "consolidate",
]

META = "__tensordict__"
NON_TENSOR = "__tensordict_non_tensor__"
STACK = "__tensordict_stack__"
DTYPE = "__tensordict_dtype__"
VERSION = 1


def zarr_module() -> Any:
    """The `zarr` module, or an `ImportError` naming the extra to install."""
    return optional_module("zarr", "zarr support", "the 'zarr' package (>=3.1)", "zarr")


def check_key(key: Any, where: str = "") -> str:
    """`key` if it can name a zarr node, else `ValueError` naming it."""
    if not isinstance(key, str) or not key or "/" in key or key.startswith("__"):
        raise ValueError(
            f"the key {where + key if isinstance(key, str) else key!r} cannot name a zarr node "
            "(zarr keys are non-empty strings, contain no '/' and do not start with '__')"
        )
    return key


def json_value(value: Any, path: Any) -> Any:
    """The data of the non-tensor `value`, if JSON gives it back exactly."""
    data = value.data if isinstance(value, NonTensorData) else value
    if exact_json(data) is None:
        raise UnstorableValueError(
            f"the non-tensor value at key {path!r} ({type(data).__name__}) cannot be stored "
            "in a zarr store as JSON; zarr stores hold arrays and JSON values only "
            "(td never pickles)"
        )
    return data


def _all_str(values: Any, ndim: int) -> bool:
    if ndim == 0:
        return type(values) is str
    return all(_all_str(v, ndim - 1) for v in values)


def stack_values(value: NonTensorStack, path: Any) -> tuple[list[Any], list[int], bool]:
    """The elements of the stack `value` (nested lists), its shape, and whether every one
    is a string; `UnstorableValueError` naming `path` when JSON cannot hold them."""
    values, shape = value.tolist(), list(value.batch_size)
    if _all_str(values, len(shape)):
        return values, shape, True
    if exact_json(values) is None:
        raise UnstorableValueError(
            f"the non-tensor stack at key {path!r} cannot be stored in a zarr store: its "
            "elements are neither all strings nor JSON values (td never pickles)"
        )
    return values, shape, False


def write_stack(group: Any, key: str, value: NonTensorStack, path: Any) -> Any:
    """Write the stack `value` as the new array `key` of `group` (upstream's layout)."""
    values, shape, strings = stack_values(value, path)
    if not strings:
        return _write_json(group, key, values, {STACK: shape})
    node = group.create_array(
        key, shape=tuple(shape), dtype=str, compressors=None, attributes={STACK: shape}
    )
    if all(shape):
        node[...] = object_array(values, tuple(shape))
    return node


def read_stack(node: Any, values: Any, device: Any) -> NonTensorStack:
    """The stack stored in `node`, whose elements (nested lists) are `values`."""
    shape = node.attrs.get(STACK)
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise MemmapFormatError(f"the {STACK!r} attribute of zarr array {node.path!r} is malformed")
    try:
        array = object_array(values, tuple(shape))
    except ValueError as err:
        raise MemmapFormatError(f"zarr array {node.path!r}: {err}") from None
    return NonTensorStack(array, device=device)


def chunk_kwargs(shape: tuple[int, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` for `create_array`: one uncompressed chunk unless told otherwise; a
    `chunks` shorter than `shape` chunks the leading dims and leaves the rest whole."""
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


def check_tree(td: Any, path: str) -> None:
    """Refuse, before anything is written, what a zarr store cannot hold (`path`: the
    prefix of the keys, for messages)."""
    if isinstance(td, LazyStackedTensorDict):
        for sub in td.tensordicts:
            check_tree(sub, path)
        return
    for key, value in td._items_str():
        check_key(key, path)
        if isinstance(value, NonTensorStack):
            stack_values(value, path + key)
        elif is_tensor_collection(value) and not isinstance(value, NonTensorData):
            check_tree(value, f"{path}{key}/")
        elif isinstance(value, torch.Tensor):
            if value.requires_grad:
                raise UnstorableValueError(
                    f"Cannot write a tensor that has requires_grad=True at key {path + key!r} "
                    "of a zarr store (a store cannot hold the autograd graph): write "
                    "value.detach() instead"
                )
        else:
            json_value(value, path + key)


def _is_zero_fill(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is one value broadcast (e.g. `from_schema`'s zeros) equal to zero,
    which a new zarr array already holds: nothing needs writing."""
    if not tensor.numel() or any(s != 0 for s in tensor.stride()):
        return False
    return not bool(tensor.reshape(-1)[0].item())


def write_tensor(group: Any, key: str, tensor: torch.Tensor, kwargs: dict[str, Any]) -> Any:
    """Write `tensor` as the new array `key` of `group` (which holds no `key`)."""
    tensor = tensor.detach().to("cpu")
    name = str(tensor.dtype).removeprefix("torch.")
    attrs = {}
    if name in VIEWED:
        attrs[DTYPE] = name
        tensor = tensor.view(VIEWED[name][1])
    dtype = torch.empty(0, dtype=tensor.dtype).numpy().dtype
    shape = tuple(tensor.shape)
    node = group.create_array(
        key, shape=shape, dtype=dtype, attributes=attrs, **chunk_kwargs(shape, kwargs)
    )
    if tensor.numel() and not _is_zero_fill(tensor):
        node[...] = tensor.contiguous().numpy()
    return node


def write_text(group: Any, key: str, value: Any, path: Any) -> Any:
    """Write the non-tensor `value` as JSON text in the new uint8 array `key` of `group`."""
    return _write_json(group, key, json_value(value, path), {})


def _write_json(group: Any, key: str, data: Any, attrs: dict[str, Any]) -> Any:
    payload = np.frombuffer(json.dumps(data).encode("utf-8"), dtype=np.uint8)
    node = group.create_array(
        key,
        shape=payload.shape,
        dtype=np.uint8,
        compressors=None,
        attributes={**attrs, NON_TENSOR: {"encoding": "json"}},
    )
    node[...] = payload
    return node


def write_tree(group: Any, td: TensorDictBase, kwargs: dict[str, Any]) -> None:
    """Write `td` (checked with `check_tree`) into the empty group `group`."""
    meta: dict[str, Any] = {"batch_size": list(td.batch_size), "version": VERSION}
    names = getattr(td, "names", None)
    if names is not None and any(n is not None for n in names):
        meta["names"] = list(names)
    if isinstance(td, LazyStackedTensorDict):
        meta["lazy_stack"] = {"stack_dim": td.stack_dim, "count": len(td.tensordicts)}
        for i, sub in enumerate(td.tensordicts):
            write_tree(group.create_group(str(i)), sub, kwargs)
        group.attrs[META] = meta
        return
    for key, value in td._items_str():
        if isinstance(value, NonTensorStack):
            write_stack(group, key, value, key)
        elif is_tensor_collection(value) and not isinstance(value, NonTensorData):
            write_tree(group.create_group(key), value, kwargs)
        elif isinstance(value, torch.Tensor):
            write_tensor(group, key, value, kwargs)
        else:
            write_text(group, key, value, key)
    group.attrs[META] = meta


def meta_of(group: Any) -> dict[str, Any]:
    """The td metadata of `group` (`{}` for a group another tool wrote)."""
    meta = group.attrs.get(META)
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not isinstance(meta.get("batch_size", []), list):
        raise MemmapFormatError(f"the {META!r} attribute of zarr group {group.path!r} is malformed")
    return dict(meta)


def consolidate(store: Any) -> None:
    """Write the store's consolidated metadata (so readers open it in one read)."""
    zarr = zarr_module()
    with warnings.catch_warnings():  # zarr notes that the v3 spec lacks it; upstream writes it
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(store)
