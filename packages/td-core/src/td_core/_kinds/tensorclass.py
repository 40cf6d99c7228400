"""`@tensorclass`: a dataclass whose fields live in a TensorDict.

The decorator builds a subclass of the user's class and of `TensorDictBase`
whose storage primitives delegate to a wrapped `TensorDict` and whose
results (`_new`) are built as the same class. So every TensorDict operation
(indexing, reshape, stack, cat, apply, to, clone, comparisons) returns an
instance of the user's class, with the user's methods, through the shared base.
Fields are properties: tensors read as tensors, other values as themselves.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from td_core._core.contract import provide
from td_core._core.traverse import is_nt, is_ragged, is_stack
from td_core._core.utils import NO_DEFAULT
from td_core._io.printoptions import print_option
from td_core._io.repr import leaf_repr, td_repr
from td_core._io.repr_compact import with_compact
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.pytree import allow_weights_only, register
from td_core._kinds.tensorclass_compat import TensorClassCompat, unknown_field_error
from td_core._kinds.tensorclass_init import make_init
from td_core._kinds.tensorclass_route import route_wrapped_ops
from td_core._kinds.tensorclass_wrapped import WrappedKindMixin, wraps_as_is
from td_core._leaves.linked_list import linked_values
from td_core._leaves.nontensor import NonTensorData, NonTensorStack
from td_core._ops.names import inherit_names
from td_core.errors import FieldError

__all__ = ["build_tensorclass", "tensorclass"]

_T = TypeVar("_T")
_RESERVED = {"batch_size", "device", "shape", "names"}
_RAGGED_READS = ("as_list", "as_padded_tensor", "as_nested_tensor")


class _TensorClassBase(TensorClassCompat, WrappedKindMixin):
    """What every generated tensorclass shares."""

    _td_tensorclass = True  # not upstream's `_is_tensorclass`, which its vmap patch reads
    # a view op's record lives on the instance (its __dict__), not in a side table keyed by
    # id(): torch.compile cannot rebuild such a key for an object made in the graph
    _view_slot = True
    _fields: tuple[str, ...] = ()
    _field_set: frozenset[str] = frozenset()
    _defaults: dict[str, Any] = {}  # noqa: RUF012 - replaced per class
    _tensordict: TensorDict  # or another kind, wrapped by from_tensordict (see WrappedKindMixin)

    # ---------------------------------------------------------------- primitives
    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        return self._tensordict._get_str(key, default)

    def get(self, key: Any, default: Any = NO_DEFAULT, **how: Any) -> Any:
        """The field at `key`, as `TensorDict.get` (a missing one gives `None`).

        As upstream, `get("batch_size")` (and `"device"`, `"shape"`, `"names"`)
        reads the attribute of that name. The ragged-read keywords (`as_list=`,
        `as_padded_tensor=`, ...) are those of `TensorDict.get`.
        """
        if type(key) is str and key in _RESERVED and key not in self._field_set:
            return getattr(self, key)
        if how and any(how.get(k) for k in _RAGGED_READS) and is_stack(self._tensordict):
            return self._tensordict.get(key, default, **how)  # the stack reads its members
        value = super().get(key, default, **how)
        # as upstream, a tensorclass reads a non-tensor entry as its value, not as the leaf
        return linked_values(value, self._tensordict, key) if is_nt(value) and not how else value

    def _set_str(self, key: str, value: Any) -> None:
        if key not in type(self)._field_set:  # every write of a new key comes through here
            raise unknown_field_error(type(self), key)
        self._tensordict._set_str(key, value)

    def _del_str(self, key: str) -> None:
        self._tensordict._del_str(key)

    def _index(self, index: Any) -> Any:
        if is_stack(self._tensordict):  # a lazy stack indexes its members, ragged ones included
            return type(self)._wrap(self._tensordict._index(index))
        return super()._index(index)

    def unbind(self, dim: int = 0) -> tuple[Any, ...]:
        """The slices along batch dim `dim`, each an instance of this class."""
        if is_stack(self._tensordict):  # a lazy stack unbinds through its members
            return tuple(type(self)._wrap(part) for part in self._tensordict.unbind(dim))
        return super().unbind(dim)

    def _subtrees(self) -> list[TensorDictBase]:
        return self._tensordict._subtrees()  # a lazy stack: its members (locks walk these)

    def _key_items(self) -> Any:
        return self._tensordict._key_items()  # a lazy stack's ragged leaves are never stacked

    def _key_nodes(self) -> Any:
        return self._tensordict._key_nodes()

    def _keys_str(self) -> Any:
        return self._tensordict._keys_str()

    def _items_str(self) -> Any:
        return self._tensordict._items_str()

    def _values_str(self) -> Any:
        return self._tensordict._values_str()

    @classmethod
    def _check_fields(cls, source: Any) -> Any:
        """`source` (a mapping of a result's entries), once its keys are known to be fields."""
        keys = source.keys() if type(source) is dict else set(source.keys())
        if not keys <= cls._field_set:  # e.g. flatten_keys: "nested.x"
            unknown = sorted(k for k in keys if k not in cls._field_set)
            raise FieldError(
                f"the result has keys {unknown} that are not fields of {cls.__name__} "
                f"(fields: {list(cls._fields)}); convert with to_tensordict() first"
            )
        return source

    def _new(self, source: dict[str, Any], batch_size: torch.Size, device: Any = NO_DEFAULT) -> Any:
        type(self)._check_fields(source)
        td = TensorDict._new_unsafe(
            source, batch_size, self._tensordict.device if device is NO_DEFAULT else device
        )
        return inherit_names(self, type(self)._wrap(td))

    @classmethod
    def _wrap(cls, td: TensorDictBase) -> Any:
        obj = object.__new__(cls)
        object.__setattr__(obj, "_tensordict", td)
        return obj

    @classmethod
    def _from_pytree(cls, source: dict[str, Any], batch_size: torch.Size, device: Any) -> Any:
        return cls._wrap(TensorDict._new_unsafe(source, batch_size, device))

    @classmethod
    def from_tensordict(
        cls, tensordict: TensorDictBase, non_tensordict: dict[str, Any] | None = None
    ) -> Any:
        """An instance holding `tensordict` (not copied); unknown keys are refused.

        The class's `__post_init__`, if any, runs on the new instance.
        """
        unknown = [k for k in tensordict.keys() if k not in cls._fields]
        if unknown:
            raise FieldError(
                f"{cls.__name__} has no field(s) {unknown}; fields are {list(cls._fields)}"
            )
        td = (
            tensordict
            if wraps_as_is(tensordict)  # writes through the instance reach it, as upstream
            else TensorDict(dict(tensordict.items()), tensordict.batch_size, tensordict.device)
        )
        obj = cls._wrap(td)
        for key, value in (non_tensordict or {}).items():
            setattr(obj, key, value)
        post_init = getattr(obj, "__post_init__", None)
        if post_init is not None:  # a new instance from user data: validate it as __init__ does
            post_init()
        return obj

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        *,
        auto_batch_size: bool | None = None,
        names: Any = None,
    ) -> Any:
        """An instance whose fields are the keys of the (nested) mapping `input_dict`.

        The arguments are those of `TensorDict.from_dict`; keys that are not
        fields are refused (`KeyError`).
        """
        td = TensorDict.from_dict(
            input_dict,
            batch_size,
            device,
            batch_dims,
            auto_batch_size=auto_batch_size,
            names=names,
        )
        return cls.from_tensordict(td)

    @classmethod
    def from_list(
        cls,
        input: Any,
        *,
        auto_batch_size: bool | None = None,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Any = None,
        lazy: bool | None = None,
    ) -> Any:
        """An instance from a list of mappings (one per row), as `TensorDict.from_list`.

        The keys of the mappings must be fields. Rows whose entries differ in
        shape (or `lazy=True`) give an instance over a lazy stack of the rows.
        """
        td = TensorDict.from_list(
            input,
            auto_batch_size=auto_batch_size,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            names=names,
            lazy=lazy,
        )
        return cls.from_tensordict(td)

    @classmethod
    def fromkeys(cls, keys: Any, value: Any = 0) -> Any:
        """An instance of empty batch size holding `value` in each field named in `keys`."""
        return cls.from_tensordict(TensorDict.fromkeys(keys, value))

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """The fields as a plain TensorDict (a shallow copy; a copy of a wrapped kind's reads)."""
        td = self._tensordict
        return td.copy() if type(td) is TensorDict or is_ragged(td) else td.to_tensordict()

    # ---------------------------------------------------------------- metadata
    @property
    def batch_size(self) -> torch.Size:
        return self._tensordict.batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._tensordict.batch_size = value

    @property
    def device(self) -> torch.device | None:
        return self._tensordict.device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError(
            f"the device of a {type(self).__name__} cannot be changed in place: device cannot "
            "be set using tensorclass.device = device; use obj.to(device), which returns a "
            "new instance on that device"
        )

    def _set_device(self, device: Any) -> None:
        self._tensordict._set_device(device)

    @property  # type: ignore[misc]  # read-only here: the lock is the inner TensorDict's
    def _is_locked(self) -> bool:
        return self._tensordict._is_locked

    def _lock_tree(self, locked: bool) -> None:
        self._tensordict._lock_tree(locked)

    def _raw_names(self) -> Any:
        return self._tensordict._raw_names()

    def _store_names(self, names: Any) -> None:
        self._tensordict._store_names(names)

    def _set_names(self, names: Any) -> None:
        # the wrapped kind checks in its own order: a view refuses before the names are read
        self._tensordict._set_names(names)

    # ------------------------------------------------------------------- dunder
    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if name in cls._field_set:
            if type(value) is torch.Tensor:  # what `set` does with a tensor, without its dispatch
                self._tensordict._set_leaf(name, value, False, name)
                self._undelete(name)
            elif value is None:
                if name in self._tensordict._keys_str():
                    self._tensordict._del_str(name)
            else:
                self.set(name, value)
        elif _is_data_descriptor(cls, name):  # a property with a setter (batch_size, names, ...)
            object.__setattr__(self, name, value)
        else:
            # as a dataclass with slots would: a typo must not be stored silently
            raise unknown_field_error(cls, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"_tensordict": self._tensordict}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_tensordict", state["_tensordict"])

    @with_compact
    def __repr__(self) -> str:
        lines = []
        stacked = is_stack(self._tensordict)
        for key in sorted(self._keys_str()):
            if stacked:  # a lazy stack renders its entries without stacking ragged ones
                lines.append(f"{key}={self._tensordict._render(key)}")  # type: ignore[attr-defined]
                continue
            value = self._get_str(key)
            text = (
                td_repr(value)
                if not isinstance(value, torch.Tensor) and not is_nt(value)
                else leaf_repr(value)
            )
            lines.append(f"{key}={text}")
        # a field named like the metadata (`shadow=True`) replaces its line, as upstream
        td, fields = self._tensordict, type(self)._field_set
        if print_option("show_batch_size"):
            if "batch_size" not in fields:
                lines.append(f"batch_size={td.batch_size}")
            elif "shape" not in fields:
                lines.append(f"shape={td.batch_size}")
        if "device" not in fields and print_option("show_device"):
            lines.append(f"device={td.device}")
        if print_option("show_is_shared"):
            lines.append(f"is_shared={td.is_shared()}")
        body = ",\n".join("\n".join("    " + ln for ln in line.splitlines()) for line in lines)
        return f"{type(self).__name__}(\n{body})"


# over any kind but a dense TensorDict, out-of-place ops run on that kind (the class's own aside)
route_wrapped_ops(_TensorClassBase, skip=[n for n in vars(_TensorClassBase) if n != "__module__"])

# a plain dict, not functools.cache: torch.compile traces a dict lookup, not a cache wrapper
_CUSTOM_SETATTR: dict[type, Callable[..., None] | None] = {}


def _custom_setattr(cls: type) -> Callable[..., None] | None:
    """The `__setattr__` a user class defines (first in the MRO), or `None` if it defines none."""
    try:
        return _CUSTOM_SETATTR[cls]
    except KeyError:
        found = _CUSTOM_SETATTR[cls] = _find_custom_setattr(cls)
        return found


def _find_custom_setattr(cls: type) -> Callable[..., None] | None:
    for klass in cls.__mro__:
        fn = klass.__dict__.get("__setattr__")
        while fn is not None and getattr(fn, "_td_generated", False):  # an option's wrapper
            fn = getattr(fn, "_td_wraps", None)
        if fn is None:
            continue
        if fn is _TensorClassBase.__setattr__ or issubclass(_TensorClassBase, klass):
            return None
        return fn
    return None


def _is_data_descriptor(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return hasattr(type(klass.__dict__[name]), "__set__")
    return False


def _dataclass_spec(cls: type, fields: tuple[str, ...]) -> tuple[dict[str, Any], Any]:
    """`__dataclass_fields__` and `__dataclass_params__` for the declared fields.

    A generated tensorclass is a real dataclass (`dataclasses.is_dataclass`,
    `dataclasses.fields` in declared order, with their defaults), but its
    `__init__`, `repr` and `==` stay the TensorDict ones: the spec is
    built on a throwaway class and attached.
    """
    annotations: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        annotations.update(inspect.get_annotations(klass))
        raw.update({n: klass.__dict__[n] for n in fields if n in klass.__dict__})
    namespace: dict[str, Any] = {"__annotations__": {n: annotations.get(n, Any) for n in fields}}
    for name, default in raw.items():
        if isinstance(default, dataclasses.Field):
            # `repr=False` is kept: the compact repr leaves such a field out
            namespace[name] = (
                dataclasses.field(default_factory=default.default_factory, repr=default.repr)
                if default.default_factory is not dataclasses.MISSING
                else dataclasses.field(default=default.default, repr=default.repr)
            )
        elif type(default).__hash__ is None:  # a list or dict default: dataclasses refuse these
            namespace[name] = dataclasses.field(default_factory=lambda v=default: v)  # type: ignore[misc]  # mypy cannot infer a lambda with a default
        else:
            namespace[name] = default
    probe: Any = dataclasses.dataclass(init=False, repr=False, eq=False)(
        type(cls.__name__, (), namespace)
    )
    return probe.__dataclass_fields__, probe.__dataclass_params__


def _field_property(name: str, keep_leaf: bool = False) -> property:
    tensor = torch.Tensor  # read from the closure: cheaper than the module's `torch`

    def getter(self: _TensorClassBase) -> Any:
        td = self._tensordict
        if type(td) is TensorDict and td._pending is None:  # the common case: its dict, directly
            value = td._tensordict.get(name)
        else:
            value = td._get_str(name, None)
        if type(value) is tensor:
            return value
        if value is None:
            deleted = self.__dict__.get("_td_deleted")
            if deleted and name in deleted:
                raise AttributeError(f"{type(self).__name__} field {name!r} was deleted")
            return type(self)._defaults.get(name)
        return (
            linked_values(value, self._tensordict, name)
            if is_nt(value) and not keep_leaf
            else value
        )

    def setter(self: _TensorClassBase, value: Any) -> None:
        _TensorClassBase.__setattr__(self, name, value)

    return property(getter, setter, doc=f"The `{name}` field.")


def _is_tensordict_hint(hint: Any) -> bool:
    """Whether an annotation names a TensorDict type (alone, in a union or parameterised)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or (origin is not None and origin is types.UnionType):
        return any(_is_tensordict_hint(arg) for arg in typing.get_args(hint))
    if origin is not None:
        hint = origin
    return isinstance(hint, type) and issubclass(hint, TensorDictBase)


def _field_hints(cls: type, fields: tuple[str, ...]) -> dict[str, Any]:
    """The annotation of each field, string annotations evaluated where possible.

    A string is evaluated in the class's module, where the class's own name
    stands for the tensorclass (`y: "Node"` inside `Node`); one that cannot be
    evaluated is left out.
    """
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        module = sys.modules.get(klass.__module__)  # where the annotation was written
        scope = vars(module) if module is not None else {}
        for name, hint in inspect.get_annotations(klass).items():
            if name not in fields:
                continue
            if isinstance(hint, str):
                if hint.strip("'\" ") == cls.__name__:
                    out[name] = TensorDictBase  # the class itself, a tensorclass
                    continue
                try:
                    hint = eval(hint, scope)  # what typing.get_type_hints does with a string
                except Exception:
                    continue
            out[name] = hint
    return out


def _is_leaf_hint(hint: Any) -> bool:
    """Whether a field is annotated as a non-tensor leaf class (read as the leaf itself)."""
    return isinstance(hint, type) and issubclass(hint, (NonTensorData, NonTensorStack))


def _is_classvar(hint: Any) -> bool:
    if isinstance(hint, str):  # a string annotation (`from __future__ import annotations`)
        return hint.split("[", 1)[0].strip() in ("ClassVar", "typing.ClassVar")
    return hint is typing.ClassVar or typing.get_origin(hint) is typing.ClassVar


def _fields_of(cls: type, shadow: bool = False) -> tuple[tuple[str, ...], dict[str, Any]]:
    names: list[str] = []
    defaults: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass in _TensorClassBase.__mro__ or klass.__dict__.get("_tc_template"):
            continue  # td's own bases annotate their internals (`_tensordict`, `_tc_flags`, ...)
        annotations = inspect.get_annotations(klass)
        for name, hint in annotations.items():
            if name.startswith("__") or _is_classvar(hint):
                continue  # as dataclasses: `_private: Any = None` is a field, a ClassVar is not
            if name in _RESERVED and not shadow:
                raise AttributeError(f"tensorclass {cls.__name__}: field name {name!r} is reserved")
            if name not in names:
                names.append(name)
            if name in klass.__dict__:
                default = klass.__dict__[name]
                if isinstance(default, dataclasses.Field):
                    default = (
                        default.default_factory()
                        if default.default_factory is not dataclasses.MISSING
                        else default.default
                    )
                defaults[name] = default
    return tuple(names), defaults


def tensorclass(cls: type[_T]) -> type[_T]:
    """Turn an annotated class into a dataclass backed by a TensorDict.

    The constructor takes the fields (positionally or by name) plus
    `batch_size` and `device`. Methods of the class are kept, and every
    TensorDict operation returns an instance of the class.

    Examples:
        >>> import torch
        >>> from td_core import tensorclass
        >>> @tensorclass
        ... class Batch:
        ...     obs: torch.Tensor
        ...     label: torch.Tensor
        ...
        ...     def only(self, label):
        ...         return self[self.label == label]
        >>> data = Batch(torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 1, 0]), batch_size=[6])
        >>> picked = data.only(1)
        >>> type(picked).__name__, picked.batch_size, picked.obs.shape
        ('Batch', torch.Size([3]), torch.Size([3, 3]))
    """
    return build_tensorclass(cls, {})


def build_tensorclass(
    cls: type[_T], body: dict[str, Any], *, shadow: bool = False, tensor_only: bool = False
) -> type[_T]:
    """`tensorclass(cls)`, with `body` (methods, `__classcell__`) set on the built class itself.

    The class form (`class Foo(TensorClass)`) passes its methods here rather than
    leaving them on `cls`: a method calling `super()` then names the class that
    is returned, as Python requires of a metaclass. With `shadow`, fields may be
    named like the metadata (`batch_size`, `device`, `names`, `shape`): the field
    hides the attribute, and the constructor's keyword of that name sets the field.
    With `tensor_only`, a field annotated as a non-tensor leaf class reads as the
    leaf itself rather than its value.
    """
    fields, defaults = _fields_of(cls, shadow)
    hints = _field_hints(cls, fields)
    namespace: dict[str, Any] = dict(body)
    namespace.update(
        {
            name: _field_property(name, tensor_only and _is_leaf_hint(hints.get(name)))
            for name in fields
        }
    )
    dc_fields, dc_params = _dataclass_spec(cls, fields)
    namespace.update(
        __dataclass_fields__=dc_fields,
        __dataclass_params__=dc_params,
        __match_args__=fields,
        _fields=fields,
        _field_set=frozenset(fields),
        __expected_keys__=set(fields),
        _defaults=defaults,
        _mapping_fields=frozenset(n for n, h in hints.items() if _is_tensordict_hint(h)),
        __init__=make_init(cls.__name__, fields, defaults, _custom_setattr),
        # a mutable dataclass with `==` is unhashable; `frozen=True` makes it hashable again
        __hash__=None,
        __module__=cls.__module__,
        __qualname__=cls.__qualname__,
        __doc__=cls.__doc__,
    )
    new_cls = type(cls.__name__, (cls, _TensorClassBase), namespace)
    register(new_cls)
    allow_weights_only(new_cls)
    return new_cls


provide("tensorclass", tensorclass)
