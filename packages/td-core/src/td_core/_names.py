"""Named batch dims (``names``, ``refine_names``, ``rename``)."""

from __future__ import annotations

__all__ = ["NamesMixin"]


class NamesMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
