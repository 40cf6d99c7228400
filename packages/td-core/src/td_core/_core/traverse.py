"""The two traversals every bulk operation is built on.

`map_batch` applies a *batch op* to a whole tree: a function that acts on
the `n` leading (batch) dims of a tensor and leaves the trailing dims alone
(indexing, reshape, permute, expand, ...). Sub-TensorDicts are traversed with
the same function and `n`, and get the new leading dims plus whatever extra
batch dims they had. Non-tensor leaves apply the op to their values; an
`UnbatchedTensor` (a tensor without the batch dims) takes the same branch
and comes back unchanged.

`map_leaves` applies a function to every tensor leaf, keeping the batch
size (clone, to, detach, arithmetic, ...). Non-tensor leaves pass through.

Both build each result's entry dict in one pass and construct it with the
private constructor, which does not re-validate.

Lazy stacks run per member. A lazy stack's reads are stacked copies, and its
members may hold leaves of different shapes, so every traversal here asks
`stack_parts` first: for a lazy stack it walks the members and re-stacks
the results lazily. Leaf-wise traversals (`map_leaves`, `tensor_leaves`,
`rebuild`, `aligned_leaves`) always do this, so in-place ops write the
members' own tensors and results stay lazy, as upstream. Batch ops run per
member only when the members' leaves differ in shape (`ragged`); otherwise
stacking once and running the op once is cheaper. An op written over these
traversals works on ragged lazy stacks with no code of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import torch

from td_core.errors import BatchSizeError, KeyNotFoundError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from td_core._core.contract import TensorDictContract

__all__ = [
    "entries_of",
    "has_exclusive_keys",
    "map_batch",
    "map_batch_multi",
    "map_leaves",
    "tensor_leaves",
    "rebuild",
    "is_td",
    "is_nt",
    "stack_parts",
    "is_stack",
    "aligned_leaves",
    "per_member",
    "is_ragged",
]

Tensor = torch.Tensor


def is_td(obj: Any) -> TypeIs[Any]:
    """A TensorDict-like container (not a non-tensor leaf)."""
    if isinstance(obj, Tensor):  # the usual case: 15-60 ns, a missing class attribute 170
        return False
    cls = type(obj)
    return getattr(cls, "_td_collection", False) and not cls._is_non_tensor


def is_nt(obj: Any) -> bool:
    """A non-tensor leaf."""
    return not isinstance(obj, Tensor) and getattr(type(obj), "_is_non_tensor", False)


def _batched(value: Tensor) -> bool:
    """Whether the tensor subclass instance `value` has the batch dims (not an `UnbatchedTensor`).

    `UnbatchedTensor` says `_is_non_tensor`, so batch ops take the
    non-tensor branch for it; leaf-wise traversals treat it as a tensor.
    """
    return not getattr(type(value), "_td_pass_through", False)


def is_stack(td: Any) -> bool:
    """Whether `td` is a lazy stack.

    A class flag every kind has (the contract's `_td_lazy_stack`), so the look-up is a
    hit, cached by Python per class; not a side dict filled on first use, whose new
    entries would make torch.compile guard on it and recompile.
    """
    return getattr(type(td), "_td_lazy_stack", False)


def entries_of(td: Any) -> Any:
    """What holds `td`'s entries: the TensorDict a tensorclass wraps (maybe a lazy stack),
    else `td` itself."""
    return td._tensordict if td._td_tensorclass else td


def stack_parts(td: Any) -> tuple[list[Any], int] | None:
    """`(members, stack_dim)` of a lazy stack, `None` for every other kind."""
    return td._stack_parts() if is_stack(td) else None


def _restack(td: Any, members: Sequence[Any], dim: int, *, named: bool = True) -> Any:
    """A lazy stack of `members` along `dim`, built by the lazy stack `td`'s class.

    `named`: the stack dim keeps `td`'s name for it (`False` where the op reshapes).
    """
    return td._restack(members, dim, named=named)  # only lazy stacks reach here


def is_ragged(td: Any) -> bool:
    """Whether `td` is a lazy stack whose members' leaves differ in shape (at any depth)."""
    return stack_parts(td) is not None and bool(td._is_ragged())


def per_member(td: TensorDictContract, fn: Callable[..., Any], *others: Any) -> Any:
    """`fn(member, *others_member)` for each member of a lazy stack, re-stacked lazily.

    `others` (TensorDicts of `td`'s batch size, or anything else) are split
    along the stack dim. Returns `NotImplemented` when `td` is not a lazy
    stack, so a traversal starts with:

    ```python
    result = per_member(td, lambda m, *o: traversal(m, *o, ...), *others)
    if result is not NotImplemented:
        return result
    ```

    Results that are `None` (in-place traversals) give `None`.
    """
    parts = stack_parts(td)
    if parts is None:
        return NotImplemented
    members, d = parts
    split = [o.unbind(d) if is_td(o) else [o] * len(members) for o in others]
    results = [fn(m, *(s[i] for s in split)) for i, m in enumerate(members)]
    if all(r is None for r in results):
        return None
    return _restack(td, results, d)


def _ragged(td: TensorDictContract) -> tuple[list[Any], int] | None:
    """`stack_parts(td)` when it is a lazy stack whose members' leaves differ in shape."""
    parts = stack_parts(td)
    return parts if parts is not None and td._is_ragged() else None  # type: ignore[attr-defined]


def map_batch(td: TensorDictContract, fn: Callable[[Tensor], Tensor], lead: torch.Size) -> Any:
    """Apply the batch op `fn` to every entry; `lead` is the new batch size of `td`."""
    return _map_batch(td, fn, lead, len(td.batch_size))


def _map_batch(
    td: TensorDictContract, fn: Callable[[Tensor], Tensor], lead: torch.Size, n: int
) -> Any:
    if is_stack(td):
        ragged = _ragged(td)
        if ragged is not None:
            return _lazy_batch(td, ragged, lambda t: (fn(t),), [lead], n)[0]
        kept = _per_member_keeping_keys(td, lambda t: (fn(t),), [lead], n)
        if kept is not None:
            return kept[0]
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if type(value) is Tensor or (isinstance(value, Tensor) and _batched(value)):
            out[key] = fn(value)
        elif value._is_non_tensor:  # non-tensor leaves and `UnbatchedTensor`s
            out[key] = value._map_batch(fn, lead, n)
        else:
            out[key] = _map_batch(value, fn, lead, n)
    bs = td.batch_size
    return td._new(out, lead if len(bs) == n else lead + bs[n:])


def index_batch(td: TensorDictContract, index: Any, lead: torch.Size) -> Any:
    """`map_batch` specialised to `t[index]`: indexing is the hottest batch op,
    and inlining it saves a function call per leaf."""
    return _index_batch(td, index, lead, len(td.batch_size))


def _index_batch(td: TensorDictContract, index: Any, lead: torch.Size, n: int) -> Any:
    if stack_parts(td) is not None:
        return _map_batch(td, lambda t: t[index], lead, n)
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if type(value) is Tensor or (isinstance(value, Tensor) and _batched(value)):
            out[key] = value[index]
        elif value._is_non_tensor:
            out[key] = value._map_batch(lambda t: t[index], lead, n)
        else:
            out[key] = _index_batch(value, index, lead, n)
    bs = td.batch_size
    return td._new(out, lead if len(bs) == n else lead + bs[n:])


def map_batch_multi(
    td: TensorDictContract,
    fn: Callable[[Tensor], Sequence[Tensor]],
    leads: Sequence[torch.Size],
) -> list[Any]:
    """Like `map_batch` for ops with several results (unbind, split, chunk)."""
    return _map_batch_multi(td, fn, leads, len(td.batch_size))


def _map_batch_multi(
    td: TensorDictContract,
    fn: Callable[[Tensor], Sequence[Tensor]],
    leads: Sequence[torch.Size],
    n: int,
) -> list[Any]:
    if is_stack(td):
        ragged = _ragged(td)
        if ragged is not None:
            return _lazy_batch(td, ragged, fn, leads, n)
        kept = _per_member_keeping_keys(td, fn, leads, n)
        if kept is not None:
            return kept
    keys: list[str] = []
    columns: list[Sequence[Any]] = []  # one row of parts per entry, turned into columns below
    for key, value in td._items_str():
        keys.append(key)
        if type(value) is Tensor or (isinstance(value, Tensor) and _batched(value)):
            columns.append(fn(value))
        elif value._is_non_tensor:
            columns.append(value._map_batch_multi(fn))
        else:
            columns.append(_map_batch_multi(value, fn, leads, n))
    bs = td.batch_size
    extra = bs[n:] if len(bs) > n else None  # (slicing a torch.Size costs ~0.3 us)
    outs: Any  # every entry is cut into len(leads) parts: strict, a miscount raises
    if columns and len(leads) <= _FEW_PIECES:  # (chunk(2), split in two): dicts built in C
        outs = map(dict, map(zip, repeat(keys), zip(*columns, strict=True)))
    else:  # many pieces: a dict built from a zip costs more per piece than a few stores
        outs = [{} for _ in leads]
        for key, parts in zip(keys, columns):
            for out, part in zip(outs, parts, strict=True):
                out[key] = part
    return [
        td._new(out, lead + extra if extra else lead) for out, lead in zip(outs, leads, strict=True)
    ]


_FEW_PIECES = 4  # `_map_batch_multi` transposes the parts up to this many pieces


def map_leaves(
    td: TensorDictContract,
    fn: Callable[[Tensor], Tensor],
    *,
    device: Any = None,
    keep_non_tensor: Callable[[Any], Any] | None = None,
) -> Any:
    """Apply `fn` to every tensor leaf; the batch size is unchanged.

    Args:
        device: the device of the result (default: `td`'s).
        keep_non_tensor: what to do with non-tensor leaves (default: keep them).
    """
    if is_stack(td):  # asked first: building the closure costs more than the question
        return per_member(
            td, lambda m: map_leaves(m, fn, device=device, keep_non_tensor=keep_non_tensor)
        )
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            out[key] = fn(value)
        elif value._is_non_tensor:
            out[key] = value if keep_non_tensor is None else keep_non_tensor(value)
        else:
            out[key] = map_leaves(value, fn, device=device, keep_non_tensor=keep_non_tensor)
    return td._new(out, td.batch_size, td.device if device is None else device)


def tensor_leaves(td: TensorDictContract) -> list[Tensor]:
    """The tensor leaves in traversal order (the order `rebuild` consumes)."""
    out: list[Tensor] = []
    _collect(td, out)
    return out


def _collect(td: TensorDictContract, out: list[Tensor]) -> None:
    parts = stack_parts(td)
    if parts is not None:
        for member in parts[0]:
            _collect(member, out)
        return
    for value in td._values_str():
        if isinstance(value, Tensor):
            out.append(value)
        elif not value._is_non_tensor:
            _collect(value, out)


def rebuild(
    td: TensorDictContract, leaves: Iterator[Tensor], *, batch_size: torch.Size | None = None
) -> Any:
    """A tree shaped like `td` whose tensor leaves are taken from `leaves` in order."""
    parts = stack_parts(td)
    if parts is not None:
        members, d = parts
        member_bs = None
        if batch_size is not None:
            if len(batch_size) <= d or batch_size[d] != len(members):
                raise BatchSizeError(
                    f"cannot give a lazy stack of {len(members)} members along dim {d} the "
                    f"batch_size {list(batch_size)}"
                )
            member_bs = batch_size[:d] + batch_size[d + 1 :]
        return _restack(td, [rebuild(m, leaves, batch_size=member_bs) for m in members], d)
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            out[key] = next(leaves)
        elif value._is_non_tensor:
            out[key] = value
        else:
            out[key] = rebuild(value, leaves)
    return td._new(out, td.batch_size if batch_size is None else batch_size)


def aligned_leaves(td: TensorDictContract, other: TensorDictContract) -> list[Any]:
    """`other`'s entries at `td`'s tensor leaves, in `tensor_leaves` order.

    Raises `KeyError` naming the first key of `td` that `other` lacks.
    """
    out: list[Any] = []
    _align(td, other, out, ())
    return out


def _align(td: TensorDictContract, other: Any, out: list[Any], prefix: tuple[str, ...]) -> None:
    parts = stack_parts(td)
    if parts is not None:
        members, d = parts
        for member, part in zip(members, other.unbind(d)):
            _align(member, part, out, prefix)
        return
    for key, value in td._items_str():
        if not isinstance(value, Tensor) and value._is_non_tensor:
            continue
        item = other._get_str(key, _MISSING)
        if item is _MISSING:
            raise KeyNotFoundError(
                f"key {(*prefix, key)!r} is in the first TensorDict but not in the second"
            )
        if isinstance(value, Tensor):
            out.append(item)
        else:
            _align(value, item, out, (*prefix, key))


_MISSING = object()


def has_exclusive_keys(td: Any) -> bool:
    """Whether `td` is a lazy stack whose members' keys differ (upstream's exclusive keys)."""
    parts = stack_parts(td)
    return parts is not None and _keys_differ(parts[0])


def _keys_differ(members: Sequence[Any]) -> bool:
    if not members:
        return False
    keys = members[0]._keys_str()
    return any(member._keys_str() != keys for member in members[1:])


def _per_member_keeping_keys(
    td: TensorDictContract,
    fn: Callable[[Tensor], Sequence[Tensor]],
    leads: Sequence[torch.Size],
    n: int,
) -> list[Any] | None:
    """A lazy stack whose members' keys differ, per member, so the keys only some members
    have are kept; `None` for any other stack, or when the op mixes the members (then the
    common keys are combined densely, as upstream)."""
    parts = stack_parts(td)
    if parts is None or n > len(td.batch_size) or not _keys_differ(parts[0]):  # n > ndim: all
        return None
    try:
        return _lazy_batch(td, parts, fn, leads, n)
    except BatchSizeError:
        return None


def _lazy_batch(
    td: TensorDictContract,
    parts: tuple[list[TensorDictContract], int],
    fn: Callable[[Tensor], Sequence[Tensor]],
    leads: Sequence[torch.Size],
    n: int,
) -> list[Any]:
    """The batch op `fn` (acting on the `n` leading dims) on a ragged lazy stack, per member.

    The op is first run on a probe, `arange(len(members))` laid along the
    stack dim: where the member numbers land in each result tells which result
    dim is the new stack dim and which member each slice along it comes from
    (a result constant throughout comes from one member). Each member then runs
    the op on its leaves broadcast along the stack dim (a view) and keeps its
    slice, so view ops (unsqueeze, permute, expand, ...) stay views of the
    members. Ops that mix members (a reshape merging the stack dim) raise.
    """
    members, d = parts
    bs = td.batch_size
    if d >= n:  # the op leaves the stack dim alone: run it on each member directly
        subs = [_map_batch_multi(m, fn, leads, n) for m in members]
        return [
            _restack(td, [sub[k] for sub in subs], d - n + len(lead))
            for k, lead in enumerate(leads)
        ]
    shape = [1] * n
    shape[d] = len(members)
    probe_in = torch.arange(len(members)).view(shape).expand(bs[:n])
    probes: Sequence[Tensor] | None
    try:
        probes = fn(probe_in)
        # a data-moving op commutes with relabelling the members (a cyclic shift: a constant
        # result, such as new_ones', is moved by it); a reduction does not
        shifted = fn((probe_in + 1) % len(members))
    except (RuntimeError, TypeError, ValueError, IndexError):
        probes = shifted = None
    results = []
    for k, lead in enumerate(leads):
        layout = None
        if probes is not None and shifted is not None:
            layout = _member_layout(probes[k], shifted[k], len(members))
        if layout is None:
            raise BatchSizeError(
                f"this operation mixes the members of a lazy stack whose entries differ in shape "
                f"(batch_size {list(bs)}, stack_dim {d}): densify with contiguous() first, or "
                "select the entries whose shapes agree"
            )
        r, picks = layout

        def member_op(t: Tensor, k: int = k, r: int | None = r, j: int = 0) -> Tensor:
            full = fn(t.unsqueeze(d).expand(*bs[:n], *t.shape[n - 1 :]))[k]
            return full if r is None else full.select(r, j)

        if r is None:
            results.append(_map_batch(members[picks[0]], member_op, lead, n - 1))
            continue
        sub_lead = lead[:r] + lead[r + 1 :]
        results.append(
            _restack(
                td,
                [
                    _map_batch(members[i], functools.partial(member_op, j=j), sub_lead, n - 1)
                    for j, i in enumerate(picks)
                ],
                r,
                named=lead == bs[:n],  # a reshape forgets the names (the caller sets others)
            )
        )
    return results


def _member_layout(probe: Any, shifted: Any, count: int) -> tuple[int | None, list[int]] | None:
    """`(result dim, member per slice)` from a probe result, `(None, [member])` if constant.

    `None` when the op is not a pure data move of the members' rows: its probe
    result must hold member numbers, and relabelling the members (`shifted`,
    the op on `(probe + 1) % count`) must relabel the result the same way.
    """
    if (
        not isinstance(probe, Tensor)
        or not isinstance(shifted, Tensor)
        or probe.dtype != torch.int64
        or probe.numel() == 0
        or probe.shape != shifted.shape
        or bool(((probe < 0) | (probe >= count)).any())
        or not torch.equal(shifted, (probe + 1) % count)
    ):
        return None
    flat = probe.reshape(-1)
    if bool((flat == flat[0]).all()):
        return None, [int(flat[0])]
    for r in range(probe.ndim):
        rows = probe.movedim(r, 0).reshape(probe.shape[r], -1)
        if bool((rows == rows[:, :1]).all()):
            return r, rows[:, 0].tolist()
    return None
