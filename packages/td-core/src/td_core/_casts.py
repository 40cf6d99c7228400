"""Dtype casts (``float32()``, ``bfloat16()``, ``type()``, ...): one table, one implementation."""

from __future__ import annotations

__all__ = ["CastMixin"]


class CastMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
