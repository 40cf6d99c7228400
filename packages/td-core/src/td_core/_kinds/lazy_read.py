"""Reading a `LazyStackedTensorDict`'s entries without stacking them.

A leaf whose shape differs between the members (a ragged leaf) cannot be
stacked into one tensor: `get` reads it as a list, a padded tensor or a
nested tensor, and `get_item_shape` gives its shape with `-1` for the
ragged dims.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.flags import get_defaults_to_none
from td_core._core.traverse import is_td
from td_core._core.utils import NO_DEFAULT
from td_core.errors import DimError, KeyNotFoundError

if TYPE_CHECKING:
    from td_core._kinds.base import TensorDictBase

__all__ = ["LazyReadMixin", "pad_tensors"]

Tensor = torch.Tensor
_ABSENT = object()


class LazyReadMixin:
    """The ragged-leaf reads of `get` (its keywords), `get_nestedtensor` and `get_item_shape`."""

    __slots__ = ()

    if TYPE_CHECKING:
        tensordicts: list[TensorDictBase]
        stack_dim: int

        def exclusive_keys(self) -> list[list[str]]: ...

    def _get_ragged(
        self,
        key: Any,
        default: Any,
        *,
        as_list: bool,
        as_padded_tensor: bool,
        as_nested_tensor: bool,
        padding_side: str,
        layout: torch.layout | None,
        padding_value: float | int | bool,
    ) -> Any:
        """`get` with a ragged-read keyword (see `TensorDictBase.get`): the members' entries
        as a list, a padded tensor or a nested tensor, without stacking them."""
        if as_list + as_padded_tensor + as_nested_tensor > 1:
            raise TypeError(
                "get: as_list, as_padded_tensor and as_nested_tensor are exclusive; pass one of them"
            )
        if as_nested_tensor:
            return self.get_nestedtensor(key, default, layout=layout)
        # members read with the same keyword, so stacks of stacks give lists of lists
        # or padded tensors padded again
        values = [
            td.get(
                key,
                _ABSENT,
                as_list=as_list,
                as_padded_tensor=as_padded_tensor,
                padding_side=padding_side,
                padding_value=padding_value,
            )
            for td in self.tensordicts
        ]
        if any(v is _ABSENT for v in values):
            return super().get(key, default)  # type: ignore[misc]  # TensorDictBase.get  # the missing key's error, or default
        if as_list and all(isinstance(v, (Tensor, list)) for v in values):
            return values
        if not all(isinstance(v, Tensor) for v in values):
            return super().get(key, default)  # type: ignore[misc]  # TensorDictBase.get  # sub-TensorDicts and non-tensors stack as usual
        if as_list:
            return values
        return pad_tensors(values, padding_value, padding_side)

    def __contains__(self, key: object) -> bool:
        """Whether `key` is a key of the stack; a TensorDict: whether it is one of the members.

        A member is matched by identity (`td.clone()` is not in the stack).
        """
        if is_td(key):
            return any(key is td for td in self.tensordicts)
        return super().__contains__(key)  # type: ignore[misc]  # TensorDictBase.__contains__

    def get_nestedtensor(
        self, key: Any, default: Any = NO_DEFAULT, *, layout: torch.layout | None = None
    ) -> Any:
        """The members' entries at `key` as one nested tensor (ragged dims allowed).

        Args:
            default: returned when a member lacks `key`.
            layout: `torch.jagged` or `torch.strided` (the default).
        """
        if self.stack_dim != 0:
            raise DimError(
                "LazyStackedTensorDict.get_nestedtensor can only be called when the stack_dim "
                f"is 0. This stack has stack_dim={self.stack_dim}, and a nested tensor stacks "
                "along dim 0: read it with get(key, as_list=True) or get(key, as_padded_tensor=True)"
            )
        values = [td.get(key, _ABSENT) for td in self.tensordicts]
        if any(v is _ABSENT for v in values):
            if default is NO_DEFAULT and get_defaults_to_none():
                return None  # as get
            if default is NO_DEFAULT:
                raise KeyNotFoundError(
                    f"key {key!r} is not in every member of the lazy stack "
                    f"(exclusive keys: {self.exclusive_keys()})"
                )
            return default
        with warnings.catch_warnings():
            # ragged feature dims need the strided layout, which torch flags as a prototype
            warnings.filterwarnings(
                "ignore", message="The PyTorch API of nested tensors is in prototype"
            )
            return torch.nested.as_nested_tensor(values, layout=layout)

    def get_item_shape(self, key: Any) -> torch.Size:
        """The shape of the entry at `key` without stacking; ragged dims are -1.

        Where the members' entries do not even share their number of dims, the
        shape is `torch.Size([-1])` (as upstream): nothing of it is known.
        """
        shapes = []
        for td in self.tensordicts:
            v = td.get(key)
            # a tensorclass member reads a non-tensor entry as its value: the member's batch
            shapes.append(
                v.shape if isinstance(v, Tensor) else getattr(v, "batch_size", td.batch_size)
            )
        return _stacked_shape(shapes, self.stack_dim)


def pad_tensors(
    tensors: Sequence[Tensor], padding_value: float | int | bool = 0.0, padding_side: str = "right"
) -> Tensor:
    """Stack tensors of one rank but different shapes along a new first dim, padding each dim.

    Args:
        tensors: the tensors, at least one.
        padding_value: the value of the padding.
        padding_side: `"right"` pads after the values, `"left"` before.

    Raises:
        ValueError: if `padding_side` is neither, or the ranks differ.
    """
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    if len({t.ndim for t in tensors}) != 1:
        raise ValueError(
            f"cannot pad tensors of different ranks {[t.ndim for t in tensors]} to one shape"
        )
    shape = [max(sizes) for sizes in zip(*(t.shape for t in tensors))]
    first = tensors[0]
    out = torch.full((len(tensors), *shape), padding_value, dtype=first.dtype, device=first.device)
    for i, t in enumerate(tensors):
        where: list[Any] = [i]
        for n, m in zip(t.shape, shape):
            where.append(slice(0, n) if padding_side == "right" else slice(m - n, m))
        out[tuple(where)] = t
    return out


def _stacked_shape(shapes: list[torch.Size], stack_dim: int) -> torch.Size:
    first = shapes[0]
    if any(len(s) != len(first) for s in shapes):
        return torch.Size([-1])  # not even the number of dims is shared: unknown, as upstream
    dims = [d if all(s[i] == d for s in shapes) else -1 for i, d in enumerate(first)]
    return torch.Size((*dims[:stack_dim], len(shapes), *dims[stack_dim:]))
