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

__all__ = ["td_repr", "leaf_repr", "fields_repr", "described_repr", "value_summary"]

_INDENT = "    "

# (print option, label, how to read it): the parts of a tensor's line, in order
_LEAF_PARTS: list[tuple[str, str, Any]] = [
    ("show_shape", "shape", leaf_shape),
    ("show_field_device", "device", lambda t: t.device),
    ("show_dtype", "dtype", lambda t: t.dtype),
    ("show_field_is_shared", "is_shared", lambda t: t.is_shared() or t.is_cuda),
    ("show_grad", "requires_grad", lambda t: t.requires_grad),
    ("show_is_contiguous", "is_contiguous", lambda t: t.is_contiguous()),
    ("show_is_view", "is_view", lambda t: t._base is not None),
    ("show_storage_size", "storage_size", lambda t: t.untyped_storage().nbytes()),
]


def leaf_repr(value: Any) -> str:
    """`Tensor(shape=..., device=..., dtype=..., is_shared=...)` or the leaf's own repr."""
    if isinstance(value, torch.Tensor):
        name = type(value).__name__ if type(value) is not torch.Tensor else "Tensor"
        opts = get_printoptions()
        parts = [f"{label}={get(value)}" for option, label, get in _LEAF_PARTS if opts[option]]
        if opts["plain"]:
            parts.append(value_summary(value))
        return f"{name}({', '.join(parts)})"
    return repr(value)


def described_repr(
    name: str, shape: torch.Size, device: Any, dtype: torch.dtype, is_shared: bool
) -> str:
    """A tensor's line from its description (a lazy stack's entry, never stacked to print it)."""
    opts = get_printoptions()
    described = (shape, device, dtype, is_shared)
    parts = [
        f"{label}={value}"
        for (option, label, _), value in zip(_LEAF_PARTS, described)
        if opts[option]
    ]
    return f"{name}({', '.join(parts)})"


def value_summary(t: torch.Tensor) -> str:
    """What `plain=True` adds to a tensor's line: mean and std, or min and max for integers.

    Examples:
        >>> import torch
        >>> value_summary(torch.tensor([1.0, 2.0, 3.0])), value_summary(torch.arange(4))
        ('mean=2, std=1', 'min=0, max=3')
    """
    if t.numel() == 0 or t.device.type == "meta":
        return "[]"
    if t.is_nested:  # one flat view of every component's values
        t = torch.cat([part.reshape(-1) for part in t.unbind()])
    if t.is_floating_point() or t.is_complex():
        wide = t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
        std = wide.std().item() if wide.numel() > 1 else float("nan")  # one value: no spread
        return f"mean={wide.mean().item():.4g}, std={std:.4g}"
    return f"min={t.min().item()}, max={t.max().item()}"


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
    """`name={` then one `key: text` line per field, in the `sort_keys` order.

    `"alphabetical"` sorts the lines, a function sorts them by what it returns for
    each line, anything else (`"insertion"`, `None`) keeps the entries' order.
    """
    lines = [f"{k}: {text}" for k, text in fields]
    order = get_printoptions()["sort_keys"]
    if order == "alphabetical":
        lines.sort()
    elif callable(order):
        lines.sort(key=order)
    body = ",\n".join(textwrap.indent(line, _INDENT) for line in lines)
    return f"{name}={{\n{body}}}" if body else f"{name}={{\n}}"


fields_repr = _fields
