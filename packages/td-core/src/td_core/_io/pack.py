"""`TensorDict.pack` and `PackLayout`: every leaf in the columns of one feature tensor, and back.

`td.pack()` flattens each leaf after the batch dims and concatenates the
leaves (in sorted key order) along one new dim, giving `(*batch_size, F)`;
the `PackLayout` it returns records which columns hold which key, so that
`layout.unpack(flat)` rebuilds the TensorDict as views of `flat`, for any
leading batch dims (after indexing or `index_select` of the packed tensor).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from td_core._core.contract import TensorDictContract, dense
from td_core._core.keys import NestedKey
from td_core._core.predicates import is_tensorclass
from td_core._core.traverse import is_nt, is_td, stack_parts

__all__ = ["PackLayout", "PackMixin", "pack"]

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class PackLayout:
    """Where each leaf of a packed TensorDict lies in the packed tensor; see `TensorDictBase.pack`.

    Frozen, hashable and compared by value, so it can be cached or used as a
    constant under `torch.compile`. Only tensorclasses come back with their
    class from `unpack`; every other kind comes back as a `TensorDict`.

    Attributes:
        keys: the leaf keys, in column order.
        shapes: the shape of each leaf after the batch dims (as `torch.Size`).
        dim: the packed dim, counted from the end (negative).
        nested: one `(key, batch_shape, cls)` per sub-TensorDict: its batch
            dims after the root's, and its tensorclass (or `None`).
        device: the device of the packed TensorDict.
        cls: the tensorclass of the packed TensorDict, or `None`.
        offsets: the first column of each leaf (computed).
        numel: the number of columns (computed).

    Example:
        ```python
        >>> import torch
        >>> from td_core import TensorDict
        >>> td = TensorDict(p=torch.zeros(5), v=torch.ones(5, 3), batch_size=[5])
        >>> flat, layout = td.pack()
        >>> layout.keys, layout.offsets, layout.numel
        (('p', 'v'), (0, 1), 4)
        >>> layout.unpack(flat[:2])["v"].shape
        torch.Size([2, 3])

        ```
    """

    keys: tuple[NestedKey, ...]
    shapes: tuple[torch.Size, ...]
    dim: int = -1
    nested: tuple[tuple[NestedKey, torch.Size, Any], ...] = ()
    device: torch.device | None = None
    cls: Any = None
    offsets: tuple[int, ...] = dataclasses.field(init=False)
    numel: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        shapes = tuple(torch.Size(s) for s in self.shapes)
        object.__setattr__(self, "shapes", shapes)
        nested = tuple((k, torch.Size(bs), c) for k, bs, c in self.nested)
        object.__setattr__(self, "nested", nested)
        sizes = [math.prod(s) for s in shapes]
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        object.__setattr__(self, "offsets", tuple(offsets))
        object.__setattr__(self, "numel", sum(sizes))

    def unpack(self, flat: Tensor) -> Any:
        """The TensorDict packed in `flat`, its leaves views of `flat`.

        Args:
            flat: a tensor with `numel` entries along dim `dim`; its other
                dims become the batch size of the result.

        Returns:
            A `TensorDict` (or an instance of `cls`), on `flat`'s device if
            the packed TensorDict had a device.

        Raises:
            IndexError: if `flat` has no dim `dim`.
            ValueError: if `flat` does not have `numel` entries along `dim`.
        """
        ndim = flat.ndim
        if not -ndim <= self.dim < ndim:
            raise IndexError(
                f"PackLayout.unpack: dim {self.dim} is out of range for a tensor with {ndim} dims"
            )
        if flat.shape[self.dim] != self.numel:
            raise ValueError(
                f"PackLayout.unpack: expected {self.numel} entries along dim {self.dim} of the "
                f"packed tensor, got {flat.shape[self.dim]} (shape {list(flat.shape)})"
            )
        flat = flat.movedim(self.dim, -1)
        bs = flat.shape[:-1]
        device = flat.device if self.device is not None else None
        out = dense(None, bs, device)
        for key, batch_shape, _ in self.nested:
            out.set(key, dense(None, bs + batch_shape, device))
        for key, shape, offset in zip(self.keys, self.shapes, self.offsets):
            value = flat.narrow(-1, offset, math.prod(shape))
            out.set(key, value.unflatten(-1, shape) if shape else value.squeeze(-1))
        for key, _, cls in reversed(self.nested):  # children before their parents
            if cls is not None:
                out.set(key, cls.from_tensordict(out.get(key)))
        return out if self.cls is None else self.cls.from_tensordict(out)


def _exclusive(td: Any) -> bool:
    """Whether `td` is a lazy stack whose members' keys differ."""
    parts = stack_parts(td)
    if parts is None:
        return False
    first = set(parts[0][0].keys(include_nested=True, leaves_only=True))
    return any(set(m.keys(include_nested=True, leaves_only=True)) != first for m in parts[0][1:])


def pack(
    td: TensorDictContract, dim: int = -1, *, layout: PackLayout | None = None
) -> tuple[Tensor, PackLayout]:
    """See `PackMixin.pack`."""
    bs = td.batch_size
    n = len(bs)
    if not -n - 1 <= dim <= n:
        raise IndexError(
            f"pack: dim {dim} is out of range for a TensorDict with {n} batch dims "
            f"(expected a dim in [{-n - 1}, {n}])"
        )
    pos = dim + n + 1 if dim < 0 else dim
    if _exclusive(td):
        raise RuntimeError("pack: the members of this lazy stack have different keys")
    leaves: dict[Any, Tensor] = {}
    nested: list[tuple[NestedKey, torch.Size, Any]] = []
    for key in td.keys(include_nested=True, sort=True):
        value = td.get(key)
        if is_nt(value):
            raise TypeError(
                f"pack: cannot pack the non-tensor entry {key!r}; drop the non-tensor entries "
                "with filter_non_tensor_data() first"
            )
        if is_td(value):
            if _exclusive(value):
                raise RuntimeError(
                    f"pack: the members of the lazy stack at {key!r} have different keys"
                )
            nested.append(
                (key, value.batch_size[n:], type(value) if is_tensorclass(value) else None)
            )
        else:
            leaves[key] = value
    if layout is not None:
        layout_pos = layout.dim + n + 1 if layout.dim < 0 else layout.dim
        if layout_pos != pos:
            raise ValueError(
                f"pack: cannot pack along dim {dim} with a layout packed along dim {layout.dim}"
            )
        if set(leaves) != set(layout.keys):
            raise KeyError(
                f"pack: the leaves {sorted(leaves, key=str)} differ from the keys of the layout "
                f"{sorted(layout.keys, key=str)}"
            )
        leaves = {key: leaves[key] for key in layout.keys}
    shapes = tuple(value.shape[n:] for value in leaves.values())
    if layout is not None and shapes != layout.shapes:
        raise ValueError(
            f"pack: the feature shapes of the leaves {[list(s) for s in shapes]} differ from "
            f"the layout's {[list(s) for s in layout.shapes]}"
        )
    tensors = []
    first: Tensor | None = None
    for key, value in leaves.items():
        if first is None:
            first = value
        elif value.dtype != first.dtype:
            raise TypeError(
                f"pack: the leaves must share one dtype, got {first.dtype} and {value.dtype} at "
                f"{key!r}; cast the TensorDict first (e.g. float())"
            )
        elif value.device != first.device:
            raise RuntimeError(
                f"pack: the leaves must share one device, got {first.device} and {value.device} "
                f"at {key!r}"
            )
        column = value.flatten(n) if value.ndim > n else value.unsqueeze(-1)
        tensors.append(column if pos == n else column.movedim(-1, pos))
    if tensors:
        flat = torch.cat(tensors, pos).contiguous()
    else:
        flat = torch.empty((*bs[:pos], 0, *bs[pos:]), device=td.device)
    return flat, PackLayout(
        keys=tuple(leaves),
        shapes=shapes,
        dim=pos - n - 1,
        nested=tuple(nested),
        device=td.device,
        cls=type(td) if is_tensorclass(td) else None,
    )


class PackMixin(TensorDictContract):
    """`pack`: the leaves as the columns of one tensor (inverse: `PackLayout.unpack`)."""

    __slots__ = ()

    def pack(self, dim: int = -1, *, layout: PackLayout | None = None) -> tuple[Tensor, PackLayout]:
        """All the leaves packed into one contiguous tensor of features, and its layout.

        Each leaf is flattened after the batch dims and the leaves are
        concatenated in sorted key order, so the columns depend only on the
        set of keys: the result is `(*batch_size, F)` for `dim=-1`.
        `layout.unpack(flat)` inverts it (for any leading batch dims).

        Args:
            dim: where the packed dim goes, in `[-(batch_dims + 1), batch_dims]`
                as for `torch.stack`.
            layout: pack in this layout's key order; a missing, extra or
                reshaped leaf raises. `dim` must be the layout's.

        Returns:
            `(flat, layout)`.

        Raises:
            IndexError: if `dim` is out of range.
            TypeError: for a non-tensor entry, or leaves of different dtypes.
            RuntimeError: for leaves on different devices, or a lazy stack
                whose members' keys differ.
            KeyError / ValueError: if the leaves do not match `layout`.

        Example:
            ```python
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict(obs=torch.zeros(2, 4, 3), r=torch.ones(2, 4), batch_size=[2, 4])
            >>> flat, layout = td.pack(0)  # the features first: (F, *batch_size)
            >>> flat.shape, layout.dim
            (torch.Size([4, 2, 4]), -3)
            >>> td.pack(0, layout=layout)[0].equal(flat)
            True

            ```
        """
        return pack(self, dim, layout=layout)
