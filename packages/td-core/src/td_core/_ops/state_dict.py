"""`state_dict` and `load_state_dict`: a TensorDict's tensors in `nn.Module`'s format.

A state dict maps dotted keys (`"a.b"`) to tensors, in key order, with the
batch size and device of every level in a `_metadata` attribute (`""` for
the root, `"a"` for the sub-TensorDict at `"a"`), as `nn.Module.state_dict`
keeps its per-module metadata. `flatten=False` nests plain `OrderedDict`s
instead, each with its own `_metadata`. Loading reads the flat, the nested
and upstream's legacy format (`"__batch_size"`/`"__device"` entries), checks
everything, then writes: a state dict that does not fit changes nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_td
from td_core.errors import DeviceError, MissingEntryError

__all__ = ["state_dict_of", "load_state_dict_into"]

Tensor = torch.Tensor
_LEGACY = ("__batch_size", "__device")


def _meta(td: TensorDictContract) -> dict[str, Any]:
    return {"batch_size": td.batch_size, "device": td.device}


def state_dict_of(
    td: TensorDictContract,
    destination: dict[str, Any] | None,
    prefix: str,
    keep_vars: bool,
    flatten: bool,
) -> OrderedDict[str, Any]:
    """`td.state_dict(...)` (see `StructureMixin.state_dict`)."""
    out: Any = OrderedDict() if destination is None else destination
    if not hasattr(out, "_metadata"):
        out._metadata = OrderedDict()
    out._metadata[prefix[:-1] if prefix.endswith(".") else prefix] = _meta(td)
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            out[prefix + key] = value if keep_vars else value.detach()
        elif is_td(value) and not getattr(value, "_is_non_tensor", False):
            if flatten:
                state_dict_of(value, out, f"{prefix}{key}.", keep_vars, True)
            else:
                out[prefix + key] = state_dict_of(value, None, "", keep_vars, False)
    return out


def _read(
    source: Mapping[str, Any],
    prefix: tuple[str, ...],
    leaves: dict[tuple[str, ...], Any],
    meta: dict[tuple[str, ...], dict[str, Any]],
) -> None:
    """Collect the leaves and per-level metadata of a flat or nested state dict."""
    for path, info in (getattr(source, "_metadata", None) or {}).items():
        if isinstance(info, Mapping):
            meta[prefix + (tuple(path.split(".")) if path else ())] = dict(info)
    legacy = {k: source[k] for k in _LEGACY if k in source}
    if legacy:
        meta.setdefault(prefix, {}).update(
            {"batch_size": legacy.get("__batch_size"), "device": legacy.get("__device")}
        )
    for key, value in source.items():
        if key in _LEGACY:
            continue
        path = prefix + tuple(str(key).split("."))
        if isinstance(value, Mapping):
            _read(value, path, leaves, meta)
        else:
            leaves[path] = value


def load_state_dict_into(
    td: TensorDictContract,
    state_dict: Mapping[str, Any],
    strict: bool,
    assign: bool,
) -> Any:
    """`td.load_state_dict(...)` (see `StructureMixin.load_state_dict`)."""
    leaves: dict[tuple[str, ...], Any] = {}
    meta: dict[tuple[str, ...], dict[str, Any]] = {}
    _read(state_dict, (), leaves, meta)
    mine = {(k,) if type(k) is str else k for k in td.keys(include_nested=True, leaves_only=True)}
    if strict and set(leaves) != mine:
        missing = sorted(".".join(k) for k in mine - set(leaves))
        unexpected = sorted(".".join(k) for k in set(leaves) - mine)
        first = f"Key {unexpected[0]!r} wasn't expected in the state-dict. " if unexpected else ""
        raise MissingEntryError(
            f"load_state_dict(strict=True): {first}The key sets don't match: missing keys "
            f"{missing}, unexpected keys {unexpected}; pass strict=False to load the keys that match"
        )
    root = meta.get((), {})
    device = root.get("device")
    if device is not None and td.device is not None and torch.device(device) != td.device:
        raise DeviceError(
            f"load_state_dict: the state dict was saved on {device}, this TensorDict is on "
            f"{td.device}; loading across devices is not supported (move one of them first)"
        )
    entries = {k[0] if len(k) == 1 else k: v for k, v in leaves.items()}
    old_batch_size = td.batch_size
    batch_size = root.get("batch_size")
    if batch_size is not None and torch.Size(batch_size) != old_batch_size:
        td.batch_size = torch.Size(batch_size)  # validated against the entries by the setter
    try:
        if assign:
            return td.update(entries)
        present = td.keys(include_nested=True)
        existing = {k: v for k, v in entries.items() if k in present}
        new = {k: v for k, v in entries.items() if k not in existing}
        td.update_(existing)
        return td.update(new) if new else td
    except Exception:
        if td.batch_size != old_batch_size:  # the writes validate first: undo the resize
            td.batch_size = old_batch_size
        raise
