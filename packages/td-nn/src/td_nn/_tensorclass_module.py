"""Modules typed by tensorclasses: `TensorClassModuleBase[In, Out]` and its TensorDict wrapper."""

from __future__ import annotations

import typing
from typing import Any, Generic, TypeVar

from torch import nn

from td_core import NestedKey, TensorDictBase, is_tensorclass
from td_nn._base import TensorDictModuleBase

__all__ = ["TensorClassModuleBase", "TensorClassModuleWrapper"]

InputClass = TypeVar("InputClass")
OutputClass = TypeVar("OutputClass")


class TensorClassModuleBase(nn.Module, Generic[InputClass, OutputClass]):
    """Base of modules that take one tensorclass (or tensor) and return another.

    Subclass `TensorClassModuleBase[In, Out]` and write `forward`; the
    subscript sets `input_type` and `output_type`, so a type checker knows
    both, and `as_td_module` gives a TensorDict module.

    Raises:
        ValueError: when subclassed with an empty subscript.

    Examples:
        >>> import torch
        >>> from td_core import TensorClass, TensorDict
        >>> from td_nn import TensorClassModuleBase
        >>> class In(TensorClass):
        ...     x: torch.Tensor
        >>> class Out(TensorClass):
        ...     y: torch.Tensor
        >>> class Double(TensorClassModuleBase[In, Out]):
        ...     def forward(self, data: In) -> Out:
        ...         return Out(y=data.x * 2, batch_size=data.batch_size)
        >>> Double()(In(x=torch.ones(2), batch_size=[2])).y
        tensor([2., 2.])
        >>> Double().as_td_module()(TensorDict(x=torch.ones(2), batch_size=[2]))["y"]
        tensor([2., 2.])
    """

    input_type: type[Any]
    output_type: type[Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is TensorClassModuleBase:
                args = typing.get_args(base)
                if not args:
                    raise ValueError("Generic input/output types not set in TensorClassModuleBase")
                cls.input_type, cls.output_type = args

    def forward(self, x: InputClass) -> OutputClass:
        """Compute the output; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def __call__(self, x: InputClass) -> OutputClass:
        return super().__call__(x)

    def as_td_module(self) -> TensorClassModuleWrapper:
        """This module as a `TensorClassModuleWrapper` (TensorDict in, TensorDict out).

        Raises:
            ValueError: if `input_type`/`output_type` are unset or not tensorclasses.
        """
        in_type = getattr(self, "input_type", None)
        out_type = getattr(self, "output_type", None)
        if not (isinstance(in_type, type) and isinstance(out_type, type)):
            raise ValueError(
                f"Generic input/output types not set in TensorClassModuleBase: subclass "
                f"TensorClassModuleBase[InputClass, OutputClass] to convert {type(self).__name__}"
            )
        if not (is_tensorclass(in_type) and is_tensorclass(out_type)):
            raise ValueError(
                "Only TensorClassModuleBase implementations with both input and output type as "
                "TensorClass can be converted to TensorDictModule"
            )
        return TensorClassModuleWrapper(self)


def _field_keys(cls: type) -> list[NestedKey]:
    """The fields of a tensorclass as keys; fields that are tensorclasses give nested keys."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references
        hints = {}
    keys: list[NestedKey] = []
    for name in cls._fields:  # type: ignore[attr-defined]
        sub = hints.get(name)
        if isinstance(sub, type) and is_tensorclass(sub):
            keys += [(name, *((k,) if isinstance(k, str) else k)) for k in _field_keys(sub)]
        else:
            keys.append(name)
    return keys


class TensorClassModuleWrapper(TensorDictModuleBase):
    """A `TensorClassModuleBase` seen as a TensorDict module.

    The input TensorDict is converted to the input class (entries that are not
    fields are ignored), the module runs, and its output comes back as a NEW
    TensorDict of the output fields (the input is not written to).

    Args:
        module: the module; its input and output types must be tensorclasses.
    """

    _native_call = True

    def __init__(self, module: TensorClassModuleBase[Any, Any]) -> None:
        super().__init__()
        self.training = module.training
        self.tc_module = module
        self.in_keys = _field_keys(module.input_type)
        self.out_keys = _field_keys(module.output_type)

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        """Convert, call the module, and return its output as a TensorDict."""
        if args or kwargs:
            raise TypeError(
                f"TensorClassModuleWrapper takes one TensorDict, got extra arguments "
                f"{len(args)} positional and {sorted(kwargs)}"
            )
        in_type = self.tc_module.input_type
        fields = set(in_type._fields)
        extra = [k for k in tensordict.keys() if k not in fields]
        if extra:
            tensordict = tensordict.exclude(*extra)
        return self.tc_module(in_type.from_tensordict(tensordict)).to_tensordict()
