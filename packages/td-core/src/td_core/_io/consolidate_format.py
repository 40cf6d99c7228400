"""The JSON description of a consolidated buffer, and the file `consolidate(filename=...)` writes.

A consolidated TensorDict is one `uint8` buffer plus the places of its
leaves in it. `describe_layout` writes those places as plain JSON (dtype
names, shapes, byte offsets, non-tensor values, lazy stacks member by
member, nested jagged tensors as their values/offsets/lengths), and
`build_from_layout` reads such a description back over a buffer after
validating it: dtypes come from a fixed table, every tensor lies inside the
buffer, keys are strings. The file format is the buffer, then the
description, its length (8 bytes, little endian) and a magic tag. No pickle
is involved anywhere.
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from td_core._core.class_lookup import loaded_object
from td_core._core.contract import TensorDictContract, dense, lazy
from td_core._core.predicates import is_tensorclass
from td_core._core.traverse import is_nt, stack_parts
from td_core._leaves.nontensor import NonTensorData, NonTensorStack

__all__ = [
    "ALIGN",
    "MAGIC",
    "TRAILER",
    "build_from_layout",
    "describe_layout",
    "from_consolidated",
    "jagged_parts",
]

Tensor = torch.Tensor
ALIGN = 16  # covers every dtype's itemsize, so each view starts on its element boundary
MAGIC = b"TDCONS01"
TRAILER = struct.Struct("<Q8s")
_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex32,
        torch.complex64,
        torch.complex128,
    )
}


def jagged_parts(t: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """`(values, offsets, lengths or None)` of a nested jagged tensor (torch types them loosely)."""
    njt: Any = t
    return njt.values(), njt.offsets(), njt.lengths()


def _tensor_spec(t: Tensor, offsets: Iterator[int]) -> dict[str, Any]:
    return {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "offset": next(offsets),
    }


def _json_value(data: Any, key: str) -> Any:
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        raise TypeError(
            f"consolidate(filename=...) stores non-tensor values as JSON; the value at "
            f"{key!r} ({type(data).__name__}) is not JSON-serialisable"
        ) from None
    return data


def describe_layout(td: TensorDictContract, offsets: Iterator[int]) -> dict[str, Any]:
    """The JSON layout of `td`, consuming one offset per buffer part from `offsets`.

    A dense level is `{"batch_size", "entries"}` with, per key, a tensor slot, a
    nested jagged tensor (its parts' slots), a non-tensor value or stack, or a
    sub-tree; a lazy stack is `{"stack": dim, "members": [...]}`.
    """
    parts = stack_parts(td)
    if parts is not None:
        members, dim = parts
        return {"stack": dim, "members": [describe_layout(m, offsets) for m in members]}
    entries: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            if value.is_nested:
                values, offs, lengths = jagged_parts(value)
                entries[key] = {
                    "jagged": {
                        "ragged_idx": int(getattr(value, "_ragged_idx", 1)),
                        "values": _tensor_spec(values, offsets),
                        "offsets": _tensor_spec(offs, offsets),
                        "lengths": None if lengths is None else _tensor_spec(lengths, offsets),
                    }
                }
            else:
                entries[key] = {"tensor": _tensor_spec(value, offsets)}
        elif is_nt(value):
            if isinstance(value, NonTensorData):
                entries[key] = {"non_tensor": _json_value(value.data, key)}
            else:
                flat = value.as_array().reshape(-1).tolist()
                entries[key] = {
                    "non_tensor_stack": {
                        "shape": list(value.batch_size),
                        "values": _json_value(flat, key),
                    }
                }
        else:
            entries[key] = {"tensordict": describe_layout(value, offsets)}
    out: dict[str, Any] = {"batch_size": list(td.batch_size), "entries": entries}
    if is_tensorclass(td):
        cls = type(td)
        out["class"] = f"{cls.__module__}:{cls.__qualname__}"
    return out


def from_consolidated(filename: str | os.PathLike[str]) -> Any:
    """Map a file written by `consolidate(filename=...)` back as a consolidated TensorDict.

    Raises:
        ValueError: naming the file, if it is not such a file or its layout is invalid.
    """
    path = Path(filename)
    size = path.stat().st_size
    if size < TRAILER.size:
        raise ValueError(f"{path}: too small to be a consolidated TensorDict ({size} bytes)")
    with open(path, "rb") as f:
        f.seek(size - TRAILER.size)
        length, magic = TRAILER.unpack(f.read(TRAILER.size))
        if magic != MAGIC or length > size - TRAILER.size:
            raise ValueError(f"{path}: not a file written by consolidate(filename=...)")
        f.seek(size - TRAILER.size - length)
        try:
            description = json.loads(f.read(length))
        except ValueError as err:
            raise ValueError(f"{path}: the layout description is not valid JSON: {err}") from None
    total = description.get("total") if isinstance(description, dict) else None
    if not isinstance(total, int) or total != size - TRAILER.size - length:
        raise ValueError(f"{path}: the layout's size does not match the file")
    buffer = torch.from_file(str(path), shared=True, size=total, dtype=torch.uint8)
    return build_from_layout(description.get("tree"), buffer, total, path)


def build_from_layout(tree: Any, buffer: Tensor, total: int, path: object) -> Any:
    """A TensorDict of views of `buffer` described by `tree` (validated; `path` names the source in errors)."""
    if isinstance(tree, dict) and "stack" in tree:
        dim, members = tree["stack"], tree.get("members")
        if not isinstance(dim, int) or not isinstance(members, list) or not members:
            raise ValueError(f"{path}: malformed lazy stack in the layout")
        return lazy([build_from_layout(m, buffer, total, path) for m in members], dim)
    if not isinstance(tree, dict) or not isinstance(tree.get("entries"), dict):
        raise ValueError(f"{path}: malformed layout description")
    batch_size = tree.get("batch_size")
    if not isinstance(batch_size, list) or not all(
        isinstance(d, int) and d >= 0 for d in batch_size
    ):
        raise ValueError(f"{path}: malformed batch_size {batch_size!r}")
    out = dense(None, torch.Size(batch_size))
    for key, entry in tree["entries"].items():
        if not isinstance(key, str) or not isinstance(entry, dict) or len(entry) != 1:
            raise ValueError(f"{path}: malformed entry {key!r}")
        ((kind, spec),) = entry.items()
        if kind == "tensor":
            out.set(key, _tensor(spec, buffer, total, path, key))
        elif kind == "jagged":
            out.set(key, _jagged(spec, buffer, total, path, key))
        elif kind == "tensordict":
            out.set(key, build_from_layout(spec, buffer, total, path))
        elif kind == "non_tensor":
            out.set(key, NonTensorData(spec, out.batch_size))
        elif kind == "non_tensor_stack":
            out.set(key, _non_tensor_stack(spec, path, key))
        else:
            raise ValueError(f"{path}: unknown entry kind {kind!r} at {key!r}")
    name = tree.get("class")
    if name is None:
        return out
    cls = _loaded_tensorclass(name, path)
    return out if cls is None else cls.from_tensordict(out)


def _loaded_tensorclass(name: Any, path: object) -> Any:
    """The tensorclass `module:qualname` if its module is loaded in this process, else `None`
    (with a warning). Nothing is imported: a layout from a file or a peer names a class,
    it never makes this process run a module."""
    found = loaded_object(name) if isinstance(name, str) else None
    if isinstance(found, type) and is_tensorclass(found):
        return found
    warnings.warn(
        f"{path}: the data is a tensorclass {name!r}, which is not loaded in this process "
        "(td imports nothing a layout names): it is returned as a TensorDict; import the "
        "class's module first to get the class back",
        UserWarning,
        stacklevel=3,
    )
    return None


def _non_tensor_stack(spec: Any, path: object, key: str) -> NonTensorStack:
    shape = spec.get("shape") if isinstance(spec, dict) else None
    values = spec.get("values") if isinstance(spec, dict) else None
    if (
        not isinstance(shape, list)
        or not all(isinstance(d, int) and d >= 0 for d in shape)
        or not isinstance(values, list)
        or len(values) != torch.Size(shape).numel()
    ):
        raise ValueError(f"{path}: malformed non-tensor stack at {key!r}")
    array = np.empty((len(values),), dtype=object)
    for i, v in enumerate(values):
        array[i] = v
    return NonTensorStack(array.reshape(shape))


def _jagged(spec: Any, buffer: Tensor, total: int, path: object, key: str) -> Tensor:
    if not isinstance(spec, dict) or not isinstance(spec.get("ragged_idx"), int):
        raise ValueError(f"{path}: malformed nested jagged tensor entry {key!r}")
    values = _tensor(spec.get("values"), buffer, total, path, key)
    offsets = _tensor(spec.get("offsets"), buffer, total, path, key)
    lengths = spec.get("lengths")
    lengths = None if lengths is None else _tensor(lengths, buffer, total, path, key)
    try:
        return torch.nested.nested_tensor_from_jagged(
            values, offsets, lengths=lengths, jagged_dim=spec["ragged_idx"]
        )
    except (RuntimeError, ValueError, IndexError) as err:
        raise ValueError(f"{path}: invalid nested jagged tensor at {key!r}: {err}") from None


def _tensor(spec: Any, buffer: Tensor, total: int, path: object, key: str) -> Tensor:
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: malformed tensor entry {key!r}")
    name = spec.get("dtype")
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    shape, offset = spec.get("shape"), spec.get("offset")
    if dtype is None:
        raise ValueError(f"{path}: unknown dtype {spec.get('dtype')!r} at {key!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > 64
        or not all(isinstance(d, int) and d >= 0 for d in shape)
    ):
        raise ValueError(f"{path}: malformed shape {shape!r} at {key!r}")
    nbytes = torch.Size(shape).numel() * dtype.itemsize
    if not isinstance(offset, int) or offset < 0 or offset % ALIGN or offset + nbytes > total:
        raise ValueError(f"{path}: entry {key!r} lies outside the buffer")
    return buffer[offset : offset + nbytes].view(dtype).view(shape)
