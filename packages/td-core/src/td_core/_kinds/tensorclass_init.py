"""The `__init__` a tensorclass gets: its fields by position or by name, then the
keywords `batch_size`, `device` and `names`, checked and worded as a dataclass's are."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from td_core._kinds.dense import TensorDict

__all__ = ["make_init"]


def make_init(
    cls_name: str,
    fields: tuple[str, ...],
    defaults: dict[str, Any],
    custom_setattr: Callable[[type], Callable[..., None] | None],
) -> Callable[..., None]:
    """The `__init__` of the tensorclass `cls_name` with `fields` (and their `defaults`).

    `custom_setattr(cls)` gives the `__setattr__` a user class defines, if any: the
    fields are then set through it, as a dataclass's `__init__` does.
    """
    shadowed = [n for n in ("batch_size", "device", "names") if n in fields]
    field_set = frozenset(fields)

    def __init__(
        self: Any,
        *args: Any,
        batch_size: Any = None,
        device: Any = None,
        names: Any = None,
        **kwargs: Any,
    ) -> None:
        if len(args) > len(fields):
            raise TypeError(
                f"{cls_name}.__init__() takes {len(fields) + 1} positional arguments but "
                f"{len(args) + 1} were given (self and the fields {list(fields)})"
            )
        values = dict(zip(fields, args))
        meta = {"batch_size": batch_size, "device": device, "names": names}
        for meta_name in shadowed:  # `shadow=True`: the keyword sets the field of that name
            if meta[meta_name] is not None:
                kwargs[meta_name] = meta[meta_name]
                meta[meta_name] = None
        batch_size, device, names = meta["batch_size"], meta["device"], meta["names"]
        for name, value in kwargs.items():
            if name not in field_set:
                raise TypeError(
                    f"{cls_name}() got an unexpected field {name!r}; fields are {list(fields)}"
                )
            if name in values:
                raise TypeError(f"{cls_name}() got field {name!r} twice")
            values[name] = value
        # the class's `_defaults` (the same dict): torch.compile reaches a class attribute,
        # not a tensor default held in this closure
        defaults_now = type(self)._defaults
        missing = (
            [f for f in fields if f not in values and f not in defaults_now]
            if len(values) < len(fields)
            else None
        )
        if missing:  # worded as Python words it for a dataclass
            quoted = [repr(f) for f in missing]
            listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
            plural = "s" if len(missing) > 1 else ""
            raise TypeError(
                f"{cls_name}() missing {len(missing)} required positional argument{plural}: "
                f"{listed}"
            )
        custom = custom_setattr(type(self))
        given = {}
        plain = custom is None  # every value a tensor and no `__setattr__` of the class's own
        for name in fields:
            value = values.get(name, defaults_now.get(name))
            if value is not None:
                given[name] = value
                plain = plain and type(value) is torch.Tensor
        bs = [] if batch_size is None else batch_size
        if plain:  # the constructor validates the tensors as `set` would, in one pass
            td = TensorDict(given, batch_size=bs, device=device)
            object.__setattr__(self, "_tensordict", td)
        else:
            td = TensorDict(batch_size=bs, device=device)
            object.__setattr__(self, "_tensordict", td)
            for name, value in given.items():
                if custom is None:
                    self.set(name, value)
                else:  # the class's own __setattr__ sees the fields, as a dataclass's does
                    custom(self, name, value)
        if names is not None:
            td.names = names
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:  # as a dataclass does, after the fields are set
            post_init()

    # what `inspect.signature(cls)` shows: the fields, then batch_size, device and names
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(
            f,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=defaults[f] if f in defaults else inspect.Parameter.empty,
        )
        for f in fields
    ]
    params += [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
        for n in ("batch_size", "device", "names")
        if n not in shadowed
    ]
    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return __init__
