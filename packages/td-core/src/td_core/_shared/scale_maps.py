"""Maps from unconstrained reals to positive reals, for scale parameters.

Shared by td-nn and td-distributions (`NormalParamWrapper`,
`AddStateIndependentNormalScale`). `mappings(name)` turns a name such as
`"biased_softplus_1.0"` into the callable.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["biased_softplus", "inv_softplus", "expln", "mappings", "add_custom_mapping"]


def inv_softplus(bias: float | torch.Tensor) -> float | torch.Tensor:
    """Inverse of softplus: `x` such that `softplus(x) == bias` (`bias > 0`).

    Examples:
        >>> import torch
        >>> from td_core import inv_softplus
        >>> round(float(torch.nn.functional.softplus(torch.tensor(inv_softplus(2.0)))), 6)
        2.0
    """
    if isinstance(bias, torch.Tensor):
        return bias.expm1().clamp_min(1e-30).log()
    if bias <= 0:
        raise ValueError(f"inv_softplus is defined for positive values only, got {bias!r}")
    return math.log(math.expm1(bias))


class biased_softplus(nn.Module):
    """Softplus shifted so that `f(0) == bias` and `f(x) > min_val` everywhere.

    Args:
        bias: the value at 0; must exceed `min_val`.
        min_val: the lower bound of the output.
    """

    def __init__(self, bias: float, min_val: float = 0.01) -> None:
        super().__init__()
        if bias <= min_val:
            raise ValueError(
                f"biased_softplus needs bias > min_val, got bias={bias!r}, min_val={min_val!r}"
            )
        self.bias = float(inv_softplus(bias - min_val))
        self.min_val = min_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.softplus(x + self.bias) + self.min_val

    def extra_repr(self) -> str:
        return f"bias={self.bias:.4f}, min_val={self.min_val}"


def expln(x: torch.Tensor) -> torch.Tensor:
    """`exp(x)` for `x <= 0` and `log1p(x) + 1` above: positive, smooth, slow-growing."""
    return torch.where(x <= 0, x.clamp_max(0).exp(), x.clamp_min(0).log1p() + 1)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


_FIXED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softplus": nn.functional.softplus,
    "exp": torch.exp,
    "relu": torch.relu,
    "expln": expln,
    "none": _identity,
}


# names registered with add_custom_mapping: a registry, like torch's, consulted before the fixed names
_CUSTOM: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}


def add_custom_mapping(name: str, mapping: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Register `mapping` under `name` so that `mappings(name)` returns it.

    A registered name replaces a built-in one of the same name.

    Args:
        name: the name, e.g. for `NormalParamExtractor(scale_mapping=name)`.
        mapping: a function from a tensor to a tensor of the same shape.

    Raises:
        TypeError: if `name` is not a str or `mapping` is not callable.

    Examples:
        >>> import torch
        >>> from td_core import add_custom_mapping, mappings
        >>> add_custom_mapping("square", torch.square)
        >>> mappings("square")(torch.tensor(3.0))
        tensor(9.)
    """
    if not isinstance(name, str):
        raise TypeError(f"add_custom_mapping: name must be a str, got {name!r}")
    if not callable(mapping):
        raise TypeError(f"add_custom_mapping: mapping must be callable, got {mapping!r}")
    _CUSTOM[name] = mapping


def mappings(key: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The positive mapping called `key`.

    Known names: `softplus`, `exp`, `relu`, `expln`, `none`,
    `biased_softplus` (bias 1.0), `biased_softplus_{bias}` and
    `biased_softplus_{bias}_{min_val}`.

    Examples:
        >>> import torch
        >>> from td_core import mappings
        >>> float(mappings("biased_softplus_2.0")(torch.zeros(())))
        2.0
    """
    if key in _CUSTOM:
        return _CUSTOM[key]
    if key in _FIXED:
        return _FIXED[key]
    if key == "biased_softplus" or key.startswith("biased_softplus_"):
        parts = key.split("_")[2:]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            values = []
        if len(parts) > 2 or len(values) != len(parts):
            raise ValueError(
                f"cannot parse mapping {key!r}: expected 'biased_softplus_<bias>[_<min_val>]'"
            )
        return biased_softplus(*values) if values else biased_softplus(1.0)
    known = ", ".join(sorted([*_FIXED, *_CUSTOM, "biased_softplus_<bias>[_<min_val>]"]))
    raise KeyError(f"unknown mapping {key!r}; known mappings: {known}")
