"""The ``dict`` surface beyond get/set (``popitem``, ``clear``, ``fromkeys``, ``sorted_keys``, ``filter_empty_``, ...)."""

from __future__ import annotations

__all__ = ["MappingMixin"]


class MappingMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
