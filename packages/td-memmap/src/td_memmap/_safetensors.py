"""TensorDicts to and from safetensors files (needs `td-memmap[safetensors]`).

A file holds every tensor leaf under a name made of its nested key joined by
`"."`, plus one JSON metadata entry (`"tensordict"`) describing the tree:
batch sizes, dim names, which names are tensors and which keys are sub-
TensorDicts, and JSON-representable non-tensor values. The tree lists every
key explicitly, so keys that contain `"."` round-trip. The layout matches
upstream tensordict's, so files move between the two libraries.

A file without that metadata (a model checkpoint, say) loads as a nested
TensorDict with an empty batch size, each name split on `"."`.

Safety: nothing is unpickled; the metadata is parsed as JSON and checked
(keys are strings, every tensor it names exists, batch sizes are lists of
non-negative ints); any problem raises `MemmapFormatError` naming the
file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from td_core import NonTensorData, TensorDict, TensorDictBase, is_tensor_collection
from td_memmap._errors import MemmapFormatError
from td_memmap._format import exact_json
from td_memmap._optional import optional_module

__all__ = ["to_safetensors", "from_safetensors"]

_META_KEY = "tensordict"
_VERSION = 1


def _require() -> Any:
    return optional_module(
        "safetensors.torch", "safetensors support", "the 'safetensors' package", "safetensors"
    )


def _encode_node(td: TensorDictBase, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    names = getattr(td, "names", None)
    if names is not None and all(n is None for n in names):
        names = None
    keys: dict[str, Any] = {}
    for key, value in td._items_str():
        name = f"{prefix}{key}"
        if is_tensor_collection(value):
            keys[key] = {"td": _encode_node(value, name + ".", tensors)}
        elif isinstance(value, torch.Tensor):
            if name in tensors:
                raise ValueError(
                    f"to_safetensors: two leaves would be stored under the name {name!r}; "
                    "rename a key so that joining nested keys with '.' is unambiguous"
                )
            tensors[name] = value.detach().to("cpu").contiguous()
            keys[key] = {"tensor": name}
        else:
            data = getattr(value, "data", value)
            if exact_json(data) is None:
                raise TypeError(
                    f"to_safetensors: the non-tensor value at key {name!r} "
                    f"({type(data).__name__}) cannot be stored as JSON; safetensors files "
                    "hold tensors and JSON metadata only (use memmap() for other values)"
                )
            keys[key] = {"non_tensor": data}
    return {"batch_size": list(td.batch_size), "names": names, "keys": keys}


def to_safetensors(data: TensorDictBase, path: str | os.PathLike) -> None:
    """Write `data` to a safetensors file at `path`.

    Tensor leaves are stored under their nested key joined by `"."`; the
    batch sizes, dim names, nesting and JSON-representable non-tensor values
    go in the file's metadata.

    Args:
        data: the TensorDict (any kind; lazy stacks are stored densely).
        path: the file to write (replaced if it exists).

    Raises:
        TypeError: a non-tensor value is not JSON-representable.
        ImportError: safetensors is not installed (`td-memmap[safetensors]`).
    """
    st = _require()
    tensors: dict[str, torch.Tensor] = {}
    root = _encode_node(data, "", tensors)
    meta = json.dumps({"version": _VERSION, "root": root})
    st.save_file(tensors, str(path), metadata={_META_KEY: meta})


def _bad(path: Any, why: str) -> MemmapFormatError:
    return MemmapFormatError(f"{os.fspath(path)}: not a valid td safetensors file: {why}")


def _batch_size(path: Any, node: dict) -> torch.Size:
    bs = node.get("batch_size", [])
    if not isinstance(bs, list) or not all(isinstance(s, int) and s >= 0 for s in bs):
        raise _bad(path, f"batch_size {bs!r} is not a list of non-negative ints")
    return torch.Size(bs)


def _decode_node(path: Any, node: Any, tensors: dict[str, torch.Tensor], device: Any) -> TensorDict:
    if not isinstance(node, dict) or not isinstance(node.get("keys", {}), dict):
        raise _bad(path, "a tree node is not an object with 'keys'")
    out = TensorDict(batch_size=_batch_size(path, node), device=device)
    for key, entry in node.get("keys", {}).items():
        if not isinstance(entry, dict) or len(entry) != 1:
            raise _bad(path, f"entry {key!r} is not a one-field object")
        ((kind, value),) = entry.items()
        if kind == "tensor":
            if not isinstance(value, str) or value not in tensors:
                raise _bad(path, f"entry {key!r} names a missing tensor {value!r}")
            out._set_str(key, tensors[value])
        elif kind == "td":
            out._set_str(key, _decode_node(path, value, tensors, device))
        elif kind == "non_tensor":
            out._set_str(key, NonTensorData(value, batch_size=out.batch_size, device=device))
        else:
            raise _bad(path, f"entry {key!r} has unknown kind {kind!r}")
    names = node.get("names")
    if names is not None:
        if not isinstance(names, list) or len(names) != len(out.batch_size):
            raise _bad(path, f"names {names!r} do not match the batch size")
        if hasattr(out, "names"):  # dim names, where this td-core build has them
            out.names = names
    return out


def from_safetensors(
    path: str | os.PathLike, *, device: torch.device | str | int | None = None
) -> TensorDictBase:
    """Load a TensorDict from the safetensors file at `path`.

    A file written by `to_safetensors` loads with its nesting, batch
    sizes, dim names and non-tensor values; any other safetensors file loads
    as a nested TensorDict with an empty batch size (names split on `"."`).

    Args:
        path: the file to read.
        device: where to load the tensors; also the result's device.
            `None` (default) loads on the CPU with no device.

    Raises:
        FileNotFoundError: `path` does not exist.
        MemmapFormatError: (a `ValueError`) the file or its metadata is
            malformed; the message names the file.
        ImportError: safetensors is not installed (`td-memmap[safetensors]`).
    """
    st = _require()
    from safetensors import safe_open

    if not Path(path).is_file():
        raise FileNotFoundError(f"{os.fspath(path)}: no such safetensors file")
    dev = torch.device(device) if device is not None else None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            meta = (handle.metadata() or {}).get(_META_KEY)
        tensors = st.load_file(str(path), device="cpu" if dev is None else str(dev))
    except Exception as err:  # safetensors raises its own SafetensorError for bad headers
        raise _bad(path, str(err)) from err
    if meta is None:
        out = TensorDict(device=dev)
        for name, tensor in tensors.items():
            out.set(tuple(name.split(".")), tensor)
        return out
    try:
        tree = json.loads(meta)
    except ValueError as err:
        raise _bad(path, f"metadata is not JSON ({err})") from err
    if not isinstance(tree, dict) or tree.get("version") != _VERSION:
        found = tree.get("version") if isinstance(tree, dict) else tree
        raise _bad(path, f"unsupported metadata version {found!r}")
    return _decode_node(path, tree.get("root"), tensors, dev)
