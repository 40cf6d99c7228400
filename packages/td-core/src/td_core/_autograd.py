"""Autograd and parameter views of the leaves (``data``, ``grad``, ``zero_grad``, ``backward``, ``param_count``, ``bytes``)."""

from __future__ import annotations

__all__ = ["AutogradMixin"]


class AutogradMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
