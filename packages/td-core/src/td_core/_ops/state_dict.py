"""`state_dict` and `load_state_dict`: a TensorDict's tensors in `nn.Module`'s format.

A state dict maps dotted keys (`"a.b"`) to tensors, in key order, with the
batch size and device of every level in a `_metadata` attribute (`""` for
the root, `"a"` for the sub-TensorDict at `"a"`), as `nn.Module.state_dict`
keeps its per-module metadata. `flatten=False` nests plain `OrderedDict`s
instead, each with its own `_metadata`. Loading reads the flat, the nested
and upstream's legacy format (`"__batch_size"`/`"__device"` entries), checks
everything, then writes: a state dict that does not fit changes nothing.

A tensorclass level also records, as upstream, its class name (`"_type"`, a
label only: loading never imports it) and its non-tensor fields
(`"_non_tensor"`, name to value), which loading writes back. Upstream's older
tensorclass format (`"_tensordict"` and `"_non_tensordict"` entries) loads too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_nt, is_td
from td_core.errors import DeviceError, MissingEntryError

__all__ = ["state_dict_of", "load_state_dict_into"]

Tensor = torch.Tensor
_LEGACY = ("__batch_size", "__device")


def _meta(td: TensorDictContract) -> dict[str, Any]:
    meta: dict[str, Any] = {"batch_size": td.batch_size, "device": td.device}
    cls = type(td)
    if getattr(cls, "_td_tensorclass", False):
        meta["_type"] = f"{cls.__module__}.{cls.__qualname__}"
        meta["_non_tensor"] = {k: v.data for k, v in td._items_str() if is_nt(v)}
    return meta


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
        if type(value) is Tensor or isinstance(value, Tensor):
            out[prefix + key] = value if keep_vars else value.detach()
        elif is_td(value):
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
    if isinstance(source.get("_tensordict"), Mapping) and "_non_tensordict" in source:
        # upstream's older tensorclass format: the fields under "_tensordict", the
        # non-tensor ones (None for unset) under "_non_tensordict"
        values = {k: v for k, v in (source["_non_tensordict"] or {}).items() if v is not None}
        meta.setdefault(prefix, {}).setdefault("_non_tensor", {}).update(values)
        _read(source["_tensordict"], prefix, leaves, meta)
        return
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
    non_tensor = _non_tensor_writes(td, meta, strict)
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
        out = td.update(new) if new else td
        for path, key, value in non_tensor:
            (td.get(path) if path else td).set(key, value, inplace=True)
        return out
    except Exception:
        if td.batch_size != old_batch_size:  # the writes validate first: undo the resize
            td.batch_size = old_batch_size
        raise


def _non_tensor_writes(
    td: TensorDictContract, meta: dict[tuple[str, ...], dict[str, Any]], strict: bool
) -> list[tuple[tuple[str, ...], str, Any]]:
    """The non-tensor values recorded under `"_non_tensor"`, checked against `td`.

    With `strict`, a name that is neither a field of the tensorclass at that
    level nor an entry of the TensorDict there raises `KeyError`.
    """
    out: list[tuple[tuple[str, ...], str, Any]] = []
    for path, info in meta.items():
        values = info.get("_non_tensor") or {}
        if not values:
            continue
        level: Any = td.get(path) if path else td
        if level is None or not is_td(level):
            if strict:
                raise MissingEntryError(
                    f"load_state_dict(strict=True): Key {'.'.join(path)!r} wasn't expected "
                    "in the state-dict: its non-tensor values have no TensorDict to go to"
                )
            continue
        allowed = set(getattr(type(level), "_fields", ())) | set(level._keys_str())
        for key, value in values.items():
            if key not in allowed:
                if strict:
                    where = f" (at {'.'.join(path)!r})" if path else ""
                    raise MissingEntryError(
                        f"load_state_dict(strict=True): Key {key!r} wasn't expected in the "
                        f"state-dict{where}: it is a non-tensor value for an entry "
                        f"{type(level).__name__} does not have; pass strict=False to skip it"
                    )
                continue
            out.append((path, key, value))
    return out
