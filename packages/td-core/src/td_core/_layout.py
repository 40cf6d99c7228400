"""Batch-dim rearrangements beyond views (``repeat``, ``tile``, ``flip``, ``narrow``, ``movedim``, ``pad``, ``new_*``)."""

from __future__ import annotations

__all__ = ["LayoutMixin"]


class LayoutMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
