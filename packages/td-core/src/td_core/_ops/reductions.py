"""Reductions over batch dims (`sum`, `mean`, `std`, `max`, ...): the public methods.

Each method is one line calling `_run`, the one body they share, with its row of the
table in `reduce_engine.py`; the module doc there says how `dim`, `keepdim` and
`reduce` are read.
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.utils import NO_DEFAULT
from td_core._ops.reduce_engine import (
    REDUCTIONS,
    Dim,
    KeyTransform,
    bool_over_leaves,
    bool_reduction,
    reduction,
)

__all__ = ["ReductionMixin"]

Tensor = torch.Tensor
_R = REDUCTIONS


class ReductionMixin(TensorDictContract):
    """Methods of `td_core.TensorDictBase` from this family."""

    __slots__ = ()

    def sum(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
        key_transform: KeyTransform = None,
    ) -> Any:
        """Sum of each leaf over `dim` (see the module doc for `dim` and `reduce`).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.ones(4, 3)}, [4, 3])
            >>> td.sum(0)["a"].tolist()
            [4.0, 4.0, 4.0]
            >>> td.sum(reduce=True).item()
            12.0
        """
        return _run(self, "sum", dim, keepdim, reduce, key_transform, dtype=dtype)

    def nansum(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Sum of each leaf over `dim`, NaNs counted as zero."""
        return _run(self, "nansum", dim, keepdim, reduce, dtype=dtype)

    def mean(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
        key_transform: KeyTransform = None,
    ) -> Any:
        """Mean of each leaf over `dim` (floating-point leaves, or pass `dtype`)."""
        return _run(self, "mean", dim, keepdim, reduce, key_transform, dtype=dtype)

    def nanmean(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Mean of each leaf over `dim`, ignoring NaNs."""
        return _run(self, "nanmean", dim, keepdim, reduce, dtype=dtype)

    def prod(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Product of each leaf over `dim`."""
        return _run(self, "prod", dim, keepdim, reduce, dtype=dtype)

    def std(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        correction: int = 1,
        reduce: bool | None = None,
        key_transform: KeyTransform = None,
    ) -> Any:
        """Standard deviation of each leaf over `dim` (`correction=0`: the biased one)."""
        return _run(self, "std", dim, keepdim, reduce, key_transform, correction=correction)

    def var(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        correction: int = 1,
        reduce: bool | None = None,
        key_transform: KeyTransform = None,
    ) -> Any:
        """Variance of each leaf over `dim` (`correction=0`: the biased one)."""
        return _run(self, "var", dim, keepdim, reduce, key_transform, correction=correction)

    def max(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = False,
        *,
        reduce: bool | None = None,
        return_indices: bool = True,
    ) -> Any:
        """Maximum of each leaf; with a batch `dim`, `(values, indices)` as in `torch.max`.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.tensor([1.0, 3.0, 2.0])}, [3])
            >>> values, indices = td.max(0)
            >>> values["a"].item(), indices["a"].item()
            (3.0, 1)
        """
        return _run(self, "max", dim, keepdim, reduce, return_indices=return_indices)

    def min(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = False,
        *,
        reduce: bool | None = None,
        return_indices: bool = True,
    ) -> Any:
        """Minimum of each leaf; with a batch `dim`, `(values, indices)` as in `torch.min`."""
        return _run(self, "min", dim, keepdim, reduce, return_indices=return_indices)

    def amax(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = False,
        *,
        reduce: bool | None = None,
    ) -> Any:
        """Maximum of each leaf over `dim` (values only)."""
        return _run(self, "amax", dim, keepdim, reduce)

    def amin(
        self,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = False,
        *,
        reduce: bool | None = None,
    ) -> Any:
        """Minimum of each leaf over `dim` (values only)."""
        return _run(self, "amin", dim, keepdim, reduce)

    def logsumexp(self, dim: Dim = None, keepdim: bool = False, *, out: Any = None) -> Any:
        """`log(sum(exp(leaf)))` over batch `dim` (default: every batch dim).

        With `out` (a TensorDict) the result is written into it: in place into the entries
        it has, added where it lacks them (an empty `out` takes the whole result).
        """
        result = reduction(self, _R["logsumexp"], dim, keepdim)
        return result if out is None else out.update(result, inplace=True)

    def quantile(
        self,
        q: float | Tensor,
        dim: Dim = NO_DEFAULT,
        keepdim: bool = NO_DEFAULT,
        *,
        interpolation: str = "linear",
        reduce: bool | None = None,
        key_transform: KeyTransform = None,
    ) -> Any:
        """The `q`-th quantile of each leaf over `dim` (a tensor `q` adds leading dims)."""
        return _run(
            self, "quantile", dim, keepdim, reduce, key_transform, q, interpolation=interpolation
        )

    def cummax(self, dim: int, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        """Running maximum along batch `dim`: `(values, indices)` as in `torch.cummax`."""
        return _run(self, "cummax", dim, False, reduce, return_indices=return_indices)

    def cummin(self, dim: int, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        """Running minimum along batch `dim`: `(values, indices)` as in `torch.cummin`."""
        return _run(self, "cummin", dim, False, reduce, return_indices=return_indices)

    def softmax(self, dim: int, dtype: torch.dtype | None = None) -> Any:
        """Softmax of each leaf along batch `dim`."""
        return _run(self, "softmax", dim, False, None, dtype=dtype)

    def norm(
        self,
        *,
        out: Any = None,
        dtype: torch.dtype | None = None,
        key_transform: KeyTransform = None,
    ) -> Any:
        """The 2-norm of each leaf over all its elements (`batch_size=[]`)."""
        result = _run(self, "norm", NO_DEFAULT, False, None, key_transform, dtype=dtype)
        return result if out is None else out.update(result, inplace=True)

    def all(self, dim: Dim = None) -> Any:
        """`True` if every element of every tensor leaf is true; per batch `dim` with a dim."""
        if dim is None:  # (the usual call: straight to the walk over the leaves)
            return bool_over_leaves(self, False)
        return bool_reduction(self, _R["all"], dim)

    def any(self, dim: Dim = None) -> Any:
        """`True` if any element of any tensor leaf is true; per batch `dim` with a dim."""
        if dim is None:
            return bool_over_leaves(self, True)
        return bool_reduction(self, _R["any"], dim)


def _run(
    td: Any,
    name: str,
    dim: Any,
    keepdim: Any,
    reduce: bool | None,
    key_transform: KeyTransform = None,
    *args: Any,
    correction: int = 1,
    **options: Any,
) -> Any:
    """The body of the reduction methods: `reduction` with row `name` and the options given.

    Options that are `None` are left out (the torch op's default applies), and so is
    `correction=1` (torch's default): `t.std(d)` and `t.std(d, correction=1)` agree, but
    the keyword picks a slower overload (about 1.4x per call on small leaves), which
    shows over many leaves.
    """
    kwargs = {k: v for k, v in options.items() if v is not None}
    if correction != 1:
        kwargs["correction"] = correction
    return reduction(
        td, _R[name], dim, keepdim, *args, reduce=reduce, key_transform=key_transform, **kwargs
    )
