"""Pointwise math: one table of ops (name, torch function, in-place form), one implementation.

Out-of-place and in-place (`x_`) leaf-wise math with TensorDict, tensor or scalar
operands; `torch._foreach_*` where it applies, a per-leaf path under `torch.func`
transforms and for dtypes `_foreach` refuses. The rows with one operand (`exp`,
`sqrt`, ...) are in `td_core._ops.pointwise_unary`; how a row runs (operands,
broadcasting over batch dims, fast paths, lazy stacks) in `td_core._ops.pointwise_run`.
Comparisons (`==`, `<`, ...) of two non-tensor leaves compare their values; a non-tensor
leaf compared with a number or a tensor takes no part (an empty TensorDict in the result).

Examples:
    >>> import torch
    >>> from td_core import TensorDict
    >>> target = TensorDict({"w": torch.zeros(3)}, [3])
    >>> source = TensorDict({"w": torch.ones(3)}, [3])
    >>> target.lerp_(source, 0.5)["w"]
    tensor([0.5000, 0.5000, 0.5000])
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._core.contract import dense
from td_core._core.traverse import is_nt, is_td, stack_parts
from td_core._core.utils import NO_DEFAULT
from td_core._ops.pointwise_run import Op, _lazy_members, run, split_operands
from td_core._ops.pointwise_unary import UnaryMixin
from td_core.errors import KeyNotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self

    from td_core._core.contract import TensorDictContract

__all__ = ["BINARY", "PointwiseMixin"]

Tensor = torch.Tensor
_SCALARS = (int, float, bool, complex)


def _row(name: str, fn: Callable[..., Any] | None = None, in_place: str | None = None) -> Op:
    """`torch.<name>`, `Tensor.<name>_` and their `_foreach` forms where torch has them."""
    fn = fn if fn is not None else getattr(torch, name)
    fn_ = getattr(Tensor, in_place or f"{name}_", None)
    if fn_ is None:  # torch has no in-place method (maximum, minimum): compute, then copy back

        def fn_(t: Tensor, *args: Any, _fn: Callable[..., Any] = fn, **kwargs: Any) -> Tensor:
            return t.copy_(_fn(t, *args, **kwargs))

    return Op(
        name,
        fn,
        fn_,
        getattr(torch, f"_foreach_{name}", None),
        getattr(torch, f"_foreach_{name}_", None),
    )


# name -> row; operands are TensorDicts, tensors (batch-shaped) or scalars
BINARY: dict[str, Op] = {
    **{
        name: _row(name)
        for name in "add sub mul div pow clamp_min clamp_max lerp addcmul addcdiv".split()
    },
    # torch.maximum/minimum take no Python number; _foreach takes one (upstream's result)
    "maximum": _row("maximum", lambda t, o: torch.maximum(t, torch.as_tensor(o, device=t.device))),
    "minimum": _row("minimum", lambda t, o: torch.minimum(t, torch.as_tensor(o, device=t.device))),
    "mod": _row("mod", torch.remainder, "remainder_"),
    "rsub": Op("rsub", torch.rsub),
    "rdiv": Op("rdiv", lambda t, o: o / t),
    "rpow": Op("rpow", lambda t, o: o**t),
    **{
        name: _row(name)
        for name in "bitwise_and bitwise_or bitwise_xor logical_and logical_or logical_xor".split()
    },
}


def _alpha(other: Any, alpha: Any) -> tuple[Any, dict[str, Any]]:
    """`add`/`sub` `alpha=`: folded into a scalar operand, else passed to torch."""
    if alpha is None:
        return other, {}
    if type(other) in _SCALARS:
        return other * alpha, {}
    return other, {"alpha": alpha}


def _add(
    td: TensorDictContract, name: str, other: Any, alpha: Any, default: Any, inplace: bool
) -> Any:
    other, kwargs = _alpha(other, alpha)
    return run(td, BINARY[name], (other,), inplace=inplace, default=default, **kwargs)


def _clamp(td: TensorDictContract, low: Any, high: Any, inplace: bool) -> Any:
    if low is None and high is None:
        raise TypeError("clamp needs at least one of min and max (both are None)")
    if low is not None and high is not None and is_td(low) != is_td(high):
        raise ValueError(
            "clamp: min and max must both be TensorDicts or both not be (got "
            f"{type(low).__name__} and {type(high).__name__})"
        )
    if high is None:
        return run(td, BINARY["clamp_min"], (low,), inplace=inplace)
    if low is None:
        return run(td, BINARY["clamp_max"], (high,), inplace=inplace)
    out = run(td, BINARY["clamp_min"], (low,), inplace=inplace)
    return run(out, BINARY["clamp_max"], (high,), inplace=True)


class PointwiseMixin(UnaryMixin):
    """Pointwise methods of `td_core.TensorDictBase` (one-operand ones in `UnaryMixin`)."""

    __slots__ = ()

    # ------------------------------------------------------------ arithmetic
    def add(self, other: Any, *, alpha: float | None = None, default: Any = None) -> Self:
        """`self + alpha * other` leaf-wise (a new TensorDict).

        Args:
            other: a TensorDict (same keys), a tensor aligned with the batch dims, or a scalar.
            alpha: a multiplier of `other`.
            default: a value for keys only one side holds, or `"intersection"`
                to keep only the common keys (default: missing keys raise `KeyError`).
        """
        return _add(self, "add", other, alpha, default, False)

    def add_(self, other: Any, *, alpha: float | None = None) -> Self:
        """`self += alpha * other` leaf-wise, in place (returns self)."""
        return _add(self, "add", other, alpha, None, True)

    def sub(self, other: Any, *, alpha: float | None = None, default: Any = None) -> Self:
        """`self - alpha * other` leaf-wise (a new TensorDict); see `add`."""
        return _add(self, "sub", other, alpha, default, False)

    def sub_(self, other: Any, alpha: float | None = None) -> Self:
        """`self -= alpha * other` leaf-wise, in place (returns self)."""
        return _add(self, "sub", other, alpha, None, True)

    def rsub(self, other: Any, *, alpha: float | None = None, default: Any = None) -> Self:
        """`other - alpha * self` leaf-wise (a new TensorDict)."""
        kwargs: dict[str, Any] = {} if alpha is None else {"alpha": alpha}
        return run(self, BINARY["rsub"], (other,), default=default, **kwargs)

    def mul(self, other: Any, *, default: Any = None) -> Self:
        """`self * other` leaf-wise (a new TensorDict); see `add` for `default`."""
        return run(self, BINARY["mul"], (other,), default=default)

    def mul_(self, other: Any) -> Self:
        """`self *= other` leaf-wise, in place (returns self)."""
        return run(self, BINARY["mul"], (other,), inplace=True)

    def div(self, other: Any, *, default: Any = None) -> Self:
        """`self / other` leaf-wise (true division; a new TensorDict)."""
        return run(self, BINARY["div"], (other,), default=default)

    def div_(self, other: Any) -> Self:
        """`self /= other` leaf-wise, in place (integer leaves raise; returns self)."""
        return run(self, BINARY["div"], (other,), inplace=True)

    def pow(self, other: Any, *, default: Any = None) -> Self:
        """`self ** other` leaf-wise (a new TensorDict)."""
        return run(self, BINARY["pow"], (other,), default=default)

    def pow_(self, other: Any) -> Self:
        """`self **= other` leaf-wise, in place (returns self)."""
        return run(self, BINARY["pow"], (other,), inplace=True)

    def mod(self, other: Any) -> Self:
        """`self % other` leaf-wise (Python's modulus, `torch.remainder`)."""
        return run(self, BINARY["mod"], (other,))

    def mod_(self, other: Any) -> Self:
        """`self %= other` leaf-wise, in place (returns self)."""
        return run(self, BINARY["mod"], (other,), inplace=True)

    def maximum(self, other: Any, *, default: Any = None) -> Self:
        """The element-wise maximum of `self` and `other` (a new TensorDict)."""
        return run(self, BINARY["maximum"], (other,), default=default)

    def maximum_(self, other: Any) -> Self:
        """The element-wise maximum of `self` and `other`, in place (returns self)."""
        return run(self, BINARY["maximum"], (other,), inplace=True)

    def minimum(self, other: Any, *, default: Any = None) -> Self:
        """The element-wise minimum of `self` and `other` (a new TensorDict)."""
        return run(self, BINARY["minimum"], (other,), default=default)

    def minimum_(self, other: Any) -> Self:
        """The element-wise minimum of `self` and `other`, in place (returns self)."""
        return run(self, BINARY["minimum"], (other,), inplace=True)

    def clamp_min(self, other: Any, default: Any = None) -> Self:
        """Every element raised to at least `other` (a new TensorDict)."""
        return run(self, BINARY["clamp_min"], (other,), default=default)

    def clamp_min_(self, other: Any) -> Self:
        """Every element raised to at least `other`, in place (returns self)."""
        return run(self, BINARY["clamp_min"], (other,), inplace=True)

    def clamp_max(self, other: Any, *, default: Any = None) -> Self:
        """Every element lowered to at most `other` (a new TensorDict)."""
        return run(self, BINARY["clamp_max"], (other,), default=default)

    def clamp_max_(self, other: Any) -> Self:
        """Every element lowered to at most `other`, in place (returns self)."""
        return run(self, BINARY["clamp_max"], (other,), inplace=True)

    def clamp(self, min: Any = None, max: Any = None, *, out: Any = None) -> Self:
        """Every element clamped to `[min, max]` (either may be `None`; a new TensorDict).

        `min` and `max` are both TensorDicts or both not. With `out`, the
        result is written into `out` (a TensorDict of the same structure).
        """
        result = _clamp(self, min, max, False)
        return result if out is None else out.update_(result)

    def clamp_(self, min: Any = None, max: Any = None) -> Self:
        """Every element clamped to `[min, max]`, in place (returns self)."""
        return _clamp(self, min, max, True)

    def lerp(self, end: Any, weight: Any) -> Self:
        """`self + weight * (end - self)` leaf-wise (a new TensorDict).

        `end` and `weight` are TensorDicts, batch-shaped tensors or (`weight`) scalars.
        """
        return run(self, BINARY["lerp"], (end, weight))

    def lerp_(self, end: Any, weight: Any) -> Self:
        """`self += weight * (end - self)` in place: the soft target-network update."""
        return run(self, BINARY["lerp"], (end, weight), inplace=True)

    def addcmul(self, other1: Any, other2: Any, *, value: float | None = 1) -> Self:
        """`self + value * other1 * other2` leaf-wise (a new TensorDict)."""
        return run(self, BINARY["addcmul"], (other1, other2), value=value)

    def addcmul_(self, other1: Any, other2: Any, *, value: float | None = 1) -> Self:
        """`self += value * other1 * other2` leaf-wise, in place (returns self)."""
        return run(self, BINARY["addcmul"], (other1, other2), inplace=True, value=value)

    def addcdiv(self, other1: Any, other2: Any, value: float | None = 1) -> Self:
        """`self + value * other1 / other2` leaf-wise (a new TensorDict)."""
        return run(self, BINARY["addcdiv"], (other1, other2), value=value)

    def addcdiv_(self, other1: Any, other2: Any, *, value: float | None = 1) -> Self:
        """`self += value * other1 / other2` leaf-wise, in place (returns self)."""
        return run(self, BINARY["addcdiv"], (other1, other2), inplace=True, value=value)

    # ------------------------------------------------------------ bitwise, logical
    def bitwise_and(self, other: Any, *, default: Any = None) -> Self:
        """`self & other` leaf-wise (integer and bool leaves; a new TensorDict)."""
        return run(self, BINARY["bitwise_and"], (other,), default=default)

    def bitwise_and_(self, other: Any) -> Self:
        """`self &= other` leaf-wise, in place (returns self)."""
        return run(self, BINARY["bitwise_and"], (other,), inplace=True)

    def bitwise_or(self, other: Any, *, default: Any = None) -> Self:
        """`self | other` leaf-wise (integer and bool leaves; a new TensorDict)."""
        return run(self, BINARY["bitwise_or"], (other,), default=default)

    def bitwise_or_(self, other: Any) -> Self:
        """`self |= other` leaf-wise, in place (returns self)."""
        return run(self, BINARY["bitwise_or"], (other,), inplace=True)

    def bitwise_xor(self, other: Any, *, default: Any = None) -> Self:
        """`self ^ other` leaf-wise (integer and bool leaves; a new TensorDict)."""
        return run(self, BINARY["bitwise_xor"], (other,), default=default)

    def bitwise_xor_(self, other: Any) -> Self:
        """`self ^= other` leaf-wise, in place (returns self)."""
        return run(self, BINARY["bitwise_xor"], (other,), inplace=True)

    def logical_and(self, other: Any, *, default: Any = None) -> Self:
        """Element-wise logical AND of the leaves (bool leaves; a new TensorDict)."""
        return run(self, BINARY["logical_and"], (other,), default=default)

    def logical_or(self, other: Any, *, default: Any = None) -> Self:
        """Element-wise logical OR of the leaves (bool leaves; a new TensorDict)."""
        return run(self, BINARY["logical_or"], (other,), default=default)

    def logical_xor(self, other: Any, *, default: Any = None) -> Self:
        """Element-wise logical XOR of the leaves (bool leaves; a new TensorDict)."""
        return run(self, BINARY["logical_xor"], (other,), default=default)

    # ------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Self:
        return run(self, BINARY["add"], (other,))

    __radd__ = __add__  # commutative: the same leaf-wise op

    def __iadd__(self, other: Any) -> Self:
        return run(self, BINARY["add"], (other,), inplace=True)

    def __sub__(self, other: Any) -> Self:
        return run(self, BINARY["sub"], (other,))

    def __rsub__(self, other: Any) -> Self:
        return run(self, BINARY["rsub"], (other,))

    def __isub__(self, other: Any) -> Self:
        return run(self, BINARY["sub"], (other,), inplace=True)

    def __mul__(self, other: Any) -> Self:
        return run(self, BINARY["mul"], (other,))

    __rmul__ = __mul__  # commutative: the same leaf-wise op

    def __imul__(self, other: Any) -> Self:
        return run(self, BINARY["mul"], (other,), inplace=True)

    def __truediv__(self, other: Any) -> Self:
        return run(self, BINARY["div"], (other,))

    def __rtruediv__(self, other: Any) -> Self:
        return run(self, BINARY["rdiv"], (other,))

    def __itruediv__(self, other: Any) -> Self:
        return run(self, BINARY["div"], (other,), inplace=True)

    def __pow__(self, other: Any) -> Self:
        return run(self, BINARY["pow"], (other,))

    def __rpow__(self, other: Any) -> Self:
        return run(self, BINARY["rpow"], (other,))

    def __ipow__(self, other: Any) -> Self:
        return run(self, BINARY["pow"], (other,), inplace=True)

    def __mod__(self, other: Any) -> Self:
        return run(self, BINARY["mod"], (other,))

    def __and__(self, other: Any) -> Self:
        return run(self, BINARY["bitwise_and"], (other,))

    __rand__ = __and__  # commutative: the same leaf-wise op

    def __iand__(self, other: Any) -> Self:
        return run(self, BINARY["bitwise_and"], (other,), inplace=True)

    def __or__(self, other: Any) -> Self:
        return run(self, BINARY["bitwise_or"], (other,))

    __ror__ = __or__  # commutative: the same leaf-wise op

    def __ior__(self, other: Any) -> Self:
        return run(self, BINARY["bitwise_or"], (other,), inplace=True)

    def __xor__(self, other: Any) -> Self:
        return run(self, BINARY["bitwise_xor"], (other,))

    __rxor__ = __xor__  # commutative: the same leaf-wise op

    def __ixor__(self, other: Any) -> Self:
        return run(self, BINARY["bitwise_xor"], (other,), inplace=True)

    # ------------------------------------------------------------ comparisons
    def __eq__(self, other: object) -> Any:
        return _compare(self, other, operator.eq)

    def __ne__(self, other: object) -> Any:
        return _compare(self, other, operator.ne)

    def __lt__(self, other: Any) -> Any:
        return _compare(self, other, operator.lt)

    def __le__(self, other: Any) -> Any:
        return _compare(self, other, operator.le)

    def __gt__(self, other: Any) -> Any:
        return _compare(self, other, operator.gt)

    def __ge__(self, other: Any) -> Any:
        return _compare(self, other, operator.ge)

    __hash__ = object.__hash__


# ------------------------------------------------------------------ comparisons
def _compare(td: TensorDictContract, other: Any, op: Callable[[Any, Any], Any]) -> Any:
    """Leaf-wise comparison; non-tensor leaves compare by value (`==`/`!=` only).

    A `dict` compares as the TensorDict of the same batch size it would build.
    """
    if isinstance(other, Mapping) and not is_td(other):
        other = dense(other, td.batch_size, td.device)
    elif not is_td(other) and not isinstance(other, (Tensor, *_SCALARS)):
        return NotImplemented  # `td == "z"` is False, as for any unrelated object
    members = _lazy_members(td)
    if members is not None:
        dim, (parts,) = split_operands(td, "compare", (other,), False)
        return type(td)(  # type: ignore[call-arg]
            *(_compare(m, part, op) for m, part in zip(members, parts)), stack_dim=dim
        )
    if is_td(other):
        return _zip_compare(td, other, op, ())
    n = len(td.batch_size)
    if isinstance(other, Tensor) and other.ndim:
        torch.broadcast_shapes(td.batch_size, other.shape)  # raises RuntimeError on a mismatch

        def fn(t: Tensor) -> Tensor:
            return op(t, other.view(*other.shape, *([1] * (t.ndim - n))) if t.ndim > n else other)

    else:

        def fn(t: Tensor) -> Tensor:
            return op(t, other)

    return _map_compare(td, fn, other.ndim if isinstance(other, Tensor) else 0)


def _map_compare(td: TensorDictContract, fn: Callable[[Tensor], Tensor], lead: int) -> Any:
    """`fn` on every tensor leaf; non-tensor leaves are left out (a number or tensor
    says nothing about them), as upstream.

    `fn` depends on the first `lead` dims only: a nested lazy stack stacked past
    them is compared member by member (its members may be ragged), as upstream.
    """
    parts = stack_parts(td)
    if parts is not None and parts[1] >= lead:
        members, dim = parts
        return type(td)(*(_map_compare(m, fn, lead) for m in members), stack_dim=dim)  # type: ignore[call-arg]
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            out[key] = fn(value)
        elif not value._is_non_tensor:
            out[key] = _map_compare(value, fn, lead)
    return td._new(out, td.batch_size)


def _nt_compare(value: Any, other: Any, op: Callable[[Any, Any], Any]) -> Any:
    """A non-tensor leaf compared with `other`.

    Against another non-tensor leaf: the values element-wise, as a bool tensor of the
    batch shape. Against a number or a tensor (`td == 0`, `td <= 1`): the leaf takes no
    part, as upstream; its place holds an empty TensorDict of its batch size, which
    `all()` and `any()` skip.
    """
    if not is_nt(other):
        return dense({}, value.batch_size)
    mine = value.as_array()
    theirs = other.as_array() if is_nt(other) else None
    if theirs is not None and theirs.shape != mine.shape:  # batch sizes broadcast, as tensors
        shape = np.broadcast_shapes(mine.shape, theirs.shape)
        mine, theirs = np.broadcast_to(mine, shape), np.broadcast_to(theirs, shape)
    flat = [
        bool(op(x, theirs.flat[i] if theirs is not None else other))
        for i, x in enumerate(mine.flat)
    ]
    return torch.tensor(flat, dtype=torch.bool).reshape(mine.shape)


def _zip_compare(
    td: TensorDictContract,
    other: TensorDictContract,
    op: Callable[[Any, Any], Any],
    prefix: tuple[str, ...],
) -> Any:
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        item = other._get_str(key, NO_DEFAULT)
        if item is NO_DEFAULT:
            raise KeyNotFoundError(
                f"key {(*prefix, key)!r} is in the first TensorDict but not in the second"
            )
        if isinstance(value, Tensor):
            # against a non-tensor leaf a tensor compares as a number does (no part)
            out[key] = dense({}, td.batch_size) if is_nt(item) else op(value, item)
        elif value._is_non_tensor:
            out[key] = _nt_compare(value, item, op)
        elif stack_parts(value) is not None and is_td(item):  # member by member: may be ragged
            out[key] = _compare(value, item, op)
        else:
            out[key] = _zip_compare(value, item, op, (*prefix, key))
    return td._new(out, td.batch_size)
