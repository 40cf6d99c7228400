"""TensorDicts as pytree nodes, so `torch.vmap`, `torch.func` and `torch.compile` see their leaves.

The children of a node are its tensor and sub-TensorDict entries; non-tensor
leaves, keys, batch size and device travel in the (static) context. When the
children come back with more or fewer dims than they left with (inside and out
of `vmap`), the batch size is re-derived from a reference child: the number
of batch dims changes by the same amount as that child's dims. So inside
`vmap` a TensorDict has its per-sample batch size, and outside again the
full one.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from td_core._core.traverse import is_nt

__all__ = ["register", "allow_weights_only"]

Tensor = torch.Tensor


def _flatten(td: Any) -> tuple[list[Any], Any]:
    # vmap flattens its inputs up to 3 times and unflattens twice per call: every
    # step here counts (a plain tensor skips the non-tensor test, the batch size
    # stays a torch.Size, which compares equal to the tuple it used to be)
    keys: list[str] = []
    children: list[Any] = []
    static: list[tuple[str, Any]] = []
    for key, value in td._items_str():
        if type(value) is not Tensor and is_nt(value):
            static.append((key, value))
        else:
            keys.append(key)
            children.append(value)
    ref = None
    if children:
        first = children[0]
        ref = first.ndim if isinstance(first, Tensor) else getattr(first, "batch_dims", None)
    context = (type(td), tuple(keys), td.batch_size, td.device, tuple(static), ref)
    return children, context


def _unflatten(children: Any, context: Any) -> Any:
    cls, keys, batch_size, device, static, ref = context
    bs = batch_size if type(batch_size) is torch.Size else torch.Size(batch_size)
    # pytree also unflattens placeholder leaves (vmap's in_dims ints): keep the batch size then
    if ref is not None and children:
        first = children[0]
        if isinstance(first, Tensor):
            now = first.ndim
        elif type(first) is int or first is None:
            now = ref
        else:
            now = getattr(first, "batch_dims", ref)
        if now != ref:
            n = len(bs) + now - ref
            bs = (first.shape if isinstance(first, Tensor) else first.batch_size)[:n]
    entries = dict(zip(keys, children))
    for key, value in static:
        entries[key] = (
            value if value.batch_size == bs else value._map_batch(lambda t: t, bs, value.batch_dims)
        )
    return cls._from_pytree(entries, bs, device)


def _flatten_with_keys(td: Any) -> tuple[list[tuple[Any, Any]], Any]:
    children, context = _flatten(td)
    return [(pytree.MappingKey(k), c) for k, c in zip(context[1], children)], context


def register(cls: type) -> None:
    """Register `cls` (a TensorDictBase subclass with `_from_pytree`) as a pytree node."""
    pytree.register_pytree_node(
        cls,
        _flatten,
        _unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=_flatten_with_keys,
    )


def allow_weights_only(*classes: type) -> None:
    """Let `torch.load(..., weights_only=True)` rebuild `classes`.

    Their pickled state is made of tensors, strings, numbers, tuples, lists and
    dicts only, so allowing them runs no code from the file.
    """
    torch.serialization.add_safe_globals(list(classes))
