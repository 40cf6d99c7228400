"""Operations on the key structure: select, exclude, flatten/unflatten keys, update, dicts.

Writes that can fail (`update`, `update_`, `load_state_dict`) validate
every entry first and only then write, so a failure leaves the TensorDict as
it was.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.compiler import is_compiling

from td_core._core.contract import TensorDictContract
from td_core._core.flags import OLD_DYNAMO
from td_core._core.keys import NestedKey, as_tuple, unravel_key
from td_core._core.traverse import is_nt, is_stack, is_td, per_member
from td_core._core.utils import NO_DEFAULT
from td_core._ops.legacy_views import refuse_inplace
from td_core._ops.lock_cache import cache_when_locked
from td_core._ops.names import adopt_names
from td_core._ops.resize_update import update_resized
from td_core._ops.state_dict import load_state_dict_into, state_dict_of
from td_core._ops.update_plan import (
    assign_result,
    build_from_tree,
    plan_update,
    plan_update_in_place,
    update_flat,
)
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

_ABSENT: Any = object()  # `get`'s default where a missing key must not read as None

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
    # first key -> the rest of the paths under it, or None: the whole entry (a path of
    # one key); in the order first asked for, as upstream
    groups: dict[str, list[tuple[str, ...]] | None] = {}
    for path in paths:
        head = path[0]
        if len(path) == 1:
            groups[head] = None
            continue
        rests = groups.get(head, _ABSENT)
        if rests is _ABSENT:
            groups[head] = [path[1:]]
        elif rests is not None:
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
        if rests is None:
            out[key] = value
        elif type(value) is not Tensor and is_td(value):
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
        if is_td(value) and not (is_leaf and is_leaf(type(value))):
            # an empty sub-TensorDict holds no leaf: it has no flat key, as upstream
            _flatten(value, sep, name, out, is_leaf)
            continue
        if name in out:
            raise KeyError(
                f"Flattening keys in tensordict causes keys to collide: two entries map to "
                f"{name!r} with separator {sep!r}; rename one of them or pick another separator"
            )
        out[name] = value


def _flatten_args(
    separator: str = ".", inplace: bool = False, is_leaf: Callable[[type], bool] | None = None
) -> Any:
    """The cache key of a `flatten_keys` call (`None`: in place, not cached)."""
    return None if inplace else (separator, is_leaf)


def _unflatten_args(separator: str = ".", inplace: bool = False) -> Any:
    """The cache key of an `unflatten_keys` call (`None`: in place, not cached)."""
    return None if inplace else (separator,)


def _merge_into(
    node: dict[str, Any], name: str, value: Any, key: str, path: tuple[str, ...]
) -> None:
    """Put `value` at `node[name]` (`path` leads to `node`), merging sub-TensorDicts; a leaf
    may not land on anything."""
    existing: Any = node.get(name)
    if existing is None:
        node[name] = value
        return
    if is_td(value) and (type(existing) is dict or is_td(existing)):
        target: dict[str, Any] = existing if type(existing) is dict else {}
        if target is not existing:  # a sub-TensorDict already there: merge into its entries
            target.update(cast(Any, existing)._items_str())
        node[name] = target
        for sub, item in value._items_str():
            _merge_into(target, sub, item, key, (*path, name))
        return
    raise KeyError(
        f"Unflattening key(s) in tensordict will override an existing for unflattened key: "
        f"entry {key!r} and another key both fill {(*path, name)!r}; rename one of them"
    )


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

    def select(
        self,
        *keys: NestedKey,
        inplace: bool = False,
        strict: bool = True,
        as_tensordict: bool = False,
    ) -> Self:
        """Only the given (possibly nested) keys; with `inplace` the others are removed from self.

        `as_tensordict=True` makes a tensorclass return a plain `TensorDict`; every
        other kind is a TensorDict already and ignores it.
        """
        if inplace and self._writes_through:
            raise refuse_inplace(self, "select")
        if is_stack(self):  # lazy stacks select member by member
            stacked = _members_do(self, "select", *keys, inplace=inplace, strict=strict)
            return remember(self, stacked, same)
        # fast path, top-level keys only: read in the order asked for (as upstream); the
        # first key that is not a str sends the whole call to the nested path
        get = self._getter()
        out: dict[str, Any] = {}
        for k in keys:
            if type(k) is not str:
                break
            value = get(k, NO_DEFAULT)
            if value is not NO_DEFAULT:
                out[k] = value
            elif strict and all(type(other) is str for other in keys):
                raise KeyNotFoundError(
                    f"select: key {k!r} not found (keys: {sorted(self._keys_str())}); "
                    "pass strict=False to skip missing keys"
                )
        else:
            result = self._new(out, self.batch_size)
            return assign_result(self, result) if inplace else remember(self, result, same)
        paths = [(k,) if type(k) is str else as_tuple(unravel_key(k)) for k in keys]
        result = _select(self, paths, strict, ())
        return assign_result(self, result) if inplace else remember(self, result, same)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self:
        """Everything but the given (possibly nested) keys."""
        if inplace and self._writes_through:
            raise refuse_inplace(self, "exclude")
        if is_stack(self):  # lazy stacks exclude member by member
            return remember(self, _members_do(self, "exclude", *keys, inplace=inplace), same)
        # top-level keys only: a copy of the entries, less keys; the first key that is not
        # a str sends the whole call to the nested path
        items = self._items_str()
        # a dict's view: copy the dict whole (torch.compile before 2.15 cannot trace `mapping`)
        mapping = None if OLD_DYNAMO and is_compiling() else getattr(items, "mapping", None)
        out = mapping.copy() if mapping is not None else dict(items)
        for k in keys:
            if type(k) is not str:
                break
            out.pop(k, None)
        else:
            result = self._new(out, self.batch_size)
            return assign_result(self, result) if inplace else remember(self, result, same)
        result = _exclude(self, [as_tuple(unravel_key(k)) for k in keys])
        return assign_result(self, result) if inplace else remember(self, result, same)

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
        if inplace and self._writes_through:  # the split keys leave the view's source
            if self._is_locked:
                raise LockedError(
                    "Cannot modify locked TensorDict: split_keys(inplace=True) would delete "
                    f"keys {taken!r} (unlock_() it first)"
                )
            present = self.keys(include_nested=True)
            for key in taken:
                if key in present:
                    self.del_(key)
            rest = self
        else:
            rest = self.exclude(*taken, inplace=inplace)
        if not reproduce_struct:
            _prune_emptied(rest, taken)
        out = (*parts, rest)
        if reproduce_struct:
            out = tuple(self.empty(recurse=True).update(part) for part in out)
        return out

    @cache_when_locked("flatten_keys", _flatten_args, holds_leaves=True)
    def flatten_keys(
        self,
        separator: str = ".",
        inplace: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> Self:
        """A flat TensorDict whose keys join nested keys with `separator`.

        On a locked TensorDict the result is computed once and handed back
        (the same object) until it is unlocked; the result is locked too,
        since every caller shares it (upstream's may be changed), and holds
        the same leaves, so in-place writes show through. `unflatten_keys`
        does the same; a lazy stack does both member by member.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": {"b": torch.zeros(2)}}, [2])
            >>> list(td.flatten_keys(".").keys())
            ['a.b']
        """
        if inplace and self._writes_through:
            raise refuse_inplace(self, "exclude", "flatten_keys")
        result = _members_do(self, "flatten_keys", separator, inplace=inplace, is_leaf=is_leaf)
        if result is NotImplemented:
            out: dict[str, Any] = {}
            _flatten(self, separator, "", out, is_leaf)
            result = self._new(out, self.batch_size)
            if inplace:
                return assign_result(self, result)
        return remember(self, result, keys_unflattened, separator, key_map=split_path(separator))

    @cache_when_locked("unflatten_keys", _unflatten_args, holds_leaves=True)
    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> Self:
        """The inverse of `flatten_keys`: split keys on `separator` into nested TensorDicts."""
        if inplace and self._writes_through:
            raise refuse_inplace(self, "exclude", "unflatten_keys")
        tree: dict[str, Any] = {}
        lazy = _members_do(self, "unflatten_keys", separator, inplace=inplace)
        if lazy is not NotImplemented:  # a lazy stack: member by member, sharing their leaves
            return remember(self, lazy, keys_flattened, separator, key_map=join_path(separator))
        for key, value in self._items_str():
            if type(value) is not Tensor and is_td(value):
                value = value.unflatten_keys(separator)
            *parents, last = key.split(separator)  # (torch.compile before 2.15 refuses `pop()`)
            node = tree
            for part in parents:
                child = node.get(part)
                if child is None:
                    child = node[part] = {}
                elif type(child) is not dict:  # a sub-TensorDict is already there: merge into it
                    if not is_td(child):
                        raise KeyError(
                            f"Unflattening key(s) in tensordict will override an existing for "
                            f"unflattened key: key {key!r} needs {part!r} to be a TensorDict, "
                            "but it is a leaf"
                        )
                    child = node[part] = dict(child._items_str())
                node = child
            if type(value) is Tensor and last not in node:  # the usual entry: a new leaf
                node[last] = value
            else:
                _merge_into(node, last, value, key, tuple(parents))
        result = build_from_tree(self, tree)
        if inplace:
            return assign_result(self, result)
        return remember(self, result, keys_flattened, separator, key_map=join_path(separator))

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> Self:
        """Move the entry at `old_key` to `new_key` (`safe`: refuse to overwrite)."""
        if self.is_locked:
            raise LockedError(f"Cannot modify locked TensorDict: cannot rename {old_key!r}")
        if old_key not in self.keys(include_nested=True):  # even where get() defaults to None
            raise KeyNotFoundError(
                f"rename_key_: key {old_key!r} not found in {type(self).__name__} with keys "
                f"{sorted(self.keys(include_nested=True), key=str)}"
            )
        value = self.get(old_key)
        if safe and new_key in self.keys(include_nested=True):
            raise KeyError(
                f"rename_key_: key {new_key!r} already present in TensorDict; pass safe=False "
                f"to overwrite it with {old_key!r}"
            )
        self.set(new_key, value)
        old_t, new_t = as_tuple(unravel_key(old_key)), as_tuple(unravel_key(new_key))
        if old_t[: len(new_t)] != new_t:  # a key renamed to its parent went with the parent
            self.del_(old_key)
        return self

    def update(
        self,
        input_dict_or_td: Mapping[Any, Any] | TensorDictContract | None = None,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Iterable[NestedKey] | None = None,
        non_blocking: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        update_batch_size: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Write every entry of `input_dict_or_td` into self (sub-TensorDicts are merged).

        Every entry is validated before any is written: on error, self is unchanged.

        Args:
            input_dict_or_td: a TensorDict or a (nested) mapping of entries.
            clone: write clones of the entries.
            inplace: copy into existing entries rather than replace them.
            keys_to_update: only these (nested) keys.
            non_blocking: asynchronous copies.
            is_leaf: with `update_batch_size`, which classes are written whole
                (default: sub-TensorDicts are merged).
            update_batch_size: take the batch size of `input_dict_or_td` (a
                TensorDict), and of its sub-TensorDicts for the ones self has too.
            **kwargs: more entries by name; they win over `input_dict_or_td`'s.
        """
        # the usual call, a plain dict and no option: straight to the validated fast path
        tried = (
            type(input_dict_or_td) is dict
            and not (kwargs or clone or inplace)
            and keys_to_update is None
        )
        if tried and update_flat(self, input_dict_or_td):
            return self
        if input_dict_or_td is None:
            input_dict_or_td = {}
        if kwargs:
            if update_batch_size:
                raise TypeError(
                    "update(update_batch_size=True) takes its entries as one TensorDict"
                )
            merged = dict(
                input_dict_or_td._items_str() if is_td(input_dict_or_td) else input_dict_or_td
            )
            merged.update(kwargs)
            input_dict_or_td = merged
        if is_td(input_dict_or_td) and (
            (bs := self.batch_size) != (other_bs := input_dict_or_td.batch_size)
            and bs[: len(other_bs)] != other_bs[: len(bs)]  # (slices only where they differ)
        ):
            if not update_batch_size:
                raise BatchSizeError(
                    f"update: the source's batch_size {list(input_dict_or_td.batch_size)} does "
                    f"not match {list(self.batch_size)}; update_batch_size must be set to True "
                    "to take the source's batch size"
                )
            update_resized(self, input_dict_or_td, inplace, keys_to_update, is_leaf)
            return self
        if update_batch_size and is_td(input_dict_or_td) and not inplace and keys_to_update is None:
            update_resized(self, input_dict_or_td, inplace, keys_to_update, is_leaf)
            return self
        if (
            not tried
            and keys_to_update is None
            and not clone
            and not inplace
            and update_flat(self, input_dict_or_td)
        ):
            return self
        allowed = (
            None if keys_to_update is None else {as_tuple(unravel_key(k)) for k in keys_to_update}
        )
        plan: list[tuple[TensorDictContract, str, Any, tuple[str, ...]]] = []
        plan_update(self, input_dict_or_td, clone, inplace, allowed, (), plan)
        for target, key, value, full in plan:
            if inplace and key in target._keys_str():
                target._copy_into(key, target._get_str(key), value, full)
            else:
                target._set_str(key, value)
                if type(value) is not Tensor and is_td(value) and target._raw_names() is None:
                    adopt_names(target, value)  # as `set` does, once the update cannot fail
        return self

    def update_(
        self,
        input_dict_or_td: Mapping[Any, Any] | TensorDictContract | None = None,
        clone: bool = False,
        *,
        keys_to_update: Iterable[NestedKey] | None = None,
        non_blocking: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Copy every entry of the input into the existing entry of self, in place.

        Entries can also be given by name (`**kwargs`, which win over the input's).
        Raises `KeyError` naming the first key that self lacks, before writing anything.
        """
        if input_dict_or_td is None or kwargs:
            merged = dict(
                {}
                if input_dict_or_td is None
                else input_dict_or_td._items_str()
                if is_td(input_dict_or_td)
                else input_dict_or_td
            )
            merged.update(kwargs)
            input_dict_or_td = merged
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
        plan_update_in_place(self, input_dict_or_td, allowed, (), pairs, values)
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
        flatten: bool = True,
    ) -> OrderedDict[str, Any]:
        """Tensor leaves under dotted keys, like `nn.Module.state_dict`.

        Args:
            destination: a dict to fill (and return) instead of a new `OrderedDict`.
            prefix: prepended to every key.
            keep_vars: keep the tensors attached to autograd (detached by default).
            flatten: `False` nests one `OrderedDict` per sub-TensorDict instead
                of dotted keys.

        The batch size and device of each level are in the result's
        `_metadata` attribute (`""` for the root, `"a.b"` for the sub-TensorDict
        at `("a", "b")`); non-tensor leaves are left out, as upstream.
        """
        return state_dict_of(self, destination, prefix, keep_vars, flatten)

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        from_flatten: bool | None = None,
    ) -> Self:
        """Copy (or, with `assign`, set) the entries of a `state_dict` into self.

        Reads the flat (dotted keys) and nested formats alike, with or without
        `_metadata`, and upstream's legacy `"__batch_size"`/`"__device"` entries
        (`from_flatten` is accepted for upstream's signature: the format is
        always detected). The saved root batch size is restored.

        Raises:
            KeyError: (a `RuntimeError` too) with `strict`, naming the missing
                and unexpected keys; nothing is written.
            RuntimeError: if the state dict was saved on another device.
        """
        return load_state_dict_into(self, state_dict, strict, assign)


def _prune_emptied(td: Any, taken: list[NestedKey]) -> None:
    """Drop from `td` the sub-TensorDicts left without leaves by taking the nested keys
    `taken` out of them (deepest first), as upstream's `split_keys` does."""
    parents = {
        path[:i] for path in (as_tuple(unravel_key(k)) for k in taken) for i in range(1, len(path))
    }
    for parent in sorted(parents, key=len, reverse=True):
        sub = td.get(parent, None) if parent in td.keys(include_nested=True) else None
        if is_td(sub) and not is_nt(sub) and sub.is_empty():
            td.del_(parent)
