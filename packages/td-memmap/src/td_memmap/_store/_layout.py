"""How a TensorDictStore lays its entries out in a Redis server.

For a stored TensorDict with namespace `ns` and id `tid`:

- `ns:tid:meta` (a hash): `batch_size` (JSON list of ints), `device`
  (`""` or a device string), `format` (`"td-store/1"`).
- `ns:tid:keys` (a hash): one field per entry, named by the JSON list of its
  key path (`["a", "b"]`), whose value is JSON metadata: `{"kind": "tensor",
  "dtype": name, "shape": [...]}` (with `"unbatched": true` for an
  `UnbatchedTensor`), `{"kind": "td", "batch_size": [...]}` for a
  sub-TensorDict, `{"kind": "non_tensor", "value": ...}` or
  `{"kind": "non_tensor_stack", "shape": [...], "values": [...]}`.
- `ns:tid:data:<path JSON>` (a string): a tensor's raw bytes, C-contiguous,
  in the byte order of the machine that wrote them.

Dtype names come from td-memmap's fixed table (`td_memmap.DTYPES`); nothing is
ever unpickled. Every write of whole entries is one MULTI/EXEC transaction, so
a reader sees all of it or none of it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from td_core import NonTensorData, NonTensorStack, UnbatchedTensor
from td_memmap._format import dtype_from_name, dtype_name, value_from_json, value_to_json

__all__ = [
    "FORMAT",
    "field",
    "path_of",
    "tensor_meta",
    "tensor_bytes",
    "tensor_from_bytes",
    "non_tensor_meta",
    "non_tensor_from_meta",
]

FORMAT = "td-store/1"


def field(path: tuple[str, ...]) -> str:
    """The registry field (and data-key suffix) naming the entry at `path`."""
    return json.dumps(list(path), ensure_ascii=False, separators=(",", ":"))


def path_of(name: bytes | str) -> tuple[str, ...]:
    """Inverse of `field`."""
    text = name.decode() if isinstance(name, bytes) else name
    return tuple(json.loads(text))


def tensor_meta(value: torch.Tensor, key: object) -> dict[str, Any]:
    """The metadata of a tensor entry; `TypeError` naming `key` for a dtype with no raw bytes."""
    try:
        name = dtype_name(value.dtype, key=key)
    except TypeError as err:
        raise TypeError(f"cannot store entry {key!r} in the key-value store: {err}") from None
    meta: dict[str, Any] = {"kind": "tensor", "dtype": name, "shape": list(value.shape)}
    if isinstance(value, UnbatchedTensor):  # read back as one, outside the batch dims
        meta["unbatched"] = True
    return meta


def tensor_bytes(value: torch.Tensor) -> bytes:
    """The raw bytes of `value` (on the CPU, C-contiguous)."""
    flat = value.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def tensor_from_bytes(meta: dict[str, Any], data: bytes | None, key: object) -> torch.Tensor:
    """The tensor stored as `data` with metadata `meta`.

    Raises:
        ValueError: naming `key` when the metadata or the byte count is wrong.
    """
    dtype = dtype_from_name(meta.get("dtype"))
    shape = meta.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(type(s) is int for s in shape):
        raise ValueError(
            f"entry {key!r} in the key-value store has invalid metadata {meta!r} "
            "(unknown dtype or bad shape)"
        )
    data = data or b""
    count = int(np.prod(shape)) if shape else 1
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != count * itemsize:
        raise ValueError(
            f"entry {key!r} in the key-value store holds {len(data)} bytes, but its metadata "
            f"says shape {shape} of {meta['dtype']} ({count * itemsize} bytes)"
        )
    if count == 0:
        value = torch.empty(shape, dtype=dtype)
    else:
        value = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
    return UnbatchedTensor(value) if meta.get("unbatched") is True else value


def non_tensor_meta(value: Any, key: object) -> dict[str, Any]:
    """The metadata of a non-tensor entry, its value as JSON; `TypeError` naming `key`."""
    try:
        if isinstance(value, NonTensorStack):
            flat = value.as_array().reshape(-1)
            return {
                "kind": "non_tensor_stack",
                "shape": list(value.batch_size),
                "values": [value_to_json(_plain(v)) for v in flat],
            }
        return {"kind": "non_tensor", "value": value_to_json(value.data)}
    except TypeError as err:
        raise TypeError(
            f"cannot store the non-tensor entry {key!r} in the key-value store: values are "
            f"kept as JSON, never pickled ({err})"
        ) from None


def _plain(value: Any) -> Any:
    """A stack element as a plain value (a 0-d object array holds one)."""
    return value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value


def non_tensor_from_meta(
    meta: dict[str, Any], batch_size: torch.Size, device: torch.device | None
) -> NonTensorData | NonTensorStack:
    """The non-tensor entry described by `meta`."""
    if meta["kind"] == "non_tensor":
        return NonTensorData(value_from_json(meta["value"]), batch_size, device)
    shape = tuple(meta["shape"])
    arr = np.empty(shape, dtype=object)
    for i, v in enumerate(meta["values"]):
        arr.flat[i] = value_from_json(v)
    return NonTensorStack(arr, device=device)
