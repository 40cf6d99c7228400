"""Functions over lists of TensorDicts: merging, stacking densely when possible, grouping, collating.

Written over the public API and the storage primitives, so they accept every
kind (dense, lazy stacks, tensorclasses) and keep the kind of their input
where upstream does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from td_core._core.contract import TensorDictContract
from td_core._core.keys import unravel_key
from td_core._core.traverse import is_td
from td_core._core.utils import normalize_dim
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._ops.best_stack import best_intention_stack
from td_core._ops.stack import stack

__all__ = ["merge_tensordicts", "maybe_dense_stack", "dense_stack_tds", "group_by", "collate"]

Tensor = torch.Tensor


# ----------------------------------------------------------------- merging
def merge_tensordicts(
    *tensordicts: TensorDictContract,
    callback_exist: Callable[..., Any] | Mapping[Any, Callable[..., Any]] | None = None,
) -> TensorDictBase:
    """Merge the entries of several TensorDicts into a new one (values are not copied).

    Args:
        *tensordicts: at least two TensorDicts; the result has the batch size
            of the first.
        callback_exist: `callback_exist(*values)` combines a tensor leaf that
            every input holds; a dict gives one callable per (nested) key.
            Without it (or for keys it lacks) the first input's value wins.

    Raises:
        RuntimeError: with fewer than two inputs.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, merge_tensordicts
        >>> td0 = TensorDict({"a": {"b0": 0}, "common": 0})
        >>> td1 = TensorDict({"a": {"b1": 1}, "common": 1})
        >>> merged = merge_tensordicts(td0, td1, callback_exist=lambda *v: torch.stack(v))
        >>> sorted(merged.keys(True, True), key=str), merged["common"]
        ([('a', 'b0'), ('a', 'b1'), 'common'], tensor([0, 1]))
    """
    if len(tensordicts) < 2:
        raise RuntimeError(f"at least 2 tensordicts must be provided, got {len(tensordicts)}")
    callbacks: dict[Any, Callable[..., Any]] = {}
    default_cb = None
    if isinstance(callback_exist, Mapping):
        callbacks = {unravel_key(k): cb for k, cb in callback_exist.items()}
    else:
        default_cb = callback_exist
    out = tensordicts[0].copy()
    for td in tensordicts[1:]:
        for key in td.keys(include_nested=True, leaves_only=True):
            if key not in out.keys(include_nested=True):
                out.set(key, td.get(key))
    for key in list(out.keys(include_nested=True, leaves_only=True)):
        cb = callbacks.get(key, default_cb)
        if cb is None:
            continue
        values = [td.get(key, None) for td in tensordicts]
        if all(isinstance(v, Tensor) for v in values):
            out.set(key, cb(*values))
    return out


# ------------------------------------------------------- dense when possible
def maybe_dense_stack(
    input: Sequence[TensorDictBase],
    dim: int = 0,
    *,
    out: TensorDictBase | None = None,
    **kwargs: Any,
) -> TensorDictBase:
    """Stack densely if every item has the same keys and entry shapes, lazily otherwise.

    Sub-TensorDicts are handled the same way, one level at a time: a dense
    result may hold lazy stacks of the sub-TensorDicts that differ.

    Args:
        input: the TensorDicts (or tensorclasses) to stack; same batch size.
        dim: the new batch dim.
        out: a TensorDict to write the result into.

    Examples:
        >>> from td_core import TensorDict, maybe_dense_stack
        >>> td0, td1 = TensorDict({"a": 0}), TensorDict({"b": 0})
        >>> type(maybe_dense_stack([td0, td0])).__name__, type(maybe_dense_stack([td0, td1])).__name__
        ('TensorDict', 'LazyStackedTensorDict')
    """
    del kwargs
    items = list(input)
    if not items:
        raise RuntimeError("maybe_dense_stack needs at least one TensorDict")
    d = normalize_dim(dim, items[0].batch_dims + 1)
    result = best_intention_stack(items, d, stack)
    if out is not None:
        out.update(result)
        return out
    return result


def dense_stack_tds(
    td_list: Sequence[TensorDictBase] | TensorDictBase, dim: int | None = None
) -> TensorDictBase:
    """Restack a lazy stack (or a list) densely where the members agree.

    Args:
        td_list: a `LazyStackedTensorDict` (its `stack_dim` is used), a
            list of TensorDicts, or a dense TensorDict (returned unchanged).
        dim: the stack dim; required for a list.

    Raises:
        ValueError: for a list without `dim`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, lazy_stack, dense_stack_tds
        >>> td = lazy_stack([TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(3))])
        >>> type(dense_stack_tds(td)).__name__
        'TensorDict'
    """
    members = getattr(td_list, "tensordicts", None)
    if members is not None and hasattr(td_list, "stack_dim"):
        return maybe_dense_stack(list(members), td_list.stack_dim)
    if is_td(td_list):
        return td_list
    if dim is None:
        raise ValueError(
            "dense_stack_tds: a list of TensorDicts needs dim= (a LazyStackedTensorDict uses its "
            "stack_dim)"
        )
    return maybe_dense_stack(list(td_list), dim)


# ----------------------------------------------------------------- grouping
def group_by(
    tensordict: TensorDictContract, key: Any
) -> tuple[Tensor | list[Any], tuple[Any, ...]]:
    """Split the rows (first batch dim) into groups that share the value of `key`.

    Args:
        tensordict: a TensorDict (or tensorclass) with at least one batch dim.
        key: a tensor entry, or a non-tensor entry of hashable, sortable values.

    Returns:
        `(values, groups)`: the sorted unique values (a tensor, or a list for
        non-tensor entries) and one container per value, rows in order.

    Raises:
        ValueError: if `tensordict` has no batch dim.
        KeyError: if `key` is missing.
        TypeError: if the entry is a TensorDict, or its values cannot be
            hashed or sorted.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, group_by
        >>> td = TensorDict(uid=torch.tensor([2, 0, 2]), r=torch.arange(3.0), batch_size=[3])
        >>> values, groups = group_by(td, "uid")
        >>> values, [g["r"] for g in groups]
        (tensor([0, 2]), [tensor([1.]), tensor([0., 2.])])
    """
    if not tensordict.batch_dims:
        raise ValueError(
            "group_by groups the rows along the first batch dimension of the tensordict, "
            "which has none."
        )
    entry = tensordict.get(key, None)
    if entry is None:
        raise KeyError(f"group_by: the tensordict has no entry {key!r}.")
    if is_td(entry):
        raise TypeError(f"group_by: entry {key!r} is a TensorDict; group by a leaf")
    if isinstance(entry, Tensor):
        values, inverse = (
            torch.unique(entry, return_inverse=True)
            if entry.ndim == 1
            else torch.unique(entry, dim=0, return_inverse=True)
        )
        n_groups = values.shape[0]
        out_values: Tensor | list[Any] = values
    else:
        rows = [_hashable(v) for v in tensordict[key]]
        try:
            uniq = sorted(set(rows))
        except TypeError as err:
            raise TypeError(
                f"group_by: the values of entry {key!r} cannot be hashed and sorted: {err}"
            ) from None
        pos = {v: i for i, v in enumerate(uniq)}
        inverse = torch.tensor([pos[v] for v in rows], dtype=torch.long)
        n_groups = len(uniq)
        out_values = uniq
    order = torch.argsort(inverse.cpu(), stable=True)
    counts = torch.bincount(inverse.cpu(), minlength=n_groups).tolist()
    gathered = tensordict[order.to(inverse.device)]
    groups, start = [], 0
    for count in counts:
        groups.append(gathered[start : start + count])
        start += count
    return out_values, tuple(groups)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"group_by: value {value!r} cannot be hashed") from None
    return value


# ---------------------------------------------------------------- collating
def collate(
    batch: Any,
    *,
    pad_keys: Mapping[Any, float] | None = None,
    nested_keys: Sequence[Any] | None = None,
    mask_key: Any = None,
) -> Any:
    """Collate a list of samples into a batch (a `DataLoader` `collate_fn`).

    TensorDicts and tensorclasses go through `maybe_dense_stack`,
    tensors through `torch.stack`, mappings and tuples entry by entry, and
    anything else through `torch.utils.data.default_collate`. Anything but
    a non-empty list is returned as is.

    Args:
        batch: the samples.
        pad_keys: entries to pad along their first dim to the longest sample
            (mapped to their padding value); samples must have no batch dims.
        nested_keys: entries to stack as jagged nested tensors.
        mask_key: where to store the masks of the `pad_keys` entries.

    Raises:
        KeyError: for a `pad_keys`/`nested_keys` entry a sample lacks.
        ValueError: for inconsistent options (see upstream's rules).

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, collate
        >>> out = collate([(TensorDict(x=torch.zeros(3)), i) for i in range(4)])
        >>> out[0].batch_size, out[1]
        (torch.Size([4]), tensor([0, 1, 2, 3]))
    """
    if not isinstance(batch, list) or not batch:
        return batch
    opts = {"pad_keys": pad_keys, "nested_keys": nested_keys, "mask_key": mask_key}
    first = batch[0]
    if is_td(first):
        if pad_keys or nested_keys or mask_key is not None:
            return _collate_special(batch, pad_keys or {}, list(nested_keys or ()), mask_key)
        return maybe_dense_stack(batch)
    if isinstance(first, Tensor):
        return torch.stack(batch)
    if isinstance(first, Mapping):
        return {k: collate([b[k] for b in batch], **opts) for k in first}
    if isinstance(first, tuple):
        cols = [collate(list(col), **opts) for col in zip(*batch)]
        return type(first)(*cols) if hasattr(first, "_fields") else tuple(cols)
    from torch.utils.data import default_collate

    return default_collate(batch)


def _collate_special(
    batch: list[Any], pad_keys: Mapping[Any, float], nested_keys: list[Any], mask_key: Any
) -> Any:
    pads = {unravel_key(k): v for k, v in pad_keys.items()}
    nested = [unravel_key(k) for k in nested_keys]
    if mask_key is not None and not pads:
        raise ValueError("collate: mask_key needs pad_keys")
    both = set(pads) & set(nested)
    if both:
        raise ValueError(
            f"collate: keys {sorted(both, key=str)} are in both pad_keys and nested_keys"
        )
    if pads and batch[0].batch_dims:
        raise ValueError(
            f"collate: pad_keys needs samples with an empty batch size, got "
            f"{list(batch[0].batch_size)}"
        )
    for key in (*pads, *nested):
        for i, sample in enumerate(batch):
            if sample.get(key, None) is None:
                raise KeyError(f"collate: sample {i} has no entry {key!r}")
    if mask_key is not None and batch[0].get(mask_key, None) is not None:
        raise ValueError(f"collate: mask_key {mask_key!r} names an entry of the samples")
    special = [*pads, *nested]
    rest = [s.exclude(*special) for s in batch]
    out = maybe_dense_stack(rest)
    if nested and hasattr(out, "stack_dim"):
        raise ValueError(
            "collate: with nested_keys, the other entries must stack densely: name every "
            "variable-length entry in pad_keys or nested_keys"
        )
    masks = {}
    for key, value in pads.items():
        vals = [s.get(key) for s in batch]
        length = max(v.shape[0] for v in vals)
        padded = [
            F.pad(v, [0, 0] * (v.ndim - 1) + [0, length - v.shape[0]], value=value) for v in vals
        ]
        out.set(key, torch.stack(padded))
        masks[key] = torch.arange(length).unsqueeze(0) < torch.tensor(
            [v.shape[0] for v in vals]
        ).unsqueeze(1)
    for key in nested:
        out.set(
            key,
            torch.nested.as_nested_tensor([s.get(key) for s in batch], layout=torch.jagged),
        )
    if mask_key is not None:
        mask_td = TensorDict(batch_size=out.batch_size)
        for key, mask in masks.items():
            mask_td.set(key, mask)
        out.set(mask_key, mask_td)
    return out
