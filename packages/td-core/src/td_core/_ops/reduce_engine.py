"""The reduction engine: the table of ops (`REDUCTIONS`) and the one implementation.

Every op reads `dim` the same way:

- no `dim` (or `None`): each leaf is reduced over all of its dims (`logsumexp`: over
  the batch dims only) and the result has `batch_size=[]` (`[1, ...]` with `keepdim`);
- an int or a tuple of ints: those batch dims; `keepdim=True` keeps them with size 1;
- `"feature"`: each leaf over the dims after its own (sub-)TensorDict's batch dims; every
  batch size is unchanged and non-tensor leaves are kept.

With `reduce=True` the leaves are reduced together into one tensor: with no `dim` over
every element of every leaf, with `dim="feature"` over the features of all leaves, with
batch dims by concatenating the leaves along the (first) dim and reducing over the dims.
`max`/`min` with a dim and `cummax`/`cummin` return `(values, indices)` as torch's
named tuples of TensorDicts. Non-tensor leaves are left out of every other result, as
upstream does.
A lazy stack with ragged leaves is reduced member by member when the dims leave its stack
dim alone. The public methods are in `_reductions.py`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from torch.compiler import is_compiling

from td_core._core.traverse import (
    has_exclusive_keys,
    is_nt,
    is_stack,
)
from td_core._core.utils import NO_DEFAULT
from td_core._leaves.unbatched import is_unbatched
from td_core._ops.lazy_shape import restack
from td_core._ops.names import carry_names, names_after
from td_core._ops.reduce_mean import SumThenDivide
from td_core.errors import BatchSizeError, DimError

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract

__all__ = [
    "REDUCTIONS",
    "Reduction",
    "reduction",
    "bool_reduction",
    "bool_over_leaves",
]

Tensor = torch.Tensor
_functorch_active = torch._C._are_functorch_transforms_active
Dim = int | tuple[int, ...] | list[int] | Literal["feature"] | None
KeyTransform = Callable[[str], str] | None


@dataclasses.dataclass(frozen=True)
class Reduction:
    """One row of the table.

    Attributes:
        name: the method name (and the name of torch's named tuple for `indices` ops).
        fn: the torch op, called as `fn(leaf, *args, *dims, keepdim=..., **kwargs)`.
        multi_dim: `fn` takes a tuple of dims (otherwise several dims are flattened into one).
        no_dim: what no `dim` means: `"leaf"` (every dim of each leaf) or `"batch"`.
        scan: the op keeps every dim (`cummax`, `softmax`): it takes exactly one dim.
        indices: `fn` returns `(values, indices)` when given a dim.
        values_fn: the op that returns the values alone (`amax` for `max`), if any.
    """

    name: str
    fn: Callable[..., Any]
    multi_dim: bool = True
    no_dim: Literal["leaf", "batch"] = "leaf"
    scan: bool = False
    indices: bool = False
    values_fn: Callable[..., Any] | None = None


REDUCTIONS: dict[str, Reduction] = {
    row.name: row
    for row in (
        Reduction("sum", Tensor.sum),
        Reduction("nansum", Tensor.nansum),
        Reduction("mean", Tensor.mean),
        Reduction("nanmean", Tensor.nanmean),
        Reduction("prod", Tensor.prod, multi_dim=False),
        Reduction("std", Tensor.std),
        Reduction("var", Tensor.var),
        Reduction("amax", Tensor.amax),
        Reduction("amin", Tensor.amin),
        Reduction("max", Tensor.max, multi_dim=False, indices=True, values_fn=Tensor.amax),
        Reduction("min", Tensor.min, multi_dim=False, indices=True, values_fn=Tensor.amin),
        Reduction("logsumexp", Tensor.logsumexp, no_dim="batch"),
        Reduction("quantile", Tensor.quantile, multi_dim=False),
        Reduction("cummax", Tensor.cummax, scan=True, indices=True),
        Reduction("cummin", Tensor.cummin, scan=True, indices=True),
        Reduction("softmax", Tensor.softmax, scan=True),
        Reduction("all", Tensor.all),
        Reduction("any", Tensor.any),
        Reduction("norm", torch.linalg.vector_norm),
    )
}


# ------------------------------------------------------------------ dims
def _parse_dim(
    td: TensorDictContract, row: Reduction, dim: Any, keepdim: bool
) -> tuple[str, tuple[int, ...]]:
    """`("leaf" | "feature" | "dims", dims)`; raises before anything is computed."""
    n = td.batch_dims
    if dim is NO_DEFAULT or dim is None:
        if row.scan:
            raise TypeError(f"{row.name}() needs a batch dim (an int), got {dim!r}")
        if row.no_dim == "batch":
            return "dims", tuple(range(n))
        return "leaf", ()
    if isinstance(dim, str):
        if dim != "feature":
            raise ValueError(
                f"{row.name}: dim must be an int, a tuple of ints, None or 'feature', got {dim!r}"
            )
        if keepdim:
            raise TypeError("dim='feature' is incompatible with keepdim=True.")
        if row.scan:
            raise TypeError(f"{row.name}() needs a batch dim (an int), got dim='feature'")
        return "feature", ()
    items = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    out = []
    for d in items:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"{row.name}: dims must be ints, got {dim!r}")
        if not -n <= d < n:
            raise DimError(
                f"{row.name}: dim {d} is not a batch dim of a TensorDict with batch_size "
                f"{list(td.batch_size)} (valid dims: {-n} to {n - 1}); to reduce over the "
                "feature dims pass dim='feature' or use apply()"
            )
        out.append(d % n)
    if len(set(out)) != len(out):
        raise DimError(f"{row.name}: dim {dim!r} names a batch dim twice")
    if row.scan and len(out) != 1:
        raise TypeError(f"{row.name}() takes one batch dim, got {dim!r}")
    return "dims", tuple(out)


def _features(t: Tensor, n: int) -> Tensor:
    """`t` with its dims after the first `n` flattened into one last dim."""
    return t.unsqueeze(-1) if t.ndim == n else t.flatten(n)


def _reduced_size(bs: torch.Size, dims: tuple[int, ...], keepdim: bool) -> torch.Size:
    if keepdim:
        return torch.Size(1 if i in dims else s for i, s in enumerate(bs))
    return torch.Size(s for i, s in enumerate(bs) if i not in dims)


@dataclasses.dataclass(slots=True)
class _Plan:
    """One call of `reduction` as it was read, handed on to the helpers below.

    Attributes:
        row: the op's row of `REDUCTIONS`.
        mode: how `dim` was read: `"leaf"`, `"feature"` or `"dims"` (see `_parse_dim`).
        dims: the batch dims reduced (with `mode="dims"`).
        keepdim: whether the reduced dims stay, with size 1.
        pair: whether the result is `(values, indices)`.
        args: the op's positional arguments after the leaf (`quantile`'s `q`).
        kwargs: the op's keyword arguments.
    """

    row: Reduction
    mode: str
    dims: tuple[int, ...]
    keepdim: bool
    pair: bool
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


# ---------------------------------------------------------------- leaf ops
def _call(
    row: Reduction, values: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[..., Any]:
    """`fn(t, *dims, **keywords)` for the row with `args` and `kwargs` bound.

    `values`: a dim is given and only the values are wanted (`amax` for `max`).
    """
    fn = row.values_fn if values and row.values_fn is not None else row.fn
    if values and row.indices and row.values_fn is None:  # cummax/cummin values
        return lambda t, *d, **kw: fn(t, *args, *d, **kw, **kwargs)[0]
    if args or kwargs:
        return lambda t, *d, **kw: fn(t, *args, *d, **kw, **kwargs)
    return fn


def _leaf_op(plan: _Plan, n: int) -> Callable[[Tensor], Any]:
    """The function each tensor leaf goes through (dims passed positionally: it is faster)."""
    row, mode, dims, keepdim = plan.row, plan.mode, plan.dims, plan.keepdim
    args, kwargs = plan.args, plan.kwargs
    call = _call(row, not plan.pair and mode != "leaf", args, kwargs)
    if mode == "feature":
        return lambda t: call(_features(t, n), -1)
    if mode == "leaf":
        if not keepdim:
            return call
        if row.multi_dim or row.values_fn is not None:
            whole = _call(row, True, args, kwargs)
            return lambda t: whole(t, tuple(range(t.ndim)), keepdim=True)
        return lambda t: call(t.reshape(-1), 0).reshape(*_lead(row, args), *(1,) * t.ndim)
    if len(dims) == 1:
        (d,) = dims
        keep = {"keepdim": True} if keepdim and not row.scan else {}
        if (call is row.fn or call is row.values_fn) and not is_compiling():  # a C-level call
            return operator.methodcaller(call.__name__, d, **keep)
        return lambda t: call(t, d, **keep)
    if row.multi_dim or row.values_fn is not None:  # max/min over several dims: amax/amin
        many = _call(row, True, args, kwargs)
        return lambda t: many(t, dims, keepdim=keepdim)
    return lambda t: _flattened(call, t, dims, keepdim, len(_lead(row, args)))


def _flattened(
    call: Callable[..., Tensor], t: Tensor, dims: tuple[int, ...], keepdim: bool, lead: int
) -> Tensor:
    """`call` over several dims of `t` for ops that take one: flatten them into dim 0."""
    k = len(dims)
    out = call(t.movedim(dims, tuple(range(k))).flatten(0, k - 1), 0)
    if keepdim:
        for d in sorted(dims):
            out = out.unsqueeze(d + lead)
    return out


def _lead(row: Reduction, args: tuple[Any, ...]) -> tuple[int, ...]:
    """Dims an op puts in front of its result (`quantile` with a tensor `q`)."""
    if row.name == "quantile" and isinstance(args[0], Tensor):
        return tuple(args[0].shape)
    return ()


# ---------------------------------------------------------------- traversal
def _walk(
    td: TensorDictContract,
    leaf: Callable[[Tensor], Any],
    new_bs: Callable[[torch.Size], torch.Size],
    key_transform: KeyTransform,
    pair: bool,
    sub: Callable[[Any], Any] | None = None,
) -> Any:
    """A result tree shaped like `td` (with `pair`: two, values and indices).

    `sub` reduces a sub-TensorDict (default: `_walk` with the same leaf op); with
    it, non-tensor leaves are kept (the batch size does not change).
    """
    out: dict[str, Any] = {}
    second: dict[str, Any] = {}
    for key, value in td._items_str():
        if type(value) is Tensor or (isinstance(value, Tensor) and not is_unbatched(value)):
            result = leaf(value)
        elif is_unbatched(value):  # no batch dim to reduce, kept
            kept = value.with_batch_size(new_bs(td.batch_size))
            result = (kept, kept) if pair else kept
        elif value._is_non_tensor:
            if sub is None:
                continue
            result = (value, value) if pair else value
        elif sub is not None:
            result = sub(value)
        else:
            result = _walk(value, leaf, new_bs, key_transform, pair)
        if key_transform is not None:
            key = key_transform(key)
        if pair:
            out[key], second[key] = result
        else:
            out[key] = result
    bs = new_bs(td.batch_size)
    return (td._new(out, bs), td._new(second, bs)) if pair else td._new(out, bs)


def _walk_features(td: TensorDictContract, plan: _Plan, key_transform: KeyTransform) -> Any:
    """`dim="feature"`: each leaf over the dims after its own TensorDict's batch dims.

    Every (sub-)TensorDict keeps its batch size, and non-tensor leaves are kept.
    """
    leaf = _leaf_op(plan, td.batch_dims)

    def sub(value: Any) -> Any:
        return _walk_features(value, plan, key_transform)

    return _walk(td, leaf, lambda bs: bs, key_transform, plan.pair, sub)


def _flat_leaves(td: TensorDictContract, out: list[Tensor]) -> list[Tensor]:
    """Every tensor leaf, reading a lazy stack's members instead of stacking (ragged leaves too)."""
    _find_leaf(td, out.append)  # append returns None: the walk never stops
    return out


def _find_leaf(td: TensorDictContract, stop: Callable[[Tensor], Any]) -> bool:
    """Walk the tensor leaves as `_flat_leaves` lists them until `stop(leaf)` is true;
    whether it was."""
    if not is_stack(td):
        for value in td._values_str():
            if isinstance(value, Tensor):
                if stop(value):
                    return True
            elif not value._is_non_tensor and _find_leaf(value, stop):
                return True
        return False
    if has_exclusive_keys(td):  # each member's own leaves: the keys only some hold count too
        return any(_find_leaf(m, stop) for m in cast(Any, td).tensordicts)
    for key, first in td._key_items():  # a lazy stack's: a member's leaf stands for the stack
        if isinstance(first, Tensor):
            if _find_member_leaf(td, key, stop):
                return True
        elif not is_nt(first) and _find_leaf(first, stop):
            return True  # (a lazy stack of the members' sub-TensorDicts)
    return False


def _batch_leaves(td: TensorDictContract) -> list[Tensor]:
    """Every tensor leaf with the container's batch dims in front (a lazy stack's stacked).

    A ragged lazy stack raises `BatchSizeError`, as there is no stacked leaf to read.
    """
    values = (td.get(key) for key in td.keys(include_nested=True, leaves_only=True))
    return [value for value in values if isinstance(value, Tensor)]


# ---------------------------------------------------------------- the implementation
def reduction(
    td: TensorDictContract,
    row: Reduction,
    dim: Any = NO_DEFAULT,
    keepdim: Any = False,
    *args: Any,
    reduce: bool | None = None,
    key_transform: KeyTransform = None,
    return_indices: bool = True,
    **kwargs: Any,
) -> Any:
    """Run the reduction `row` over `td`; `args`/`kwargs` go to the torch function."""
    keepdim = bool(keepdim)
    mode, dims = _parse_dim(td, row, dim, keepdim)
    n = td.batch_dims
    pair = row.indices and return_indices and mode != "leaf"
    if pair and len(dims) > 1:
        raise TypeError(
            f"{row.name} over several dims {dim!r} has no single index: pass one dim, or "
            "return_indices=False for the values"
        )
    plan = _Plan(row, mode, dims, keepdim, pair, args, kwargs)
    if reduce:
        return _reduce_leaves(td, plan)
    if key_transform is not None:
        _check_fields(td, key_transform)
    try:
        if (
            row.scan
            and mode == "dims"
            and has_exclusive_keys(td)
            and cast(Any, td).stack_dim not in dims
        ):
            # softmax/cummax over a member dim: each member keeps the keys only it holds
            result = _per_member(td, plan, key_transform)
        elif mode == "feature":
            result = _walk_features(td, plan, key_transform)
        elif row.name == "mean" and not args and not kwargs and not _functorch_active():
            leaf = SumThenDivide(
                _leaf_op(dataclasses.replace(plan, row=REDUCTIONS["sum"]), n),
                _leaf_op(plan, n),
                None if mode == "leaf" else math.prod(td.batch_size[d] for d in dims),
            )
            result = _walk(td, leaf, _batch_rule(plan, n, td.batch_size), key_transform, pair)
            leaf.finish()
        else:
            new_bs = _batch_rule(plan, n, td.batch_size)
            result = _walk(td, _leaf_op(plan, n), new_bs, key_transform, pair)
            if row.name == "softmax" and has_exclusive_keys(td):  # over the stack dim
                result = _softmax_keeping_exclusive(td, result, plan)
    except BatchSizeError:  # a lazy stack with ragged leaves: reduce each member if the dims allow
        stack_dim = getattr(td, "stack_dim", None)
        if mode != "dims" or stack_dim is None or stack_dim in dims:
            raise
        result = _per_member(td, plan, key_transform)
    names = td._raw_names()
    if names is not None and mode == "dims" and not row.scan:  # the kept dims keep their names
        dropped = () if keepdim else dims
        result = carry_names(
            result, names_after(names, drop=dropped, insert=range(len(_lead(row, args))))
        )
    return getattr(torch.return_types, row.name)(result) if pair else result


def _per_member(td: TensorDictContract, plan: _Plan, key_transform: KeyTransform) -> Any:
    """The reduction of each member of a lazy stack over `dims` (not the stack dim), re-stacked lazily."""
    row, dims, keepdim = plan.row, plan.dims, plan.keepdim
    stack_dim: int = cast(Any, td).stack_dim
    inner = tuple(d if d < stack_dim else d - 1 for d in dims)
    results = [
        reduction(
            member,
            row,
            inner,
            keepdim,
            *plan.args,
            key_transform=key_transform,
            return_indices=plan.pair,
            **plan.kwargs,
        )
        for member in cast(Any, td).tensordicts
    ]
    dropped = 0 if keepdim or row.scan else sum(d < stack_dim for d in dims)
    new_dim = stack_dim - dropped + len(_lead(row, plan.args))
    if plan.pair:
        return tuple(restack(td, part, new_dim) for part in zip(*results))
    return restack(td, results, new_dim)


def _softmax_keeping_exclusive(td: Any, common: Any, plan: _Plan) -> Any:
    """A softmax over the stack dim of members whose keys differ, as upstream: the common keys
    come from `common` (the softmax of the stacked entries) sliced back into the members; a key
    only some members hold has no softmax across members, and gets the softmax of its leaf
    along the same dim number."""
    d, kwargs = plan.dims[0], plan.kwargs
    members = [
        member.apply(lambda x, v: x.softmax(d, **kwargs) if v is None else v, part, default=None)
        for member, part in zip(td.tensordicts, common.unbind(td.stack_dim))
    ]
    return restack(td, members, td.stack_dim)


def _check_fields(td: TensorDictContract, key_transform: Callable[[str], str]) -> None:
    """A tensorclass result can only hold its own fields: renamed keys must still be fields."""
    fields = getattr(type(td), "_fields", None)
    if not fields:
        return
    renamed = sorted(k for k in map(key_transform, td._keys_str()) if k not in fields)
    if renamed:
        raise ValueError(
            f"key_transform renames entries of {type(td).__name__} to {renamed}, which are not "
            f"among its fields {list(fields)}; call it on td.to_tensordict() instead"
        )


def _batch_rule(plan: _Plan, n: int, bs: torch.Size) -> Callable[[torch.Size], torch.Size]:
    """The batch size of each (sub-)TensorDict of the result, from its own batch size."""
    row, mode, dims, keepdim = plan.row, plan.mode, plan.dims, plan.keepdim
    if mode == "leaf":
        return lambda sub: torch.Size((1,) * len(sub)) if keepdim else torch.Size()
    if mode == "feature":
        outer = bs[:n]
        return lambda sub: outer
    if row.scan:
        return lambda sub: sub
    top = _reduced_size(bs, dims, keepdim)
    lead = _lead(row, plan.args)
    if lead:  # (`torch.Size` concatenation costs about as much as the rest)
        top = torch.Size(lead) + top
    return lambda sub: top if len(sub) == n else top + sub[n:]


def _reduce_leaves(td: TensorDictContract, plan: _Plan) -> Any:
    """`reduce=True`: every leaf reduced together into one tensor."""
    row, mode, dims = plan.row, plan.mode, plan.dims
    n = td.batch_dims
    leaves = _flat_leaves(td, []) if mode == "leaf" else _batch_leaves(td)
    if not leaves:
        raise ValueError(
            f"{row.name}(reduce=True) reduces the tensor leaves together, and this TensorDict "
            "has no tensor leaves."
        )
    if mode == "leaf":
        whole = _call(row, True, plan.args, plan.kwargs)
        return whole(torch.cat([t.reshape(-1) for t in leaves]))
    if mode == "feature":
        joined, dims = torch.cat([_features(t, n) for t in leaves], -1), (n,)
    else:
        try:
            joined = torch.cat(leaves, dims[0])
        except RuntimeError:
            shapes = [list(t.shape) for t in leaves]
            raise BatchSizeError(
                f"{row.name}(dim={dims if len(dims) > 1 else dims[0]}, reduce=True) joins the "
                f"leaves along batch dim {dims[0]}, so they need the same shape apart from it; "
                f"got {shapes}. Use dim='feature' or reduce=False"
            ) from None
    return _leaf_op(dataclasses.replace(plan, mode="dims", dims=dims), n)(joined)


def _find_member_leaf(td: TensorDictContract, key: str, stop: Callable[[Tensor], Any]) -> bool:
    """`_find_leaf` over the members' leaf `key` of the lazy stack `td` (stacks of stacks too)."""
    members: list[TensorDictContract] = cast(Any, td).tensordicts  # a lazy stack's hold the data
    for m in members:
        if _find_member_leaf(m, key, stop) if is_stack(m) else stop(m._get_str(key)):
            return True
    return False


#: Up to this many elements in all, the leaves after the first are reduced as one
#: concatenated tensor: one reduction instead of one per leaf (3x faster over 30 small
#: leaves), for a copy of at most a few megabytes.
FUSE_NUMEL = 1 << 20


def _cat_flat(tensors: list[Tensor]) -> Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


#: every element of a list of tensors in one 1-d tensor (`torch.cat` of each one flattened,
#: with cat's type promotion): torch's own helper flattens them in C++, half the time of a
#: `reshape(-1)` call per tensor; the plain `cat` where a torch build lacks it
_flatten_all: Callable[[list[Tensor]], Tensor] = getattr(
    torch._C._nn, "flatten_dense_tensors", _cat_flat
)


def bool_over_leaves(td: TensorDictContract, any_: bool) -> bool:
    """`td.any()` / `td.all()`: the first leaf alone (so a first leaf that decides
    returns at once, as upstream), then the others in one reduction where they are
    small, else leaf by leaf until one decides."""
    fn = Tensor.any if any_ else Tensor.all
    rest: list[Tensor] = []
    checked = False  # whether the first leaf was reduced (and did not decide) already
    dense: Any = td  # (a dense TensorDict's entry dict is read directly: a hot path)
    if type(td)._plain_nodes and dense._pending is None:  # dense: a first tensor entry at once
        for value in dense._tensordict.values():
            if type(value) is Tensor:  # (it is the first leaf the walk below meets)
                if fn(value).item() is any_:
                    return any_
                checked = True
            break

    def first_decides(t: Tensor) -> bool:
        if checked or rest or fn(t).item() is not any_:
            rest.append(t)  # (the first leaf, which did not decide, is kept as a marker)
            return False
        return True

    if _find_leaf(td, first_decides):
        return any_
    rest = rest[1:]
    if len(rest) > 3 and sum(map(Tensor.numel, rest)) <= FUSE_NUMEL:
        try:
            flat = _flatten_all(rest)
        except (RuntimeError, TypeError):  # other devices, layouts: leaf by leaf
            pass
        else:
            return bool(fn(flat))
    for t in rest:
        if fn(t).item() is any_:
            return any_
    return not any_


def bool_reduction(td: TensorDictContract, row: Reduction, dim: Dim) -> Any:
    """`all`/`any`: a Python bool over every leaf, or a TensorDict over batch dim(s) `dim`."""
    if dim is None:
        return bool_over_leaves(td, row.name == "any")
    return reduction(td, row, dim)
