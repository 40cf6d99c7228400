"""The compact repr of `set_printoptions(compact=True)`: `TensorDict(batch_size=[3], fields={a: f32[4]})`.

Each tensor entry prints as a token: its dtype's short name (`f32`, `i64`,
`bf16`, `bool`) and its dims after the batch dims (`f32[4]`; an unbatched
tensor shows all its dims), then `@device` where it lives off the CPU and the
container has no device. A non-tensor entry prints as its value's type name
(`str`), a nested container as `{...}`, led by its class name unless it is a
plain TensorDict and by its dims past the parent's batch dims (`[2]{...}`).

The text is built from metadata only: a lazy stack's entries are read member
by member (a dim that differs between members is `-1`, the dtype the promoted
one), never stacked. What fits in 80 columns stays on one line; otherwise
each entry of a container takes its own line, by the same rule, one level
deeper.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import torch

from td_core._core.contract import provided
from td_core._core.predicates import is_tensorclass
from td_core._core.traverse import _batched, is_nt, is_td, stack_parts
from td_core._core.utils import leaf_shape
from td_core._io.printoptions import print_option
from td_core._leaves.nontensor import NonTensorData

__all__ = ["compact_repr", "compact_dtype", "with_compact"]

# A leaf renders as its token; a container as (prefix, [(key, node), ...]).
Node: TypeAlias = "str | tuple[str, list[tuple[str, Node]]]"
# (dims after the batch dims, dtype, devices) of a tensor entry
_Meta = tuple[list[Any], torch.dtype, set[torch.device]]

_WIDTH = 80
_STEP = "    "
_CPU = torch.device("cpu")
_SHORT = {"uint": "u", "int": "i", "float": "f", "complex": "c"}
_LONG_NAMES = re.compile("uint|int|float|complex")
# the `__repr__`s that print through this module: a nested container of another
# class (a remote store) keeps its own repr, so it shows as its class name
_COMPACT_AWARE: set[Callable[[Any], str]] = set()


def with_compact(detailed: Callable[[Any], str]) -> Callable[[Any], str]:
    """A `__repr__` giving the compact form under `set_printoptions(compact=True)`, else `detailed`'s.

    Examples:
        >>> class Kind:
        ...     __repr__ = with_compact(lambda self: "Kind(...)")
    """

    @functools.wraps(detailed)
    def __repr__(self: Any) -> str:
        if print_option("compact"):
            return compact_repr(self)
        return detailed(self)

    _COMPACT_AWARE.add(__repr__)
    return __repr__


@functools.cache
def compact_dtype(dtype: torch.dtype) -> str:
    """The short name of `dtype` in the compact repr: `f32`, `i64`, `u8`, `c64`, `bf16`, `bool`.

    Examples:
        >>> import torch
        >>> compact_dtype(torch.float32), compact_dtype(torch.bfloat16)
        ('f32', 'bf16')
    """
    name = str(dtype).removeprefix("torch.")
    return _LONG_NAMES.sub(lambda match: _SHORT[match.group()], name)


def compact_repr(obj: Any) -> str:
    """The compact repr of a TensorDict, lazy stack, tensorclass or `TensorDictParams`.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> compact_repr(TensorDict(a=torch.zeros(3, 4), batch_size=[3]))
        'TensorDict(batch_size=[3], fields={a: f32[4]})'
    """
    if isinstance(obj, provided("TensorDictParams")):
        # shown as the TensorDict of parameters it wraps, as upstream's module does
        return f"{type(obj).__name__}(params={_top(obj, 'TensorDict', params=True)})"
    return _top(obj, type(obj).__name__, params=False)


def _top(obj: Any, name: str, *, params: bool) -> str:
    header, exclusive = _header(obj), _exclusive(obj, params)
    head = f"{name}(" + "".join(f"{item}, " for item in header) + "fields="
    label = ", exclusive_fields="
    # the exclusive fields follow the last line of the fields, then ")"
    tail = len(label) + 2 if exclusive else 1
    out = head + _render(("", _body(obj, params)), "", len(head), tail)
    if exclusive:
        used = len(out.rsplit("\n", 1)[-1]) + len(label)
        out += label + _render(("", exclusive), "", used, 1)
    return out + ")"


def _dims(sizes: Iterable[Any]) -> str:
    return "[" + ",".join(str(size) for size in sizes) + "]"


def _header(obj: Any) -> list[str]:
    """The `name=value` items before `fields=`."""
    items = []
    fields = type(obj)._field_set if is_tensorclass(obj) else frozenset()
    # a tensorclass field named `batch_size` or `device` hides that item
    if print_option("show_batch_size") and "batch_size" not in fields:
        items.append(f"batch_size={_dims(obj.batch_size)}")
    if print_option("show_device") and "device" not in fields and obj.device is not None:
        items.append(f"device={obj.device}")
    parts = stack_parts(obj)
    if parts is not None:
        items.append(f"stack_dim={parts[1]}")
    return items


def _exclusive(obj: Any, params: bool) -> list[tuple[str, Node]]:
    """For each member of a lazy stack holding keys that not all members hold: `(index, node)`."""
    parts = stack_parts(obj)
    if parts is None:
        return []
    common = set(obj._keys_str())
    out: list[tuple[str, Node]] = []
    for i, member in enumerate(parts[0]):
        own = [key for key in member._keys_str() if key not in common]
        if own:
            out.append((str(i), ("", _entries(member, own, params))))
    return out


def _body(obj: Any, params: bool, cls: type | None = None) -> list[tuple[str, Node]]:
    """The entries of a container; a tensorclass (or a stack of one, `cls`) adds its `None` fields."""
    if is_tensorclass(obj):
        cls, obj = type(obj), obj._tensordict
    if cls is None:
        return _entries(obj, list(obj._keys_str()), params)
    # the fields declared with `field(repr=False)` are left out
    shown = [spec.name for spec in dataclasses.fields(cls) if spec.repr]
    held = list(obj._keys_str())
    entries = _entries(obj, [key for key in held if key in shown], params)
    return entries + [(name, "None") for name in shown if name not in held]


def _entries(td: Any, keys: Sequence[str], params: bool) -> list[tuple[str, Node]]:
    """`(key, node)` for each key of `td`, in the order `sort_keys` asks for."""
    entries = [(key, _entry(td, key, params)) for key in keys]
    order = print_option("sort_keys")
    sort_by: Callable[[str], Any] | None = (
        (lambda text: text) if order == "alphabetical" else order if callable(order) else None
    )
    if sort_by is not None:
        entries.sort(key=lambda entry: sort_by(f"{entry[0]}: {_flat(entry[1])}"))
    return entries


def _first_member(td: Any) -> Any:
    """The container whose entry decides the kind of a lazy stack's entry: its first leaf member."""
    parts = stack_parts(td)
    while parts is not None and parts[0]:
        td = parts[0][0]
        parts = stack_parts(td)
    return td


def _entry(td: Any, key: str, params: bool) -> Node:
    """The node of the entry `key` of the container `td`."""
    first = _first_member(td)
    item = first._get_str(key, None)
    if item is None or (isinstance(item, torch.Tensor) and not is_nt(item)):
        meta = _tensor_meta(td, key)
        return meta if isinstance(meta, str) else _token(td, *meta)
    if is_nt(item):
        return _non_tensor(item)
    if not is_td(item) or (not is_tensorclass(item) and type(item).__repr__ not in _COMPACT_AWARE):
        return type(item).__name__
    sub = item if first is td else td._get_str(key)
    is_params = isinstance(item, provided("TensorDictParams"))
    # in a TensorDictParams, a nested one shows as the TensorDict of parameters it wraps
    plain = type(item) is provided("TensorDict") or (params and is_params)
    prefix = "" if plain else type(item).__name__
    extra = sub.batch_size[len(td.batch_size) :]
    if extra:
        prefix += _dims(extra)
    return prefix, _body(sub, params or is_params, type(item) if is_tensorclass(item) else None)


def _non_tensor(item: Any) -> str:
    """A non-tensor entry: the type of the one value it holds, or its own class for a stack."""
    if isinstance(item, NonTensorData):
        return type(item.data).__name__
    return type(item).__name__


def _tensor_meta(td: Any, key: str) -> _Meta | str:
    """Dims after the batch dims, dtype and devices of a tensor entry, or a non-tensor's node.

    Over a lazy stack, the members are walked (nested stacks too) without
    stacking: a dim that differs is -1 (`[-1]` where their numbers of dims
    differ), the dtype the promoted one; a member holding a non-tensor value
    gives that value's node.
    """
    parts = stack_parts(td)
    if parts is None:
        if is_tensorclass(td) and stack_parts(td._tensordict) is not None:
            return _tensor_meta(td._tensordict, key)
        value = td._get_str(key)
        if is_nt(value):
            return _non_tensor(value)
        return _shape_after_batch(td, value), value.dtype, {value.device}
    shapes: list[tuple[Any, ...]] = []
    dtypes: list[torch.dtype] = []
    devices: set[torch.device] = set()
    pending = list(parts[0])
    while pending:
        member = pending.pop()  # from the last member, as upstream walks them
        nested = stack_parts(member)
        if nested is not None:
            pending.extend(nested[0])
            continue
        meta = _tensor_meta(member, key)
        if isinstance(meta, str):
            return meta
        shapes.append(tuple(meta[0]))
        dtypes.append(meta[1])
        devices |= meta[2]
    return _merge_shapes(shapes), functools.reduce(torch.promote_types, dtypes), devices


def _merge_shapes(shapes: list[tuple[Any, ...]]) -> list[Any]:
    """One shape for several: -1 where they differ, `[-1]` if their lengths differ."""
    merged = list(shapes[0])
    for other in shapes[1:]:
        if len(other) != len(merged):
            return [-1]
        merged = [a if a == b else -1 for a, b in zip(merged, other)]
    return merged


def _shape_after_batch(td: Any, tensor: torch.Tensor) -> list[Any]:
    shape = list(leaf_shape(tensor))
    return shape[len(td.batch_size) :] if _batched(tensor) else shape


def _token(td: Any, shape: list[Any], dtype: torch.dtype, devices: set[torch.device]) -> str:
    token = _dims(shape)
    if print_option("show_dtype"):
        token = compact_dtype(dtype) + token
    if td.device is None and devices != {_CPU}:
        token += "@" + ",".join(sorted(str(device) for device in devices))
    return token


def _flat(node: Node) -> str:
    """The one-line text of a node."""
    if isinstance(node, str):
        return node
    prefix, entries = node
    return prefix + "{" + ", ".join(f"{key}: {_flat(value)}" for key, value in entries) + "}"


def _render(node: Node, indent: str, used: int, tail: int) -> str:
    """A node on one line if it fits between the `used` columns before it and `tail` after it.

    Otherwise each entry goes on its own line, one step deeper, rendered by the
    same rule; the last entry carries the closing `}` and this node's `tail`.
    """
    flat = _flat(node)
    if isinstance(node, str) or not node[1] or used + len(flat) + tail <= _WIDTH:
        return flat
    prefix, entries = node
    pad = indent + _STEP
    last = len(entries) - 1
    lines = [
        f"{pad}{key}: " + _render(value, pad, len(pad) + len(key) + 2, tail + 1 if i == last else 1)
        for i, (key, value) in enumerate(entries)
    ]
    return prefix + "{\n" + ",\n".join(lines) + "}"
