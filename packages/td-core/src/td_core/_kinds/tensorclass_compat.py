"""What a tensorclass offers beyond `TensorDictBase`, for code written against upstream.

Upstream's tensorclasses keep two stores (`_tensordict` for entries,
`_non_tensordict` for fields set to `None`) and build instances with a
private `_from_tensordict`; downstream libraries call both. td keeps every
field in one `TensorDict`, so these are thin, typed views over it:

- `cls._from_tensordict(td)`: the same as the public `cls.from_tensordict(td)`.
- `obj._non_tensordict`: a read-only mapping of the fields that are unset (`None`).

The mixin also holds the writes that are particular to a tensorclass: a key
that is not a field is refused, a mapping given to a field that is not
annotated as a TensorDict is kept as one value, and an in-place write may not
change an entry from a tensor to a non-tensor value or back.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from td_core._core.keys import NestedKey, unravel_key
from td_core._core.traverse import is_nt, is_stack, is_td
from td_core._kinds.dense import TensorDict  # at run time: user classes' type hints see it
from td_core._leaves.nontensor import NonTensorData
from td_core.errors import FieldError, KeyNotFoundError, TDError

__all__ = ["TensorClassCompat", "unknown_field_error"]

_CASTABLE = (torch.Tensor, np.ndarray, int, float, bool, complex, list, tuple)


class _InPlaceTypeError(TDError, ValueError):
    """An in-place write of a tensor into a non-tensor entry (upstream raises `ValueError`)."""


class _MissingIndexKeyError(KeyNotFoundError, ValueError):
    """`obj["key"]` of a tensorclass names no entry: a `KeyError` as on every kind, and the
    `ValueError` upstream raises for every string index of a tensorclass."""


def unknown_field_error(cls: type, key: str) -> FieldError:
    """The error for a write to `key`, which is not a field of the tensorclass `cls`."""
    fields = list(getattr(cls, "_fields", ()))
    return FieldError(
        f"Cannot set the attribute {key!r}: {cls.__name__} has no such field "
        f"(fields: {fields}); a tensorclass only holds its declared fields"
    )


class TensorClassCompat:
    """Upstream's private tensorclass names, and the tensorclass rules for writes."""

    _fields: tuple[str, ...]
    _field_set: frozenset[str]
    _mapping_fields: frozenset[str] = frozenset()
    _tensordict: TensorDict

    @classmethod
    def _from_tensordict(
        cls, tensordict: Any, non_tensordict: dict[str, Any] | None = None, safe: bool = True
    ) -> Any:
        """Upstream's private constructor: the same as `from_tensordict`.

        Kept for code written against upstream (its own tests and downstream
        libraries call it). `safe` is accepted and ignored: the input is
        always checked.
        """
        build: Any = cls
        return build.from_tensordict(tensordict, non_tensordict)

    @property
    def _non_tensordict(self) -> Mapping[str, None]:
        """The fields that are unset (read as `None`), as a read-only mapping.

        Upstream keeps such fields in a second dict of this name; td keeps
        every field in `_tensordict`, so this is a view for compatibility.
        """
        present = self._tensordict._keys_str()
        return types.MappingProxyType(
            {name: None for name in type(self)._fields if name not in present}
        )

    def _field_entry(self, key: str, value: Any) -> Any:
        """`value` as it is stored in the field `key`.

        A mapping that is not a TensorDict is kept as one non-tensor value,
        unless the field is annotated as a TensorDict (then it becomes one), as
        upstream stores it.
        """
        if (
            isinstance(value, Mapping)
            and not is_td(value)
            and key not in type(self)._mapping_fields
        ):
            td = self._tensordict
            return NonTensorData(value, td.batch_size, td.device)
        return value

    def _set_leaf(self, key: str, item: Any, inplace: bool, full_key: NestedKey) -> None:
        cls = type(self)
        if key not in cls._field_set:
            raise unknown_field_error(cls, key)
        td = self._tensordict
        item = self._field_entry(key, item)
        current = td._get_str(key, None) if inplace else None
        if current is not None:
            holds_tensor = isinstance(current, torch.Tensor) or (
                is_td(current) and not is_nt(current)
            )
            gives_tensor = isinstance(item, _CASTABLE) or (is_td(item) and not is_nt(item))
            if holds_tensor and not gives_tensor:
                raise RuntimeError(
                    f"Cannot update an existing entry of type {type(current).__name__} at "
                    f"{full_key!r} with a value of type {type(item).__name__} in place; "
                    "set it without inplace=True to replace it"
                )
            if is_nt(current) and isinstance(item, torch.Tensor):
                raise _InPlaceTypeError(
                    f"Failed to update {key!r} in place: it holds a non-tensor value and "
                    "cannot take a tensor; set it without inplace=True to replace it"
                )
        td._set_leaf(key, item, inplace, full_key)
        self._undelete(key)

    def _undelete(self, key: str) -> None:
        """Forget that the field `key` was deleted (`del obj.key`): it holds a value again."""
        deleted = self.__dict__.get("_td_deleted")
        if deleted:
            deleted.discard(key)

    def __delattr__(self, name: str) -> None:
        if name not in type(self)._field_set:
            object.__delattr__(self, name)
            return
        td = self._tensordict
        if name in td._keys_str():
            td.del_(name)
        # the field now reads as missing (`hasattr` is False) until it is set again
        self.__dict__.setdefault("_td_deleted", set()).add(name)

    def is_non_tensor(self, key: NestedKey) -> bool:
        """Whether the entry stored at `key` is a non-tensor leaf (`KeyError` if missing).

        `get` reads a non-tensor field as its value, so `is_non_tensor(obj.get(key))`
        is `False`; this checks what is stored.
        """
        path = unravel_key(key)
        if type(path) is str:
            return self._tensordict.is_non_tensor(path)
        child = self._tensordict._get_str(path[0], None)
        if len(path) > 1 and is_td(child) and not is_nt(child):
            rest = path[1:]
            return bool(child.is_non_tensor(rest[0] if len(rest) == 1 else rest))
        return self._tensordict.is_non_tensor(path)

    def _get_strict(self, key: NestedKey) -> Any:
        """`obj[key]` once `get` missed: a miss raises `_MissingIndexKeyError`."""
        parent: Any = super()
        try:
            return parent._get_strict(key)
        except KeyNotFoundError as err:
            if isinstance(err, ValueError):
                raise
            raise _MissingIndexKeyError(str(err)) from None

    def update(
        self,
        input_dict_or_td: Any = None,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Iterable[NestedKey] | None = None,
        non_blocking: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        update_batch_size: bool = False,
        **kwargs: Any,
    ) -> Any:
        """`TensorDict.update`, refusing (before anything is written) keys that are not fields."""
        if keys_to_update is None:
            _refuse_foreign_keys(self, input_dict_or_td)
            _refuse_foreign_keys(self, kwargs)
        parent: Any = super()
        return parent.update(
            input_dict_or_td,
            clone,
            inplace,
            keys_to_update=keys_to_update,
            non_blocking=non_blocking,
            is_leaf=is_leaf,
            update_batch_size=update_batch_size,
            **kwargs,
        )

    def rename_keys(self, mapping: Mapping[NestedKey, NestedKey], *, strict: bool = True) -> Any:
        """`TensorDict.rename_keys`; a destination that is not a field is refused first,
        whether or not its source is present (as upstream)."""
        _refuse_foreign_keys(self, dict.fromkeys(mapping.values()))
        parent: Any = super()
        return parent.rename_keys(mapping, strict=strict)

    # `get` reads a non-tensor field as its value (as upstream); these read the stored
    # entries, as upstream's tensorclass does by handing them to its TensorDict
    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> Iterator[Any]:
        """The entries, in the order of `keys` with the same arguments."""
        return self._tensordict.values(include_nested, leaves_only, is_leaf, sort=sort)

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> Iterator[tuple[Any, Any]]:
        """`(key, entry)` pairs, in the order of `keys` with the same arguments."""
        return self._tensordict.items(include_nested, leaves_only, is_leaf, sort=sort)

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """The shape of the entry stored at `key` (a non-tensor leaf's batch size)."""
        return self._tensordict.get_item_shape(key)

    def entry_class(self, key: NestedKey) -> type:
        """The class of the entry stored at `key` (`NonTensorData` for a non-tensor field)."""
        return self._tensordict.entry_class(key)

    def _setitem_index(self, index: Any, value: Any) -> None:
        fields = type(self)._field_set
        if is_td(value) and not is_nt(value):
            foreign = sorted(k for k in value.keys() if k not in fields)
            if foreign:
                raise FieldError(
                    f"{type(self).__name__}[...] = {type(value).__name__}: the value has "
                    f"keys {foreign} that are not fields of {type(self).__name__} (fields: "
                    f"{list(type(self)._fields)}); __setitem__ is only allowed for same-class "
                    "or compatible class (same fields) assignment"
                )
        parent: Any = super()
        parent._setitem_index(index, value)

    def select(
        self,
        *keys: NestedKey,
        inplace: bool = False,
        strict: bool = True,
        as_tensordict: bool = False,
    ) -> Any:
        """The fields at `keys` (the others unset); a plain `TensorDict` with `as_tensordict`.

        Over a lazy stack, the stack's own member-wise `select` (sharing the members'
        tensors, as a dense instance's `select` shares its own).
        """
        if as_tensordict and not inplace:
            return self._tensordict.select(*keys, strict=strict)
        if not inplace and is_stack(self._tensordict):
            build: Any = type(self)
            return build._wrap(self._tensordict.select(*keys, strict=strict))
        parent: Any = super()
        return parent.select(*keys, inplace=inplace, strict=strict)


def _refuse_foreign_keys(tc: Any, source: Any) -> None:
    """Raise the unknown-field error if `source` (a mapping or TensorDict of entries for
    the tensorclass `tc`) holds a key that is not a field, at any tensorclass level."""
    if source is None or not (isinstance(source, Mapping) or is_td(source)):
        return
    fields = type(tc)._field_set
    for key, value in source.items():
        path = unravel_key(key)
        first, rest = (path, ()) if type(path) is str else (path[0], path[1:])
        if first not in fields:
            raise unknown_field_error(type(tc), first)
        child = tc._tensordict._get_str(first, None)
        if not getattr(type(child), "_td_tensorclass", False):
            continue
        if rest:
            _refuse_foreign_keys(child, {rest[0] if len(rest) == 1 else rest: value})
        else:
            _refuse_foreign_keys(child, value)
