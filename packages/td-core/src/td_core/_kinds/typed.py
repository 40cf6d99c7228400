"""`TypedTensorDict`: a `TensorDict` subclass whose fields are class annotations.

A subclass declares `name: Tensor` annotations (with optional defaults); its
constructor takes them by keyword and checks them, fields read and write as
attributes, and every TensorDict operation returns the subclass (`_new`
builds `type(self)`). Subclasses of subclasses add fields.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.pytree import allow_weights_only, register

__all__ = ["TypedTensorDict"]

_NO_FIELD: Any = object()
_OPTIONS = ("shadow", "frozen", "autocast", "nocast", "tensor_only")
# TensorClass options that upstream's TypedTensorDict accepts and ignores
_NO_EFFECT_OPTIONS = ("autocast", "nocast", "tensor_only")
_CLASSVAR_PREFIXES = ("ClassVar", "typing.ClassVar")
_NOT_REQUIRED_PREFIXES = ("NotRequired", "typing.NotRequired", "typing_extensions.NotRequired")


def _field(name: str, default: Any) -> property:
    def getter(self: TensorDict) -> Any:
        value = self._tensordict.get(name, _NO_FIELD)
        if value is not _NO_FIELD:
            return self._get_strict(name)  # (a non-tensor entry reads as its value)
        if default is not _NO_FIELD:
            return default
        raise AttributeError(
            f"{type(self).__name__!r} has field {name!r} declared but not set: "
            f"set it with `obj.{name} = value` or pass it to the constructor"
        )

    def setter(self: TensorDict, value: Any) -> None:
        self.set(name, value)

    return property(getter, setter, doc=f"The `{name}` field.")


def _resolve(klass: type, hint: Any) -> Any:
    """An annotation, evaluated when it is a string (`from __future__ import annotations`)."""
    if not isinstance(hint, str):
        return hint
    module = sys.modules.get(klass.__module__)
    try:
        # (as typing.get_type_hints does: an annotation of the class being defined)
        return eval(hint, dict(vars(module)) if module else {}, {klass.__name__: klass})
    except Exception:
        return hint  # (a name only the caller's scope knows: read the text)


def _kind(hint: Any) -> str:
    """`"classvar"`, `"optional"` (`NotRequired[...]`) or `"required"`."""
    if isinstance(hint, str):
        head = hint.split("[", 1)[0].strip()
        if head in _CLASSVAR_PREFIXES:
            return "classvar"
        return "optional" if head in _NOT_REQUIRED_PREFIXES else "required"
    origin = typing.get_origin(hint)
    if origin is ClassVar:
        return "classvar"
    # by name: typing.NotRequired is 3.11+, typing_extensions' serves 3.10
    return "optional" if getattr(origin, "_name", None) == "NotRequired" else "required"


class _LinkedEntries(dict[str, Any]):
    """The entries of an instance made by `from_tensordict`: every write and delete goes to the source first.

    A write the source refuses (a locked source, a shape it does not
    accept) raises before the instance changes. Not being a plain `dict`
    also keeps the instance off the fast paths that write into the dict
    directly.
    """

    __slots__ = ("source",)

    def __init__(self, source: TensorDictBase, entries: Any) -> None:
        super().__init__(entries)
        self.source = source

    def __setitem__(self, key: str, value: Any) -> None:
        source = self.source
        source.set(key, value)
        if is_td(value) and not is_nt(value):
            # the source's own sub-TensorDict (the same object for a dense source; a view that
            # writes through for a lazy stack or a file), so writes under `key` reach it too
            value = source._get_str(key, value)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        if key in self.source.keys():
            self.source.del_(key)
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]  # as dict's, through update
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = self[key]
        del self[key]
        return value

    def popitem(self) -> tuple[str, Any]:
        key = next(reversed(self))
        return key, self.pop(key)

    def clear(self) -> None:
        for key in list(self):
            del self[key]


class TypedTensorDict(TensorDict):
    """A TensorDict with declared fields, read and written as attributes.

    `from_tensordict(td)` links the instance to `td`: an entry set or
    deleted through it, or a new batch size, is set in `td` first. A field annotated
    `NotRequired[Tensor]`, or given a default, may be
    left out. Class options, as upstream: `TypedTensorDict["shadow"]` (or
    `class C(TypedTensorDict, shadow=True)`) allows a field named like a
    TensorDict attribute (`data`, `clone`, ...), which the field then hides
    on instances of the class (the hidden method is gone from them, and an
    op that calls it fails: `copy()` calls `clone`); `TypedTensorDict["frozen"]` locks every
    instance the constructor builds. Subclasses inherit the options.

    Keyword Args:
        batch_size: the batch size (`None`: empty).
        device: the device.
        names: the names of the batch dims.
        non_blocking: accepted for upstream compatibility.
        lock: lock the instance.
        **fields: the value of each field; a missing required field, or an
            unknown name, raises `TypeError`.

    Examples:
        >>> import torch
        >>> from td_core import TypedTensorDict
        >>> class State(TypedTensorDict):
        ...     obs: torch.Tensor
        ...     reward: torch.Tensor
        >>> state = State(obs=torch.zeros(3, 4), reward=torch.ones(3), batch_size=[3])
        >>> type(state[0]).__name__, state.obs.shape
        ('State', torch.Size([3, 4]))
        >>> sorted(State.__required_keys__)
        ['obs', 'reward']
    """

    __slots__ = ("_source",)
    _source: TensorDictBase  # set by `from_tensordict` only: the TensorDict written through
    _field_names: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}
    _shadow: ClassVar[bool] = False
    _frozen: ClassVar[bool] = False
    __expected_keys__: ClassVar[frozenset[str]] = frozenset()
    __required_keys__: ClassVar[frozenset[str]] = frozenset()
    __optional_keys__: ClassVar[frozenset[str]] = frozenset()

    def __class_getitem__(cls, options: Any) -> Any:
        """A base class with the given options on: `TypedTensorDict["shadow", "frozen"]`.

        Raises:
            ValueError: for an unknown option.
        """
        options = options if isinstance(options, tuple) else (options,)
        for option in options:
            if option not in _OPTIONS:
                raise ValueError(
                    f"Unknown TypedTensorDict option: {option!r}; the options are "
                    f"{', '.join(map(repr, _OPTIONS))}"
                )
        name = f"{cls.__name__}_{'_'.join(options)}"
        return types.new_class(
            name,
            (cls,),
            dict.fromkeys(options, True),
            lambda namespace: namespace.update(_typed_template=True),
        )

    def __init_subclass__(
        cls,
        *,
        shadow: bool | None = None,
        frozen: bool | None = None,
        autocast: bool | None = None,
        nocast: bool | None = None,
        tensor_only: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        for option, value in (
            ("autocast", autocast),
            ("nocast", nocast),
            ("tensor_only", tensor_only),
        ):
            if value is not None:
                warnings.warn(
                    f"the TypedTensorDict option {option!r} has no effect (it is a TensorClass "
                    "option); upstream deprecates it too",
                    DeprecationWarning,
                    stacklevel=3,
                )
        if shadow is not None:
            cls._shadow = bool(shadow)
        if frozen is not None:
            cls._frozen = bool(frozen)
        if cls.__dict__.get("_typed_template", False):
            return
        names: list[str] = []
        optional: set[str] = set()
        defaults: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            if not issubclass(klass, TypedTensorDict) or klass is TypedTensorDict:
                continue
            for name, raw in inspect.get_annotations(klass).items():
                kind = _kind(_resolve(klass, raw))
                if name.startswith("_") or kind == "classvar":
                    continue
                if hasattr(TensorDictBase, name) and not cls._shadow:
                    raise AttributeError(
                        f"{cls.__name__}: field {name!r} shadows a TensorDictBase attribute "
                        f"(it would hide `{cls.__name__}.{name}`); rename it, or allow it with "
                        "TypedTensorDict['shadow']"
                    )
                if name not in names:
                    names.append(name)
                if kind == "optional":
                    optional.add(name)
                default = klass.__dict__.get(name, _NO_FIELD)
                if isinstance(default, property):
                    default = klass._field_defaults.get(name, _NO_FIELD)
                if default is not _NO_FIELD:
                    defaults[name] = default
                    optional.add(name)
        cls._field_names = tuple(names)
        cls._field_defaults = defaults
        cls.__expected_keys__ = frozenset(names)
        cls.__optional_keys__ = frozenset(optional)
        cls.__required_keys__ = frozenset(names) - cls.__optional_keys__
        for name in names:
            setattr(cls, name, _field(name, defaults.get(name, _NO_FIELD)))
        register(cls)
        allow_weights_only(cls)

    def __init__(
        self,
        _source: Mapping[str, Any] | None = None,
        *,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        device: Any = None,
        names: Sequence[str] | None = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **fields: Any,
    ) -> None:
        del non_blocking
        values = {**dict(_source or {}), **fields}
        cls = type(self)
        unexpected = [k for k in values if k not in cls._field_names]
        if unexpected:
            raise TypeError(f"{cls.__name__}() got unexpected field(s): {', '.join(unexpected)}")
        for name, default in cls._field_defaults.items():
            values.setdefault(name, default)
        missing = [k for k in cls._field_names if k not in values and k in cls.__required_keys__]
        if missing:
            raise TypeError(f"{cls.__name__}() missing required field(s): {', '.join(missing)}")
        values = {k: v for k, v in values.items() if v is not None}
        super().__init__(
            values,
            [] if batch_size is None else batch_size,
            device,
            names=names,
            lock=lock or cls._frozen,
        )

    def _set_batch_size(self, size: torch.Size) -> None:
        source = getattr(self, "_source", None)
        if source is not None and size != self._batch_size:
            source.batch_size = size  # first, as a write: a size the source refuses changes neither
        super()._set_batch_size(size)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        if "source" in state:
            state["source"] = dict(state["source"])  # a pickled instance is not linked
        return state

    def _new(
        self, source: dict[str, Any], batch_size: torch.Size, device: Any = NO_DEFAULT
    ) -> TensorDict:
        return type(self)._new_unsafe(
            source, batch_size, self._device if device is NO_DEFAULT else device
        )

    @classmethod
    def from_tensordict(cls, tensordict: TensorDictBase, *, check: bool = True) -> Any:
        """An instance of the class over `tensordict`'s entries (the tensors are not copied).

        The instance holds the same tensors and is linked to `tensordict`:
        an entry set (`obj.x = value`, `obj["x"] = value`, `set`, `update`)
        or deleted through the instance is set or deleted in `tensordict`
        first, by `tensordict`'s own rules (a write it refuses changes
        neither), so both see it on every kind (dense, lazy stack, file); so
        does a new batch size. An
        in-place write into a tensor of a dense source is seen by both; the
        results of ops (`clone`, indexing, ...) are new, unlinked instances.
        The instance starts locked when `tensordict` is locked.

        Args:
            tensordict: the TensorDict whose entries the instance takes.

        Keyword Args:
            check: refuse a `tensordict` that misses a required field. With
                `False` an empty or partly filled one is accepted (reading a
                missing field raises `AttributeError`).

        Raises:
            TypeError: if `check` and a required field is missing.
        """
        keys = tensordict.keys()
        missing = sorted(k for k in cls.__required_keys__ if k not in keys) if check else []
        if missing:
            raise TypeError(
                f"{cls.__name__}.from_tensordict() missing required field(s): {', '.join(missing)}"
            )
        typed = cls._new_unsafe(
            _LinkedEntries(tensordict, tensordict._items_str()),
            tensordict.batch_size,
            tensordict.device,
        )
        typed._source = tensordict
        if tensordict.is_locked:  # as upstream, whose instance shares the source's lock
            typed.lock_()
        return typed
