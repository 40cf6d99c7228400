"""Conversion to and from other containers (numpy, lists, namedtuples, dataclasses, pytrees, ``from_any``)."""

from __future__ import annotations

__all__ = ["ConvertMixin"]


class ConvertMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
