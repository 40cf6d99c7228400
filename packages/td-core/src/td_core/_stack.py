"""Dense ``stack`` and ``cat`` of TensorDicts (``torch.stack`` / ``torch.cat`` land here).

Keys must match across inputs; the error names the first key one input lacks.
Non-tensor leaves stack into a ``NonTensorStack`` (one rule, equal values or not).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from td_core._map import is_td
from td_core._names import carry_names, names_after
from td_core._nontensor import cat_non_tensors, stack_non_tensors
from td_core._utils import normalize_dim
from td_core.errors import BatchSizeError, KeyNotFoundError

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["stack", "cat"]

Tensor = torch.Tensor


def _check_inputs(tds: Sequence[Any], what: str) -> list[TensorDictBase]:
    tds = list(tds)
    if not tds:
        raise ValueError(f"{what} needs at least one TensorDict")
    for i, td in enumerate(tds):
        if not is_td(td):
            raise TypeError(f"{what}: item {i} is a {type(td).__name__}, not a TensorDict")
    return tds


def _same_keys(tds: list[TensorDictBase], prefix: tuple[str, ...], what: str) -> None:
    keys = tds[0]._keys_str()
    for i, td in enumerate(tds[1:], 1):
        other = td._keys_str()
        if other != keys and set(other) != set(keys):
            missing = [k for k in keys if k not in other] or [k for k in other if k not in keys]
            raise KeyNotFoundError(
                f"{what}: TensorDicts 0 and {i} have different keys at {prefix or 'the root'!r}: "
                f"{sorted(set(keys) ^ set(other))} (first: {(*prefix, missing[0])!r})"
            )


def _getters(tds: list[TensorDictBase]) -> list[Any]:
    """Per-member lookups: the entry dict's own ``__getitem__`` for dense TensorDicts (fastest)."""
    out = []
    for td in tds:
        entries = getattr(td, "_tensordict", None)
        out.append(entries.__getitem__ if type(entries) is dict else td._get_str)
    return out


def stack(
    tds: Sequence[TensorDictBase], dim: int = 0, *, out: TensorDictBase | None = None
) -> TensorDictBase:
    """Stack TensorDicts of equal batch size along a new batch dim ``dim``."""
    tds = _check_inputs(tds, "stack")
    bs = tds[0].batch_size
    for i, td in enumerate(tds[1:], 1):
        if td.batch_size != bs:
            raise BatchSizeError(
                f"stack: TensorDict {i} has batch_size {list(td.batch_size)}, TensorDict 0 has {list(bs)}"
            )
    d = normalize_dim(dim, len(bs) + 1)
    from td_core._lazy import LazyStackedTensorDict, lazy_stack_enabled

    if lazy_stack_enabled():
        if out is not None:
            raise TypeError("stack(..., out=) cannot be combined with set_lazy_stack(True)")
        return LazyStackedTensorDict(*tds, stack_dim=d)
    result = _combine(tds, d, (), stacking=True)
    names = tds[0]._raw_names()
    if names is not None:
        carry_names(result, names_after(names, insert=(d,)))
    if out is not None:
        out.update_(result)
        return out
    return result


def _combine(
    tds: list[TensorDictBase], d: int, prefix: tuple[str, ...], stacking: bool
) -> TensorDictBase:
    """Stack (new dim ``d``) or concatenate (along ``d``) matching entries, recursively."""
    what = "stack" if stacking else "cat"
    tensor_op = torch.stack if stacking else torch.cat
    non_tensor_op = stack_non_tensors if stacking else cat_non_tensors
    first = tds[0]
    _same_keys(tds, prefix, what)
    getters = _getters(tds)
    entries: dict[str, Any] = {}
    for key, value in first._items_str():
        values = [get(key) for get in getters]
        if isinstance(value, Tensor):
            try:
                entries[key] = tensor_op(values, d)
            except (RuntimeError, TypeError) as err:
                shapes = sorted({tuple(v.shape) for v in values if isinstance(v, Tensor)})
                raise BatchSizeError(
                    f"{what}: entry {(*prefix, key)!r} has incompatible shapes {shapes}: {err}"
                ) from None
        elif value._is_non_tensor:
            entries[key] = non_tensor_op(values, d)
        else:
            if stacking and any(v.batch_size != value.batch_size for v in values):
                raise BatchSizeError(
                    f"stack: sub-TensorDict {(*prefix, key)!r} has different batch sizes "
                    f"{sorted({tuple(v.batch_size) for v in values})}"
                )
            entries[key] = _combine(values, d, (*prefix, key), stacking)
    bs = list(first.batch_size)
    if stacking:
        bs.insert(d, len(tds))
    else:
        bs[d] = sum(td.batch_size[d] for td in tds)
    return first._new(entries, torch.Size(bs))


def cat(
    tds: Sequence[TensorDictBase], dim: int = 0, *, out: TensorDictBase | None = None
) -> TensorDictBase:
    """Concatenate TensorDicts along the existing batch dim ``dim``."""
    tds = _check_inputs(tds, "cat")
    bs = tds[0].batch_size
    d = normalize_dim(dim, len(bs))
    for i, td in enumerate(tds[1:], 1):
        other = td.batch_size
        if len(other) != len(bs) or other[:d] != bs[:d] or other[d + 1 :] != bs[d + 1 :]:
            raise BatchSizeError(
                f"cat along dim {dim}: TensorDict {i} has batch_size {list(other)}, TensorDict 0 has "
                f"{list(bs)}; they may differ only in dim {d}"
            )
    result = _combine(tds, d, (), stacking=False)
    names = tds[0]._raw_names()
    if names is not None:
        carry_names(result, names)
    if out is not None:
        out.update_(result)
        return out
    return result
