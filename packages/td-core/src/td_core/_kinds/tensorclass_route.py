"""A tensorclass over a lazy stack, a view or a file: its ops run on the kind it wraps, as upstream.

`MyClass.from_tensordict(td)` wraps `td` itself. `TensorDictBase`'s ops read a
lazy stack's leaves as stacked copies, which fails for members whose leaves
differ in shape and gives results that share nothing with the members; a
sub-TensorDict's shallow copy is a view of the same region, as upstream, where
the base op gives a dense copy. Each kind runs these ops its own way. So, over
any kind but a dense `TensorDict`, each op listed here is the wrapped kind's op
of the same name, and a TensorDict result comes back as an instance of the class
over it (the wrapped TensorDict itself gives back the instance). Over a dense
TensorDict nothing changes: the op is the one the class inherits, whose
signature and docstring `help()` shows through `functools.wraps`.

In-place ops need no entry: `WrappedKindMixin` already hands them to the wrapped kind.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from td_core._core.traverse import is_nt, is_td
from td_core._kinds.dense import TensorDict
from td_core._ops.casts import CastMixin
from td_core._ops.pointwise import PointwiseMixin
from td_core._ops.pointwise_unary import UnaryMixin
from td_core._ops.rearrange import LayoutMixin
from td_core._ops.reductions import ReductionMixin
from td_core._ops.shape import ShapeMixin

__all__ = ["route_wrapped_ops"]

_DUNDER_OPS = {
    "__abs__", "__neg__", "__invert__", "__add__", "__radd__", "__sub__", "__rsub__",
    "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__pow__", "__rpow__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__",
    "__mod__", "__rand__", "__ror__", "__rxor__",
}  # fmt: skip
# the families whose every out-of-place op is routed, so a new op in one is routed too
_FAMILIES = (UnaryMixin, PointwiseMixin, CastMixin, LayoutMixin, ShapeMixin, ReductionMixin)
_MORE = (
    "apply", "named_apply", "_fast_apply", "clone", "contiguous", "detach", "to", "cpu",
    "cuda", "gather", "masked_fill", "masked_select", "where", "empty", "zero_grad",
    "requires_grad_", "consolidate", "as_tensor", "densify", "to_padded_tensor",
)  # fmt: skip
# over every kind but a dense one (a view's leaves are views; a ragged stack's cannot be stacked)
_PROPERTIES = ("grad", "data", "dtype", "depth", "_has_non_tensor")
# results that are not instances of the class (keys per member, counts, flags)
_UNWRAPPED = ("data_ptr", "bytes", "param_count", "is_consolidated")
_SKIPPED = {"dtype", "unbind"}  # dtype: a property (above); unbind: the class's own


def _family_ops() -> list[str]:
    names: list[str] = []
    for family in _FAMILIES:
        for name, member in vars(family).items():
            if name.startswith("_") and name not in _DUNDER_OPS:
                continue
            if name.endswith("_") and not name.endswith("__"):  # in place: routed already
                continue
            if callable(member) and name not in _SKIPPED and name not in names:
                names.append(name)
    return names


def _deliver(obj: Any, result: Any, td: Any) -> Any:
    """The stack's `result` as `obj`'s op returns it: TensorDicts as instances."""
    if result is td:
        return obj
    if isinstance(result, (tuple, list)):  # split, chunk; max(dim) gives torch.return_types
        return type(result)([_deliver(obj, r, td) for r in result])
    if is_td(result) and not is_nt(result) and not getattr(type(result), "_td_tensorclass", False):
        return type(obj)._wrap(obj._check_fields(result))
    return result


def _routed(name: str, inherited: Callable[..., Any], wrap: bool) -> Callable[..., Any]:
    @functools.wraps(inherited)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        td = self._tensordict
        if type(td) is TensorDict:  # the usual case; any other kind runs its own op
            return inherited(self, *args, **kwargs)
        out = kwargs.get("out")
        if out is not None and getattr(type(out), "_td_tensorclass", False):
            kwargs["out"] = out._tensordict  # written through what it wraps; `out` comes back
            result = getattr(td, name)(*args, **kwargs)
            return out if result is kwargs["out"] else _deliver(self, result, td)
        result = getattr(td, name)(*args, **kwargs)
        return _deliver(self, result, td) if wrap else result

    return method


def _routed_property(name: str, inherited: property) -> property:
    def getter(self: Any) -> Any:
        td = self._tensordict
        if type(td) is TensorDict:  # any other kind knows where its leaves (and grads) live
            return inherited.__get__(self)
        return _deliver(self, getattr(td, name), td)

    return property(getter, inherited.fset, inherited.fdel, inherited.__doc__)


def route_wrapped_ops(cls: type, skip: Iterable[str] = ()) -> None:
    """Install on `cls` (the tensorclass base) the ops that run on the wrapped kind.

    `skip` names the ops `cls` defines for itself (their own handling of each kind).
    """
    own = set(skip)
    for name in [*_family_ops(), *_MORE, *_UNWRAPPED]:
        if name not in own:
            setattr(cls, name, _routed(name, getattr(cls, name), name not in _UNWRAPPED))
    for name in _PROPERTIES:
        setattr(cls, name, _routed_property(name, getattr(cls, name)))
