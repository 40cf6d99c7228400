"""``repr`` in the seeds' format: one line per field, nested TensorDicts indented."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import torch

from td_core._map import is_td

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["td_repr", "leaf_repr", "fields_repr"]

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


def td_repr(
    td: TensorDictBase,
    extra: dict[str, Any] | None = None,
    fields: list[tuple[str, str]] | None = None,
    after: dict[str, Any] | None = None,
) -> str:
    """The multi-line repr of a TensorDict-like container.

    Args:
        extra: more ``name=value`` parts after ``fields`` (e.g. ``exclusive_fields``).
        fields: pre-rendered ``(key, text)`` pairs, for containers that render
            entries without materialising them.
        after: parts after ``is_shared`` (e.g. ``stack_dim``).
    """
    if fields is None:
        # each sub-container renders itself: a lazy stack shows ragged dims as -1 without stacking
        fields = [(k, repr(v) if is_td(v) else leaf_repr(v)) for k, v in td._items_str()]
    parts = [_fields("fields", fields)]
    for name, value in (extra or {}).items():
        parts.append(value if name.endswith("fields") else f"{name}={value}")
    parts += [
        f"batch_size={td.batch_size}",
        f"device={td.device}",
        f"is_shared={td.is_shared()}",
    ]
    parts += [f"{name}={value}" for name, value in (after or {}).items()]
    body = ",\n".join(textwrap.indent(p, _INDENT) for p in parts)
    return f"{type(td).__name__}(\n{body})"


def _fields(name: str, fields: list[tuple[str, str]]) -> str:
    """``name={`` then one ``key: text`` line per field, sorted by key."""
    lines = ",\n".join(textwrap.indent(f"{k}: {text}", _INDENT) for k, text in sorted(fields))
    return f"{name}={{\n{lines}}}" if lines else f"{name}={{\n}}"


fields_repr = _fields
