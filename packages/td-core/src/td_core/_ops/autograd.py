"""Autograd and parameter views of the leaves (`data`, `grad`, `zero_grad`, `backward`, `param_count`, `bytes`).

Everything that reads or changes autograd state works on the *stored* leaves
(`own_leaves`): for a lazy stack those are its members' tensors, never the
stacked copies a read would build, so `requires_grad_`, `zero_grad` and
`grad` reach the tensors an optimizer holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_td, map_leaves, tensor_leaves
from td_core._ops import lazy_shape as lazy
from td_core.errors import BatchSizeError, KeyNotFoundError

_MISSING: Any = object()

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["AutogradMixin", "grad", "own_leaves"]

Tensor = torch.Tensor


def own_leaves(
    td: TensorDictContract, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[Any, Tensor]]:
    """`(key, tensor)` for every stored tensor leaf; a lazy stack's come from its members.

    A member's key is prefixed with its position in the stack (as a string).
    """
    found = lazy.parts(td)
    if found is not None:
        for i, member in enumerate(found[0]):
            yield from own_leaves(member, (*prefix, str(i)))
        return
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            yield ((*prefix, key) if prefix else key), value
        elif not value._is_non_tensor:
            yield from own_leaves(value, (*prefix, key))


def _grads(td: TensorDictContract) -> Any | None:
    """The `.grad` of every leaf that has one, or `None` if none has."""
    found = lazy.parts(td)
    if found is not None:
        members, s = found
        per = [_grads(m) for m in members]
        if all(g is None for g in per):
            return None
        if any(g is None for g in per):
            raise RuntimeError(
                "grad: some members of the lazy stack have gradients and others do not; "
                "read them per member (td.tensordicts[i].grad)"
            )
        return lazy.restack(td, per, s)  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            if value.grad is not None:
                out[key] = value.grad
        elif not value._is_non_tensor:
            sub = _grads(value)
            if sub is not None:
                out[key] = sub
    return td._new(out, td.batch_size) if out else None


def _pairs(td: TensorDictContract, other: Any, what: str) -> list[tuple[Tensor, Tensor]]:
    """`(leaf, other's leaf at the same key)` for every leaf, checked before any write."""
    if not is_td(other):
        raise TypeError(f"{what} needs a TensorDict, got {type(other).__name__}")
    found = lazy.parts(td)
    if found is not None:  # the stored leaves are the members': pair them member by member
        members, s = found
        if other.batch_size != td.batch_size:
            raise BatchSizeError(
                f"{what}: the TensorDict given has batch_size {list(other.batch_size)}, the lazy "
                f"stack has {list(td.batch_size)}"
            )
        pieces = other.unbind(s)
        return [pair for m, o in zip(members, pieces) for pair in _pairs(m, o, what)]
    pairs = []
    for key, leaf in td.items(include_nested=True, leaves_only=True):
        if not isinstance(leaf, Tensor):
            continue
        src = other.get(key, _MISSING)  # (NO_DEFAULT would mean "no default": None)
        if src is _MISSING:
            raise KeyNotFoundError(f"{what}: key {key!r} is missing from the TensorDict given")
        if not isinstance(src, Tensor) or src.shape != leaf.shape:
            raise BatchSizeError(
                f"{what}: the value at key {key!r} has shape {list(getattr(src, 'shape', []))}, "
                f"the leaf has shape {list(leaf.shape)}"
            )
        pairs.append((leaf, src))
    return pairs


class AutogradMixin(TensorDictContract):
    """Methods of `td_core.TensorDictBase` from this family."""

    __slots__ = ()

    @property
    def data(self) -> Self:
        """A TensorDict of every leaf's `.data`: the same storage, outside autograd.

        `params.data.clone()` snapshots parameters; writing into the result
        (`target.data.update_(source.data)`) changes the leaves without autograd
        seeing it. Assigning `td.data = other` rebinds each leaf's `.data`. A locked
        TensorDict gives a locked result, as upstream.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"w": torch.zeros(2, requires_grad=True)}, [2])
            >>> td.data["w"].requires_grad
            False
        """
        out = lazy.per_member(self, lambda m: m.data, lambda d: map_leaves(d, lambda t: t.data))
        return out.lock_() if self.is_locked and not out.is_locked else out  # as upstream

    @data.setter
    def data(self, value: TensorDictContract) -> None:
        for leaf, src in _pairs(self, value, "data"):
            leaf.data = src

    @property
    def grad(self) -> Self | None:
        """A TensorDict of the leaves' `.grad`; leaves without one are left out, `None` if no leaf has one.

        Assigning `td.grad = other` sets each leaf's `.grad` (copying into an existing one).
        A locked TensorDict gives a locked result, as upstream.
        """
        out = _grads(self)
        return out.lock_() if out is not None and self.is_locked and not out.is_locked else out

    @grad.setter
    def grad(self, value: TensorDictContract) -> None:
        for leaf, src in _pairs(self, value, "grad"):
            if leaf.grad is None:
                leaf.grad = src
            else:
                leaf.grad.copy_(src)

    def zero_grad(self, set_to_none: bool = True) -> Self:
        """Reset every leaf's `.grad`: to `None`, or (`set_to_none=False`) fill existing ones with 0.

        Returns:
            self.
        """
        grads = []
        for _, leaf in own_leaves(self):
            if set_to_none:
                leaf.grad = None
            elif leaf.grad is not None:
                grads.append(leaf.grad)
        if grads:
            torch._foreach_zero_(grads)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Set `requires_grad` on every tensor leaf (returns self).

        Raises:
            RuntimeError: naming the key, if `requires_grad` is true and a leaf is
                not floating point or complex (nothing is changed then).
        """
        leaves = list(own_leaves(self))
        if requires_grad:
            for key, leaf in leaves:
                if not (leaf.is_floating_point() or leaf.is_complex()):
                    raise RuntimeError(
                        f"requires_grad_: the leaf at key {key!r} has dtype {leaf.dtype}; only "
                        "floating point and complex tensors can require gradients (select() "
                        "the float entries first)"
                    )
        for _, leaf in leaves:
            leaf.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self) -> bool:
        """Whether any tensor leaf requires gradients."""
        return any(leaf.requires_grad for _, leaf in own_leaves(self))

    def backward(
        self,
        gradient: TensorDictContract | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: TensorDictContract | Sequence[Tensor] | None = None,
    ) -> None:
        """Back-propagate from every leaf that requires gradients, in one `torch.autograd.backward` call.

        Without `gradient` every such leaf must hold one element (a loss): a
        TensorDict of losses back-propagates their sum.

        Args:
            gradient: the gradient of each leaf, at the same keys and shapes.
            retain_graph: keep the graph for another backward pass.
            create_graph: build the graph of the derivative (higher-order gradients).
            inputs: the tensors (or a TensorDict of them) to accumulate gradients into.

        Raises:
            RuntimeError: if no leaf requires gradients, or a leaf has several
                elements and no `gradient` is given, or a gradient's shape differs.
            KeyError: if `gradient` lacks a key.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> w = torch.ones(3, requires_grad=True)
            >>> TensorDict({"loss": (w * 2).sum()}, []).backward()
            >>> w.grad
            tensor([2., 2., 2.])
        """
        keys, tensors = [], []
        for key, leaf in self.items(include_nested=True, leaves_only=True):
            if isinstance(leaf, Tensor) and leaf.requires_grad:
                keys.append(key)
                tensors.append(leaf)
        if not tensors:
            raise RuntimeError(
                "backward: there is no leaf tensor requiring gradients in the TensorDict "
                f"(keys: {sorted(map(str, self.keys(include_nested=True, leaves_only=True)))})"
            )
        grad_tensors: list[Tensor] | None = None
        if gradient is None:
            for key, t in zip(keys, tensors):
                if t.numel() != 1:
                    raise RuntimeError(
                        f"backward: the leaf at key {key!r} has shape {list(t.shape)}, and grad "
                        "can be implicitly created only for scalar outputs: pass a gradient "
                        "TensorDict, or reduce every leaf that requires gradients to one element"
                    )
        else:
            if not is_td(gradient):
                raise TypeError(
                    f"backward: gradient must be a TensorDictBase (a TensorDict of one gradient "
                    f"per leaf), got {type(gradient).__name__}"
                )
            grad_tensors = []
            for key, t in zip(keys, tensors):
                g = gradient.get(key, None)
                if g is None:
                    raise KeyNotFoundError(
                        f"backward: Missing gradient entry for key {key!r}: the gradient "
                        f"TensorDict has keys {sorted(map(str, gradient.keys(True, True)))}"
                    )
                if g.shape != t.shape:
                    raise BatchSizeError(
                        f"backward: Mismatch in shape: the gradient at key {key!r} has shape "
                        f"{list(g.shape)}, the leaf has shape {list(t.shape)}"
                    )
                grad_tensors.append(g)
        wrt: list[Tensor] | None = None
        if inputs is not None:
            if isinstance(inputs, TensorDictContract):
                wrt = [t for _, t in own_leaves(inputs)]
            else:
                wrt = list(inputs)
        torch.autograd.backward(
            tensors,
            grad_tensors,
            retain_graph=retain_graph,
            create_graph=create_graph,
            inputs=wrt,
        )

    def detach(self) -> Self:
        """Every tensor leaf detached from the autograd graph (sharing storage)."""
        return lazy.per_member(self, lambda m: m.detach(), lambda d: map_leaves(d, Tensor.detach))

    def detach_(self) -> Self:
        """Detach every tensor leaf in place (returns self).

        Raises:
            RuntimeError: naming the key, if a leaf is a view (torch cannot detach
                those in place); nothing is changed then.
        """
        leaves = list(own_leaves(self))
        for key, leaf in leaves:
            if leaf._is_view():
                raise RuntimeError(
                    f"detach_: the leaf at key {key!r} is a view of another tensor, which torch "
                    "cannot detach in place; use detach() instead"
                )
        for _, leaf in leaves:
            leaf.detach_()
        return self

    def param_count(self, *, count_duplicates: bool = True) -> int:
        """The number of elements over all tensor leaves (a tensor stored twice counts once
        with `count_duplicates=False`)."""
        return sum(t.numel() for t in _distinct(self, count_duplicates))

    def bytes(self, *, count_duplicates: bool = True) -> int:
        """The bytes of all tensor leaves and their gradients (non-tensor leaves count 0).

        A nested (jagged) tensor counts its values, offsets and lengths. With
        `count_duplicates=False`, a tensor held twice (as two leaves, or as the
        values of two nested tensors) counts once.
        """
        return sum(t.numel() * t.element_size() for t in _distinct(self, count_duplicates))


def _parts(t: Tensor) -> list[Tensor]:
    """The tensors that hold `t`'s data: itself (and its grad), or a jagged tensor's components."""
    if t.is_nested and t.layout == torch.jagged:
        njt: Any = t  # torch's NestedTensor subclass (offsets/lengths are not on Tensor)
        parts = [njt.values(), njt.offsets()]
        lengths = njt.lengths()
        return parts if lengths is None else [*parts, lengths]
    grad = t.grad if t.requires_grad and t.is_leaf else None
    return [t] if grad is None else [t, grad]


def _distinct(td: TensorDictContract, count_duplicates: bool) -> list[Tensor]:
    parts = [p for _, t in own_leaves(td) for p in _parts(t)]
    if count_duplicates:
        return parts
    # a jagged tensor's values() is a new view each call: the same data is the same memory
    seen: dict[Any, Tensor] = {}
    for p in parts:
        ptr = p.data_ptr() if p.device.type != "meta" else 0
        seen.setdefault((ptr, p.dtype, tuple(p.shape)) if ptr else id(p), p)
    return list(seen.values())


def _one(value: Any, what: str) -> Any:
    """`value`, or its only item when it is a tuple or list of one."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1 or not (is_td(value[0]) or isinstance(value[0], Tensor)):
            raise ValueError(
                f"torch.autograd.grad with TensorDicts supports a single {what} "
                f"(a TensorDict or a tensor), got a {type(value).__name__} of {len(value)}"
            )
        value = value[0]
    return value


def _flat(value: Any) -> list[Tensor]:
    return tensor_leaves(value) if is_td(value) else [value]


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, **kwargs: Any) -> Any:
    """`torch.autograd.grad` over TensorDicts: the gradient of `outputs` at every leaf of `inputs`.

    `outputs` is a TensorDict (every tensor leaf is an output) or a tensor;
    `grad_outputs`, when given, has the structure of `outputs`. The result has the
    structure and kind of `inputs` (a tensorclass gives the tensorclass, a lazy stack
    a lazy stack), with each leaf replaced by its gradient; non-tensor leaves are
    kept. A leaf the outputs do not depend on, with `allow_unused=True`, gets a
    zero gradient. Other keywords go to `torch.autograd.grad`.

    Raises:
        ValueError: more than one output, input or grad_output, an input that is not
            a TensorDict, or `grad_outputs` whose leaves do not match `outputs`'.
    """
    outputs = _one(outputs, "output")
    inputs = _one(inputs, "input")
    if not is_td(inputs):
        raise ValueError(
            "torch.autograd.grad with TensorDicts needs the inputs as a TensorDict, got "
            f"{type(inputs).__name__}"
        )
    out_leaves = _flat(outputs)
    grad_leaves = None
    if grad_outputs is not None:
        grad_leaves = _flat(_one(grad_outputs, "grad_output"))
        if [g.shape for g in grad_leaves] != [o.shape for o in out_leaves]:
            raise ValueError(
                "torch.autograd.grad: grad_outputs must have the leaves of outputs, got "
                f"shapes {[list(g.shape) for g in grad_leaves]} for outputs of shapes "
                f"{[list(o.shape) for o in out_leaves]}"
            )
    in_leaves = tensor_leaves(inputs)
    grads = iter(torch.autograd.grad(out_leaves, in_leaves, grad_leaves, **kwargs))

    def pick(leaf: Tensor) -> Tensor:
        found = next(grads)
        return torch.zeros_like(leaf) if found is None else found

    return map_leaves(inputs, pick)
