"""`update(source, update_batch_size=True)`: self takes the source's batch size.

The result is built and validated as a new dense TensorDict first (self's
entries with the source's written over them, dense sub-TensorDicts present in
both merged the same way), then self is emptied and refilled: a failure leaves
self unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from td_core._core.contract import dense
from td_core._core.traverse import is_stack, is_td
from td_core.errors import LockedError, OptionsConflictError

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
    if is_stack(td) or not hasattr(td, "_tensordict"):
        raise NotImplementedError(
            f"update(update_batch_size=True) changes the batch size of a dense TensorDict; "
            f"got a {type(td).__name__}"
        )
    # the result, built (and validated) before self changes
    checked = dense(_resized_entries(td, source, is_leaf), source.batch_size, td.device)
    td.clear()
    td.batch_size = checked.batch_size
    for key, value in checked._items_str():
        td._set_str(key, value)


def _resized_entries(
    td: Any, source: Any, is_leaf: Callable[[type], bool] | None
) -> dict[str, Any]:
    """`td`'s entries with `source`'s over them; dense sub-TensorDicts in both are merged."""
    entries = dict(td._items_str())
    for key, value in source._items_str():
        existing = entries.get(key)
        if (
            existing is not None
            and type(existing) is type(td)
            and is_td(value)
            and not (is_leaf is not None and is_leaf(type(value)))
        ):
            value = dense(_resized_entries(existing, value, is_leaf), value.batch_size, td.device)
        entries[key] = value
    return entries
