"""`update(source, update_batch_size=True)`: self takes the source's batch size.

Everything is checked first (self's entries that the source lacks must fit
the new batch size, at every depth), then written: a failure leaves self
unchanged. Sub-TensorDicts, tensorclasses and lazy stacks present in both are
resized in place, so references to them stay valid, as upstream; a lazy
stack keeps its members (each resized to its part of the source), drops the
ones past the source's size and gains (shallow copies of) the new parts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from td_core._core.contract import dense
from td_core._core.traverse import is_stack, is_td, stack_parts
from td_core.errors import BatchSizeError, LockedError, OptionsConflictError

__all__ = ["update_resized"]


def update_resized(
    td: Any,
    source: Any,
    inplace: bool,
    keys_to_update: Any,
    is_leaf: Callable[[type], bool] | None,
) -> None:
    """`update(source, update_batch_size=True)`: checked whole, then written."""
    if inplace:
        raise OptionsConflictError(
            "update(update_batch_size=True) replaces entries to change the batch size: it cannot "
            "be combined with inplace=True"
        )
    if keys_to_update is not None:
        raise OptionsConflictError(
            "update(update_batch_size=True) takes the whole source: it cannot be combined with "
            "keys_to_update"
        )
    if not is_td(source):
        raise TypeError(
            f"update(update_batch_size=True) takes the batch size of a TensorDict, got "
            f"{type(source).__name__}"
        )
    if td.is_locked:
        raise LockedError(
            "update(update_batch_size=True): the TensorDict is locked (unlock_() it to change "
            "its batch size)"
        )
    _check(td, source, is_leaf)  # everything is checked before the first write
    _resize(td, source, is_leaf)


def _merged(existing: Any, value: Any, is_leaf: Callable[[type], bool] | None) -> bool:
    """Whether sub-TensorDict `existing` is resized in place to `value` (kept, not replaced)."""
    return (
        is_td(existing)
        and is_td(value)
        and not (is_leaf is not None and is_leaf(type(value)))
        and (is_stack(existing) or hasattr(existing, "_tensordict"))
    )


def _member_sources(td: Any, source: Any) -> list[Any]:
    """The source's parts along `td`'s stack dim, one per member of the resized stack."""
    if not 0 <= td.stack_dim < source.batch_dims:
        raise BatchSizeError(
            f"update(update_batch_size=True): a lazy stack along dim {td.stack_dim} cannot take "
            f"the batch size {list(source.batch_size)}, which has no such dim"
        )
    parts = stack_parts(source)
    if parts is not None and parts[1] == td.stack_dim:
        return list(parts[0])
    return list(source.unbind(td.stack_dim))


def _check(td: Any, source: Any, is_leaf: Callable[[type], bool] | None) -> None:
    """Raise if `td` cannot take `source`'s batch size and entries (nothing is written)."""
    if is_stack(td):
        for member, part in zip(td.tensordicts, _member_sources(td, source)):
            if not is_td(member):
                raise NotImplementedError(
                    f"update(update_batch_size=True) of a stack of {type(member).__name__}"
                )
            _check(member, part, is_leaf)
        return
    if not hasattr(td, "_tensordict"):
        raise NotImplementedError(
            f"update(update_batch_size=True) changes the batch size of a TensorDict, a lazy "
            f"stack or a tensorclass; got a {type(td).__name__}"
        )
    entries = {}
    for key, value in td._items_str():
        new = source._get_str(key, None)
        if new is None:
            entries[key] = value  # kept: must fit the new batch size
        elif _merged(value, new, is_leaf):
            _check(value, new, is_leaf)
    dense(entries, source.batch_size, td.device)  # validates what is kept


def _resize(td: Any, source: Any, is_leaf: Callable[[type], bool] | None) -> None:
    if is_stack(td):
        parts = _member_sources(td, source)
        members = list(td.tensordicts)
        for member, part in zip(members, parts):
            _resize(member, part, is_leaf)
        members = members[: len(parts)] + [part.copy() for part in parts[len(members) :]]
        bs = source.batch_size
        td._replace_members(members, bs[: td.stack_dim] + bs[td.stack_dim + 1 :])
        return
    kept = {}
    for key, value in source._items_str():
        existing = td._get_str(key, None)
        if existing is not None and _merged(existing, value, is_leaf):
            _resize(existing, value, is_leaf)
            kept[key] = existing
    own = {key: value for key, value in td._items_str() if source._get_str(key, None) is None}
    fitted = dense(own, source.batch_size, td.device)  # checked in `_check`: cannot fail
    order = [*td._keys_str(), *(k for k in source._keys_str() if td._get_str(k, None) is None)]
    td.clear()
    td.batch_size = source.batch_size
    for key in order:
        if key in own:
            td._set_str(key, fitted._get_str(key))
        else:
            td._set_str(key, kept.get(key, source._get_str(key)))
