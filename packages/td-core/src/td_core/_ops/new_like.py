"""New TensorDicts shaped like this one (`new_zeros`, `new_full`, `new_tensor`, ...) and layout queries.

The `new_*` constructors are one table (name -> `Tensor` method) and one
implementation: each tensor leaf `t` becomes `t.new_*(size + t.shape[batch_dims:])`,
so leaves keep their dtype, device and feature shape unless told otherwise;
non-tensor leaves keep their value at the new batch size.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import _map_batch, is_ragged, is_td, map_leaves
from td_core._core.utils import NO_DEFAULT, as_device, shape_args
from td_core._ops import lazy_shape as lazy
from td_core.errors import BatchSizeError, KeyNotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self

_MISSING: Any = object()  # `get`'s default in queries that need the entry to be there


__all__ = ["NewMixin"]

Tensor = torch.Tensor

# name -> the Tensor method building one leaf (`new_full` also takes the fill value)
_NEW: dict[str, Callable[..., Tensor]] = {
    "new_zeros": Tensor.new_zeros,
    "new_ones": Tensor.new_ones,
    "new_empty": Tensor.new_empty,
    "new_full": Tensor.new_full,
}

# the depth at which every level of a tree takes the new batch size as a whole
_ALL_LEVELS = 1 << 30


def _retag(td: TensorDictContract, device: Any) -> Any:
    """Record `device` as the device of `td` and its sub-TensorDicts."""
    td._set_device(device)
    for sub in td._subtrees():
        _retag(sub, device)
    return td


def _new_like(
    td: TensorDictContract,
    name: str,
    size: tuple[Any, ...],
    fill: tuple[Any, ...],
    dtype: torch.dtype | None,
    device: Any,
    requires_grad: bool,
    pin_memory: bool | None,
    empty_lazy: bool = False,
) -> Any:
    new = torch.Size(shape_args(size))
    if any(s < 0 for s in new):
        raise BatchSizeError(f"{name}: sizes must be non-negative, got {list(new)}")
    args = (name, fill, dtype, device, requires_grad, pin_memory)
    if empty_lazy:
        return _emptied_lazy(td, new, args)
    return _new_at(td, new, *args)


def _emptied_lazy(td: Any, new: torch.Size, args: tuple[Any, ...]) -> Any:
    """`_new_at`, with every lazy stack emptied: a lazy stack of members without leaves.

    A lazy stack keeps its stack dim when `new` reaches it (`empty_lazy=True`,
    as upstream): its members are copies of its first member's structure
    (sub-TensorDicts kept, leaves dropped) at `new` without the stack dim.
    """
    found = lazy.parts(td)
    if found is not None:
        members, dim = found
        if len(new) > dim and members:
            sub = torch.Size((*new[:dim], *new[dim + 1 :]))
            member = _emptied_lazy(members[0].empty(recurse=True), sub, args)
            return lazy.restack(td, [member.copy() for _ in range(new[dim])], dim)
        return _new_at(td, new, *args)
    out = _new_at(td, new, *args)
    n = td.batch_dims
    for key, value in td._items_str():
        if is_td(value) and not value._is_non_tensor:
            size = torch.Size((*new, *value.batch_size[n:]))
            out._set_str(key, _emptied_lazy(value, size, args))
    return out


def _new_at(
    td: TensorDictContract,
    new: torch.Size,
    name: str,
    fill: tuple[Any, ...],
    dtype: torch.dtype | None,
    device: Any,
    requires_grad: bool,
    pin_memory: bool | None,
) -> Any:
    method = _NEW[name]
    n = td.batch_dims
    dev = as_device(device) if device is not NO_DEFAULT else None
    build = _Build(method, new, n, fill, dtype, dev, requires_grad, pin_memory)
    out = _map_batch(td, build, new, n)
    return _retag(out, dev) if dev is not None else out


class _Build:
    """The `new_*` op on one tensor leaf: a tensor of the new batch size, leaf dims kept.

    `fills_new` tells a non-tensor leaf that the result's values are no batch
    positions to gather at (it fills the new elements with its first value).
    """

    fills_new = True

    def __init__(
        self,
        method: Callable[..., Tensor],
        new: torch.Size,
        n: int,
        fill: tuple[Any, ...],
        dtype: torch.dtype | None,
        device: torch.device | None,
        requires_grad: bool,
        pin_memory: bool | None,
    ) -> None:
        self.method, self.new, self.n, self.fill = method, new, n, fill
        self.dtype, self.device = dtype, device
        self.requires_grad, self.pin_memory = requires_grad, pin_memory

    def __call__(self, t: Tensor) -> Tensor:
        out = self.method(
            t,
            (*self.new, *t.shape[self.n :]),
            *self.fill,
            dtype=self.dtype if self.dtype is not None else t.dtype,
            device=self.device if self.device is not None else t.device,
            requires_grad=self.requires_grad,
        )
        return out.pin_memory() if self.pin_memory else out


def _leaf_depth(td: Any) -> int:
    """The nesting level of `td`'s deepest leaf (0: a top-level one), -1 when it holds none."""
    found = lazy.parts(td)
    if found is not None:  # from the members: reading a ragged entry would fail
        return max((_leaf_depth(m) for m in found[0]), default=-1)
    deepest = -1
    for value in td._values_str():
        if not is_td(value):
            deepest = max(deepest, 0)
            continue
        below = _leaf_depth(value)
        if below >= 0:
            deepest = max(deepest, below + 1)
    return deepest


class NewMixin(TensorDictContract):
    """`new_*` constructors and layout queries of `td_core.TensorDictBase`."""

    __slots__ = ()

    def new_zeros(
        self,
        *size: Any,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        layout: torch.layout = torch.strided,
        pin_memory: bool | None = None,
        empty_lazy: bool = False,
    ) -> Self:
        """A TensorDict of batch size `size` with the same keys, every leaf filled with 0.

        Leaves keep their dtype, device and feature dims unless `dtype`/`device` are given.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.ones(3, 2)}, [3])
            >>> td.new_zeros(5)["a"].shape
            torch.Size([5, 2])
        """
        return _new_like(
            self, "new_zeros", size, (), dtype, device, requires_grad, pin_memory, empty_lazy
        )

    def new_ones(
        self,
        *size: Any,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        layout: torch.layout = torch.strided,
        pin_memory: bool | None = None,
        empty_lazy: bool = False,
    ) -> Self:
        """Like `new_zeros`, filled with 1."""
        return _new_like(
            self, "new_ones", size, (), dtype, device, requires_grad, pin_memory, empty_lazy
        )

    def new_empty(
        self,
        *size: Any,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        layout: torch.layout = torch.strided,
        pin_memory: bool | None = None,
        empty_lazy: bool = False,
    ) -> Self:
        """Like `new_zeros`, uninitialised."""
        return _new_like(
            self, "new_empty", size, (), dtype, device, requires_grad, pin_memory, empty_lazy
        )

    def new_full(
        self,
        size: Any,
        fill_value: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        layout: torch.layout = torch.strided,
        pin_memory: bool | None = None,
        empty_lazy: bool = False,
    ) -> Self:
        """Like `new_zeros`, filled with `fill_value` (cast to each leaf's dtype)."""
        return _new_like(
            self,
            "new_full",
            (size,),
            (fill_value,),
            dtype,
            device,
            requires_grad,
            pin_memory,
            empty_lazy,
        )

    def new_tensor(
        self,
        data: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        pin_memory: bool | None = None,
    ) -> Self:
        """A TensorDict with the same keys whose leaves are copies of `data`.

        With a TensorDict, each leaf is copied from `data`'s leaf at the same
        key. With a tensor (or array, list, number), every leaf is a copy of it;
        the batch size is `data`'s shape. Leaves keep their dtype unless
        `dtype` is given, and live on `device`, by default `data`'s device (the default
        device for a list, array or number), as upstream. As `torch.Tensor.new_tensor`, a
        tensor or TensorDict `data` emits a `UserWarning` recommending `clone().detach()`.
        """
        if isinstance(data, Tensor) or is_td(data):  # as torch's new_tensor, once per call
            warnings.warn(
                "To copy construct from a tensor, it is recommended to use data.clone().detach() "
                f"(new_tensor copies the {type(data).__name__} given into every leaf, detached)",
                UserWarning,
                stacklevel=2,
            )
        src = None if isinstance(data, Tensor) or is_td(data) else torch.as_tensor(data)
        if device is not NO_DEFAULT:
            dev = as_device(device)
        else:  # as upstream: the result lives where `data` does (a list: the default device)
            dev = data.device if src is None else src.device

        def copy(t: Tensor, src: Any) -> Tensor:
            out = t.new_tensor(
                src,
                dtype=dtype if dtype is not None else t.dtype,
                device=dev if dev is not None else t.device,
                requires_grad=requires_grad,
            )
            return out.pin_memory() if pin_memory else out

        if is_td(data):
            with warnings.catch_warnings():  # new_tensor of a tensor warns to use clone()
                warnings.simplefilter("ignore", UserWarning)
                out = self.apply(copy, data, batch_size=data.batch_size)
        else:
            if is_ragged(self):  # every leaf becomes data's shape: members cannot keep theirs
                raise BatchSizeError(
                    "new_tensor(data) replaces every leaf by a copy of data, which a lazy stack "
                    "whose members' leaves differ in shape cannot hold: call contiguous() or "
                    "to_tensordict() on a regular stack first"
                )
            src = data if src is None else src
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                out = _map_batch(self, lambda t: copy(t, src), src.shape, _ALL_LEVELS)
        assert out is not None
        return _retag(out, dev) if dev is not None else out

    def as_tensor(self) -> Self:
        """Every leaf as a plain `torch.Tensor` (memory-mapped or subclassed leaves are unwrapped)."""
        return lazy.per_member(
            self, lambda m: m.as_tensor(), lambda d: map_leaves(d, torch.as_tensor)
        )

    def densify(self, layout: torch.layout = torch.strided) -> Self:
        """A TensorDict whose entries are all stacked: a lazy stack's ragged leaves become nested tensors.

        A TensorDict that is already dense is returned as is. A tensor entry only some
        members hold becomes a nested tensor too, with an empty tensor (first dim past the
        batch dims of size 0) for each member without it, as upstream.

        Args:
            layout: the layout of the nested tensors (`torch.strided` or `torch.jagged`).
        """
        found = lazy.parts(self)
        if found is None:
            return self
        members, s = found
        out: dict[str, Any] = {}
        for key in self._keys_str():
            values = [m._get_str(key) for m in members]
            first = values[0]
            if is_td(first):
                out[key] = lazy.restack(self, values, s).densify(layout)
            elif isinstance(first, Tensor) and any(v.shape != first.shape for v in values):
                if s != 0:
                    raise BatchSizeError(
                        f"densify: entry {key!r} is ragged across a stack along dim {s}; "
                        "nested tensors need the stack along dim 0"
                    )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    out[key] = torch.nested.as_nested_tensor(values, layout=layout)
            else:
                out[key] = self._get_str(key)
        for key, values in _exclusive_tensors(members, self._keys_str()):
            if s != 0:
                raise BatchSizeError(
                    f"densify: entry {key!r} is held by only some members of a stack along dim "
                    f"{s}; nested tensors need the stack along dim 0"
                )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                out[key] = torch.nested.as_nested_tensor(values, layout=layout)
        return self._new(out, self.batch_size)

    def to_padded_tensor(self, padding: float = 0.0, mask_key: Any = None) -> Self:
        """Every nested-tensor leaf converted to a padded dense tensor (other leaves as they are).

        Args:
            padding: the value of the padded elements.
            mask_key: upstream writes a mask there when a batch dim is ragged (size -1);
                td's batch dims never are, so passing it raises, as upstream does then.
        """
        if mask_key is not None:
            raise RuntimeError(
                f"to_padded_tensor(mask_key={mask_key!r}) needs a ragged batch dim, and batch_size "
                f"{list(self.batch_size)} has none; the padded leaves' own shapes give the mask"
            )

        def convert(td: TensorDictContract) -> Any:
            out: dict[str, Any] = {}
            for key, value in td._items_str():
                if isinstance(value, Tensor) and value.is_nested:
                    out[key] = torch.nested.to_padded_tensor(value, padding)
                elif is_td(value):
                    out[key] = convert(value)
                else:
                    out[key] = value
            return td._new(out, td.batch_size)

        return lazy.per_member(self, lambda m: m.to_padded_tensor(padding, mask_key), convert)

    # ------------------------------------------------------------- queries
    def get_item_shape(self, key: Any) -> torch.Size:
        """The shape of the entry at `key`: a tensor's shape, a sub-TensorDict's batch size."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyNotFoundError(
                f"get_item_shape: key {key!r} not found in {type(self).__name__} with keys "
                f"{sorted(self.keys(include_nested=True), key=str)}"
            )
        return value.shape if isinstance(value, Tensor) else value.batch_size

    def entry_class(self, key: Any) -> type:
        """The class of the entry at `key` (`type(None)` if there is none, as upstream)."""
        found = lazy.parts(self)
        if found is not None:
            cls: Any = found[0][0].entry_class(key)
            if getattr(cls, "_td_collection", False) and not cls._is_non_tensor:
                return type(self)  # sub-TensorDicts of a lazy stack read as lazy stacks
            if not getattr(cls, "_is_non_tensor", False):
                return cls  # a tensor class, even for ragged leaves that do not stack
        return type(self.get(key, None))

    @property
    def is_cpu(self) -> bool:
        """Whether the TensorDict's device is the CPU (`False` when it has no device)."""
        return self.device is not None and self.device.type == "cpu"

    @property
    def is_cuda(self) -> bool:
        """Whether the TensorDict's device is a CUDA device (`False` when it has no device)."""
        return self.device is not None and self.device.type == "cuda"

    @property
    def is_meta(self) -> bool:
        """Whether the TensorDict's device is the meta device (`False` when it has no device)."""
        return self.device is not None and self.device.type == "meta"

    @property
    def depth(self) -> int:
        """How deeply leaves are nested: 0 with only top-level leaves, 1 with `("a", "b")`, ...

        Counted over the leaves, as upstream: an empty sub-TensorDict adds no level.
        """
        return max(_leaf_depth(self), 0)

    def data_ptr(self, *, storage: bool = False) -> Self:
        """A 0-d TensorDict of each tensor leaf's `data_ptr()` (its storage's with `storage=True`)."""

        def ptrs(td: TensorDictContract) -> Any:
            out: dict[str, Any] = {}
            for key, value in td._items_str():
                if isinstance(value, Tensor):
                    ptr = value.untyped_storage().data_ptr() if storage else value.data_ptr()
                    out[key] = torch.tensor(ptr)
                elif lazy.parts(value) is not None:  # a nested lazy stack: per member
                    out[key] = value.data_ptr(storage=storage)
                elif is_td(value):
                    out[key] = ptrs(value)
            return td._new(out, torch.Size())

        found = lazy.parts(self)
        if found is not None:  # one entry per member, keyed by its position
            entries = {str(i): m.data_ptr(storage=storage) for i, m in enumerate(found[0])}
            return self._new(entries, torch.Size())
        return ptrs(self)


def _exclusive_tensors(members: list[Any], common: Any) -> list[tuple[str, list[Tensor]]]:
    """The tensor entries only some `members` hold, each with one tensor per member, as
    upstream's `densify` makes them: a member without the entry gets an empty tensor whose
    first dim past its batch dims is 0 (sub-TensorDicts only some members hold are left out,
    as upstream)."""
    found: dict[str, Tensor] = {}
    for member in members:
        for key, value in member._items_str():
            if key not in common and key not in found and isinstance(value, Tensor):
                found[key] = value
    out = []
    for key, like in found.items():
        values = []
        for member in members:
            value = member._get_str(key, None)
            if not isinstance(value, Tensor):
                shape = list(like.shape)
                shape[min(member.batch_dims, len(shape) - 1)] = 0
                value = like.new_empty(shape)
            values.append(value)
        out.append((key, values))
    return out
