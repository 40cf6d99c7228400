"""Best-intention stacking (`maybe_dense_stack`): dense where the inputs agree, lazy where not.

Inputs whose keys and entry shapes agree are stacked densely. Inputs whose
top-level keys and shapes agree but whose sub-TensorDicts differ give a dense
TensorDict holding lazy stacks of the sub-TensorDicts that differ (one level
at a time). Otherwise the result is a lazy stack of the inputs; lazy stacks
alike (the same keys, stack dim and member count) are stacked member by member,
densely where the members agree, so a member's exclusive keys stay visible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from td_core._core.contract import TensorDictContract, lazy
from td_core._core.traverse import entries_of, is_nt, stack_parts
from td_core._leaves.nontensor import stack_non_tensors
from td_core._leaves.unbatched import is_unbatched, shared_unbatched
from td_core.errors import BatchSizeError, KeyNotFoundError

__all__ = ["best_intention_stack"]

Tensor = torch.Tensor
DenseStack = Callable[[list[Any], int], Any]


def best_intention_stack(items: list[Any], d: int, dense_stack: DenseStack) -> Any:
    """Stack `items` along the new dim `d`: densely (with `dense_stack`) where they agree.

    Args:
        items: TensorDicts (or tensorclasses) of one batch size; at least one.
        d: the new batch dim, non-negative.
        dense_stack: the dense stack (`td_core`'s `stack`), tried first where the
            keys and shapes agree at this level.
    """
    if _stackable(items):
        try:
            return dense_stack(items, d)
        except (KeyNotFoundError, BatchSizeError, TypeError):
            return _per_key(items, d, dense_stack)  # sub-TensorDicts differ below this level
    return _lazy_alike(items, d, dense_stack)


def _lazy_alike(items: list[Any], d: int, dense_stack: DenseStack) -> Any:
    parts = [stack_parts(it) for it in items]
    first = parts[0]
    keys = set(items[0]._keys_str())
    if (
        first is None
        or any(p is None or p[1] != first[1] or len(p[0]) != len(first[0]) for p in parts)
        or any(set(it._keys_str()) != keys for it in items)
    ):
        return lazy(items, d)  # inputs with other keys stay whole, as upstream
    sd = first[1]
    inner, outer = (d, sd + 1) if d <= sd else (d - 1, sd)
    groups = zip(*(p[0] for p in parts if p is not None))
    return lazy([best_intention_stack(list(g), inner, dense_stack) for g in groups], outer)


def _probe(item: TensorDictContract, key: str) -> tuple[str, Any]:
    """`(kind, shape)` of an entry; in a lazy stack without stacking it (-1: ragged dim)."""
    item = entries_of(item)  # a tensorclass: what it wraps (maybe a lazy stack)
    members = getattr(item, "tensordicts", None)
    value = members[0]._get_str(key) if members is not None else item._get_str(key)
    if isinstance(value, Tensor):
        shape = item.get_item_shape(key) if members is not None else value.shape
        return "tensor", tuple(shape)
    return ("nt" if is_nt(value) else "td"), None


def _stackable(items: list[Any]) -> bool:
    """Whether the items' keys, entry kinds and tensor shapes agree at the top level."""
    bs = items[0].batch_size
    keys = set(items[0]._keys_str())
    if any(it.batch_size != bs or set(it._keys_str()) != keys for it in items):
        return False
    for key in keys:
        probes = [_probe(it, key) for it in items]
        if len(set(probes)) > 1 or (probes[0][1] is not None and -1 in probes[0][1]):
            return False
    return True


def _per_key(items: list[Any], d: int, dense_stack: DenseStack) -> Any:
    bs = list(items[0].batch_size)
    bs.insert(d, len(items))
    entries: dict[str, Any] = {}
    for key in items[0]._keys_str():
        values = [it._get_str(key) for it in items]
        first = values[0]
        if type(first) is not Tensor and is_unbatched(first):
            entries[key] = shared_unbatched(values, torch.Size(bs))
        elif isinstance(first, Tensor):
            entries[key] = torch.stack(values, d)
        elif is_nt(first):
            entries[key] = stack_non_tensors(values, d)
        else:
            entries[key] = best_intention_stack(values, d, dense_stack)
    return items[0]._new(entries, torch.Size(bs))
