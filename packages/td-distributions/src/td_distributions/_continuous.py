"""Modules that turn network outputs into the `loc` and `scale` of a normal distribution."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from td_core import mappings

__all__ = ["AddStateIndependentNormalScale", "NormalParamExtractor", "NormalParamWrapper"]

ScaleMapping = str | Callable[[torch.Tensor], torch.Tensor]


class _ScaleShapeError(ValueError, RuntimeError):
    """`loc` does not end with the scale's shape (upstream raises `RuntimeError`)."""


def _resolve_mapping(scale_mapping: ScaleMapping) -> Callable[[torch.Tensor], torch.Tensor]:
    if isinstance(scale_mapping, str):
        return mappings(scale_mapping)
    if callable(scale_mapping):
        return scale_mapping
    raise TypeError(
        f"scale_mapping must be a mapping name such as 'biased_softplus_1.0' or a callable, "
        f"got {scale_mapping!r}"
    )


def _check_lb(scale_lb: float) -> float:
    if not isinstance(scale_lb, (int, float)) or isinstance(scale_lb, bool) or scale_lb < 0:
        raise ValueError(f"scale_lb must be a number >= 0, got {scale_lb!r}")
    return float(scale_lb)


def _split_loc_scale(
    tensor: torch.Tensor, mapping: Callable[[torch.Tensor], torch.Tensor], scale_lb: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0:
        raise TypeError(
            f"expected a tensor with at least one dimension to split into loc and scale, "
            f"got {tensor!r}"
        )
    size = tensor.shape[-1]
    if size % 2:
        raise ValueError(
            f"cannot split the last dimension of a tensor of shape {list(tensor.shape)} into "
            f"loc and scale: its size ({size}) must be even"
        )
    loc, raw = tensor.split(size // 2, -1)
    return loc, mapping(raw).clamp_min(scale_lb)


class NormalParamExtractor(nn.Module):
    """Split the last dimension of a tensor into the `loc` and a positive `scale` of a normal.

    The first half of the last dimension is `loc`; the second half goes
    through `scale_mapping` and is clamped to at least `scale_lb`.
    `module(x, *others)` returns `(loc, scale, *others)`, so it can follow a
    module that returns several tensors (an RNN's output and hidden state).

    Args:
        scale_mapping: a name understood by `td_core.mappings`
            (`"biased_softplus_1.0"`, `"softplus"`, `"exp"`, `"relu"`,
            `"expln"`, `"none"`...) or a callable.
        scale_lb: the smallest scale returned.

    Raises:
        ValueError: when called on a tensor whose last dimension is odd (upstream
            gives `loc` one element more than `scale` there).

    Examples:
        >>> import torch
        >>> from td_distributions import NormalParamExtractor
        >>> loc, scale = NormalParamExtractor()(torch.zeros(3, 4))
        >>> loc.shape, scale.shape, scale[0, 0].item()
        (torch.Size([3, 2]), torch.Size([3, 2]), 1.0)
    """

    def __init__(
        self, scale_mapping: ScaleMapping = "biased_softplus_1.0", scale_lb: float = 1e-4
    ) -> None:
        super().__init__()
        self.scale_mapping = _resolve_mapping(scale_mapping)
        self.scale_lb = _check_lb(scale_lb)

    def forward(self, tensor: torch.Tensor, *others: Any) -> tuple[Any, ...]:
        loc, scale = _split_loc_scale(tensor, self.scale_mapping, self.scale_lb)
        return (loc, scale, *others)

    def extra_repr(self) -> str:
        return f"scale_lb={self.scale_lb}"


class NormalParamWrapper(nn.Module):
    """Run `module`, then split the last dimension of its (first) output into `loc` and `scale`.

    Upstream tensordict removed this class (it now raises on use) in favour of
    `nn.Sequential(module, NormalParamExtractor())`; it is kept here because
    the tensordict.nn documentation still builds models with it. When
    `module` returns a tuple, the first element is split and the others are
    returned after `scale`: `(loc, scale, *others)`.

    Args:
        module: the wrapped module (stored as `operator`, as upstream did).
        scale_mapping: as in `NormalParamExtractor`.
        scale_lb: as in `NormalParamExtractor`.

    Raises:
        TypeError: if `module` is not callable.
        ValueError: when the output's last dimension is odd.

    Examples:
        >>> import torch
        >>> from td_distributions import NormalParamWrapper
        >>> net = NormalParamWrapper(torch.nn.GRUCell(4, 8))
        >>> loc, scale = net(torch.randn(3, 4), torch.randn(3, 8))
        >>> loc.shape, scale.shape, bool((scale > 0).all())
        (torch.Size([3, 4]), torch.Size([3, 4]), True)
    """

    def __init__(
        self,
        module: nn.Module,
        scale_mapping: ScaleMapping = "biased_softplus_1.0",
        scale_lb: float = 1e-4,
    ) -> None:
        super().__init__()
        if not callable(module):
            raise TypeError(f"NormalParamWrapper expects a module or callable, got {module!r}")
        self.operator = module
        self.scale_mapping = _resolve_mapping(scale_mapping)
        self.scale_lb = _check_lb(scale_lb)

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        out = self.operator(*args, **kwargs)
        first, others = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, ())
        loc, scale = _split_loc_scale(first, self.scale_mapping, self.scale_lb)
        return (loc, scale, *others)

    def extra_repr(self) -> str:
        return f"scale_lb={self.scale_lb}"


class AddStateIndependentNormalScale(nn.Module):
    """Return the input as `loc` together with a learned scale that does not depend on it.

    The module holds `state_independent_scale`, a tensor of shape
    `scale_shape` (a parameter, or a buffer with `make_param=False`). Called
    as `module(loc, *others)` it returns `(loc, scale, *others)` where
    `scale = scale_mapping(state_independent_scale)`, clamped to at least
    `scale_lb` and expanded to the shape of `loc`.

    Args:
        scale_shape: the shape of the learned scale; it must equal the trailing
            dimensions of `loc`. An `int` means `(scale_shape,)`; `None`
            means one scalar for every element.
        scale_mapping: as in `NormalParamExtractor` (default `"exp"`,
            so that `init_value=0.0` gives a scale of 1).
        scale_lb: the smallest scale returned.
        device: where to create the scale.
        make_param: register the scale as a trainable parameter (else a buffer).
        init_value: initial value of the scale before the mapping.

    Raises:
        ValueError: if `scale_shape` has a negative entry, or (when called) if
            `loc` does not end with `scale_shape`; the latter is also a
            `RuntimeError`, the class upstream raises.

    Examples:
        >>> import torch
        >>> from td_distributions import AddStateIndependentNormalScale
        >>> module = AddStateIndependentNormalScale(4)
        >>> loc, scale = module(torch.zeros(3, 4))
        >>> scale.shape, scale[0, 0].item(), [n for n, _ in module.named_parameters()]
        (torch.Size([3, 4]), 1.0, ['state_independent_scale'])
    """

    def __init__(
        self,
        scale_shape: torch.Size | int | tuple[int, ...] | None = None,
        *,
        scale_mapping: ScaleMapping = "exp",
        scale_lb: float = 1e-4,
        device: torch.device | str | None = None,
        make_param: bool = True,
        init_value: float = 0.0,
    ) -> None:
        super().__init__()
        if scale_shape is None:
            scale_shape = ()
        elif isinstance(scale_shape, int):
            scale_shape = (scale_shape,)
        shape = torch.Size(scale_shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"scale_shape must have non-negative sizes, got {list(shape)}")
        self.scale_shape = shape
        self.scale_mapping = _resolve_mapping(scale_mapping)
        self.scale_lb = _check_lb(scale_lb)
        value = torch.full(shape, float(init_value), device=device)
        if make_param:
            self.state_independent_scale = nn.Parameter(value)
        else:
            self.register_buffer("state_independent_scale", value)

    def forward(self, loc: torch.Tensor, *others: Any) -> tuple[Any, ...]:
        ndim = len(self.scale_shape)
        if loc.dim() < ndim or loc.shape[loc.dim() - ndim :] != self.scale_shape:
            raise _ScaleShapeError(
                f"loc of shape {list(loc.shape)} does not end with the scale shape "
                f"{list(self.scale_shape)}: its last {ndim} dimension(s) must equal it"
            )
        scale = self.scale_mapping(self.state_independent_scale).clamp_min(self.scale_lb)
        return (loc, scale.expand_as(loc), *others)

    def extra_repr(self) -> str:
        return f"scale_shape={tuple(self.scale_shape)}, scale_lb={self.scale_lb}"
