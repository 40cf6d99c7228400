"""Masked and indexed reads and writes (``where``, ``masked_fill``, ``get_at``, ``set_at_``, ``gather``, ...)."""

from __future__ import annotations

__all__ = ["MaskedMixin"]


class MaskedMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
