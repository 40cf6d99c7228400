"""`mean` as a sum per leaf and one division for all of them.

On CPU, torch computes a float32 or float64 `mean` as `sum` followed by an in-place
division by the number of elements reduced (half-precision means accumulate
differently and are left to torch). Over many small leaves the division costs as
much as the sum, one dispatch each; here the sums are divided together by one
`torch._foreach_div_`, with the same bits as `Tensor.mean`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["SumThenDivide"]

Tensor = torch.Tensor
_SUMMED = frozenset((torch.float32, torch.float64))


class SumThenDivide:
    """A leaf op for `mean`: sums the leaves it can, to be divided by `finish()`.

    Args:
        sum_op: the leaf op of `sum` over the same dims.
        mean_op: the leaf op of `mean`, for the leaves left to torch (other dtypes,
            other devices, leaves that require grad).
        count: the number of elements each sum covers (`None`: every element of the leaf).
    """

    __slots__ = ("_count", "_mean", "_sum", "_sums")

    def __init__(
        self, sum_op: Callable[[Tensor], Any], mean_op: Callable[[Tensor], Any], count: int | None
    ) -> None:
        self._sum = sum_op
        self._mean = mean_op
        self._count = count
        self._sums: dict[tuple[torch.dtype, int], list[Tensor]] = {}

    def __call__(self, t: Tensor) -> Any:
        dtype = t.dtype
        if dtype not in _SUMMED or not t.is_cpu or t.requires_grad:
            return self._mean(t)
        out = self._sum(t)
        count = t.numel() if self._count is None else self._count
        group = self._sums.get((dtype, count))
        if group is None:
            self._sums[(dtype, count)] = [out]
        else:
            group.append(out)
        return out

    def finish(self) -> None:
        """Divide every sum handed out by its count, in place."""
        for (dtype, count), sums in self._sums.items():
            torch._foreach_div_(sums, torch.scalar_tensor(count, dtype=dtype))
        self._sums.clear()
