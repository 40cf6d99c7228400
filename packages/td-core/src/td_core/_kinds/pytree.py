"""TensorDicts as pytree nodes, so `torch.vmap`, `torch.func` and `torch.compile` see their leaves.

The children of a node are its tensor and sub-TensorDict entries; non-tensor
leaves, keys, batch size and device travel in the (static) context. When the
children come back with more or fewer dims than they left with (inside and out
of `vmap`), the batch size is re-derived from a reference child: the number
of batch dims changes by the same amount as that child's dims. So inside
`vmap` a TensorDict has its per-sample batch size, and outside again the
full one.

An `UnbatchedTensor` entry (data shared by the whole batch, of any shape) goes
to `vmap` as a zero-copy view with the batch dims in front (stride 0), so vmap
maps it as the other children and the function receives the entry whole; the
rebuilt TensorDict takes the data back out of that view. Under `grad`-like
transforms, which differentiate the children themselves, it goes as it is.

A lazy stack whose members have different keys or entry shapes (whose
entries cannot be stacked) is a node whose children are its members, rebuilt
as a lazy stack of the results (`tree_map` runs per member); such a stack
cannot enter a `torch.func` transform.

A locked TensorDict stays locked inside a `torch.func` transform (its
children come back wrapped by functorch), so a function under `vmap` cannot
add or replace its entries either; elsewhere (`tree_map`) the rebuilt
TensorDict is a new, unlocked one, as `apply` returns.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.utils._pytree as pytree

from td_core._core.traverse import is_nt
from td_core._leaves.unbatched import UnbatchedTensor, is_unbatched

__all__ = ["register", "allow_weights_only"]

Tensor = torch.Tensor


_MEMBERS = "members"  # the context tag of a lazy stack flattened into its members


class _SymbolicBatch(NamedTuple):
    """A batch size with symbolic sizes (`torch.export` with dynamic shapes) in a pytree
    context: only its length is kept, since export cannot write symbols into a spec, and
    the sizes are read back from the first child's leading dims."""

    ndim: int


def _symbolic(batch_size: torch.Size) -> bool:
    """Whether `batch_size` holds symbols (`torch.SymInt`, as a non-strict export traces).

    (Under Dynamo, as in a strict export, symbols look like ints: such a batch size
    stays in the spec, which export then cannot serialize.)"""
    for d in batch_size:
        if type(d) is not int:
            return True
    return False


def _flatten(td: Any) -> tuple[list[Any], Any]:
    members_of = getattr(type(td), "_pytree_members", None)  # lazy stacks define it
    parts = None if members_of is None else members_of(td)
    if parts is not None:  # a ragged lazy stack: its entries cannot be stacked
        members, stack_dim = parts
        return list(members), (_MEMBERS, type(td), stack_dim)
    # vmap flattens its inputs up to 3 times and unflattens twice per call: every
    # step here counts (a plain tensor skips the non-tensor test, the batch size
    # stays a torch.Size, which compares equal to the tuple it used to be)
    keys: list[str] = []
    children: list[Any] = []
    static: list[tuple[str, Any]] = []
    spread: list[str] = []
    for key, value in td._items_str():
        if type(value) is not Tensor:
            if is_nt(value):
                static.append((key, value))
                continue
            if is_unbatched(value) and _spreading():
                spread.append(key)
                value = _spread(value, td.batch_size)
        keys.append(key)
        children.append(value)
    ref = None
    ref_is_leaf = True
    if children:
        first = children[0]
        if isinstance(first, Tensor):
            ref = first.ndim
        else:
            ref = getattr(first, "batch_dims", None)
            ref_is_leaf = False
    bs = td.batch_size
    context = (
        type(td),
        tuple(keys),
        _SymbolicBatch(len(bs)) if children and _symbolic(bs) else bs,
        td.device,
        tuple(static),
        ref,
        ref_is_leaf,
        td.is_locked,
        tuple(spread),
        td._raw_names(),
    )
    return children, context


def _spreading() -> bool:
    """Whether an `UnbatchedTensor` child is spread over the batch dims (see `_spread`).

    Yes outside any functorch transform (where `vmap` flattens its inputs, and
    `tree_map`) and directly under `vmap` (its outputs); not under `grad`, `vjp` or
    `jvp`, which track their children by identity and differentiate them: there the
    entry goes as it is, and a gradient for it comes back as a plain tensor.
    """
    top = torch._C._functorch.peek_interpreter_stack()
    return top is None or top.key() == torch._C._functorch.TransformType.Vmap


def _spread(value: Any, batch_size: torch.Size) -> Tensor:
    """An `UnbatchedTensor` as a pytree child: its data seen through the batch dims.

    A zero-copy view (stride 0 over `batch_size`) whose leading dims are the batch
    dims, as every other child's: `vmap` maps them like the others, so the entry
    reaches the function whole, and the data is never copied. `_gather` takes the
    data back out.
    """
    cached = value.__dict__.get("_td_spread")
    if cached is not None and cached.shape == batch_size + value.shape:
        return cached  # the child it was gathered from: each flattening gives the same one
    if torch._C._functorch.is_functorch_wrapped_tensor(value):
        return _expanded(value, batch_size)
    # a transform flattens its plain inputs with its level on: the view must stay a
    # plain tensor for the transform to wrap it
    with torch._C._DisableFuncTorch():
        return _expanded(value, batch_size)


def _expanded(value: Any, batch_size: torch.Size) -> Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        plain = Tensor.as_subclass(value, Tensor)
        return plain.expand(*batch_size, *plain.shape)


def _gather(child: Any, batch_size: torch.Size) -> Any:
    """The `UnbatchedTensor` a child made by `_spread` stands for, with `batch_size`.

    Every position along the batch dims holds the same data (the entry is shared
    by the whole batch), so the first one is taken: a view, so the data (and its
    `data_ptr`) is the child's own.
    """
    if not isinstance(child, Tensor) or child.shape[: len(batch_size)] != batch_size:
        return child  # a placeholder (vmap's in_dims), or a leaf a transform reshaped
    first = (0,) * len(batch_size)
    if torch._C._functorch.is_functorch_wrapped_tensor(child):
        out = UnbatchedTensor(child[first], batch_size)
    else:
        with torch._C._DisableFuncTorch():
            out = UnbatchedTensor(child[first], batch_size)
    out.__dict__["_td_spread"] = child  # what `_spread` gives back for it
    return out


def _tensor_leaves(children: Any) -> bool:
    # whether the first leaf found (through sub-TensorDicts) is a tensor (not a placeholder)
    for child in children:
        if isinstance(child, Tensor):
            return True
        values = getattr(child, "_values_str", None)
        if values is None:
            return is_nt(child)
        found = values()
        if found:
            return _tensor_leaves(found)
    return True


def _under_transform(children: Any) -> bool:
    # the children of an input rebuilt inside vmap/grad/jvp are functorch wrappers
    # (looked for through sub-TensorDicts, which were rebuilt first)
    for child in children:
        if isinstance(child, Tensor):
            return bool(torch._C._functorch.is_functorch_wrapped_tensor(child))
        values = getattr(child, "_values_str", None)
        if values is not None and _under_transform(values()):
            return True
    return False


def _shifted_batch(children: Any, guess: torch.Size, bs: torch.Size) -> torch.Size:
    # the children gained (vmap's output) or lost (vmap's input) leading dims:
    # `guess` moves the batch size by as many dims as the first child moved,
    # which holds when the dim went in front; else (out_dims past the batch
    # dims) fall back to what all children share
    n = len(guess)
    for child in children:
        shape = child.shape if isinstance(child, Tensor) else getattr(child, "batch_size", None)
        if shape is not None and shape[:n] != guess:
            return _common_batch(children, bs)
    return guess


def _common_batch(children: Any, bs: torch.Size) -> torch.Size:
    # a leaf came back as a sub-tree (jacrev, jacfwd, hessian put the input's
    # structure under each output leaf): keep the batch size where every child
    # still starts with it, else take the longest prefix the children share
    # (at most as many dims as before)
    shapes = [
        child.shape if isinstance(child, Tensor) else child.batch_size
        for child in children
        if isinstance(child, Tensor) or hasattr(child, "batch_size")
    ]
    n = len(bs)
    if all(shape[:n] == bs for shape in shapes):
        return bs
    n = min([n, *(len(shape) for shape in shapes)])
    for i in range(n):
        if any(shape[i] != shapes[0][i] for shape in shapes):
            n = i
            break
    return torch.Size(shapes[0][:n]) if shapes else bs


def _shifted_names(
    names: tuple[str | None, ...], children: Any, n: int
) -> tuple[str | None, ...] | None:
    # the batch size lost or gained dims under vmap: a dim vmap maps over (an input's
    # batched dim, read off the first child) loses its name; a dim vmap adds (in front,
    # where out_dims=0 puts it) has none. Anything else: the names are dropped
    if len(names) < n:
        return (*(None,) * (n - len(names)), *names)
    first = children[0] if children else None
    if len(names) == n + 1 and isinstance(first, Tensor):
        bdim = torch._C._functorch.maybe_get_bdim(first)
        if 0 <= bdim < len(names):
            return (*names[:bdim], *names[bdim + 1 :])
    return None


def _unflatten(children: Any, context: Any) -> Any:
    if context[0] == _MEMBERS:
        _, cls, stack_dim = context
        if not _tensor_leaves(children) or _under_transform(children):
            # vmap rebuilds its inputs from placeholders (in_dims ints) or batched tensors
            raise NotImplementedError(
                f"a {cls.__name__} whose members have different keys or entry shapes cannot "
                "go through a torch.func transform (vmap, grad, ...): its entries cannot be "
                "stacked into batched tensors (and its members are only rebuilt from tensor "
                "leaves); densify it first (contiguous(), or select the common keys) or pass "
                "its members separately"
            )
        return cls(*children, stack_dim=stack_dim)
    cls, keys, batch_size, device, static, ref, ref_is_leaf, locked, spread, names = context
    if type(batch_size) is _SymbolicBatch:  # sizes only known from the leaves (torch.export)
        first = children[0]
        batch_size = (first.shape if isinstance(first, Tensor) else first.batch_size)[
            : batch_size.ndim
        ]
    bs = batch_size if type(batch_size) is torch.Size else torch.Size(batch_size)
    # pytree also unflattens placeholder leaves (vmap's in_dims ints): keep the batch size then
    if ref is not None and children:
        first = children[0]
        if isinstance(first, Tensor):
            if ref_is_leaf:
                if first.ndim != ref:
                    bs = _shifted_batch(children, first.shape[: len(bs) + first.ndim - ref], bs)
            else:
                bs = _common_batch(children, bs)
        elif type(first) is not int and first is not None:
            if ref_is_leaf:
                bs = _common_batch(children, bs)
            elif first.batch_dims != ref:
                bs = _shifted_batch(
                    children, first.batch_size[: len(bs) + first.batch_dims - ref], bs
                )
    entries = dict(zip(keys, children))
    for key in spread:
        entries[key] = _gather(entries[key], bs)
    for key, value in static:
        entries[key] = (
            value if value.batch_size == bs else value._map_batch(lambda t: t, bs, value.batch_dims)
        )
    td = cls._from_pytree(entries, bs, device)
    if names is not None:
        names = names if bs == batch_size else _shifted_names(names, children, len(bs))
        if names is not None:
            td._store_names(names)
    if locked and _under_transform(children):
        td._lock_tree(True)
    return td


def _flatten_with_keys(td: Any) -> tuple[list[tuple[Any, Any]], Any]:
    children, context = _flatten(td)
    if context[0] == _MEMBERS:
        return [(pytree.SequenceKey(i), c) for i, c in enumerate(children)], context
    return [(pytree.MappingKey(k), c) for k, c in zip(context[1], children)], context


def register(cls: type) -> None:
    """Register `cls` (a TensorDictBase subclass with `_from_pytree`) as a pytree node."""
    pytree.register_pytree_node(
        cls,
        _flatten,
        _unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=_flatten_with_keys,
    )


def allow_weights_only(*classes: type) -> None:
    """Let `torch.load(..., weights_only=True)` rebuild `classes`.

    Their pickled state is made of tensors, strings, numbers, tuples, lists and
    dicts only, so allowing them runs no code from the file.
    """
    torch.serialization.add_safe_globals(list(classes))
