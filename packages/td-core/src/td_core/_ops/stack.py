"""Dense `stack` and `cat` of TensorDicts (`torch.stack` / `torch.cat` land here).

Keys must match across inputs; the error names the first key one input lacks.
Non-tensor leaves stack into a `NonTensorStack` (one rule, equal values or not).

`StackMixin` holds the stacking methods of every kind: the class-level
`stack`/`cat`/`lazy_stack`/`maybe_dense_stack` and the entry-level
`stack_tensors`/`cat_tensors`/`stack_from_tensordict`/`cat_from_tensordict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

import torch
from torch.compiler import is_compiling

from td_core._core.contract import TD, TensorDictContract, lazy, provided
from td_core._core.flags import lazy_stack_enabled
from td_core._core.keys import NestedKey, unravel_key
from td_core._core.traverse import (
    entries_of,
    has_exclusive_keys,
    is_ragged,
    is_stack,
    is_td,
    stack_parts,
    tensor_leaves,
)
from td_core._core.utils import normalize_dim
from td_core._leaves.nontensor import cat_non_tensors, stack_non_tensors
from td_core._leaves.unbatched import (
    is_unbatched,
    shared_unbatched,
    unbatched_storage_differs,
    warn_unbatched_storage,
)
from td_core._ops.best_stack import best_intention_stack
from td_core._ops.names import carry_names, names_after
from td_core.errors import BatchSizeError, DeviceError, GradLeafWriteError, KeyNotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["stack", "stack_onto", "cat", "StackMixin"]

Tensor = torch.Tensor
_pending, _entries = attrgetter("_pending"), attrgetter("_tensordict")  # read in C per input
_FAILED_STACK = " (Failed to stack tensors within a tensordict)"  # upstream's words


def _check_inputs(tds: Sequence[Any], what: str) -> list[Any]:
    tds = list(tds)
    if not tds:
        raise ValueError(f"{what} needs at least one TensorDict")
    # one check per class, not per input: 100 inputs of one class cost one `is_td`
    classes = dict(zip(map(type, tds), tds))  # (built in C)
    if len(classes) == 1 and is_td(tds[0]):  # inputs of one class (one tensorclass at most)
        return tds
    if not all(is_td(td) for td in classes.values()):
        i = next(i for i, td in enumerate(tds) if not is_td(td))
        raise TypeError(f"{what}: item {i} is a {type(tds[i]).__name__}, not a TensorDict")
    tcs = [cls.__name__ for cls in classes if getattr(cls, "_td_tensorclass", False)]
    if len(tcs) > 1:  # as upstream: torch finds no implementation for the mix
        raise TypeError(
            f"torch.{what}: no implementation found for instances of different tensorclasses "
            f"{tcs}; convert them with to_tensordict() first"
        )
    return tds


def _any_ragged(tds: list[TensorDictContract]) -> bool:
    """Whether an input is (or a tensorclass wraps) a lazy stack that a dense stack would
    not hold whole: members whose entries differ in shape, or keys only some members have."""
    if not any(
        is_stack(td) or td._td_tensorclass for td in dict(zip(map(type, tds), tds)).values()
    ):
        return False  # no lazy stack among the inputs: the usual case, one look per class
    return any(is_ragged(td) or has_exclusive_keys(td) for td in map(entries_of, tds))


def _same_keys(tds: list[TensorDictContract], prefix: tuple[str, ...], what: str) -> None:
    keys = tds[0]._keys_str()
    for i, td in enumerate(tds[1:], 1):
        other = td._keys_str()
        if other != keys and set(other) != set(keys):
            missing = [k for k in keys if k not in other] or [k for k in other if k not in keys]
            raise KeyNotFoundError(
                f"{what}: TensorDicts 0 and {i} have different keys at {prefix or 'the root'!r}: "
                f"{sorted(set(keys) ^ set(other))} (first: {(*prefix, missing[0])!r})"
            )


def _entry_dict(td: Any) -> Any:
    """A dense TensorDict's entry dict (`None` while torch.compile holds keys back)."""
    return td._tensordict if td._pending is None else None


def _columns(
    tds: list[TensorDictContract], prefix: tuple[str, ...], what: str
) -> list[tuple[str, list[Any]]]:
    """`(key, the entries of every input at key)` for each key of the first input, in its order.

    Raises `KeyNotFoundError` unless every input has the same keys.
    """
    dicts: list[Any]
    try:  # dense TensorDicts (nothing held back by torch.compile): read their entry dicts
        if is_compiling():  # Dynamo cannot trace the C-level getters
            dicts = [_entry_dict(td) for td in tds]
        elif set(map(_pending, tds)) == {None}:
            dicts = list(map(_entries, tds))
        else:
            dicts = [None]
    except AttributeError:
        dicts = [None]
    if set(map(type, dicts)) == {dict}:
        first = dicts[0]
        # as many keys as the first, and each of its keys: the same keys
        if set(map(len, dicts)) == {len(first)}:
            keys = list(first)
            try:
                if len(keys) > 1 and not is_compiling():  # one C call per input; zip: columns
                    rows = list(map(itemgetter(*keys), dicts))
                    return [(key, list(column)) for key, column in zip(keys, zip(*rows))]
                return [(key, [entries[key] for entries in dicts]) for key in keys]
            except KeyError:
                pass
    _same_keys(tds, prefix, what)
    getters = [td._get_str for td in tds]
    return [(key, [get(key) for get in getters]) for key in tds[0]._keys_str()]


def stack(
    tds: Sequence[TensorDictContract], dim: int = 0, *, out: TensorDictContract | None = None
) -> Any:
    """Stack TensorDicts of equal batch size along a new batch dim `dim`."""
    tds = _check_inputs(tds, "stack")
    bs = tds[0].batch_size
    for i, td in enumerate(tds):
        if td.batch_size != bs:
            raise BatchSizeError(
                f"stack: TensorDict {i} has batch_size {list(td.batch_size)}, TensorDict 0 has {list(bs)}"
            )
    d = normalize_dim(dim, len(bs) + 1)
    if out is not None:  # written in place whatever set_lazy_stack says, as upstream
        return stack_onto(out, tds, d)
    if lazy_stack_enabled() or _any_ragged(tds):
        # ragged lazy stacks cannot become dense: stack them lazily, as upstream
        return lazy(tds, d)
    result = _combine(tds, d, (), stacking=True)
    names = tds[0]._raw_names()
    if names is not None and all(td._raw_names() == names for td in tds[1:]):
        # inputs named differently give an unnamed result, as upstream
        carry_names(result, names_after(names, insert=(d,)))
    return result


def stack_onto(out: TD, tds: list[TensorDictContract], d: int) -> TD:
    """`stack(tds, d, out=out)`: write the stack into `out`'s existing leaves, in place.

    `out` keeps its storage (and its kind); keys `out` lacks are refused
    before anything is written. Inputs that are lazy stacks of ragged members
    go member by member into an `out` stacked lazily along `d`. `cat(...,
    out=)` writes the same way.

    Raises:
        BatchSizeError: if `out.batch_size` is not the stacked batch size.
        GradLeafWriteError: if a leaf of `out` requires grad, or an input's does where `out`
            is a `TensorDictParams` (outside `torch.no_grad()`).
        MissingEntryError: if an input holds a key that `out` lacks.
    """
    bs = list(tds[0].batch_size)
    bs.insert(d, len(tds))
    if out.batch_size != torch.Size(bs):
        raise BatchSizeError(
            f"stack(..., out=): out.batch_size and stacked batch size must match, got "
            f"out.batch_size {list(out.batch_size)} and stacked batch size {bs}"
        )
    if torch.is_grad_enabled():
        _check_grad(out, tds)
    # ragged inputs stay a lazy stack, which goes member by member into a lazy `out`
    out.update_(lazy(tds, d) if _any_ragged(tds) else _combine(tds, d, (), stacking=True))
    return out


def _check_grad(out: TensorDictContract, tds: list[TensorDictContract]) -> None:
    """Refuse `stack(..., out=)` where autograd could not record the write.

    A `TensorDictParams` `out` takes the values into its parameters' data
    (its in-place value writes run under `no_grad`, as upstream), so inputs
    that require grad are refused there; any other `out` refuses leaves that
    require grad.
    """
    if out._writes_values_without_grad:
        if any(t.requires_grad for td in tds for t in tensor_leaves(td)):
            raise GradLeafWriteError(
                f"stack(..., out=): inputs require grad, but a {type(out).__name__} out takes the "
                "values into its data without autograd, and out= arguments don't support "
                "automatic differentiation; stack the inputs' detach() or stack without out="
            )
    elif any(t.requires_grad and t.is_leaf for t in tensor_leaves(out)):
        raise GradLeafWriteError(
            "stack(..., out=): out holds leaves that require grad, and out= arguments don't "
            "support automatic differentiation; stack under torch.no_grad() or stack without out="
        )


def _combine(tds: list[TensorDictContract], d: int, prefix: tuple[str, ...], stacking: bool) -> Any:
    """Stack (new dim `d`) or concatenate (along `d`) matching entries, recursively.

    `UnbatchedTensor` entries whose inputs hold different data keep the first
    one's; the warning saying so comes only once everything combined (a stack
    that fails on another entry raises without warning).
    """
    differing: list[tuple[str, ...]] = []
    result = _combine_level(tds, d, prefix, stacking, differing)
    if differing:
        warn_unbatched_storage(stacklevel=3)
    return result


def _combine_level(
    tds: list[TensorDictContract],
    d: int,
    prefix: tuple[str, ...],
    stacking: bool,
    differing: list[tuple[str, ...]],
) -> Any:
    """`_combine`'s recursion; the keys of unbatched entries that differ go to `differing`."""
    what = "stack" if stacking else "cat"
    tensor_op = torch.stack if stacking else torch.cat
    non_tensor_op = stack_non_tensors if stacking else cat_non_tensors
    first = tds[0]
    columns = _columns(tds, prefix, what)
    bs = list(first.batch_size)
    if stacking:
        bs.insert(d, len(tds))
    else:
        bs[d] = sum(td.batch_size[d] for td in tds)
    entries: dict[str, Any] = {}
    for key, values in columns:
        value = values[0]
        if type(value) is not Tensor and is_unbatched(value):  # shared by all: the first one
            if unbatched_storage_differs(values):
                differing.append((*prefix, key))
            entries[key] = shared_unbatched(values, torch.Size(bs), warn=False)
            continue
        if isinstance(value, Tensor):
            try:
                entries[key] = tensor_op(values, d)
            except (RuntimeError, TypeError) as err:
                devices = sorted({str(v.device) for v in values if isinstance(v, Tensor)})
                if len(devices) > 1:
                    path = " / ".join(f'"{part}"' for part in (*prefix, key))
                    raise DeviceError(
                        f"{what}: tensors on different devices at key {path} ({devices}): "
                        "move the TensorDicts to one device first"
                    ) from None
                shapes = sorted({tuple(v.shape) for v in values if isinstance(v, Tensor)})
                raise BatchSizeError(
                    f"{what}: entry {(*prefix, key)!r} has incompatible shapes {shapes}"
                    f"{_FAILED_STACK if stacking else ''}: {err}"
                ) from None
        elif value._is_non_tensor:
            entries[key] = non_tensor_op(values, d)
        else:
            if any(isinstance(v, Tensor) for v in values):
                raise TypeError(
                    f"{what}: entry {(*prefix, key)!r} is a TensorDict in some inputs and a "
                    "tensor in others"
                )
            if stacking and any(v.batch_size != value.batch_size for v in values):
                raise BatchSizeError(
                    f"stack: sub-TensorDict {(*prefix, key)!r} has different batch sizes "
                    f"{sorted({tuple(v.batch_size) for v in values})}"
                )
            if stacking and _any_ragged(values):  # ragged lazy stacks cannot become dense
                entries[key] = _stack_lazy(values, d)
                continue
            if not stacking and _any_stack(values):
                entries[key] = _cat_lazy(values, d)
                continue
            entries[key] = _combine_level(values, d, (*prefix, key), stacking, differing)
    return first._new(entries, torch.Size(bs))


def cat(
    tds: Sequence[TensorDictContract], dim: int = 0, *, out: TensorDictContract | None = None
) -> Any:
    """Concatenate TensorDicts along the existing batch dim `dim`."""
    tds = _check_inputs(tds, "cat")
    bs = tds[0].batch_size
    d = normalize_dim(dim, len(bs))
    for i, td in enumerate(tds):
        other = td.batch_size
        if other == bs:  # the usual case; slicing torch.Size costs ~1 us a side
            continue
        if len(other) != len(bs) or other[:d] != bs[:d] or other[d + 1 :] != bs[d + 1 :]:
            raise BatchSizeError(
                f"cat along dim {dim}: TensorDict {i} has batch_size {list(other)}, TensorDict 0 has "
                f"{list(bs)}; they may differ only in dim {d}{_member_count_note(tds, bs, other)}"
            )
    # instances of a tensorclass are looked through: over lazy stacks, the class over their cat
    wrapped = tds[0]._td_tensorclass and all(td._td_tensorclass for td in tds)
    inner = [entries_of(td) for td in tds] if wrapped else tds
    if _any_stack(inner):  # as upstream: a lazy stack among the inputs gives a lazy stack
        result = _cat_lazy(inner, d)
        if wrapped:
            result = type(tds[0])._wrap(result)
    else:
        result = _combine(tds, d, (), stacking=False)
    names = tds[0]._raw_names()
    if names is not None:
        carry_names(result, names)
    if out is not None:
        if out.batch_size != result.batch_size:
            raise BatchSizeError(
                f"cat(..., out=): out.batch_size {list(out.batch_size)} and the concatenated "
                f"batch size {list(result.batch_size)} must match"
            )
        out.update_(result)
        return out
    return result


def _stack_lazy(tds: list[TensorDictContract], d: int) -> Any:
    """`stack` of lazy stacks whose members differ in shape: a lazy stack again.

    Stacks alike (same stack dim, as many members) have their members stacked
    pairwise, lazily stacked on the outside (as upstream); other inputs are
    stacked lazily as they are.
    """
    parts = [stack_parts(td) for td in tds]
    first = parts[0]
    if first is None or any(
        p is None or p[1] != first[1] or len(p[0]) != len(first[0]) for p in parts
    ):
        return lazy(tds, d)
    sd = first[1]
    inner, outer = (d, sd + 1) if d <= sd else (d - 1, sd)
    groups = zip(*(p[0] for p in parts if p is not None))
    return lazy([stack(list(group), inner) for group in groups], outer)


def _cat_lazy(tds: list[TensorDictContract], d: int) -> Any:
    """`cat` where an input is a lazy stack: a lazy stack again, as upstream.

    The other inputs are split into lazy stacks along the same stack dim
    (views of them). Along the stack dim the members are chained; along
    another dim the inputs must stack the same number of members, which are
    concatenated pairwise.
    """
    dims = {p[1] for p in map(stack_parts, tds) if p is not None}
    if len(dims) != 1:
        raise BatchSizeError(
            f"cat along dim {d}: the lazy stacks are stacked along different dims "
            f"{sorted(dims)} (cat lazy stacked tds must have same stack dim)"
        )
    sd = dims.pop()
    members = [_members(td, sd) for td in tds]
    if d == sd:
        chained = [m for ms in members for m in ms]
        if not chained:  # every input is empty along the stack dim
            bs = list(tds[0].batch_size)
            first = tds[0]
            del bs[sd]
            return provided("LazyStackedTensorDict")(
                stack_dim=sd, batch_size=bs, device=first.device
            )
        return lazy(chained, sd)
    counts = [len(ms) for ms in members]
    if len(set(counts)) != 1:
        raise BatchSizeError(
            f"cat along dim {d}: the inputs stack {counts} members along dim {sd}; cat lazy "
            "stacked tds along a non-stack dimension requires all inputs to have the same "
            "number of stacked tensordicts"
        )
    inner = d if d < sd else d - 1
    return lazy([cat(list(group), inner) for group in zip(*members)], sd)


def _members(td: TensorDictContract, sd: int) -> list[Any]:
    """The members of a lazy stack along `sd`, or the slices of any other input along `sd`."""
    parts = stack_parts(td)
    if parts is not None:
        return list(parts[0])
    return list(td.unbind(sd))


def _member_count_note(tds: list[TensorDictContract], bs: torch.Size, other: torch.Size) -> str:
    """Upstream's words when the batch sizes differ in a lazy input's stack dim."""
    dims = [p[1] for p in map(stack_parts, tds) if p is not None]
    if dims and len(other) == len(bs) and other[dims[0]] != bs[dims[0]]:
        return (
            f" (dim {dims[0]} is a lazy stack's stack dim: cat lazy stacked tds along a "
            "non-stack dimension requires all inputs to have the same number of stacked "
            "tensordicts)"
        )
    return ""


def _any_stack(tds: list[TensorDictContract]) -> bool:
    """Whether an input is a lazy stack (one look per class)."""
    return any(is_stack(td) for td in {type(td): td for td in tds}.values())


def _combine_entries(
    td: TD,
    keys: tuple[NestedKey, ...],
    out_key: NestedKey,
    dim: int,
    keep_entries: bool,
    op: Any,
) -> TD:
    """`td[out_key] = op([td[k] for k in keys], dim)`; the inputs are removed unless kept."""
    if not keys:
        raise ValueError("stack_tensors/cat_tensors need at least one key to combine")
    values = [td[key] for key in keys]  # a missing key raises KeyError naming it
    for key, value in zip(keys, values):
        if not isinstance(value, Tensor):
            raise TypeError(f"entry {key!r} is a {type(value).__name__}, not a tensor")
    target = unravel_key(out_key)
    removed = [] if keep_entries else [k for k in map(unravel_key, keys) if k != target]
    twice = next((k for i, k in enumerate(removed) if k in removed[:i]), None)
    if twice is not None:  # refused before anything is written (upstream fails half-way)
        raise KeyNotFoundError(
            f"key {twice!r} is listed twice: its entry cannot be removed twice; pass "
            "keep_entries=True to combine an entry with itself"
        )
    td.set(out_key, op(values, dim))  # validated against the batch size before anything is removed
    for key in removed:
        td.del_(key)
    return td


def _leaf_tensors(td: TensorDictContract, sorted_keys: Any) -> list[Tensor]:
    keys = [
        k for k in td.keys(include_nested=True, leaves_only=True) if isinstance(td.get(k), Tensor)
    ]
    if sorted_keys is True:
        keys = sorted(keys, key=lambda k: k if isinstance(k, str) else ".".join(k))
    elif isinstance(sorted_keys, (list, tuple)):
        keys = list(sorted_keys)
    if not keys:
        raise ValueError("stack_from_tensordict/cat_from_tensordict: the TensorDict has no tensor")
    return [td[k] for k in keys]  # a missing key in sorted_keys raises KeyError naming it


class StackMixin(TensorDictContract):
    """Stacking and concatenation methods of TensorDictBase."""

    __slots__ = ()

    @classmethod
    def stack(
        cls,
        input: Sequence[TensorDictContract],
        dim: int = 0,
        *,
        out: TensorDictContract | None = None,
    ) -> Self:
        """Stack TensorDicts along a new batch dim (`torch.stack`; see `td_core.stack`)."""
        return stack(input, dim, out=out)

    @classmethod
    def cat(
        cls,
        input: Sequence[TensorDictContract],
        dim: int = 0,
        *,
        out: TensorDictContract | None = None,
    ) -> Self:
        """Concatenate TensorDicts along a batch dim (`torch.cat`; see `td_core.cat`)."""
        return cat(input, dim, out=out)

    @classmethod
    def lazy_stack(
        cls,
        input: Sequence[Any],
        dim: int = 0,
        *,
        device: Any = None,
        out: TensorDictContract | None = None,
        stack_dim_name: str | None = None,
        strict_shape: bool = False,
    ) -> Any:
        """Stack TensorDicts lazily (a `LazyStackedTensorDict` keeping the originals).

        With `out`, the stack is written into `out` in place and `out` is
        returned, as `stack(..., out=)` does. See `td_core.lazy_stack`.
        """
        return provided("LazyStackedTensorDict").lazy_stack(
            input,
            dim,
            device=device,
            out=out,
            stack_dim_name=stack_dim_name,
            strict_shape=strict_shape,
        )

    @classmethod
    def maybe_dense_stack(
        cls,
        input: Sequence[TensorDictContract],
        dim: int = 0,
        *,
        out: TensorDictContract | None = None,
    ) -> Self:
        """A dense stack when the inputs' keys and shapes agree, else a lazy stack.

        Sub-TensorDicts are handled one level at a time, as upstream's best-intention
        stack: inputs whose top-level entries agree give a dense TensorDict holding lazy
        stacks of the sub-TensorDicts that differ, and lazy stacks alike are stacked
        member by member.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> a = TensorDict(x=torch.zeros(3), batch_size=[3])
            >>> b = TensorDict(x=torch.zeros(3, 2), batch_size=[3])
            >>> type(TensorDict.maybe_dense_stack([a, a])).__name__
            'TensorDict'
            >>> type(TensorDict.maybe_dense_stack([a, b])).__name__
            'LazyStackedTensorDict'
        """
        if out is not None:  # written in place: the inputs must stack densely
            return stack(input, dim, out=out)
        tds = _check_inputs(input, "maybe_dense_stack")
        return best_intention_stack(tds, normalize_dim(dim, tds[0].batch_dims + 1), stack)

    def to_lazystack(self, dim: int = 0) -> Any:
        """A lazy stack of this TensorDict's slices along batch dim `dim` (views of it).

        A lazy stack along `dim` already is one: it is returned as it is.
        """
        d = normalize_dim(dim, self.batch_dims)
        parts = stack_parts(self)
        if parts is not None and parts[1] == d:
            return self
        return lazy(self.unbind(d), d)

    def stack_tensors(
        self,
        *keys: NestedKey,
        out_key: NestedKey,
        dim: int = 0,
        keep_entries: bool = False,
    ) -> Self:
        """Write `torch.stack([self[k] for k in keys], dim)` at `out_key` (returns self).

        `dim` counts from the first dim of the tensors (batch dims included).
        The inputs are removed unless `keep_entries`; nothing is removed if the
        result does not fit the batch size.
        """
        return _combine_entries(self, keys, out_key, dim, keep_entries, torch.stack)

    def cat_tensors(
        self,
        *keys: NestedKey,
        out_key: NestedKey,
        dim: int = 0,
        keep_entries: bool = False,
    ) -> Self:
        """Write `torch.cat([self[k] for k in keys], dim)` at `out_key` (returns self)."""
        return _combine_entries(self, keys, out_key, dim, keep_entries, torch.cat)

    def stack_from_tensordict(
        self, dim: int = 0, *, sorted: Any = None, out: Tensor | None = None
    ) -> Tensor:
        """Stack every tensor leaf into one tensor (they must share a shape).

        Args:
            sorted: `True` orders the leaves by key, a list of keys gives the
                order; by default the order of `keys(include_nested=True)`.
            out: the tensor to write into.
        """
        return torch.stack(_leaf_tensors(self, sorted), dim, out=out)

    def cat_from_tensordict(
        self, dim: int = 0, *, sorted: Any = None, out: Tensor | None = None
    ) -> Tensor:
        """Concatenate every tensor leaf into one tensor along `dim`."""
        return torch.cat(_leaf_tensors(self, sorted), dim, out=out)
