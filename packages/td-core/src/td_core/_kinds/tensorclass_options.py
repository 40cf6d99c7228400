"""The keyword forms of `@tensorclass` and the class form `TensorClass`.

`tensorclass(autocast=, nocast=, frozen=, shadow=, kw_only=, ...)` builds the
class with `td_core._kinds.tensorclass` and then wraps its `__init__` and
`__setattr__` with the options; `class Foo(TensorClass): x: Tensor` (and
`TensorClass["frozen", "nocast"]`) runs the same builder from a metaclass.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

from td_core._kinds.base import TensorDictBase
from td_core._kinds.tensorclass import build_tensorclass
from td_core._leaves.nontensor import NonTensorData

__all__ = ["tensorclass", "TensorClass"]

_T = TypeVar("_T")
_SCALARS = (int, float, bool, complex)
_LEGACY_TENSOR_TYPE = type(torch.IntTensor)
_OPTION_NAMES = (
    "autocast",
    "frozen",
    "nocast",
    "shadow",
    "tensor_only",
    "skip_post_init_on_rebuild",
    "kw_only",
)


def tensorclass(
    cls: Any = None,
    /,
    *,
    autocast: bool = False,
    frozen: bool = False,
    nocast: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    skip_post_init_on_rebuild: bool = False,
    cast_filter: Callable[..., bool] | None = None,
    kw_only: bool = False,
) -> Any:
    """Turn an annotated class into a dataclass backed by a TensorDict.

    Used bare (`@tensorclass`) or with options (`@tensorclass(frozen=True)`).

    Args:
        cls: the class (when used bare).
        autocast: cast each assigned value to its field's annotation
            (`int`, `float`, `bool`, `str`, `torch.Tensor`).
        frozen: fields cannot be assigned after construction
            (`dataclasses.FrozenInstanceError`) and the storage is locked.
        nocast: keep Python numbers and numpy arrays as they are instead of making tensors.
        shadow: allow fields named like a TensorDict attribute (`get`,
            `batch_size`, `device`, `names`, ...); the field then hides the
            attribute, for the TensorDict methods too: with a `batch_size` field,
            index or stack `obj.to_tensordict()` instead of `obj`.
        tensor_only: fields must be annotated with tensor types (tensors,
            TensorDicts, tensorclasses, `None`); a mapping given to a TensorDict
            field becomes one, and a field annotated `NonTensorData` reads as the leaf.
        skip_post_init_on_rebuild: accepted for upstream compatibility.
        cast_filter: with `autocast`, `cast_filter(name, value)` picks the
            fields to cast (all when `None`).
        kw_only: fields are keyword-only in the constructor.

    Raises:
        AttributeError: for a field named like a TensorDict attribute without
            `shadow=True`.
        ValueError: for `autocast` together with `nocast`.

    Examples:
        >>> import torch
        >>> from td_core import tensorclass
        >>> @tensorclass(nocast=True)
        ... class Step:
        ...     obs: torch.Tensor
        ...     index: int
        >>> type(Step(obs=torch.zeros(2), index=3, batch_size=[2]).index).__name__
        'int'
    """
    options = {
        "autocast": autocast,
        "frozen": frozen,
        "nocast": nocast,
        "shadow": shadow,
        "tensor_only": tensor_only,
        "skip_post_init_on_rebuild": skip_post_init_on_rebuild,
        "kw_only": kw_only,
        "cast_filter": cast_filter,
    }
    if autocast and nocast:
        raise ValueError("tensorclass: autocast and nocast cannot both be True")
    if cls is None:
        return lambda klass: _make(klass, options)
    return _make(cls, options)


def _annotations(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: use the raw annotations
        out: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            out.update(getattr(klass, "__annotations__", {}))
        return out


def _check_shadow(cls: type) -> None:
    names = [
        n
        for klass in cls.__mro__
        if not issubclass(klass, TensorDictBase)
        for n in getattr(klass, "__annotations__", {})
        if not n.startswith("_")
    ]
    # `data` stays free, as upstream: a field of that name hides `TensorDictBase.data`
    clash = [n for n in names if hasattr(TensorDictBase, n) and n != "data"]
    if clash:
        raise AttributeError(
            f"Attribute name {clash[0]} can't be used with @tensorclass or TensorClass, as "
            f"tensorclasses have a member of that name. To allow it, pass shadow=True "
            f"(@tensorclass(shadow=True) or TensorClass['shadow'])."
        )


def _tensor_only_allows(hint: Any) -> bool:
    """Whether `tensor_only` accepts the annotation: tensors, tensor collections, `None`."""
    if hint is None or hint is type(None):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return all(_tensor_only_allows(arg) for arg in typing.get_args(hint))
    if origin is not None:  # a parameterised generic: `TensorDict[str, Tensor]`
        hint = origin
    if isinstance(hint, _LEGACY_TENSOR_TYPE):  # `torch.IntTensor`, `torch.LongTensor`, ...
        return True
    return isinstance(hint, type) and issubclass(
        hint, (torch.Tensor, TensorDictBase, NonTensorData)
    )


def _check_tensor_only(cls: type, options: dict[str, Any]) -> None:
    """Refuse `tensor_only` with casting options or with a field that is not a tensor type."""
    if options["autocast"] or options["nocast"]:
        raise TypeError(
            f"tensorclass {cls.__name__}: tensor_only cannot be combined with autocast or "
            "nocast (its fields hold tensors, there is nothing to cast)"
        )
    hints = _annotations(cls)
    names = {
        name
        for klass in cls.__mro__
        if not klass.__dict__.get("_tc_template") and not issubclass(klass, TensorDictBase)
        for name in inspect.get_annotations(klass)
        if not name.startswith("__")
    }
    for name in sorted(names):
        hint = hints.get(name)
        if isinstance(hint, str):  # a forward reference: checked when it can be evaluated
            hint = _resolve(hint, cls, cls)
            if hint is None:
                continue
        if hint is typing.ClassVar or typing.get_origin(hint) is typing.ClassVar:
            continue
        if not _tensor_only_allows(hint):
            raise TypeError(
                f"tensorclass {cls.__name__}: field {name!r} is annotated {hint!r}, but "
                "tensor_only requires types to be Tensor, Tensor-subtrypes or None "
                "(or tensor collections such as TensorDict and tensorclasses)"
            )


def _resolve(hint: Any, cls: type, built: type) -> Any:
    """An annotation given as a string (a forward reference), evaluated when first needed.

    Names resolve in the class's module, and the class's own name gives the built class
    (`tc: "Node"` inside `Node`, or any annotation under `from __future__ import annotations`).
    Unresolvable names give `None`: that field is left uncast.
    """
    if not isinstance(hint, str):
        return hint
    module = sys.modules.get(cls.__module__)
    scope = {**(vars(module) if module is not None else {}), cls.__name__: built}
    try:
        out = eval(hint, scope)  # what typing.get_type_hints does with a string annotation
    except Exception:
        return None
    # `x: "Node"` under `from __future__ import annotations` is stored as "'Node'"
    return _resolve(out, cls, built) if isinstance(out, str) and out != hint else out


def _cast_to(target: Any, value: Any) -> Any:
    """`value` cast to the annotation `target` (autocast); `value` itself when no rule applies."""
    if target is torch.Tensor:
        return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if target in (int, float, bool, str):
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        return NonTensorData(target(value))
    if target is np.ndarray:
        return NonTensorData(np.asarray(value))
    if isinstance(target, type) and issubclass(target, TensorDictBase) and isinstance(value, dict):
        build: Any = target
        if getattr(target, "_td_tensorclass", False):
            # a tensorclass field given as a dict of its fields; those left out are None
            return build(**{**dict.fromkeys(build._fields), **value})
        return build(value)
    return value


def _caster(cls: type, built: type, options: dict[str, Any]) -> Callable[[str, Any], Any]:
    hints = _annotations(cls)
    autocast, nocast = options["autocast"], options["nocast"]
    cast_filter = options["cast_filter"]

    def convert(name: str, value: Any) -> Any:
        if value is None or isinstance(value, NonTensorData):
            return value
        if autocast and (cast_filter is None or cast_filter(name, value)):
            target = hints.get(name)
            if isinstance(target, str):
                target = hints[name] = _resolve(target, cls, built)
            return _cast_to(target, value)
        if nocast and isinstance(value, (*_SCALARS, np.ndarray)):
            return NonTensorData(value)
        return value

    return convert


def _make(cls: Any, options: dict[str, Any], body: dict[str, Any] | None = None) -> Any:
    if not options["shadow"]:
        _check_shadow(cls)
    if options["tensor_only"]:
        _check_tensor_only(cls, options)
    new_cls: Any = build_tensorclass(
        cls, body or {}, shadow=bool(options["shadow"]), tensor_only=bool(options["tensor_only"])
    )
    new_cls._tc_options = dict(options)
    for flag in ("autocast", "nocast", "frozen", "shadow", "tensor_only"):  # upstream's class flags
        setattr(new_cls, f"_{flag}", bool(options[flag]))
    if options["frozen"]:
        new_cls.__hash__ = object.__hash__  # locked for good: hashable by identity
    if not any(options[k] for k in ("autocast", "nocast", "frozen", "kw_only")):
        return new_cls
    if options["autocast"]:
        # as upstream, autocast turns a mapping into a TensorDict (or tensorclass) only for a
        # field annotated with that one type; under a union the mapping is kept as a value
        hints = _annotations(cls)
        new_cls._mapping_fields = frozenset(
            n
            for n in new_cls._mapping_fields
            if isinstance(_resolve(hints.get(n), cls, new_cls), type)
        )
    convert = _caster(cls, new_cls, options)
    fields = new_cls._fields
    init = new_cls.__init__
    setattr_ = new_cls.__setattr__
    frozen, kw_only = options["frozen"], options["kw_only"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kw_only and args:
            raise TypeError(
                f"{cls.__name__}() takes keyword-only fields, got {len(args)} positional value(s)"
            )
        # extra positionals go on unconverted, for the constructor to refuse
        args = tuple(convert(name, v) for name, v in zip(fields, args)) + args[len(fields) :]
        kwargs = {k: convert(k, v) if k in fields else v for k, v in kwargs.items()}
        init(self, *args, **kwargs)
        if frozen:
            self.lock_()

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in fields:
            if frozen:
                raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
            value = convert(name, value)
        setattr_(self, name, value)

    __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    __setattr__._td_generated = True  # type: ignore[attr-defined]  # not the user's own
    __setattr__._td_wraps = setattr_  # type: ignore[attr-defined]
    new_cls.__init__ = __init__
    new_cls.__setattr__ = __setattr__
    return new_cls


_METHOD_TYPES = (types.FunctionType, classmethod, staticmethod, property)


class _TensorClassMeta(type):
    """Builds every subclass of `TensorClass` as a tensorclass."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> Any:
        # the options may also come as class keywords: `class Foo(TensorClass, nocast=True)`
        flags = {k: bool(kw.pop(k)) for k in _OPTION_NAMES if k in kw}
        if ns.get("_tc_template") or ("_fields" in ns and "_defaults" in ns):
            # TensorClass itself, TensorClass[...] or a class the builder made
            return super().__new__(mcls, name, bases, ns, **kw)
        # the methods go on the built class (see `build_tensorclass`); the fields stay here
        annotated = set(ns.get("__annotations__", {}))
        body = {
            k: v
            for k, v in ns.items()
            if k == "__classcell__"
            or (k not in annotated and isinstance(v, _METHOD_TYPES) and k != "__annotate__")
        }
        cls = super().__new__(
            mcls, name, bases, {k: v for k, v in ns.items() if k not in body}, **kw
        )
        options: dict[str, Any] = {}
        for base in reversed(cls.__mro__[1:]):
            options.update(getattr(base, "_tc_flags", {}))
        options.update(flags)
        full: dict[str, Any] = dict.fromkeys(_OPTION_NAMES, False)
        full.update(options)
        full["cast_filter"] = None
        if full["autocast"] and full["nocast"]:
            raise ValueError("tensorclass: autocast and nocast cannot both be True")
        return _make(cls, full, body)


class TensorClass(metaclass=_TensorClassMeta):
    """The class form of `@tensorclass`: subclass it and annotate the fields.

    `TensorClass["autocast", "frozen", ...]` gives a base with those options, and so do
    class keywords: `class Foo(TensorClass, nocast=True)`.

    Examples:
        >>> import torch
        >>> from td_core import TensorClass
        >>> class Batch(TensorClass):
        ...     obs: torch.Tensor
        >>> Batch(obs=torch.zeros(4, 3), batch_size=[4])[:2].obs.shape
        torch.Size([2, 3])
    """

    _tc_template = True
    _tc_flags: dict[str, bool] = {}  # noqa: RUF012 - replaced per TensorClass[...]
    # upstream's class flags; each built class sets its own
    _autocast = _nocast = _frozen = _shadow = _tensor_only = False

    def __class_getitem__(cls, flags: str | tuple[str, ...]) -> type:
        flags = (flags,) if isinstance(flags, str) else tuple(flags)
        unknown = [f for f in flags if f not in _OPTION_NAMES]
        if unknown:
            raise ValueError(f"TensorClass[...]: unknown option(s) {unknown}; use {_OPTION_NAMES}")
        return _TensorClassMeta(
            f"TensorClass_{'_'.join(flags)}",
            (cls,),
            {"_tc_template": True, "_tc_flags": dict.fromkeys(flags, True)},
        )
