"""Operations on the key structure: select, exclude, flatten/unflatten keys, update, dicts.

Writes that can fail (`update`, `update_`, `load_state_dict`) validate
every entry first and only then write, so a failure leaves the TensorDict as
it was.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TD, TensorDictContract
from td_core._core.keys import NestedKey, as_tuple, unravel_key
from td_core._core.traverse import is_nt, is_stack, is_td, per_member, stack_parts
from td_core._core.utils import NO_DEFAULT, broadcast_shape
from td_core._ops.views import (
    join_path,
    keys_flattened,
    keys_unflattened,
    remember,
    same,
    split_path,
)
from td_core._ops.writes import copy_all, plan_copy_dense
from td_core.errors import BatchSizeError, KeyNotFoundError, LockedError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["StructureMixin"]

Tensor = torch.Tensor


def _select(
    td: TensorDictContract, paths: list[tuple[str, ...]], strict: bool, prefix: tuple[str, ...]
) -> Any:
    """A new TensorDict with only `paths` (paths of length 1 take the whole entry)."""
    if is_stack(td):
        return per_member(td, lambda m: _select(m, paths, strict, prefix))
    groups: dict[str, list[tuple[str, ...]]] = {}
    for path in paths:
        rests = groups.get(path[0])
        if rests is None:
            groups[path[0]] = [path[1:]]
        else:
            rests.append(path[1:])
    out: dict[str, Any] = {}
    get = td._getter()
    for key, rests in groups.items():
        value = get(key, NO_DEFAULT)
        if value is NO_DEFAULT:
            if strict:
                raise KeyNotFoundError(
                    f"select: key {(*prefix, key)!r} not found (keys there: {sorted(td._keys_str())}); "
                    "pass strict=False to skip missing keys"
                )
            continue
        if () in rests:
            out[key] = value
        elif is_td(value):
            out[key] = _select(value, rests, strict, (*prefix, key))
        elif strict:
            raise KeyNotFoundError(
                f"select: {(*prefix, key)!r} is a leaf, it has no key {rests[0]!r}"
            )
    return td._new(out, td.batch_size)  # in the order asked for, as upstream


def _exclude(td: TensorDictContract, paths: list[tuple[str, ...]]) -> Any:
    if is_stack(td):
        return per_member(td, lambda m: _exclude(m, paths))
    drop = {p[0] for p in paths if len(p) == 1}
    deeper: dict[str, list[tuple[str, ...]]] = {}
    for path in paths:
        if len(path) > 1:
            deeper.setdefault(path[0], []).append(path[1:])
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if key in drop:
            continue
        if key in deeper and is_td(value):
            value = _exclude(value, deeper[key])
        out[key] = value
    return td._new(out, td.batch_size)


def _flatten(
    td: TensorDictContract,
    sep: str,
    prefix: str,
    out: dict[str, Any],
    is_leaf: Callable[[type], bool] | None,
) -> None:
    for key, value in td._items_str():
        name = f"{prefix}{sep}{key}" if prefix else key
        if is_td(value) and not (is_leaf and is_leaf(type(value))) and not value.is_empty():
            _flatten(value, sep, name, out, is_leaf)
            continue
        if name in out:
            raise KeyError(
                f"flatten_keys: two entries map to the key {name!r} with separator {sep!r}"
            )
        out[name] = value


def _members_do(td: TensorDictContract, method: str, *args: Any, **kwargs: Any) -> Any:
    """`method` run on each member of a lazy stack (`NotImplemented` for other kinds).

    In place, the members change and `td` itself is returned.
    """
    lazy = per_member(td, lambda m: getattr(m, method)(*args, **kwargs))
    if lazy is NotImplemented or not kwargs.get("inplace"):
        return lazy
    return td


class StructureMixin(TensorDictContract):
    """Key-structure methods of TensorDictBase."""

    __slots__ = ()

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> Self:
        """Only the given (possibly nested) keys; with `inplace` the others are removed from self."""
        if is_stack(self):  # lazy stacks select member by member
            stacked = _members_do(self, "select", *keys, inplace=inplace, strict=strict)
            return remember(self, stacked, same)
        if all(type(k) is str for k in keys):  # fast path: top-level keys only
            get = self._getter()
            out: dict[str, Any] = {}
            for k in keys:  # in the order asked for, as upstream
                assert type(k) is str  # checked above (for the type checker)
                value = get(k, NO_DEFAULT)
                if value is not NO_DEFAULT:
                    out[k] = value
                elif strict:
                    raise KeyNotFoundError(
                        f"select: key {k!r} not found (keys: {sorted(self._keys_str())}); "
                        "pass strict=False to skip missing keys"
                    )
            result = self._new(out, self.batch_size)
        else:
            paths = [(k,) if type(k) is str else as_tuple(unravel_key(k)) for k in keys]
            result = _select(self, paths, strict, ())
        return _assign(self, result) if inplace else remember(self, result, same)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self:
        """Everything but the given (possibly nested) keys."""
        if is_stack(self):  # lazy stacks exclude member by member
            return remember(self, _members_do(self, "exclude", *keys, inplace=inplace), same)
        if set(map(type, keys)) <= {str}:  # top-level keys only: one pass, no paths
            drop = set(keys)
            out = {k: v for k, v in self._items_str() if k not in drop}
            result = self._new(out, self.batch_size)
        else:
            result = _exclude(self, [as_tuple(unravel_key(k)) for k in keys])
        return _assign(self, result) if inplace else remember(self, result, same)

    def split_keys(
        self,
        *key_sets: Iterable[NestedKey],
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        strict: bool = True,
        reproduce_struct: bool = False,
    ) -> tuple[Self, ...]:
        """One TensorDict per key set, then one with the remaining keys.

        Args:
            inplace: remove the split keys from self (self is then the last result).
            default: accepted for upstream compatibility; a missing key still
                raises `KeyError` unless `strict=False`.
            strict: raise `KeyError` on a missing key (else skip it).
            reproduce_struct: every result keeps self's sub-TensorDicts (empty where
                none of their keys went to it).
        """
        key_sets = tuple(list(keys) for keys in key_sets)
        parts = [self.select(*keys, strict=strict) for keys in key_sets]
        taken = [k for keys in key_sets for k in keys]
        rest = self.exclude(*taken, inplace=inplace)
        out = (*parts, rest)
        if reproduce_struct:
            out = tuple(self.empty(recurse=True).update(part) for part in out)
        return out

    def flatten_keys(
        self,
        separator: str = ".",
        inplace: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> Self:
        """A flat TensorDict whose keys join nested keys with `separator`.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": {"b": torch.zeros(2)}}, [2])
            >>> list(td.flatten_keys(".").keys())
            ['a.b']
        """
        result = _members_do(self, "flatten_keys", separator, inplace=inplace, is_leaf=is_leaf)
        if result is NotImplemented:
            out: dict[str, Any] = {}
            _flatten(self, separator, "", out, is_leaf)
            result = self._new(out, self.batch_size)
            if inplace:
                return _assign(self, result)
        return remember(self, result, keys_unflattened, separator, key_map=split_path(separator))

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> Self:
        """The inverse of `flatten_keys`: split keys on `separator` into nested TensorDicts."""
        tree: dict[str, Any] = {}
        for key, value in self._items_str():
            if is_td(value):
                value = value.unflatten_keys(separator)
            parents = key.split(separator)
            last = parents.pop()
            node = tree
            for part in parents:
                child = node.get(part)
                if child is None:
                    child = node[part] = {}
                elif type(child) is not dict:  # a sub-TensorDict is already there: merge into it
                    if not is_td(child):
                        raise KeyError(
                            f"unflatten_keys: key {key!r} needs {part!r} to be a TensorDict, but it is a leaf"
                        )
                    child = node[part] = dict(child._items_str())
                node = child
            existing = node.get(last)
            if existing is None:
                node[last] = value
            elif type(existing) is dict and is_td(value):
                existing.update(value._items_str())
            else:
                raise KeyError(f"unflatten_keys: key {key!r} collides with another entry")
        result = _build(self, tree)
        if inplace:
            return _assign(self, result)
        return remember(self, result, keys_flattened, separator, key_map=join_path(separator))

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> Self:
        """Move the entry at `old_key` to `new_key` (`safe`: refuse to overwrite)."""
        if self.is_locked:
            raise LockedError(f"Cannot modify locked TensorDict: cannot rename {old_key!r}")
        value = self.get(old_key)
        if safe and new_key in self.keys(include_nested=True):
            raise KeyError(f"rename_key_: {new_key!r} already exists (safe=True)")
        self.set(new_key, value)
        if unravel_key(old_key) != unravel_key(new_key):
            self.del_(old_key)
        return self

    def update(
        self,
        input_dict_or_td: Mapping[Any, Any] | TensorDictContract,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Iterable[NestedKey] | None = None,
        non_blocking: bool = False,
    ) -> Self:
        """Write every entry of `input_dict_or_td` into self (sub-TensorDicts are merged).

        Every entry is validated before any is written: on error, self is unchanged.
        """
        if (
            keys_to_update is None
            and not clone
            and not inplace
            and _update_flat(self, input_dict_or_td)
        ):
            return self
        allowed = (
            None if keys_to_update is None else {as_tuple(unravel_key(k)) for k in keys_to_update}
        )
        plan: list[tuple[TensorDictContract, str, Any, tuple[str, ...]]] = []
        _plan_update(self, input_dict_or_td, clone, inplace, allowed, (), plan)
        for target, key, value, full in plan:
            if inplace and key in target._keys_str():
                target._copy_into(key, target._get_str(key), value, full)
            else:
                target._set_str(key, value)
        return self

    def update_(
        self,
        input_dict_or_td: Mapping[Any, Any] | TensorDictContract,
        clone: bool = False,
        *,
        keys_to_update: Iterable[NestedKey] | None = None,
        non_blocking: bool = False,
    ) -> Self:
        """Copy every entry of the input into the existing entry of self, in place.

        Raises `KeyError` naming the first key that self lacks, before writing anything.
        """
        dests: list[Tensor] = []
        srcs: list[Tensor] = []
        cls = type(self)
        if keys_to_update is None and cls is type(input_dict_or_td) and cls._plain_nodes:
            # two dense trees (clone=True copies as much: the values are copied in place)
            if plan_copy_dense(self, input_dict_or_td, dests, srcs):
                copy_all(dests, srcs, non_blocking)
                return self
            dests.clear()
            srcs.clear()
        allowed = (
            None if keys_to_update is None else {as_tuple(unravel_key(k)) for k in keys_to_update}
        )
        pairs: list[tuple[Tensor, Any, tuple[str, ...]]] = []
        values: list[tuple[TensorDictContract, str, Any, tuple[str, ...]]] = []
        _plan_update_(self, input_dict_or_td, allowed, (), pairs, values)
        for dest, value, _ in pairs:
            dests.append(dest)
            srcs.append(value)
        copy_all(dests, srcs, non_blocking)
        for td, key, value, full in values:
            td._copy_into(key, td._get_str(key), value, full)
        return self

    def empty(
        self,
        recurse: bool = False,
        *,
        batch_size: Any = None,
        device: Any = NO_DEFAULT,
    ) -> Self:
        """A TensorDict with the same batch size and device and no leaves.

        With `recurse=True` the sub-TensorDicts are kept (empty).
        """
        out = {}
        if recurse:
            out = {k: v.empty(recurse=True) for k, v in self._items_str() if is_td(v)}
        bs = self.batch_size if batch_size is None else torch.Size(batch_size)
        return self._new(out, bs, self.device if device is NO_DEFAULT else device)

    def copy(self) -> Self:
        """A shallow copy: new containers, the same tensors."""
        return self.clone(recurse=False)

    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
    ) -> OrderedDict[str, Any]:
        """Tensor leaves under dotted keys, like `nn.Module.state_dict` (detached unless `keep_vars`)."""
        out: OrderedDict[str, Any] = OrderedDict() if destination is None else destination  # type: ignore[assignment]
        _state_into(self, prefix, out, keep_vars)
        return out

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
    ) -> Self:
        """Copy (or, with `assign`, set) the entries of a `state_dict` into self.

        With `strict`, the keys must match exactly; missing or unexpected keys
        are all named in the `KeyError`, and nothing is written.
        """
        mine = {
            k if type(k) is str else ".".join(k)
            for k in self.keys(include_nested=True, leaves_only=True)
        }
        theirs = set(state_dict)
        if strict and mine != theirs:
            raise KeyError(
                f"load_state_dict: missing keys {sorted(mine - theirs)}, unexpected keys {sorted(theirs - mine)}"
            )
        nested = {tuple(k.split(".")) if "." in k else k: v for k, v in state_dict.items()}
        if assign:
            return self.update(nested)
        existing = {k: v for k, v in nested.items() if k in self.keys(include_nested=True)}
        self.update_(existing)
        new = {k: v for k, v in nested.items() if k not in existing}
        return self.update(new) if new else self


def _update_flat(td: TensorDictContract, source: Any) -> bool:
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


def _build(td: TensorDictContract, tree: dict[str, Any]) -> Any:
    """A container of `td`'s batch size from nested dicts (each dict becomes a TensorDict)."""
    entries = {k: _build(td, v) if type(v) is dict else v for k, v in tree.items()}
    return td._new(entries, td.batch_size)


def _assign(td: TD, result: TensorDictContract) -> TD:
    """Make `td` hold `result`'s entries (for `inplace=True` variants)."""
    if td.is_locked:
        raise LockedError(
            "Cannot modify locked TensorDict: it cannot be restructured in place (unlock_() it)"
        )
    for key in list(td._keys_str()):
        td._del_str(key)
    for key, value in result._items_str():
        td._set_str(key, value)
    return td


def _plan_update(
    td: TensorDictContract,
    source: Mapping[Any, Any] | TensorDictContract,
    clone: bool,
    inplace: bool,
    allowed: set[tuple[str, ...]] | None,
    prefix: tuple[str, ...],
    plan: list[tuple[TensorDictContract, str, Any, tuple[str, ...]]],
) -> None:
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
            _plan_update(
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
            _plan_update(existing, value, clone, inplace, allowed, full, plan)
            continue
        if clone and isinstance(value, Tensor):
            value = value.clone()
        elif clone and is_td(value):
            value = value.clone()
        if existing is NO_DEFAULT or not inplace:
            if td.is_locked:
                raise LockedError(
                    f"Cannot modify locked TensorDict: update cannot set {full!r} (use update_())"
                )
            value = td._validate(value, full if len(full) > 1 else key)
        elif isinstance(existing, Tensor):
            _check_copy(existing, value, full)
        plan.append((td, key, value, full))


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


def _state_into(td: TensorDictContract, prefix: str, out: dict[str, Any], keep_vars: bool) -> None:
    """`state_dict`'s entries: every tensor leaf under its dotted key, in key order
    (non-tensor leaves are left out, as upstream)."""
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            out[prefix + key] = value if keep_vars else value.detach()
        elif is_td(value):
            _state_into(value, f"{prefix}{key}.", out, keep_vars)


def _plan_update_(
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
            _plan_update_(member, share, allowed, prefix, pairs, values)
        return
    items = source._items_str() if is_td(source) else source.items()
    for raw_key, value in items:
        full = (*prefix, *as_tuple(unravel_key(raw_key)))
        if allowed is not None and not any(
            full[: len(a)] == a or a[: len(full)] == full for a in allowed
        ):
            continue
        dest = td.get(raw_key, NO_DEFAULT)
        if is_nt(dest) or (is_nt(value) and dest is not NO_DEFAULT and not is_td(dest)):
            # non-tensor values are written into (or replace) their leaf, after all checks
            key = unravel_key(raw_key)
            target = td if isinstance(key, str) else td._parent_for(key, create=False)
            values.append((target, key if type(key) is str else key[-1], value, full))
            continue
        if dest is NO_DEFAULT:
            raise KeyNotFoundError(
                f"update_: key {full!r} is not in the TensorDict (update_ only copies into existing entries)"
            )
        if is_td(dest):
            if not (is_td(value) or isinstance(value, Mapping)):
                raise TypeError(
                    f"update_: cannot copy a {type(value).__name__} into sub-TensorDict {full!r}"
                )
            _plan_update_(dest, value, allowed, full, pairs, values)
        elif isinstance(dest, Tensor):
            if not isinstance(value, Tensor):
                value = torch.as_tensor(value, device=dest.device)
            _check_copy(dest, value, full)
            pairs.append((dest, value, full))
