"""Padding over batch dims: `pad`, `pad_sequence` and its inverse `unpad_sequence`.

`pad` is the `pad` method as a function (one implementation, in
`td_core._ops.rearrange`). `pad_sequence` and `unpad_sequence` are written over
the storage primitives (`_items_str`, `_new`), so tensorclass inputs give
tensorclass results. Every padded leaf is computed before anything is written,
so an in-place `pad` that fails changes nothing. Non-tensor leaves hold `None`
in padded slots along batch dims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from td_core._core.keys import as_tuple, unravel_key
from td_core._core.predicates import is_tensorclass
from td_core._core.traverse import is_nt, is_td
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.lazy import LazyStackedTensorDict
from td_core._leaves.nontensor import NonTensorStack, _from_array, stack_non_tensors
from td_core._ops.rearrange import pad_pairs, padded_values

__all__ = ["pad", "pad_sequence", "unpad_sequence"]

Tensor = torch.Tensor


# ----------------------------------------------------------------------- pad
def pad(
    tensordict: TensorDictBase,
    pad_size: Sequence[int],
    value: float = 0.0,
    inplace: bool = False,
    safe: bool = True,
) -> TensorDictBase:
    """Pad every entry along the batch dims with a constant.

    Args:
        tensordict: the TensorDict (or tensorclass) to pad.
        pad_size: `(dim0_before, dim0_after, dim1_before, ...)`, starting
            from the FIRST batch dim (`torch.nn.functional.pad` starts from
            the last). Negative values crop.
        value: the value of padded tensor elements; non-tensor leaves hold
            `None` there.
        inplace: replace the leaves of `tensordict` and return it.
        safe: kept for upstream compatibility; td always computes every padded
            leaf before writing, so a failing pad never changes the input.

    Returns:
        The padded container (`tensordict` itself when `inplace`).

    Raises:
        RuntimeError: if `pad_size` has an odd length, or more entries than
            twice the number of batch dims (`DimError`), or crops a dim below
            zero (`BatchSizeError`).

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, pad
        >>> td = TensorDict({"a": torch.ones(3, 4, 1)}, batch_size=[3, 4])
        >>> pad(td, [0, 1, 0, 2]).batch_size
        torch.Size([4, 6])
    """
    if is_nt(tensordict):  # a non-tensor leaf on its own: its values padded with None
        return _pad_non_tensor(tensordict, pad_size, inplace)
    return tensordict.pad(pad_size, value, inplace=inplace, safe=safe)


def _pad_non_tensor(leaf: Any, pad_size: Sequence[int], inplace: bool) -> Any:
    """`pad` of a non-tensor leaf: a `NonTensorStack` with `None` in the new slots.

    In place, a `NonTensorStack` takes the padded values (the same object); a
    `NonTensorData` holds one value and cannot become a stack in place.
    """
    sizes = pad_pairs(pad_size, leaf.batch_size)
    values = padded_values(leaf, list(zip(sizes[::2], sizes[1::2])))
    if not inplace:
        return NonTensorStack(values, device=leaf.device)
    if not isinstance(leaf, NonTensorStack):
        raise RuntimeError(
            f"pad(inplace=True) cannot preserve the identity of a {type(leaf).__name__}: it "
            "holds one value, and padding makes a stack of them; use inplace=False"
        )
    leaf._restore(values, None, torch.Size(values.shape), leaf.device)
    return leaf


# -------------------------------------------------------------- pad_sequence
def pad_sequence(
    list_of_tensordicts: Sequence[TensorDictBase],
    pad_dim: int = 0,
    padding_value: float | Mapping[Any, float] = 0.0,
    out: TensorDictBase | None = None,
    return_mask: bool | str | tuple[str, ...] = False,
    padding_side: str = "right",
) -> TensorDictBase:
    """Pad TensorDicts to a common size along `pad_dim`, then stack them densely.

    Args:
        list_of_tensordicts: the TensorDicts (or tensorclasses) to pad; same keys.
        pad_dim: the dim of each entry to pad, counted from its first dim
            (batch dims included); negative values count from its last dim.
            When it is a batch dim the batch size is padded too.
        padding_value: the padding value, or a mapping from (nested) key to
            value; entries it does not name are padded with 0.
        out: a TensorDict to write the result into.
        return_mask: `True` adds a `"masks"` TensorDict (the valid
            positions of every entry); a nested key stores it there.
        padding_side: `"right"` (padding after the data) or `"left"`.

    Returns:
        A container of batch size `[len(list_of_tensordicts), *batch_size]`.

    Raises:
        RuntimeError: for an empty list, shapes that differ in another dim, or
            `return_mask` with tensorclass inputs.
        KeyError: for a `padding_value` key that names no entry.
        ValueError: for a bad `padding_side`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, pad_sequence
        >>> tds = [TensorDict(a=torch.ones(n)) for n in (2, 3)]
        >>> pad_sequence(tds, return_mask=True)["masks", "a"]
        tensor([[ True,  True, False],
                [ True,  True,  True]])
    """
    tds = list(list_of_tensordicts)
    if not tds:
        raise RuntimeError("list_of_tensordicts cannot be empty")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
    if return_mask is not False and is_tensorclass(tds[0]):
        raise RuntimeError(
            "pad_sequence(..., return_mask=...) needs TensorDicts: convert the tensorclasses "
            "with .to_tensordict() first"
        )
    values: dict[tuple[str, ...], float] = {}
    if isinstance(padding_value, Mapping):
        values = {as_tuple(unravel_key(k)): float(v) for k, v in padding_value.items()}
        for key in values:
            if tds[0].get(key, None) is None:
                raise KeyError(
                    f"padding_value names the key {key!r}, which no entry of the inputs has"
                )
        default = 0.0
    else:
        default = padding_value
    seq = _Sequence(pad_dim, values, default, padding_side == "left")
    result, masks = seq.node(tds, ())
    if return_mask is not False:
        mask_key = "masks" if return_mask is True else return_mask
        result.set(mask_key, masks)
    if out is not None:
        out.update(result)
        return out
    return result


class _Sequence:
    """The settings of one `pad_sequence` call, and its recursive walk."""

    def __init__(
        self, pad_dim: int, values: dict[tuple[str, ...], float], default: float, left: bool
    ) -> None:
        self.pad_dim = pad_dim
        self.values = values
        self.default = default
        self.left = left

    def resolve(self, ndim: int, key: tuple[str, ...]) -> int:
        d = self.pad_dim if self.pad_dim >= 0 else ndim + self.pad_dim
        if not 0 <= d < ndim:
            raise IndexError(
                f"pad_sequence: pad_dim {self.pad_dim} is out of range for entry {key!r} with "
                f"{ndim} dims"
            )
        return d

    def node(self, tds: list[Any], prefix: tuple[str, ...]) -> tuple[TensorDictBase, Any]:
        first = tds[0]
        bs = list(first.batch_size)
        keys = list(first._keys_str())
        for i, td in enumerate(tds[1:], 1):
            if set(td._keys_str()) != set(keys):
                raise RuntimeError(
                    f"pad_sequence: TensorDicts 0 and {i} have different keys at "
                    f"{prefix or 'the root'!r}: {sorted(set(keys) ^ set(td._keys_str()))}"
                )
        for key, value in first._items_str():
            if isinstance(value, Tensor):
                self.resolve(value.ndim, (*prefix, key))
        batch_d = self._batch_dim(first, prefix)
        if batch_d is not None:
            bs[batch_d] = max(td.batch_size[batch_d] for td in tds)
        out_bs = torch.Size([len(tds), *bs])
        entries: dict[str, Any] = {}
        masks: dict[str, Any] = {}
        for key in keys:
            vals = [td._get_str(key) for td in tds]
            full = (*prefix, key)
            if is_td(vals[0]):
                entries[key], masks[key] = self.node(vals, full)
            elif is_nt(vals[0]):
                entries[key] = self._non_tensor(vals, batch_d, full)
            else:
                entries[key], masks[key] = self._tensor(vals, full, out_bs, len(bs))
        mask_td = TensorDict._new_unsafe(masks, out_bs, first.device)
        return first._new(entries, out_bs), mask_td

    def _batch_dim(self, td: Any, prefix: tuple[str, ...]) -> int | None:
        """The batch dim that `pad_dim` names in `td`, or None."""
        nb = td.batch_dims
        if self.pad_dim >= 0:
            return self.pad_dim if self.pad_dim < nb else None
        dims = {v.ndim + self.pad_dim for v in td._values_str() if isinstance(v, Tensor)} or {
            nb + self.pad_dim
        }
        in_batch = {d for d in dims if d < nb}
        if (in_batch and in_batch != dims) or len(in_batch) > 1:
            raise ValueError(
                f"pad_sequence: pad_dim {self.pad_dim} lands on a batch dim of some entries of "
                f"{prefix or 'the root'!r} and on a feature dim of others"
            )
        return in_batch.pop() if in_batch else None

    def _tensor(
        self, vals: list[Tensor], key: tuple[str, ...], out_bs: torch.Size, nb: int
    ) -> tuple[Tensor, Tensor]:
        d = self.resolve(vals[0].ndim, key)
        length = max(v.shape[d] for v in vals)
        fill = self.values.get(key, self.default)
        padded = []
        for v in vals:
            missing = length - v.shape[d]
            flat = [0, 0] * (v.ndim - 1 - d) + ([missing, 0] if self.left else [0, missing])
            padded.append(F.pad(v, flat, value=fill) if missing else v)
        try:
            stacked = torch.stack(padded, 0)
        except RuntimeError:
            shapes = sorted({tuple(v.shape) for v in vals})
            raise RuntimeError(
                f"pad_sequence: entry {key!r} has shapes {shapes} that differ in a dim other "
                f"than pad_dim={self.pad_dim}"
            ) from None
        lengths = torch.tensor([v.shape[d] for v in vals], device=stacked.device)
        pos = torch.arange(length, device=stacked.device)
        if self.left:
            valid = pos.unsqueeze(0) >= (length - lengths).unsqueeze(1)
        else:
            valid = pos.unsqueeze(0) < lengths.unsqueeze(1)
        if d < nb:  # a batch dim: the mask has the output's batch size
            view = [len(vals)] + [1] * nb
            view[d + 1] = length
            mask = valid.view(view).expand(out_bs)
        else:
            view = [len(vals)] + [1] * nb + [length]
            mask = valid.view(view).expand(*out_bs, length)
        return stacked, mask.clone()

    def _non_tensor(self, vals: list[Any], batch_d: int | None, key: tuple[str, ...]) -> Any:
        if batch_d is None:
            return stack_non_tensors(vals, 0)
        length = max(v.batch_size[batch_d] for v in vals)
        padded = []
        for v in vals:
            missing = length - v.batch_size[batch_d]
            pads = [(0, 0)] * batch_d + [(missing, 0) if self.left else (0, missing)]
            padded.append(_from_array(padded_values(v, pads), v.device) if missing else v)
        return stack_non_tensors(padded, 0)


# ------------------------------------------------------------ unpad_sequence
def unpad_sequence(
    padded: TensorDictBase,
    mask: TensorDictBase | Tensor | None = None,
    *,
    pad_dim: int = 0,
) -> TensorDictBase:
    """Split a batch built by `pad_sequence(..., return_mask=True)` back into samples.

    Args:
        padded: the padded batch, samples along its first dim.
        mask: the valid positions: a TensorDict of masks as `pad_sequence`
            builds them, or one boolean tensor `[len(padded), max_len]` for
            every entry. `None` reads (and drops) `padded["masks"]`.
        pad_dim: the `pad_dim` given to `pad_sequence`.

    Returns:
        A `LazyStackedTensorDict` of the samples (views of `padded`).

    Raises:
        ValueError: if `padded` has no batch dim, has no masks, a mask has
            the wrong shape, or a row's valid positions are not contiguous.
        KeyError: if the mask TensorDict lacks an entry of `padded`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, pad_sequence, unpad_sequence
        >>> tds = [TensorDict(a=torch.arange(n), batch_size=[n]) for n in (2, 3)]
        >>> samples = unpad_sequence(pad_sequence(tds, return_mask=True))
        >>> samples[0]["a"]
        tensor([0, 1])
    """
    if not padded.batch_dims:
        raise ValueError(
            "unpad_sequence needs the samples along the first batch dim of padded, which has none"
        )
    if mask is None:
        mask = padded.get("masks", None)
        if mask is None:
            raise ValueError(
                "unpad_sequence: padded has no 'masks' entry; pass mask= or build padded with "
                "pad_sequence(..., return_mask=True)"
            )
        padded = padded.exclude("masks")
    if isinstance(mask, Tensor):
        if mask.ndim != 2 or mask.shape[0] != padded.batch_size[0]:
            raise ValueError(
                f"unpad_sequence: a tensor mask must have shape [{padded.batch_size[0]}, max_len], "
                f"got {list(mask.shape)}"
            )
    samples = [_unpad_row(padded[i], mask[i], pad_dim, ()) for i in range(padded.batch_size[0])]
    sizes = {s.batch_size for s in samples}
    if len(sizes) > 1:
        # td's lazy stacks hold members of one batch size: keep the dims before the ragged one
        common = min(len(s) for s in sizes)
        for d in range(common):
            if len({s[d] for s in sizes}) > 1:
                common = d
                break
        samples = [_keep_dims(s, common) for s in samples]
    return LazyStackedTensorDict(*samples, stack_dim=0)


def _keep_dims(td: TensorDictBase, n: int) -> TensorDictBase:
    entries = {k: _keep_dims(v, n) if is_td(v) else v for k, v in td._items_str()}
    return td._new(entries, td.batch_size[:n])


def _span(row: Tensor, key: tuple[str, ...]) -> slice:
    row = row.reshape(-1, row.shape[-1]).any(0) if row.ndim > 1 else row
    idx = row.nonzero().flatten().tolist()
    if not idx:
        return slice(0, 0)
    start, stop = idx[0], idx[-1] + 1
    if stop - start != len(idx):
        raise ValueError(
            f"unpad_sequence: the valid positions of entry {key!r} are not contiguous: {idx}"
        )
    return slice(start, stop)


def _unpad_row(
    row: TensorDictBase, mask: Any, pad_dim: int, prefix: tuple[str, ...]
) -> TensorDictBase:
    nb = row.batch_dims
    entries: dict[str, Any] = {}
    bs = list(row.batch_size)
    span: slice | None = None
    for key, value in row._items_str():
        full = (*prefix, key)
        sub_mask = mask
        if is_td(mask):
            sub_mask = mask.get(key, None)
            if sub_mask is None and not is_nt(value):
                raise KeyError(f"unpad_sequence: the masks have no entry {full!r}")
        if is_td(value):
            entries[key] = _unpad_row(value, sub_mask, pad_dim, full)
            continue
        if is_nt(value):
            entries[key] = value
            continue
        d = pad_dim if pad_dim >= 0 else value.ndim + pad_dim
        m = sub_mask
        if d < nb:  # a batch dim: the mask has the row's batch shape
            m = m.movedim(d, -1) if m.ndim > 1 else m
        span = _span(m, full)
        index = (slice(None),) * d + (span,)
        entries[key] = value[index]
        if d < nb:
            bs[d] = span.stop - span.start
    if span is not None and pad_dim >= 0 and pad_dim < nb:
        for key, value in list(entries.items()):
            if is_nt(value):
                entries[key] = _slice_non_tensor(value, pad_dim, span)
    return row._new(entries, torch.Size(bs))


def _slice_non_tensor(leaf: Any, dim: int, span: slice) -> Any:
    values = leaf.as_array()
    return _from_array(values[(slice(None),) * dim + (span,)], leaf.device)
