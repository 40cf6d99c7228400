"""`repr` in the seeds' format: one line per field, nested TensorDicts indented."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.traverse import is_td
from td_core._core.utils import leaf_shape
from td_core._io.printoptions import get_printoptions

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract

__all__ = ["td_repr", "leaf_repr", "fields_repr"]

_INDENT = "    "

# (print option, label, how to read it): the parts of a tensor's line, in order
_LEAF_PARTS: list[tuple[str, str, Any]] = [
    ("show_shape", "shape", leaf_shape),
    ("show_field_device", "device", lambda t: t.device),
    ("show_dtype", "dtype", lambda t: t.dtype),
    ("show_field_is_shared", "is_shared", lambda t: t.is_shared() or t.is_cuda),
    ("show_grad", "requires_grad", lambda t: t.requires_grad),
    ("show_is_contiguous", "is_contiguous", lambda t: t.is_contiguous()),
]


def leaf_repr(value: Any) -> str:
    """`Tensor(shape=..., device=..., dtype=..., is_shared=...)` or the leaf's own repr."""
    if isinstance(value, torch.Tensor):
        name = type(value).__name__ if type(value) is not torch.Tensor else "Tensor"
        opts = get_printoptions()
        parts = [f"{label}={get(value)}" for option, label, get in _LEAF_PARTS if opts[option]]
        return f"{name}({', '.join(parts)})"
    return repr(value)


def td_repr(
    td: TensorDictContract,
    extra: dict[str, Any] | None = None,
    fields: list[tuple[str, str]] | None = None,
    after: dict[str, Any] | None = None,
) -> str:
    """The multi-line repr of a TensorDict-like container.

    Args:
        extra: more `name=value` parts after `fields` (e.g. `exclusive_fields`).
        fields: pre-rendered `(key, text)` pairs, for containers that render
            entries without materialising them.
        after: parts after `is_shared` (e.g. `stack_dim`).
    """
    if fields is None:
        # each sub-container renders itself: a lazy stack shows ragged dims as -1 without stacking
        fields = [(k, repr(v) if is_td(v) else leaf_repr(v)) for k, v in td._items_str()]
    parts = [_fields("fields", fields)]
    for name, value in (extra or {}).items():
        parts.append(value if name.endswith("fields") else f"{name}={value}")
    opts = get_printoptions()
    if opts["show_batch_size"]:
        parts.append(f"batch_size={td.batch_size}")
    if opts["show_device"]:
        parts.append(f"device={td.device}")
    if opts["show_is_shared"]:
        parts.append(f"is_shared={td.is_shared()}")
    parts += [f"{name}={value}" for name, value in (after or {}).items()]
    body = ",\n".join(textwrap.indent(p, _INDENT) for p in parts)
    return f"{type(td).__name__}(\n{body})"


def _fields(name: str, fields: list[tuple[str, str]]) -> str:
    """`name={` then one `key: text` line per field, sorted by key."""
    if get_printoptions()["sort_keys"]:
        fields = sorted(fields)
    lines = ",\n".join(textwrap.indent(f"{k}: {text}", _INDENT) for k, text in fields)
    return f"{name}={{\n{lines}}}" if lines else f"{name}={{\n}}"


fields_repr = _fields
