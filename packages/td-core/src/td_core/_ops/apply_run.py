"""How `apply` and `named_apply` run over a TensorDict.

One traversal serves every form: out of place, in place (`inplace=True`,
results collected and written once every one is computed) and into a given
TensorDict (`out=`). The rule for what is left, as upstream:

- a `None` result drops the entry;
- a sub-TensorDict none of whose entries is kept is dropped (it is `None`
  for its parent), unless `filter_empty=False`;
- with the default `filter_empty=None`, a TensorDict that held no leaf in
  the first place is kept (empty), so `TensorDict().apply(fn)` is a TensorDict;
- the top level follows the same rule, so `apply` returns `None` when nothing
  is left.

Lazy stacks run per member and are re-stacked lazily (members with nothing
left become empty members when another member keeps something); with
`batch_size=` they are read as one dense TensorDict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_td, stack_parts
from td_core._core.utils import NO_DEFAULT, as_device, broadcast_shape
from td_core.errors import (
    BatchSizeError,
    DeviceError,
    GradLeafWriteError,
    KeyNotFoundError,
    LockedError,
)

__all__ = ["ApplyOptions", "run_apply"]

Tensor = torch.Tensor


@dataclass(frozen=True, slots=True)
class ApplyOptions:
    """The options of one `apply` call, resolved once.

    Attributes:
        fn: the function called on every leaf.
        named: call `fn(key, leaf, *others)` (`named_apply`).
        nested_keys: with `named`, pass the full nested key.
        default: the value passed for keys missing from the others.
        call_on_nested: call `fn` on sub-TensorDicts instead of their leaves.
        inplace: write the results into the existing leaves.
        batch_size: the result's batch size (`None`: the caller's).
        device: the result's device (`NO_DEFAULT`: the caller's).
        filter_empty: what to do with a TensorDict none of whose entries is kept.
        is_leaf: a predicate on an entry's class: entries it accepts are passed whole.
    """

    fn: Callable[..., Any]
    named: bool = False
    nested_keys: bool = False
    default: Any = NO_DEFAULT
    call_on_nested: bool = False
    inplace: bool = False
    batch_size: torch.Size | None = None
    device: Any = NO_DEFAULT
    filter_empty: bool | None = None
    is_leaf: Callable[[type], bool] | None = None


def run_apply(
    td: TensorDictContract,
    others: tuple[Any, ...],
    opts: ApplyOptions,
    *,
    prefix: tuple[str, ...] = (),
    out: TensorDictContract | None = None,
) -> Any | None:
    """Run `apply` as `opts` says; the result, `td` itself (in place), `out`, or `None`.

    All-or-nothing: `fn` runs on every leaf before anything is written, so an
    exception (or a result that does not fit) leaves `td` and `out` unchanged.
    """
    if out is not None:
        _check_out(out, opts)
    writes: list[tuple[Any, Any, Any]] = []
    result = _apply(td, others, opts, prefix, writes)
    if opts.inplace:
        _write_all(writes)
        return result
    if out is None or result is None:
        return result
    out.update(result)
    return out


def _check_out(out: TensorDictContract, opts: ApplyOptions) -> None:
    if opts.inplace:
        raise ValueError("apply: pass either inplace=True or out=, not both")
    if out.is_locked:
        raise LockedError(
            "apply(..., out=): the out TensorDict is locked; unlock it first (out.unlock_())"
        )
    if opts.batch_size is not None and opts.batch_size != out.batch_size:
        raise BatchSizeError(
            f"apply(..., out=): batch_size {list(opts.batch_size)} and out.batch_size "
            f"{list(out.batch_size)} must be equal when both are provided"
        )
    if opts.device is not NO_DEFAULT and as_device(opts.device) != out.device:
        raise DeviceError(
            f"apply(..., out=): device {opts.device!r} and out.device {out.device!r} must be "
            "equal when both are provided"
        )


def _apply(
    td: TensorDictContract,
    others: tuple[Any, ...],
    opts: ApplyOptions,
    prefix: tuple[str, ...],
    writes: list[tuple[Any, Any, Any]],
) -> Any | None:
    if opts.batch_size is None:
        parts = stack_parts(td)
        if parts is not None:  # per member (a lazy stack's reads are copies)
            return _apply_members(td, parts, others, opts, prefix, writes)
    fn, inplace, is_leaf = opts.fn, opts.inplace, opts.is_leaf
    out: dict[str, Any] = {}
    kept = False  # an entry kept that is not in `out` (in place)
    bs = td.batch_size if opts.batch_size is None else opts.batch_size
    n = len(td.batch_size)
    # the usual call, `td.apply(fn)`: plain tensor leaves take a short path
    plain = not (others or opts.named or inplace)
    check = opts.batch_size is None and n > 0  # results must keep the batch dims
    first = bs[0] if check and n == 1 else -1  # one batch dim: compare an int, not a Size slice
    for key, value in td._items_str():
        if plain and type(value) is Tensor:
            result = fn(value)
            if result is None:
                continue
            if check and type(result) is Tensor:
                shape = result.shape
                if (not shape or shape[0] != first) if first >= 0 else shape[:n] != bs:
                    raise _batch_error(result, prefix, key, bs)
            out[key] = result
            continue
        other_values = [_other_value(other, key, i, prefix, opts) for i, other in enumerate(others)]
        is_tensor = isinstance(value, Tensor)
        as_leaf = not is_tensor and is_leaf is not None and is_leaf(type(value))
        if not is_tensor and value._is_non_tensor and not as_leaf:
            if inplace:
                kept = True
            else:
                out[key] = value
            continue
        if not is_tensor and not opts.call_on_nested and not as_leaf:
            sub = _apply(value, tuple(other_values), opts, (*prefix, key), writes)
            if sub is None:
                continue
            if inplace:
                kept = True
            else:
                out[key] = sub
            continue
        if opts.named:
            name = ((*prefix, key) if prefix else key) if opts.nested_keys else key
            result = fn(name, value, *other_values)
        else:
            result = fn(value, *other_values)
        if result is None:
            continue
        if inplace:
            kept = True
            if result is not value:  # written by _write_all once every result is computed
                writes.append(((*prefix, key), value, result))
            continue
        if type(result) is Tensor and check and result.shape[:n] != bs:
            raise _batch_error(result, prefix, key, bs)
        out[key] = result
    if not (out or kept) and _drop_empty(td, opts):
        return None
    if inplace:
        return td
    return td._new(out, bs, td.device if opts.device is NO_DEFAULT else as_device(opts.device))


def _other_value(other: Any, key: str, i: int, prefix: tuple[str, ...], opts: ApplyOptions) -> Any:
    item = other._get_str(key, NO_DEFAULT) if is_td(other) else NO_DEFAULT
    if item is NO_DEFAULT:
        if opts.default is NO_DEFAULT:
            raise KeyNotFoundError(
                f"key {(*prefix, key) if prefix else key!r} is missing from TensorDict number "
                f"{i + 1} of the others passed to apply (pass default= to fill it)"
            )
        return opts.default
    return item


def _drop_empty(td: TensorDictContract, opts: ApplyOptions) -> bool:
    """Whether a TensorDict none of whose entries is kept becomes `None`."""
    if opts.filter_empty is None:  # as upstream: what was empty already stays
        return not td.is_empty()  # type: ignore[attr-defined]  # every kind has is_empty
    return opts.filter_empty


def _apply_members(
    td: TensorDictContract,
    parts: tuple[list[Any], int],
    others: tuple[Any, ...],
    opts: ApplyOptions,
    prefix: tuple[str, ...],
    writes: list[tuple[Any, Any, Any]],
) -> Any | None:
    members, dim = parts
    split = [o.unbind(dim) if is_td(o) else [o] * len(members) for o in others]
    results = [
        _apply(m, tuple(s[i] for s in split), opts, prefix, writes) for i, m in enumerate(members)
    ]
    if all(r is None for r in results):
        if members or _drop_empty(td, opts):
            return None
    if opts.inplace:
        return td
    device = td.device if opts.device is NO_DEFAULT else as_device(opts.device)
    # a member with nothing left is an empty member, so the stack keeps its shape
    filled = [
        m._new({}, m.batch_size, device) if r is None else r for m, r in zip(members, results)
    ]
    return td._restack(filled, dim, named=True)  # type: ignore[attr-defined]  # a lazy stack


def _batch_error(result: Tensor, prefix: tuple[str, ...], key: str, bs: torch.Size) -> Exception:
    return BatchSizeError(
        f"apply: the function returned a tensor of shape {list(result.shape)} for key "
        f"{(*prefix, key) if prefix else key!r}, which does not start with the batch_size "
        f"{list(bs)}; pass batch_size= if the function changes the batch dims"
    )


def _show(key: tuple[str, ...]) -> str | tuple[str, ...]:
    return key[0] if len(key) == 1 else key


def _write_all(writes: list[tuple[Any, Any, Any]]) -> None:
    """Write the in-place results, after checking every one fits its destination.

    In-place `apply` is all-or-nothing like `update`: the function runs on
    every leaf first, so an exception from it (or a result that does not fit)
    leaves every leaf as it was.
    """
    grad = torch.is_grad_enabled()
    for key, dest, result in writes:
        if isinstance(dest, Tensor):
            if grad and dest.requires_grad and dest.is_leaf:
                raise GradLeafWriteError(
                    f"apply(inplace=True): Failed to update {_show(key)!r} in place: it is a leaf tensor "
                    "that requires grad, which autograd does not let change in place; run it "
                    "under torch.no_grad() (TensorDictParams.apply_ does)"
                )
            if not isinstance(result, Tensor):
                raise TypeError(
                    f"apply_: the function returned a {type(result).__name__} for key {key!r}, "
                    "expected a tensor (or None to leave the entry alone)"
                )
            if broadcast_shape(result.shape, dest.shape) != dest.shape:
                raise BatchSizeError(
                    f"apply_: the function returned a tensor of shape {list(result.shape)} for key "
                    f"{key!r}, which cannot be written into its shape {list(dest.shape)}"
                )
    for _, dest, result in writes:
        if isinstance(dest, Tensor):
            dest.copy_(result)
        else:
            dest.update_(result)
