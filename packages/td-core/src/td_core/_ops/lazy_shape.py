"""Batch-dim ops on a lazy stack, run on its members and re-stacked lazily.

A lazy stack of members with batch size `m` along dim `s` is rearranged
without stacking any leaf: the op is translated to the members' dims (the
stack dim removed) and the results are stacked lazily again, at the dim the
stack dim moved to. So ragged members (leaves of different shapes) work, and
the result's leaves are the members' (views where the member op gives views).

The functions here take the container and return `None` when it is not a
lazy stack, so each op's body reads `lazy.permute(td, order) or dense path`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.compiler import is_compiling

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract

__all__ = [
    "parts",
    "restack",
    "per_member",
    "permute",
    "unsqueeze",
    "squeeze",
    "expand",
    "reshape",
    "repeat",
    "repeat_interleave",
    "slices",
]


def _stack_type(cls: type) -> bool:
    # a lazy stack keeps its members in a `tensordicts` slot; the base never names the class
    return any("tensordicts" in getattr(c, "__slots__", ()) for c in cls.__mro__)


_is_stack_type = functools.cache(_stack_type)


def parts(td: Any) -> tuple[list[Any], int] | None:
    """`(members, stack_dim)` if `td` is a lazy stack, else `None`."""
    # (Dynamo warns on a cached function: under torch.compile the check runs uncached)
    cls: Any = type(td)  # (a class is hashable; mypy's type[Any] is not Hashable)
    stacked = _stack_type(cls) if is_compiling() else _is_stack_type(cls)
    if not stacked:
        return None
    return list(td.tensordicts), td.stack_dim


def restack(td: Any, members: Sequence[TensorDictContract], dim: int) -> Any:
    """A lazy stack like `td` of `members` along `dim`, where `td`'s stack dim went (its name too)."""
    return td._restack(members, dim)


def per_member(
    td: TensorDictContract,
    fn: Callable[[Any], Any],
    dense: Callable[[Any], Any],
) -> Any:
    """`fn` on each member re-stacked lazily if `td` is a lazy stack, else `dense(td)`
    (ops that keep the batch size)."""
    found = parts(td)
    if found is None:
        return dense(td)
    members, s = found
    return restack(td, [fn(m) for m in members], s)


def permute(td: TensorDictContract, order: Sequence[int]) -> Any | None:
    """Members permuted by `order` without the stack dim; the stack dim goes where `order` puts it."""
    found = parts(td)
    if found is None:
        return None
    members, s = found
    sub = [o - (o > s) for o in order if o != s]
    return restack(td, [m.permute(*sub) if sub else m for m in members], list(order).index(s))


def unsqueeze(td: TensorDictContract, d: int) -> Any | None:
    """`d` is already normalised to `[0, batch_dims]`."""
    found = parts(td)
    if found is None:
        return None
    members, s = found
    if d <= s:
        return restack(td, [m.unsqueeze(d) for m in members], s + 1)
    return restack(td, [m.unsqueeze(d - 1) for m in members], s)


def squeeze(td: TensorDictContract, dims: Sequence[int]) -> Any | None:
    """Remove the size-1 batch dims `dims` (normalised, all of size 1)."""
    found = parts(td)
    if found is None:
        return None
    out: Any = td  # a lazy stack, then a member or a restack
    for d in sorted(dims, reverse=True):
        found = parts(out)
        if found is None:  # the stack dim was squeezed: `out` is a member now
            out = out.squeeze(d)
            continue
        members, s = found
        if d == s:
            out = members[0]
        else:
            out = restack(out, [m.squeeze(d - (d > s)) for m in members], s - (d < s))
    return out


def expand(td: TensorDictContract, new: torch.Size) -> Any | None:
    """Expand to the (validated) batch size `new`, when the stack dim keeps its size."""
    found = parts(td)
    if found is None:
        return None
    members, s = found
    s_new = s + len(new) - td.batch_dims
    if new[s_new] != len(members):
        return None
    sub = torch.Size((*new[:s_new], *new[s_new + 1 :]))
    return restack(td, [m.expand(sub) for m in members], s_new)


def _elements(td: TensorDictContract) -> list[TensorDictContract]:
    """The 0-d elements of `td` in row-major order (views of the members)."""
    if not td.batch_dims:
        return [td]
    return [e for row in td.unbind(0) for e in _elements(row)]


def _build(td: TensorDictContract, elements: list[TensorDictContract], shape: torch.Size) -> Any:
    if not shape:
        return elements[0]
    step = math.prod(shape[1:])
    rows = [_build(td, elements[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
    return type(td)(*rows, stack_dim=0)  # type: ignore[call-arg]  # new dims: no names


def reshape(td: TensorDictContract, new: torch.Size) -> Any | None:
    """`td` as batch size `new` (same numel), as nested lazy stacks of its elements."""
    if parts(td) is None or 0 in new:
        return None
    return _build(td, _elements(td), new)


def repeat(td: TensorDictContract, reps: Sequence[int]) -> Any | None:
    """Members repeated along their dims; the member list tiled `reps[stack_dim]` times."""
    found = parts(td)
    if found is None or reps[found[1]] <= 0:
        return None
    members, s = found
    sub = [r for i, r in enumerate(reps) if i != s]
    repeated = [m.repeat(*sub) if sub else m.clone() for m in members]
    return restack(td, repeated * reps[s], s)


def repeat_interleave(
    td: TensorDictContract, repeats: Any, d: int, output_size: int | None
) -> Any | None:
    """Along the stack dim each member is repeated in place; elsewhere the members are."""
    found = parts(td)
    if found is None:
        return None
    members, s = found
    if d != s:
        return restack(
            td,
            [m.repeat_interleave(repeats, d - (d > s), output_size=output_size) for m in members],
            s,
        )
    counts = torch.as_tensor(repeats).reshape(-1).tolist()
    if len(counts) == 1:
        counts = counts * len(members)
    if len(counts) != len(members) or any(c < 0 for c in counts) or not sum(counts):
        return None  # the dense path raises torch's error (or builds an empty result)
    return restack(td, [m for m, c in zip(members, counts) for _ in range(c)], s)


def slices(
    td: TensorDictContract, d: int, bounds: Sequence[tuple[int, int]]
) -> tuple[Any, ...] | None:
    """`td[..., a:b]` along batch dim `d` for each `(a, b)`: lazy stacks of (indexed) members."""
    if parts(td) is None:
        return None
    lead = (slice(None),) * d
    return tuple(td._index((*lead, slice(a, b))) for a, b in bounds)
