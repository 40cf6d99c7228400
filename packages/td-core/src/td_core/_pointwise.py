"""Pointwise math: one table of ops (name, torch function, in-place form), one implementation.

Out-of-place and in-place (``x_``) leaf-wise math with TensorDict, tensor or scalar
operands; ``torch._foreach_*`` where it applies, a per-leaf path under ``torch.func``
transforms and for dtypes ``_foreach`` refuses.
"""

from __future__ import annotations

__all__ = ["PointwiseMixin"]


class PointwiseMixin:
    """Methods of :class:`td_core.TensorDictBase` from this family."""

    __slots__ = ()
