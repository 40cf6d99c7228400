"""The `dict` surface beyond get/set: locking, `popitem`, `clear`, `fromkeys`, non-tensor entries, ...

Every method here checks what can fail (locks, missing keys) before it writes,
so a failed call leaves the TensorDict as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract, dense, provided
from td_core._core.keys import NestedKey, as_tuple, unravel_key
from td_core._core.traverse import is_nt, is_td, per_member
from td_core._core.utils import NO_DEFAULT
from td_core._leaves.nontensor import NonTensorData
from td_core._leaves.unbatched import is_unbatched
from td_core._ops.lock_cache import cache_view, cached, drop
from td_core._ops.lock_graph import link, unlink_unless_held
from td_core._ops.per_object import PerObject
from td_core.errors import KeyNotFoundError, LockedError

_MISSING: Any = object()  # `get`'s default where the entry must be there

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["BEFORE_LOCK", "MappingMixin", "PerObject", "fromkeys"]

Tensor = torch.Tensor


# Lock state before the latest lock_()/unlock_() call: what a `with` block restores (`_views`).
BEFORE_LOCK = PerObject("dict_methods.BEFORE_LOCK")


def _locked_error(what: str, key: Any = None) -> LockedError:
    target = "" if key is None else f" {key!r}"
    return LockedError(
        f"Cannot modify locked TensorDict: cannot {what}{target} (unlock_() it first)"
    )


def _drop_empty(td: TensorDictContract) -> bool:
    """Remove empty sub-TensorDicts (bottom up); whether `td` itself ended up empty."""
    for key, value in list(td._key_items()):  # a lazy stack's leaves are not stacked
        if is_td(value) and _drop_empty(value):
            td._del_str(key)
    return not td._keys_str()


def _has_empty(td: TensorDictContract) -> bool:
    """Whether a sub-TensorDict at any depth holds no entry."""
    return any(
        is_td(value) and (value.is_empty() or _has_empty(value)) for _, value in td._key_items()
    )


def _without_non_tensor(td: TensorDictContract) -> Any:
    lazy = per_member(td, _without_non_tensor)  # a lazy stack stays lazy (ragged leaves too)
    if lazy is not NotImplemented:
        return lazy
    out = {}
    for key, value in td._items_str():
        if is_td(value):
            out[key] = _without_non_tensor(value)
        elif not is_nt(value):
            out[key] = value
    return td._new(out, td.batch_size)


def _non_tensor_items(
    td: TensorDictContract, prefix: tuple[str, ...], nested: bool
) -> Iterator[tuple[NestedKey, Any]]:
    for key, value in td._key_items():  # a lazy stack's tensor leaves are not stacked
        if is_nt(value):
            yield ((*prefix, key) if prefix else key), value
        elif nested and is_td(value):
            yield from _non_tensor_items(value, (*prefix, key), nested)


def fromkeys(keys: list[Any], value: Any = 0) -> Any:
    """A TensorDict with empty batch size holding `value` at every key (see `TensorDict.fromkeys`)."""
    td = dense()
    for key in keys:
        td.set(key, value)
    return td


class MappingMixin(TensorDictContract):
    """Dict-like methods of `td_core.TensorDictBase`."""

    __slots__ = ()

    # ---------------------------------------------------------------- locking
    def lock_(self) -> Self:
        """Lock this TensorDict and its sub-TensorDicts: no entry may be added, replaced or removed.

        In-place writes (`set_`, `td[idx] = ...` on existing entries) stay
        allowed. Returns self; as a context manager (`with td.lock_():`) the
        previous state comes back on exit.

        The sub-TensorDicts remember the locked TensorDicts above them (weakly):
        while one of those is alive and locked, unlocking the sub-TensorDict
        raises `LockedError` (see `unlock_`).
        """
        before = self._is_locked
        self._set_lock(True)
        BEFORE_LOCK.set(self, before)
        return self

    def unlock_(self) -> Self:
        """Unlock this TensorDict and its sub-TensorDicts.

        Returns self; as a context manager (`with td.unlock_():`) the
        previous state comes back on exit.

        Raises:
            LockedError: (a `RuntimeError`) if this TensorDict, or one of its
                sub-TensorDicts, is held by another locked TensorDict that is
                still alive: unlocking it would open that one to changes. Unlock
                the root instead. Nothing is unlocked then.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(2)}, [2], lock=True)
            >>> with td.unlock_():
            ...     td["b"] = torch.ones(2)
            >>> td.is_locked
            True
        """
        before = self._is_locked
        self._set_lock(False)  # checks first: a refused unlock_() records nothing
        BEFORE_LOCK.set(self, before)
        return self

    def clear_refs_for_compile_(self) -> Self:
        """Forget the lock states recorded for `with td.lock_():` here and in every sub-TensorDict.

        `lock_()`/`unlock_()` record the previous lock state (keyed by a weak
        reference to the TensorDict) so that a following `with` block can
        restore it. Upstream records its last operation the same way and asks
        for this call before a TensorDict leaves a `torch.compile`d function
        (Dynamo cannot rebuild weak references); td keeps the records outside
        the object, so the call is rarely needed, but it drops them all the
        same: a `with` block right after it restores nothing.

        Returns:
            self.
        """
        BEFORE_LOCK.pop(self, None)
        for sub in self._subtrees():
            sub.clear_refs_for_compile_()
        return self

    def _lock_tree(self, locked: bool) -> None:
        self._is_locked = locked
        if not locked:
            drop(self)  # results cached while it was locked (`lock_cache`)
        for sub in self._subtrees():
            sub._lock_tree(locked)

    def _set_lock(self, locked: bool) -> None:
        """Lock or unlock the whole tree, keeping the lock graph (`lock_graph`) up to date."""
        if locked:
            self._lock_tree(True)
            link(self, [])
            return
        blocker = unlink_unless_held(self)
        if blocker is not None:
            raise LockedError(
                "Cannot unlock a tensordict that is part of a locked graph. Unlock the root "
                f"tensordict first: {blocker} is held by a locked TensorDict that is still "
                "alive. If it belongs to several locked TensorDicts, put them under one common "
                "TensorDict and unlock that one; nothing was unlocked"
            )
        self._lock_tree(False)

    # ---------------------------------------------------------------- dict methods
    def popitem(self) -> tuple[str, Any]:
        """Remove the last top-level entry and return `(key, entry)`.

        Raises:
            KeyError: if the TensorDict is empty.
            LockedError: (a `RuntimeError`) if it is locked.
        """
        keys = list(self._keys_str())
        if not keys:
            raise KeyNotFoundError("popitem(): the TensorDict is empty")
        if self._is_locked:
            raise _locked_error("popitem")
        key = keys[-1]
        value = self._get_str(key)
        self._del_str(key)
        return key, value

    def clear(self) -> Self:
        """Remove every entry (the batch size stays)."""
        if self._is_locked:
            raise _locked_error("clear")
        for key in list(self._keys_str()):
            self._del_str(key)
        return self

    @classmethod
    def fromkeys(cls, keys: list[NestedKey], value: Any = 0) -> Self:
        """A TensorDict with empty batch size holding `value` at every key of `keys`.

        Examples:
            >>> from td_core import TensorDict
            >>> TensorDict.fromkeys(["a", ("b", "c")], 1)["b", "c"]
            tensor(1)
        """
        return fromkeys(keys, value)

    @property
    def sorted_keys(self) -> list[str]:
        """The top-level keys, sorted (computed once while the TensorDict is locked)."""
        if not self._is_locked:
            return sorted(self._keys_str())
        keys = cached(
            self, "sorted_keys", (), lambda: tuple(sorted(self._keys_str())), holds_leaves=False
        )
        return list(keys)

    @property
    def _cache(self) -> Any:
        """The results cached while locked, by method name (read-only), or `None`.

        A private attribute of upstream's kept for compatibility (see
        `td_core._ops.lock_cache`): `None` whenever the TensorDict is unlocked.
        """
        return cache_view(self)

    @_cache.setter
    def _cache(self, value: None) -> None:
        if value is not None:
            raise TypeError("_cache can only be reset, with td._cache = None")
        drop(self)

    def create_nested(self, key: NestedKey) -> Self:
        """Write an empty sub-TensorDict with this batch size at `key` (replacing what was there)."""
        key = unravel_key(key)
        parent = self if isinstance(key, str) else self._parent_for(key, create=True)
        leaf = key if type(key) is str else key[-1]
        if parent._is_locked:
            raise _locked_error("create", key)
        parent._set_str(leaf, parent._new({}, parent.batch_size))
        return self

    def filter_empty_(self) -> Self:
        """Remove, in place and recursively, the sub-TensorDicts that hold no leaf."""
        if self._is_locked and _has_empty(self):
            raise _locked_error("filter empty entries of")
        _drop_empty(self)
        return self

    def filter_non_tensor_data(self) -> Self:
        """A copy without the non-tensor leaves (sub-TensorDicts are kept, even if emptied)."""
        return _without_non_tensor(self)

    def replace(self, *args: Any, **kwargs: Any) -> Self:
        """A shallow copy with some entries replaced: `td.replace({"a": x}, b=y)`.

        Self is not modified; the entries not replaced are shared.
        """
        if len(args) > 1:
            raise TypeError(f"replace takes at most one mapping, got {len(args)} positional args")
        source: dict[Any, Any] = dict(args[0].items()) if args else {}
        source.update(kwargs)
        if not source:
            return self
        out = self.clone(recurse=False)
        if out._is_locked:  # (unlock_ records the state for a `with` block: only when needed)
            out.unlock_()
        return out.update(source)

    def rename_keys(self, mapping: Mapping[NestedKey, NestedKey], *, strict: bool = True) -> Self:
        """A copy whose entries at the keys of `mapping` move to the mapped keys.

        Leaves are shared, not copied. Sub-TensorDicts emptied by the moves are
        dropped. With `strict` a missing source key raises `KeyError`.
        """
        present = self.keys(include_nested=True)
        moves = []
        for old, new in mapping.items():
            if old not in present:
                if strict:
                    raise KeyNotFoundError(
                        f"rename_keys: key {old!r} not found (keys: {sorted(map(str, present))}); "
                        "pass strict=False to skip missing keys"
                    )
                continue
            moves.append((as_tuple(unravel_key(old)), new))
        if not moves:
            return self.copy()
        values = [self.get(old) for old, _ in moves]
        out = self.exclude(*(old for old, _ in moves))
        out.unlock_()
        for (old, _), new, value in zip(moves, (n for _, n in moves), values):
            if len(old) > 1:
                parent = out.get(old[:-1], None)
                if is_td(parent) and not parent._keys_str():
                    out.del_(old[:-1])
            out.set(new, value)
        return out

    # ---------------------------------------------------------------- non-tensor data
    def set_non_tensor(self, key: NestedKey, value: Any) -> Self:
        """Store `value` at `key` as a non-tensor leaf, even if it is a tensor or a number."""
        key = unravel_key(key)
        parent = self if isinstance(key, str) else self._parent_for(key, create=True)
        leaf = key if type(key) is str else key[-1]
        if parent._is_locked:
            raise _locked_error("set", key)
        parent._set_str(leaf, NonTensorData(value, parent.batch_size, parent.device))
        return self

    def is_non_tensor(self, key: NestedKey) -> bool:
        """Whether the entry at `key` is a non-tensor leaf (`KeyError` if missing)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            self[key]  # raises the KeyError naming the key, whatever get() defaults to
        return bool(is_nt(value))

    def non_tensor_items(self, include_nested: bool = False) -> Iterator[tuple[NestedKey, Any]]:
        """`(key, leaf)` for every non-tensor leaf (nested ones as tuple keys with `include_nested`)."""
        yield from _non_tensor_items(self, (), include_nested)

    # ---------------------------------------------------------------- splitting
    def separates(
        self,
        *keys: NestedKey,
        default: Any = NO_DEFAULT,
        strict: bool = True,
        filter_empty: bool = True,
    ) -> Self:
        """Remove `keys` from self (in place) and return them as a new TensorDict.

        Args:
            default: the value a missing key gets in the result (instead of a `KeyError`).
            strict: raise `KeyError` on a missing key (when no `default` is given).
            filter_empty: drop the sub-TensorDicts of self that the removal leaves empty.
        """
        present = self.keys(include_nested=True)
        found: list[NestedKey] = []
        missing: list[NestedKey] = []
        for key in keys:
            (found if key in present else missing).append(key)
        if missing and default is NO_DEFAULT and strict:
            raise (
                self._missing(missing[0])
                if type(missing[0]) is str
                else KeyNotFoundError(f"separates: key {missing[0]!r} not found")
            )
        if found and self._is_locked:
            raise _locked_error("separate", found[0])
        out = self.select(*found, strict=False) if found else self._new({}, self.batch_size)
        if default is not NO_DEFAULT:  # before any removal: a refused default changes nothing
            for key in missing:
                if isinstance(default, Tensor) or is_td(default):
                    out.set(key, default)
                else:
                    out.set_non_tensor(key, default)
        for key in found:
            self.del_(key)
        if filter_empty:
            for key in found:
                path = as_tuple(unravel_key(key))
                for depth in range(len(path) - 1, 0, -1):
                    parent = self.get(path[:depth], None)
                    if is_td(parent) and not parent._keys_str():
                        self.del_(path[:depth])
        return out

    # ---------------------------------------------------------------- conversion to dense
    def to_tensordict(self, *, retain_none: bool | None = None) -> Any:
        """A dense, unlocked `TensorDict` copy of this one (any kind; leaves are cloned).

        Args:
            retain_none: kept for upstream compatibility; `None` values are kept
                as non-tensor leaves either way.
        """
        return _densify(self, provided("TensorDict"))


def _densify(td: TensorDictContract, dense: Any) -> Any:
    # Unbatched entries are read last, once every other entry densified: reading one from
    # a lazy stack whose members hold different data warns, and a failed conversion warns
    # of nothing.
    pending: list[tuple[dict[str, Any], str, TensorDictContract]] = []
    tree = _collect(td, pending)
    for out, key, owner in pending:
        out[key] = owner._get_str(key).clone()
    return _build(tree, dense)


def _collect(
    td: TensorDictContract, pending: list[tuple[dict[str, Any], str, TensorDictContract]]
) -> tuple[dict[str, Any], TensorDictContract]:
    out: dict[str, Any] = {}
    for key, kind in td._key_items():
        if type(kind) is not Tensor and is_unbatched(kind):
            out[key] = None  # filled by `_densify`, keeping the key order
            pending.append((out, key, td))
            continue
        value = td._get_str(key)
        out[key] = (
            value.clone() if isinstance(value, Tensor) or is_nt(value) else _collect(value, pending)
        )
    return out, td


def _build(tree: tuple[dict[str, Any], TensorDictContract], dense: Any) -> Any:
    out, td = tree
    entries = {key: _build(v, dense) if isinstance(v, tuple) else v for key, v in out.items()}
    built = dense._new_unsafe(entries, td.batch_size, td.device)
    names = td._raw_names()  # a lazy stack's include its stack dim's
    if names is not None:
        built._store_names(names)
    return built
