"""First-class dims (`functorch.dim`), recognised by their type so td never imports them.

`td[d0]` with `d0, = functorch.dim.dims(1)` binds the first batch dim: each tensor
leaf becomes a `functorch.dim.Tensor` (not a `torch.Tensor`) and the batch size
loses that dim. `to_module` writes such leaves into a module, whose forward then
runs over the bound dim (an ensemble without `vmap`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_first_class_dim", "is_first_class_tensor"]

_MODULE = "functorch.dim"


def is_first_class_dim(item: Any) -> bool:
    """Whether `item` is a first-class dim (`functorch.dim.dims()`), as an index item."""
    cls = type(item)
    return cls.__name__ == "Dim" and cls.__module__ == _MODULE


def is_first_class_tensor(value: Any) -> bool:
    """Whether `value` is a tensor indexed by first-class dims (`functorch.dim.Tensor`)."""
    cls = type(value)
    return cls.__module__ == _MODULE and cls.__name__ in ("Tensor", "_Tensor")
