"""A distribution with all its mass on one value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch.distributions import Distribution, constraints

__all__ = ["Delta"]


def _split_shape(
    param_shape: torch.Size,
    batch_shape: torch.Size | Sequence[int] | None,
    event_shape: torch.Size | Sequence[int] | None,
) -> tuple[torch.Size, torch.Size]:
    """Batch and event shapes of a Delta, the missing one inferred from `param`."""
    batch = None if batch_shape is None else torch.Size(batch_shape)
    event = None if event_shape is None else torch.Size(event_shape)
    if not batch and not event:
        # upstream's convention: the last dimension is the event
        return param_shape[:-1], param_shape[-1:]
    if event is None:
        assert batch is not None
        return batch, param_shape[len(batch) :]
    if batch is None:
        return param_shape[: len(param_shape) - len(event)], event
    return batch, event


class Delta(Distribution):
    """A distribution with all its mass on `param`.

    `sample` and `rsample` return `param` (expanded to the
    sample shape; `rsample` keeps its gradient), and `mean`,
    `mode` and `deterministic_sample` return `param` itself.
    `log_prob` is `inf` (upstream's convention for a point mass) where
    a value matches `param` on every element of the event, within
    `|value - param| <= atol + rtol * |param|`, and `-inf` elsewhere. Its
    entropy is not defined (as upstream). This is td-nn's default
    `distribution_class`, which then copies its input to its output.

    Args:
        param: the value holding all the mass.
        atol: absolute tolerance of `log_prob`'s comparison.
        rtol: relative tolerance of `log_prob`'s comparison.
        batch_shape: the batch shape. When neither it nor `event_shape` is
            given (or both are empty), the last dimension of `param` is the
            event and the others the batch; when only one is given, the other
            is what remains of `param.shape`.
        event_shape: the shape of one value.
        validate_args: check that `param.shape == batch_shape + event_shape`
            and the values given to `log_prob`; `None` follows
            `torch.distributions.Distribution`'s global default.

    Raises:
        TypeError: if `param` is not a tensor.
        ValueError: if `atol` or `rtol` is negative, or (with validation)
            if the shapes do not split `param.shape`.

    Examples:
        >>> import torch
        >>> from td_distributions import Delta
        >>> dist = Delta(torch.zeros(4, 2))
        >>> dist.batch_shape, dist.event_shape
        (torch.Size([4]), torch.Size([2]))
        >>> dist = Delta(torch.tensor([1.0, 2.0]))
        >>> dist.sample((2,))
        tensor([[1., 2.],
                [1., 2.]])
        >>> dist.log_prob(torch.tensor([1.0, 2.0])), dist.log_prob(torch.tensor([1.0, 3.0]))
        (tensor(inf), tensor(-inf))
    """

    arg_constraints: ClassVar[dict[str, constraints.Constraint]] = {}
    has_rsample = True

    def __init__(
        self,
        param: torch.Tensor,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        batch_shape: torch.Size | Sequence[int] | None = None,
        event_shape: torch.Size | Sequence[int] | None = None,
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(param, torch.Tensor):
            raise TypeError(f"Delta expects param to be a torch.Tensor, got {type(param).__name__}")
        if atol < 0 or rtol < 0:
            raise ValueError(
                f"Delta needs atol >= 0 and rtol >= 0, got atol={atol!r}, rtol={rtol!r}"
            )
        batch, event = _split_shape(param.shape, batch_shape, event_shape)
        self.param = param
        self.atol = atol
        self.rtol = rtol
        super().__init__(batch_shape=batch, event_shape=event, validate_args=validate_args)
        if self._validate_args and batch + event != param.shape:
            raise ValueError(
                f"Delta got param of shape {list(param.shape)}, which is not "
                f"batch_shape {list(batch)} + event_shape {list(event)}: param.shape must "
                f"equal batch_shape + event_shape"
            )

    @constraints.dependent_property(is_discrete=False)
    def support(self) -> constraints.Constraint:
        return constraints.independent(constraints.real, len(self.event_shape))

    def update(self, param: torch.Tensor) -> None:
        """Replace `param`; the batch and event shapes stay as they are."""
        self.param = param

    def expand(self, batch_shape: torch.Size | Sequence[int], _instance: Any = None) -> Delta:
        new = self._get_checked_instance(Delta, _instance)
        batch_shape = torch.Size(batch_shape)
        new.param = self.param.expand(batch_shape + self.event_shape)
        new.atol, new.rtol = self.atol, self.rtol
        super(Delta, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _tolerance(self) -> torch.Tensor | float:
        """`atol + rtol * |param|`, kept while `param` is the same, unchanged tensor."""
        param = self.param
        key = (param, param._version, self.atol, self.rtol)
        cached = self.__dict__.get("_tol")
        if cached is None or cached[0] is not key[0] or cached[1:] != key[1:]:
            with torch.no_grad():
                tol = param.abs() * self.rtol + self.atol if self.rtol else None
            cached = self.__dict__["_tol"] = (*key, tol)
        return cached[4] if cached[4] is not None else self.atol

    def _matches(self, value: torch.Tensor) -> torch.Tensor:
        close = (value - self.param).abs() <= self._tolerance()
        if self.event_shape:
            close = close.flatten(close.dim() - len(self.event_shape)).all(-1)
        return close

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """`inf` where `value` matches `param` (whole event), `-inf` elsewhere."""
        if self._validate_args:
            self._validate_sample(value)
        dtype = value.dtype if value.is_floating_point() else self.param.dtype
        if not dtype.is_floating_point:
            dtype = torch.get_default_dtype()
        match = self._matches(value)
        return torch.full(match.shape, -math.inf, dtype=dtype, device=match.device).masked_fill_(
            match, math.inf
        )

    def rsample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """`param` expanded to `sample_shape + param.shape` (a view, with gradient)."""
        param = self.param  # (ints as varargs: expand parses them twice as fast as a Size)
        shape = (*sample_shape, *param.shape) if sample_shape else param.shape
        return param.expand(*shape) if shape else param.expand(shape)

    def sample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """`param` expanded to `sample_shape + param.shape` (a view, detached)."""
        return self.rsample(sample_shape).detach()

    @property
    def mode(self) -> torch.Tensor:
        return self.param

    @property
    def mean(self) -> torch.Tensor:
        return self.param

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.param

    @property
    def variance(self) -> torch.Tensor:
        return torch.zeros_like(self.param)

    def entropy(self) -> torch.Tensor:
        """Not defined, as upstream: the differential entropy of a point mass is `-inf`.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            "Delta has no entropy (a point mass has differential entropy -inf); "
            "leave it out of entropy bonuses"
        )
