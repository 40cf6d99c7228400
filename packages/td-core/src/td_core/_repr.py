"""``repr`` in the seeds' format: one line per field, nested TensorDicts indented."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import torch

from td_core._map import is_td

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["td_repr", "leaf_repr"]

_INDENT = "    "


def leaf_repr(value: Any) -> str:
    """``Tensor(shape=..., device=..., dtype=..., is_shared=...)`` or the leaf's own repr."""
    if isinstance(value, torch.Tensor):
        name = type(value).__name__ if type(value) is not torch.Tensor else "Tensor"
        return (
            f"{name}(shape={value.shape}, device={value.device}, dtype={value.dtype}, "
            f"is_shared={value.is_shared() or value.is_cuda})"
        )
    return repr(value)


def _field(key: str, value: Any) -> str:
    text = td_repr(value) if is_td(value) else leaf_repr(value)
    return textwrap.indent(f"{key}: {text}", _INDENT)


def td_repr(td: TensorDictBase, extra: dict[str, Any] | None = None) -> str:
    """The multi-line repr of a TensorDict-like container."""
    fields = ",\n".join(_field(k, v) for k, v in sorted(td._items_str(), key=lambda kv: kv[0]))
    parts = [f"fields={{\n{fields}}}" if fields else "fields={\n}"]
    for name, value in (extra or {}).items():
        parts.append(f"{name}={value}")
    parts += [
        f"batch_size={td.batch_size}",
        f"device={td.device}",
        f"is_shared={td.is_shared()}",
    ]
    body = ",\n".join(textwrap.indent(p, _INDENT) for p in parts)
    return f"{type(td).__name__}(\n{body})"
