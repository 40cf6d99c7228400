"""How a `LazyStackedTensorDict` prints: common fields, then each member's exclusive ones.

A common tensor entry prints as the stacked tensor would (its shape from
`get_item_shape`, so ragged entries print without being stacked).
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.traverse import is_td
from td_core._io.repr import described_repr, fields_repr, leaf_repr, td_repr
from td_core._io.repr_compact import with_compact

__all__ = ["LazyReprMixin"]

Tensor = torch.Tensor


class LazyReprMixin:
    """`__repr__` of `td_core.LazyStackedTensorDict`."""

    __slots__ = ()
    tensordicts: list[Any]
    stack_dim: int

    @with_compact
    def __repr__(self: Any) -> str:
        fields = [(k, self._render(k)) for k in self._keys_str()]
        # each member with keys of its own: `i ->`, then its entries one level deeper
        exclusive = [
            f"{i} ->\n"
            + _indent(",\n".join(f"{k}: {self._member_render(td.get(k))}" for k in keys))
            for i, (td, keys) in enumerate(zip(self.tensordicts, self.exclusive_keys()))
            if keys
        ]
        extra = {
            "exclusive_fields": fields_repr("exclusive_fields", [])
            if not exclusive
            else "exclusive_fields={\n" + _indent(",\n".join(exclusive)) + "}"
        }
        return td_repr(self, extra=extra, fields=fields, after={"stack_dim": self.stack_dim})

    def _render(self: Any, key: str) -> str:
        first = self.tensordicts[0]._get_str(key)
        if is_td(first):
            return repr(self._get_str(key))
        shape = self.get_item_shape(key)
        if isinstance(first, Tensor):  # a stacked read is a plain tensor, whatever the members hold
            return described_repr("Tensor", shape, first.device, first.dtype, first.is_shared())
        return leaf_repr(self._get_str(key))

    def _member_render(self: Any, value: Any) -> str:
        return repr(value) if is_td(value) else leaf_repr(value)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
