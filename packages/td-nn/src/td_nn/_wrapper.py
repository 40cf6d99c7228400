"""`TensorDictModuleWrapper`: change a module's call, keep everything else."""

from __future__ import annotations

from typing import Any

from td_core import NestedKey
from td_nn._base import TensorDictModuleBase, indent, wrapped_attribute

__all__ = ["TensorDictModuleWrapper"]


def _of_td_module(name: str) -> property:
    """A property that reads and writes the attribute `name` of the wrapped `td_module`."""
    return property(
        lambda self: getattr(self.td_module, name),
        lambda self, value: setattr(self.td_module, name, value),
        doc=f"The `{name}` of the wrapped `td_module` (setting it sets theirs).",
    )


class TensorDictModuleWrapper(TensorDictModuleBase):
    """Behave like `td_module` except for what a subclass overrides (usually `forward`).

    `in_keys`, `out_keys` and any attribute the wrapper lacks are those of
    `td_module`; its parameters are the wrapper's.

    Args:
        td_module: the module to wrap.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModule, TensorDictModuleWrapper
        >>> class TimesTen(TensorDictModuleWrapper):
        ...     def forward(self, tensordict):
        ...         tensordict = self.td_module(tensordict)
        ...         return tensordict.set("y", tensordict["y"] * 10)
        >>> wrapped = TimesTen(TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"]))
        >>> wrapped.in_keys, wrapped.out_keys
        (['x'], ['y'])
        >>> wrapped(TensorDict(x=torch.zeros(2), batch_size=[2]))["y"]
        tensor([10., 10.])
    """

    _native_call = True

    def __init__(self, td_module: TensorDictModuleBase) -> None:
        super().__init__()
        if not hasattr(td_module, "in_keys") or not hasattr(td_module, "out_keys"):
            raise TypeError(
                f"TensorDictModuleWrapper wraps a module with in_keys and out_keys, got "
                f"{type(td_module).__name__}"
            )
        self.td_module = td_module

    in_keys = _of_td_module("in_keys")
    out_keys = _of_td_module("out_keys")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped module."""
        return self.td_module(*args, **kwargs)

    def select_out_keys(self, *out_keys: NestedKey) -> TensorDictModuleWrapper:
        """Select the outputs of the wrapped module (see `TensorDictModuleBase.select_out_keys`)."""
        self.td_module.select_out_keys(*out_keys)
        return self

    def reset_out_keys(self) -> TensorDictModuleWrapper:
        """Undo `select_out_keys` on the wrapped module."""
        self.td_module.reset_out_keys()
        return self

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError as missing:
            return wrapped_attribute(self, name, "td_module", missing)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(\n    td_module={indent(repr(self.td_module))})"
