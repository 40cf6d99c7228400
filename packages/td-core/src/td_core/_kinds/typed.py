"""`TypedTensorDict`: a `TensorDict` subclass whose fields are class annotations.

A subclass declares `name: Tensor` annotations (with optional defaults); its
constructor takes them by keyword and checks them, fields read and write as
attributes, and every TensorDict operation returns the subclass (`_new`
builds `type(self)`). Subclasses of subclasses add fields.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from td_core._core.utils import NO_DEFAULT
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.pytree import allow_weights_only, register

__all__ = ["TypedTensorDict"]

_NO_FIELD: Any = object()


def _field(name: str) -> property:
    def getter(self: TensorDict) -> Any:
        return self._get_strict(name)  # a missing field raises KeyError, as upstream

    def setter(self: TensorDict, value: Any) -> None:
        self.set(name, value)

    return property(getter, setter, doc=f"The `{name}` field.")


class TypedTensorDict(TensorDict):
    """A TensorDict with declared fields, read and written as attributes.

    Keyword Args:
        batch_size: the batch size (`None`: empty).
        device: the device.
        names: accepted for upstream compatibility; must be `None`.
        non_blocking: accepted for upstream compatibility.
        lock: lock the instance.
        **fields: the value of each field; a missing field without a default,
            or an unknown name, raises `TypeError`.

    Examples:
        >>> import torch
        >>> from td_core import TypedTensorDict
        >>> class State(TypedTensorDict):
        ...     obs: torch.Tensor
        ...     reward: torch.Tensor
        >>> state = State(obs=torch.zeros(3, 4), reward=torch.ones(3), batch_size=[3])
        >>> type(state[0]).__name__, state.obs.shape
        ('State', torch.Size([3, 4]))
    """

    __slots__ = ()
    _field_names: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        defaults: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            if not issubclass(klass, TypedTensorDict) or klass is TypedTensorDict:
                continue
            for name, hint in inspect.get_annotations(klass).items():
                if name.startswith("_") or typing.get_origin(hint) is ClassVar:
                    continue
                if hasattr(TensorDictBase, name):
                    raise AttributeError(
                        f"{cls.__name__}: field {name!r} would hide the TensorDict attribute of "
                        "that name; rename it"
                    )
                if name not in names:
                    names.append(name)
                default = klass.__dict__.get(name, _NO_FIELD)
                if isinstance(default, property):
                    default = klass._field_defaults.get(name, _NO_FIELD)
                if default is not _NO_FIELD:
                    defaults[name] = default
        cls._field_names = tuple(names)
        cls._field_defaults = defaults
        for name in names:
            setattr(cls, name, _field(name))
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
        if names is not None:
            raise TypeError(f"{type(self).__name__}(names=...) is not supported by td")
        values = {**dict(_source or {}), **fields}
        cls = type(self)
        unexpected = [k for k in values if k not in cls._field_names]
        if unexpected:
            raise TypeError(f"{cls.__name__}() got unexpected field(s): {', '.join(unexpected)}")
        for name, default in cls._field_defaults.items():
            values.setdefault(name, default)
        missing = [k for k in cls._field_names if k not in values]
        if missing:
            raise TypeError(f"{cls.__name__}() missing required field(s): {', '.join(missing)}")
        values = {k: v for k, v in values.items() if v is not None}
        super().__init__(values, [] if batch_size is None else batch_size, device, lock=lock)

    def _new(
        self, source: dict[str, Any], batch_size: torch.Size, device: Any = NO_DEFAULT
    ) -> TensorDict:
        return type(self)._new_unsafe(
            source, batch_size, self._device if device is NO_DEFAULT else device
        )

    @classmethod
    def from_tensordict(cls, tensordict: TensorDictBase) -> Any:
        """A typed view of `tensordict`'s entries (the entries are not copied).

        Raises:
            TypeError: if a field without a default is missing.
        """
        missing = [
            k
            for k in cls._field_names
            if k not in tensordict.keys() and k not in cls._field_defaults
        ]
        if missing:
            raise TypeError(f"{cls.__name__}.from_tensordict: missing field(s) {missing}")
        return cls._new_unsafe(
            dict(tensordict._items_str()), tensordict.batch_size, tensordict.device
        )
