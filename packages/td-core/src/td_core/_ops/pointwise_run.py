"""How one row of the pointwise table runs over a TensorDict.

An op is a per-leaf torch function (`fn` out of place, `fn_` in place) and,
where torch has one, its `torch._foreach_*` form. Operands come in three
sorts, resolved once per call:

- a Python scalar (or `None`): passed as is to every leaf;
- a tensor: a *batch-shaped* value, as upstream treats it. It is broadcast
  against the batch size (`[4, 3]` or `[3]` for a `[4, 3]` TensorDict),
  then viewed with one trailing singleton dim per feature dim of each leaf;
- a TensorDict: its leaves at this TensorDict's leaf keys, in traversal order.
  Missing keys raise `KeyError` naming the key (`default=` fills them, or
  `"intersection"` keeps only common keys); out of place, keys only the
  operand holds raise too.

`_foreach` runs every leaf in one call; the per-leaf path is taken under
`torch.func` transforms (vmap, grad, jacrev: `_foreach` has no batching
rule) and when `_foreach` refuses the arguments. In-place ops check every
leaf's dtype against the op (once per dtype combination, cached) and every
shape before writing, so a failed op leaves the TensorDict unchanged. Lazy
stacks run per member and are re-stacked lazily; non-tensor leaves are
carried along unchanged. Out of place, the result of a locked TensorDict is
locked too, as upstream.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.compiler import is_compiling

from td_core._core.traverse import is_nt, is_td, rebuild, stack_parts
from td_core._core.utils import NO_DEFAULT
from td_core._ops.locked_results import locked_like_source
from td_core.errors import BatchSizeError, KeyNotFoundError

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract

__all__ = ["Op", "run"]

Tensor = torch.Tensor
_functorch_active = torch._C._are_functorch_transforms_active
_SCALARS = (int, float, bool, complex)


@dataclass(frozen=True)
class Op:
    """One row of the pointwise table.

    Attributes:
        name: the public method name (out of place).
        fn: per-leaf, out of place: `fn(leaf, *operands, **kwargs)`.
        fn_: per-leaf, in place (`None`: the op has no in-place form).
        foreach: `torch._foreach_*` form of `fn` (`None`: per leaf only).
        foreach_: `torch._foreach_*_` form of `fn_`.
    """

    name: str
    fn: Callable[..., Tensor]
    fn_: Callable[..., Tensor] | None = None
    foreach: Callable[..., Any] | None = None
    foreach_: Callable[..., Any] | None = None


@locked_like_source  # the result of a locked TensorDict's op is locked, as upstream
def run(
    td: TensorDictContract,
    op: Op,
    operands: tuple[Any, ...] = (),
    *,
    inplace: bool = False,
    default: Any = None,
    **kwargs: Any,
) -> Any:
    """Run `op` over `td`'s tensor leaves (in place: write them and return `td`)."""
    members = _lazy_members(td)
    if members is not None:
        return _run_lazy(td, members, op, operands, inplace, default, kwargs)
    if default is not None and not inplace:
        td, operands = _fill_missing(td, operands, default)
    leaves: list[Tensor] = []
    if not _collect(td, leaves):  # a lazy stack inside: run entry by entry
        return _run_entries(td, op, operands, inplace, kwargs)
    bs = td.batch_size
    args: list[Any] = []
    new_bs = bs
    for operand in operands:
        if type(operand) in _SCALARS or operand is None:
            args.append(operand)
        elif isinstance(operand, Tensor):
            if operand.ndim == 0:
                args.append([operand] * len(leaves))
                continue
            new_bs = _broadcast(op, new_bs, operand.shape, "tensor")
            n = len(bs)
            shape = operand.shape
            args.append(
                [
                    operand.view(*shape, *([1] * (t.ndim - n))) if t.ndim > n else operand
                    for t in leaves
                ]
            )
        elif is_td(operand):
            if operand.batch_size != bs:
                new_bs = _broadcast(op, new_bs, operand.batch_size, "TensorDict")
            found: list[Any] = []
            _align(td, operand, found, (), not inplace)
            args.append(found)
        else:
            args.append(operand)  # numpy scalars and the like: torch decides
    if new_bs != bs:
        if inplace:
            raise BatchSizeError(
                f"{op.name}_: an operand of batch shape {list(new_bs)} cannot be written into a "
                f"TensorDict of batch_size {list(bs)} in place; use {op.name}() instead"
            )
        return run(td.expand(new_bs), op, operands, **kwargs)
    if inplace:
        _apply_inplace(td, op, leaves, args, kwargs)
        return td
    return rebuild(td, iter(_apply(op, leaves, args, kwargs)))


# ------------------------------------------------------------------ execution
def _foreach_ok(args: list[Any]) -> bool:
    return not _functorch_active() and all(type(a) is list or type(a) in _SCALARS for a in args)


def _apply(op: Op, leaves: list[Tensor], args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    if not leaves:
        return []
    if op.foreach is not None and _foreach_ok(args):
        fast = _tensor_scalar(op, leaves, args, kwargs, inplace=False)
        if fast is not None:
            fn, operand, extra = fast
            return fn(leaves, operand, **extra)
        try:
            return op.foreach(leaves, *args, **kwargs)
        except (RuntimeError, TypeError):
            pass  # a dtype or an argument _foreach refuses: torch's own per-leaf error, if any
    return list(_per_leaf(op.fn, leaves, args, kwargs))


def _apply_inplace(
    td: TensorDictContract, op: Op, leaves: list[Tensor], args: list[Any], kwargs: dict[str, Any]
) -> None:
    if not leaves:
        return
    assert op.fn_ is not None
    _check_shapes(td, op, leaves, args)
    _check_dtypes(td, op, leaves, args, kwargs)
    if op.foreach_ is not None and _foreach_ok(args):
        fast = _tensor_scalar(op, leaves, args, kwargs, inplace=True)
        if fast is not None:
            fn, operand, extra = fast
            fn(leaves, operand, **extra)
            return
        try:
            op.foreach_(leaves, *args, **kwargs)
            return
        except TypeError:
            pass  # argument types _foreach does not take (checked before any write)
    collections.deque(_per_leaf(op.fn_, leaves, args, kwargs), maxlen=0)


# ops whose `_foreach` Tensor overload takes a 0-dim tensor operand:
# (out of place, in place, whether the number is negated, keywords that select the overload)
_SCALAR_AS_TENSOR: dict[
    str, tuple[Callable[..., Any], Callable[..., Any], bool, dict[str, Any]]
] = {
    "add": (torch._foreach_add, torch._foreach_add_, False, {"alpha": 1}),
    "sub": (torch._foreach_add, torch._foreach_add_, True, {"alpha": 1}),  # x - c is x + (-c)
    "mul": (torch._foreach_mul, torch._foreach_mul_, False, {}),
    "div": (torch._foreach_div, torch._foreach_div_, False, {}),
}
# leaf dtype -> the operand's dtype: the leaves' own (no cast per leaf), float32 for half
# precision (a float16/bfloat16 operand would round the number before the op does)
_OPERAND_DTYPE = {
    torch.float32: torch.float32,
    torch.float64: torch.float64,
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
}
_EXACT_INT = 2**53  # ints up to this convert to float64 without rounding


def _tensor_scalar(
    op: Op, leaves: list[Tensor], args: list[Any], kwargs: dict[str, Any], *, inplace: bool
) -> tuple[Callable[..., Any], Tensor, dict[str, Any]] | None:
    """A Python number operand as one 0-dim tensor, where that is cheaper and exact.

    On CPU, torch's `_foreach` Scalar overloads wrap the number into a new tensor
    for every leaf (about 1 us a leaf); the Tensor overloads reuse one, 3-4x faster
    over many small leaves. For floating leaves the result is bit for bit the same:
    the 0-dim operand does not promote their dtype and is read at the op's compute
    precision, as a Python number is (`alpha=1` selects `add`'s Tensor overload).
    Returns `(function, operand, keywords)`, or `None` to keep the Scalar path (other
    ops, kwargs, integer or complex leaves or numbers, leaves not on CPU, where
    `_foreach` has fused scalar kernels).
    """
    if kwargs or len(args) != 1:
        return None
    row = _SCALAR_AS_TENSOR.get(op.name)
    value = args[0]
    if row is None or not (
        type(value) is float or (type(value) is int and -_EXACT_INT <= value <= _EXACT_INT)
    ):
        return None
    if not leaves[0].is_cpu:
        return None
    dtypes = _dtypes(leaves)
    if not dtypes <= _OPERAND_DTYPE.keys():
        return None
    # one dtype: the operand's own (no cast per leaf); mixed: float64 (exact, a cast per leaf)
    dtype = _OPERAND_DTYPE[dtypes.pop()] if len(dtypes) == 1 else torch.float64
    out_of_place, in_place, negate, extra = row
    operand = torch.scalar_tensor(-value if negate else value, dtype=dtype)
    return (in_place if inplace else out_of_place), operand, extra


def _per_leaf(
    fn: Callable[..., Any], leaves: list[Tensor], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    if not args:
        return map(fn, leaves)
    return map(fn, leaves, *(a if type(a) is list else itertools.repeat(a) for a in args))


# ------------------------------------------------------------------ operands
def _broadcast(op: Op, bs: torch.Size, shape: torch.Size, what: str) -> torch.Size:
    if shape == bs:
        return bs
    try:
        return torch.Size(torch.broadcast_shapes(bs, shape))
    except RuntimeError:
        raise BatchSizeError(
            f"{op.name}: a {what} operand of batch shape {list(shape)} does not broadcast with "
            f"the batch_size {list(bs)}; a tensor operand is aligned with the batch dims "
            "(unsqueeze or expand it to the batch size, or use apply() for other alignments)"
        ) from None


def _align(
    td: TensorDictContract,
    other: TensorDictContract,
    out: list[Any],
    prefix: tuple[str, ...],
    strict: bool,
) -> None:
    """Append `other`'s leaves at `td`'s tensor-leaf keys to `out`, in traversal order."""
    if _align_same_order(td, other, out, prefix, strict):
        return
    get = other._get_str
    matched = 0
    for key, value in td._items_str():
        if not isinstance(value, Tensor) and value._is_non_tensor:
            continue
        item = get(key, NO_DEFAULT)
        if item is NO_DEFAULT:
            raise _key_error(td, other, (*prefix, key), "the operand")
        matched += 1
        if isinstance(value, Tensor):
            if not isinstance(item, Tensor):
                raise _key_error(td, other, (*prefix, key), "the operand as a tensor")
            out.append(item)
        elif is_td(item):
            _align(value, item, out, (*prefix, key), strict)
        else:
            raise _key_error(td, other, (*prefix, key), "the operand as a TensorDict")
    if strict and len(other._keys_str()) > matched:
        mine = td._keys_str()
        for key, item in other._items_str():
            if key not in mine and (isinstance(item, Tensor) or not item._is_non_tensor):
                raise KeyNotFoundError(
                    f"key {_show((*prefix, key))!r} is in the operand but not in the TensorDict: "
                    "both must hold the same keys (pass default= to fill the missing ones, or "
                    'default="intersection" to keep the common ones)'
                )


def _align_same_order(
    td: TensorDictContract,
    other: TensorDictContract,
    out: list[Any],
    prefix: tuple[str, ...],
    strict: bool,
) -> bool:
    """The usual case, keys in the same order on both sides: zip them, no lookups.

    Returns `False` (`out` as it was) at the first difference, for `_align` to
    take the lookup path and name what differs.
    """
    mine = td._items_str()
    theirs = other._items_str()
    if len(mine) != len(theirs):
        return False
    start = len(out)
    for (key, value), (key2, item) in zip(mine, theirs):
        if key != key2:
            break
        if type(value) is Tensor or isinstance(value, Tensor):
            if type(item) is Tensor or isinstance(item, Tensor):
                out.append(item)
                continue
            break
        if value._is_non_tensor:
            continue
        if not is_td(item) or not _align_same_order(value, item, out, (*prefix, key), strict):
            break
    else:
        return True
    del out[start:]
    return False


def _show(key: tuple[str, ...]) -> str | tuple[str, ...]:
    return key[0] if len(key) == 1 else key


def _key_error(
    td: TensorDictContract, other: TensorDictContract, key: tuple[str, ...], where: str
) -> KeyNotFoundError:
    value = td._get_str(key[-1], None)
    below = ""
    if is_td(value):
        leaves = [(*key, *(k if type(k) is tuple else (k,))) for k in value.keys(True, True)]
        below = f" (holding {leaves})"
    return KeyNotFoundError(
        f"key {_show(key)!r}{below} is not in {where} (operand keys here: "
        f"{sorted(other._keys_str())}); "
        'pass default= to fill it, or default="intersection" to keep only the common keys'
    )


def _fill_missing(
    td: TensorDictContract, operands: tuple[Any, ...], default: Any
) -> tuple[TensorDictContract, tuple[Any, ...]]:
    """Upstream's `default=`: `"intersection"` keeps common keys, a value fills missing ones."""
    out = []
    for operand in operands:
        if not is_td(operand):
            out.append(operand)
            continue
        mine = set(td.keys(True, True))
        theirs = set(operand.keys(True, True))
        if default == "intersection":
            common = mine & theirs
            td = td.select(*common)
            operand = operand.select(*common)
        else:
            td = td.clone(recurse=False)
            operand = operand.clone(recurse=False)
            for key in theirs - mine:
                td.set(key, _filled(operand.get(key), default))
            for key in mine - theirs:
                operand.set(key, _filled(td.get(key), default))
        out.append(operand)
    return td, tuple(out)


def _filled(like: Any, default: Any) -> Any:
    if isinstance(like, Tensor):
        if isinstance(default, Tensor):
            return default.to(like.device).expand_as(like)
        return torch.full_like(like, default)
    return like.apply(lambda t: _filled(t, default))


# ------------------------------------------------------------------ in-place checks
def _check_shapes(td: TensorDictContract, op: Op, leaves: list[Tensor], args: list[Any]) -> None:
    shapes = None
    for a in args:
        if type(a) is not list:
            continue
        if shapes is None:
            shapes = _shapes(leaves)
        if _shapes(a) == shapes:
            continue
        for t, x in zip(leaves, a):
            if x.shape != t.shape and (
                x.ndim > t.ndim or torch.broadcast_shapes(t.shape, x.shape) != t.shape
            ):
                raise BatchSizeError(
                    f"{op.name}_: the operand of shape {list(x.shape)} cannot be written into "
                    f"the entry {_key_of(td, t)!r} of shape {list(t.shape)} in place"
                )


_DTYPE_OK: dict[tuple[Any, ...], BaseException | None] = {}
_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")


def _dtypes(tensors: list[Tensor]) -> set[torch.dtype]:
    # a C-level getter in eager; Dynamo cannot trace one (a graph break under fullgraph)
    return {t.dtype for t in tensors} if is_compiling() else set(map(_DTYPE, tensors))


def _shapes(tensors: list[Tensor]) -> list[torch.Size]:
    return [t.shape for t in tensors] if is_compiling() else list(map(_SHAPE, tensors))


def _check_dtypes(
    td: TensorDictContract,
    op: Op,
    leaves: list[Tensor],
    args: list[Any],
    kwargs: dict[str, Any],
) -> None:
    """Raise what torch would for the first leaf whose dtype the op cannot write, before any write."""
    lists = [a for a in args if type(a) is list]
    dtypes = _dtypes(leaves)
    arg_dtypes = [_dtypes(a) for a in lists]
    if len(dtypes) == 1 and all(len(s) == 1 for s in arg_dtypes):
        combos = {(next(iter(dtypes)), *(next(iter(s)) for s in arg_dtypes))}
    else:
        combos = set(zip((t.dtype for t in leaves), *([x.dtype for x in a] for a in lists)))
    scalars = tuple(type(a) for a in args if type(a) is not list)
    for combo in combos:
        key = (op.name, combo, scalars, tuple(sorted(kwargs)))
        err = _DTYPE_OK.get(key, NO_DEFAULT)
        if err is NO_DEFAULT:
            err = _DTYPE_OK[key] = _probe(op, combo, args, kwargs)
        if err is not None:
            bad = next(
                t for i, t in enumerate(leaves) if (t.dtype, *(a[i].dtype for a in lists)) == combo
            )
            raise type(err)(
                f"{op.name}_ cannot write entry {_key_of(td, bad)!r} (dtype {bad.dtype}) in place: "
                f"{err}. Nothing was written; cast first (e.g. td.float()) or use {op.name}()"
            )


def _probe(
    op: Op, combo: tuple[torch.dtype, ...], args: list[Any], kwargs: dict[str, Any]
) -> BaseException | None:
    """What the in-place op raises on one-element tensors of these dtypes (`None`: it works)."""
    dtypes = iter(combo)
    self_probe = torch.ones((), dtype=next(dtypes))
    probe_args = [torch.ones((), dtype=next(dtypes)) if type(a) is list else a for a in args]
    assert op.fn_ is not None
    try:
        op.fn_(self_probe, *probe_args, **kwargs)
    except (RuntimeError, TypeError) as err:
        return err
    return None


def _key_of(td: TensorDictContract, leaf: Tensor) -> Any:
    for key, value in td.items(include_nested=True, leaves_only=True):
        if value is leaf:
            return key
    return "?"


# ------------------------------------------------------------------ lazy stacks


def _collect(td: TensorDictContract, out: list[Tensor]) -> bool:
    """`tensor_leaves` into `out`; `False` (stop) at a lazy stack or a view whose reads are copies."""
    if td._reads_are_copies:
        return False
    for value in td._values_str():
        if isinstance(value, Tensor):
            out.append(value)
        elif not value._is_non_tensor:
            if _lazy_members(value) is not None or not _collect(value, out):
                return False
    return True


def _run_entries(
    td: TensorDictContract,
    op: Op,
    operands: tuple[Any, ...],
    inplace: bool,
    kwargs: dict[str, Any],
) -> Any:
    """`op` run on each entry alone (a one-entry TensorDict sharing the leaf, or the sub-tree)."""
    bs = new_bs = td.batch_size
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if not isinstance(value, Tensor) and value._is_non_tensor:
            out[key] = value
            continue
        parts = []
        for operand in operands:
            if is_td(operand):
                item = operand._get_str(key, NO_DEFAULT)
                if item is NO_DEFAULT:
                    raise _key_error(td, operand, (key,), "the operand")
                if isinstance(item, Tensor):
                    item = operand._new({key: item}, operand.batch_size)
                parts.append(item)
            else:
                parts.append(operand)
        entry = td._new({key: value}, bs) if isinstance(value, Tensor) else value
        result = run(entry, op, tuple(parts), inplace=inplace, **kwargs)
        out[key] = result._get_str(key) if isinstance(value, Tensor) else result
        new_bs = result.batch_size  # an operand may broadcast the batch dims (`td + t[None]`)
        if inplace and td._reads_are_copies and isinstance(value, Tensor):
            td._set_str(key, out[key])  # the leaf read was a copy: write the result back
    if inplace:
        return td
    if new_bs != bs:  # non-tensor entries, kept as they were, follow the new batch dims
        out = {k: v.expand(new_bs) if is_nt(v) else v for k, v in out.items()}
    return td._new(out, new_bs)


def _lazy_members(td: TensorDictContract) -> list[Any] | None:
    parts = stack_parts(td)
    return None if parts is None else parts[0]


def _run_lazy(
    td: TensorDictContract,
    members: list[TensorDictContract],
    op: Op,
    operands: tuple[Any, ...],
    inplace: bool,
    default: Any,
    kwargs: dict[str, Any],
) -> Any:
    """Per member, the operands split along the stack dim; results re-stacked lazily."""
    dim, split = split_operands(td, op.name, operands, inplace)
    results = [
        run(member, op, tuple(parts), inplace=inplace, default=default, **kwargs)
        for member, *parts in zip(members, *split)
    ]
    if inplace:
        return td
    return type(td)(*results, stack_dim=dim)  # type: ignore[call-arg]


def split_operands(
    td: TensorDictContract, name: str, operands: tuple[Any, ...], inplace: bool
) -> tuple[int, list[Any]]:
    """The result's stack dim, and each operand split into one part per member of `td`."""
    bs = td.batch_size
    new_bs = bs
    for operand in operands:
        if isinstance(operand, Tensor) and operand.ndim:
            new_bs = _broadcast(Op(name, _no_op), new_bs, operand.shape, "tensor")
        elif is_td(operand):
            new_bs = _broadcast(Op(name, _no_op), new_bs, operand.batch_size, "TensorDict")
    if new_bs != bs and inplace:
        raise BatchSizeError(
            f"{name}_: the operands make the batch shape {list(new_bs)}, which cannot be "
            f"written into a TensorDict of batch_size {list(bs)} in place"
        )
    dim: int = td.stack_dim + len(new_bs) - len(bs)  # type: ignore[attr-defined]
    split: list[Any] = []
    for operand in operands:
        if isinstance(operand, Tensor) and operand.ndim:
            lead = [1] * (len(new_bs) - operand.ndim)
            split.append(operand.view(*lead, *operand.shape).expand(new_bs).unbind(dim))
        elif is_td(operand):
            same = operand.batch_size == new_bs
            split.append((operand if same else operand.expand(new_bs)).unbind(dim))
        else:
            split.append(itertools.repeat(operand))
    return dim, split


def _no_op(t: Tensor) -> Tensor:
    return t
