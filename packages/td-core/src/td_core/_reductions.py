"""Reductions over batch dims (``sum``, ``mean``, ``std``, ``max``, ...): one table, one implementation."""

from __future__ import annotations

__all__ = ["ReductionMixin"]


class ReductionMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
