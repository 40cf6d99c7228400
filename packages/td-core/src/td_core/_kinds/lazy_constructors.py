"""`LazyStackedTensorDict`'s alternate constructors (`from_dict`, `from_module`, ...).

`from_dict` builds one member per mapping; the module constructors give what
`TensorDict`'s give (a lazy stack of modules is `from_modules(...,
lazy_stack=True)`), as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from td_core._core.extensions import delegate
from td_core._kinds.dense import TensorDict

__all__ = ["LazyConstructorsMixin"]


class LazyConstructorsMixin:
    """The alternate constructors of `td_core.LazyStackedTensorDict`."""

    __slots__ = ()

    @classmethod
    def from_dict(  # one mapping per member, as upstream's lazy from_dict
        cls: Any,
        input_dict: Sequence[Any] | Mapping[str, Any],
        batch_size: Any = None,
        device: Any = None,
        *,
        batch_dims: int | None = None,
        stack_dim: int = 0,
    ) -> Any:
        """A lazy stack with one member per mapping (`TensorDict.from_dict` of each).

        `input_dict` is a list of mappings, or a mapping `{"0": ..., "1": ...}`
        as `to_dict()` of a lazy stack gives. `batch_size` and `batch_dims`
        are the members' (without the stack dim).
        """
        if isinstance(input_dict, Mapping):
            if not all(str(i) in input_dict for i in range(len(input_dict))):
                raise KeyError(
                    f"LazyStackedTensorDict.from_dict: a mapping input needs the keys '0' to "
                    f"'{len(input_dict) - 1}' (one per member), got {sorted(input_dict)}"
                )
            items = [input_dict[str(i)] for i in range(len(input_dict))]
        else:
            items = list(input_dict)
        members = [
            TensorDict.from_dict(item, batch_size, device, batch_dims=batch_dims) for item in items
        ]
        return cls(*members, stack_dim=stack_dim)

    @staticmethod
    def from_module(
        module: Any,
        as_module: bool = False,
        lock: bool = True,
        use_state_dict: bool = False,
        *,
        filter_empty: bool = True,
    ) -> Any:
        """The parameters and buffers of `module`: a TensorDict, as upstream (see `from_module`)."""
        return delegate(TensorDict.from_module, locals())

    @staticmethod
    def from_modules(*modules: Any, **kwargs: Any) -> Any:
        """The stacked parameters of several modules (see `td_core.from_modules`)."""
        return TensorDict.from_modules(*modules, **kwargs)

    @staticmethod
    def from_remote_init(
        src: int, group: Any = None, device: Any = None, use_broadcast: bool = False
    ) -> TensorDict:
        """Receive a TensorDict sent with `init_remote` (see `TensorDict.from_remote_init`)."""
        return TensorDict.from_remote_init(
            src, group=group, device=device, use_broadcast=use_broadcast
        )
