"""The planning half of `update` and `update_`: every entry is checked before any is written.

`StructureMixin.update`/`update_` call these; each plan validates the whole
source against the TensorDict (shapes, locks, ragged lazy stacks) and only
then writes, so a failed update leaves the TensorDict as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from td_core._core.contract import TD, TensorDictContract
from td_core._core.keys import as_tuple, unravel_key
from td_core._core.traverse import is_nt, is_ragged, is_stack, is_td, stack_parts
from td_core._core.utils import NO_DEFAULT, broadcast_shape
from td_core.errors import BatchSizeError, KeyNotFoundError, LockedError

__all__ = ["update_flat", "build_from_tree", "assign_result", "plan_update", "plan_update_in_place"]

Tensor = torch.Tensor
_ABSENT: Any = object()  # `get`'s default where a missing key must not read as None


def update_flat(td: TensorDictContract, source: Any) -> bool:
    """`update` when every entry is a plain tensor or a sub-TensorDict merged into a dense one.

    Validates everything first, then writes; returns False (having written
    nothing) when the fast path does not apply, so the general path takes over.
    """
    staged: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if not _stage_dense(td, source, staged):
        return False
    for entries, new in staged:
        entries.update(new)
    return True


def _stage_dense(td: Any, source: Any, staged: list[tuple[dict[str, Any], dict[str, Any]]]) -> bool:
    """Check `source`'s entries against the dense container `td`, recursing into sub-TensorDicts.

    Appends `(entries, new_entries)` pairs to `staged`; False if the fast path does not apply.
    """
    if getattr(td, "_pending", None) is not None:  # keys added under torch.compile: general path
        return False
    entries = getattr(td, "_tensordict", None)
    # dense containers only (their private attributes are read directly: this is a hot path)
    if type(entries) is not dict or td._is_locked or td._device is not None:
        return False
    bs = td._batch_size
    n = len(bs)
    check = n > 0  # whether each tensor's leading dims must be checked against bs
    items: Any
    if type(source) is dict:
        items = source.items()
    elif is_td(source):
        if is_stack(source):  # stacked reads (copies, and ragged leaves fail): the general path
            return False
        items = source._items_str()
        sbs = source.batch_size
        # its tensor leaves start with its batch size: if that starts with ours, so do they
        check = check and sbs != bs and not (len(sbs) > n and sbs[:n] == bs)
    elif isinstance(source, Mapping):
        items = source.items()
    else:
        return False
    first = bs[0] if n == 1 else -1  # one batch dim (the usual case): no Size slicing
    get = entries.get
    new: dict[str, Any] = {}
    for key, value in items:
        if type(key) is not str:
            if type(key) is not tuple or not key or type(key[0]) is not str:
                return False
            if len(key) > 1:  # ("sub", ...): staged into the existing sub-TensorDict
                sub = get(key[0])
                rest = key[1] if len(key) == 2 else key[1:]
                if sub is None or type(sub) is Tensor or not is_td(sub):
                    return False
                if not _stage_dense(sub, {rest: value}, staged):
                    return False
                continue
            key = key[0]
        existing = get(key)
        if type(value) is not Tensor:
            # a sub-TensorDict merged into an existing one: recurse, else the general path
            if (
                existing is None
                or type(existing) is Tensor
                or not is_td(existing)
                or not (type(value) is dict or is_td(value))
                or not _stage_dense(existing, value, staged)
            ):
                return False
            continue
        if existing is not None and type(existing) is not Tensor:
            return False
        if check:
            shape = value.shape
            if not ((shape and shape[0] == first) if first >= 0 else shape[:n] == bs):
                return False
        new[key] = value
    staged.append((entries, new))
    return True


def build_from_tree(td: TensorDictContract, tree: dict[str, Any]) -> Any:
    """A container of `td`'s batch size from nested dicts (each dict becomes a TensorDict)."""
    entries = {k: build_from_tree(td, v) if type(v) is dict else v for k, v in tree.items()}
    return td._new(entries, td.batch_size)


def assign_result(td: TD, result: TensorDictContract) -> TD:
    """Make `td` hold `result`'s entries (for `inplace=True` variants)."""
    if td.is_locked:
        raise LockedError(
            "Cannot modify locked TensorDict: it cannot be restructured in place (unlock_() it)"
        )
    # where reads are copies (a file, a server), a sub-TensorDict of `result` may be a view of
    # `td`'s own storage, which deleting its key would empty: such keys are written over
    kept = set(result._keys_str()) if td._reads_are_copies else set()
    for key in list(td._keys_str()):
        if key not in kept:
            td._del_str(key)
    for key, value in result._items_str():
        td._set_str(key, value)
    return td


def plan_update(
    td: TensorDictContract,
    source: Mapping[Any, Any] | TensorDictContract,
    clone: bool,
    inplace: bool,
    allowed: set[tuple[str, ...]] | None,
    prefix: tuple[str, ...],
    plan: list[tuple[TensorDictContract, str, Any, tuple[str, ...]]],
) -> None:
    parts, source_parts = stack_parts(td), stack_parts(source)
    if (
        parts is not None
        and source_parts is not None
        and source_parts[1] == parts[1]
        and len(source_parts[0]) == len(parts[0])
        and _leads_with(source.batch_size, td.batch_size)  # type: ignore[union-attr]
    ):  # lazy into lazy, stacked alike: member by member (ragged leaves are never stacked)
        for member, share in zip(parts[0], source_parts[0]):
            plan_update(member, share, clone, inplace, allowed, prefix, plan)
        return
    items = source._items_str() if is_td(source) else source.items()
    for raw_key, value in items:
        key = unravel_key(raw_key)
        if isinstance(key, tuple):
            target = td._parent_for(key, create=False) if _has_parent(td, key) else None
            if target is None:
                if td.is_locked:
                    raise LockedError(
                        f"Cannot modify locked TensorDict: update cannot create {(*prefix, *key)!r}"
                    )
                target = td._parent_for(key, create=True)
            plan_update(
                target, {key[-1]: value}, clone, inplace, allowed, (*prefix, *key[:-1]), plan
            )
            continue
        full = (*prefix, key)
        if allowed is not None and not any(
            full[: len(a)] == a or a[: len(full)] == full for a in allowed
        ):
            continue
        existing = td._get_str(key, NO_DEFAULT)
        if is_td(existing) and (is_td(value) or isinstance(value, Mapping)):
            if not inplace and _densely_into_ragged(existing, value):
                # a dense sub-TensorDict cannot hold ragged leaves: it becomes a lazy stack of
                # its slices (views of it) along the value's stack dim, as upstream
                if td.is_locked:
                    raise LockedError(
                        f"Cannot modify locked TensorDict: update cannot set {full!r} (use update_())"
                    )
                existing = existing.to_lazystack(value.stack_dim)  # type: ignore[union-attr]
                plan.append((td, key, existing, full))
            plan_update(existing, value, clone, inplace, allowed, full, plan)
            continue
        if clone and isinstance(value, Tensor):
            value = value.clone()
        elif clone and is_td(value):
            value = value.clone()
        if existing is NO_DEFAULT or not inplace:
            if td.is_locked:
                raise LockedError(f"update: cannot set {full!r}: the TensorDict is locked")
            # not named yet: nothing may change before every entry is checked (`update` names)
            value = td._validate(value, full if len(full) > 1 else key, adopt=False)
        elif isinstance(existing, Tensor):
            _check_copy(existing, value, full)
        plan.append((td, key, value, full))


def _densely_into_ragged(existing: Any, value: Any) -> bool:
    """Whether `value` is a lazy stack with ragged leaves to merge into the dense `existing`."""
    return (
        not is_stack(existing)
        and is_ragged(value)
        and value.stack_dim < existing.batch_dims
        and _leads_with(value.batch_size, existing.batch_size)
    )


def _leads_with(batch_size: torch.Size, lead: torch.Size) -> bool:
    return batch_size[: len(lead)] == lead


def _has_parent(td: TensorDictContract, key: tuple[str, ...]) -> bool:
    try:
        td._parent_for(key, create=False)
    except KeyError:
        return False
    return True


def _check_copy(dest: Tensor, value: Any, full: tuple[str, ...]) -> None:
    shape = value.shape if isinstance(value, Tensor) else torch.as_tensor(value).shape
    if broadcast_shape(shape, dest.shape) != dest.shape:
        raise BatchSizeError(
            f"cannot copy a value of shape {list(shape)} into {full!r} of shape {list(dest.shape)}"
        )


def _member_part(source: Any, d: int, i: int, n: int) -> Any:
    """Member `i`'s share of `source` (written into a lazy stack along dim `d` of `n`)."""
    if is_td(source):
        return source.unbind(d)[i] if source.batch_dims > d else source
    if isinstance(source, Mapping):
        return {k: _member_part(v, d, i, n) for k, v in source.items()}
    if isinstance(source, Tensor) and source.ndim >= n:
        return source.select(d, i if source.shape[d] != 1 else 0)
    return source  # broadcast into every member as it is


def plan_update_in_place(
    td: TensorDictContract,
    source: Mapping[Any, Any] | TensorDictContract,
    allowed: set[tuple[str, ...]] | None,
    prefix: tuple[str, ...],
    pairs: list[tuple[Tensor, Any, tuple[str, ...]]],
    values: list[tuple[TensorDictContract, str, Any, tuple[str, ...]]],
) -> None:
    parts = stack_parts(td)
    if parts is not None:  # a lazy stack's reads are copies: plan the writes into its members
        members, d = parts
        if is_td(source) and source.batch_dims > d:
            shares: Any = source.unbind(d)
        else:
            shares = [_member_part(source, d, i, td.batch_dims) for i in range(len(members))]
        for member, share in zip(members, shares):
            plan_update_in_place(member, share, allowed, prefix, pairs, values)
        return
    items = source._items_str() if is_td(source) else source.items()
    for raw_key, value in items:
        full = (*prefix, *as_tuple(unravel_key(raw_key)))
        if allowed is not None and not any(
            full[: len(a)] == a or a[: len(full)] == full for a in allowed
        ):
            continue
        dest = td.get(raw_key, _ABSENT)
        if is_nt(dest) or (is_nt(value) and dest is not _ABSENT and not is_td(dest)):
            # non-tensor values are written into (or replace) their leaf, after all checks
            key = unravel_key(raw_key)
            target = td if isinstance(key, str) else td._parent_for(key, create=False)
            values.append((target, key if type(key) is str else key[-1], value, full))
            continue
        if dest is _ABSENT:
            raise KeyNotFoundError(
                f"update_: key {full!r} was not found in the TensorDict (update_ only copies "
                "into existing entries)"
            )
        if is_td(dest):
            if not (is_td(value) or isinstance(value, Mapping)):
                raise TypeError(
                    f"update_: cannot copy a {type(value).__name__} into sub-TensorDict {full!r}"
                )
            plan_update_in_place(dest, value, allowed, full, pairs, values)
        elif isinstance(dest, Tensor):
            if not isinstance(value, Tensor):
                value = torch.as_tensor(value, device=dest.device)
            _check_copy(dest, value, full)
            pairs.append((dest, value, full))
