"""`torch.stack(tds)`, `torch.cat`, `torch.unbind`, ... through `__torch_function__`.

One table maps each supported torch function to its TensorDict implementation;
anything else returns `NotImplemented` (so torch raises its usual TypeError).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.traverse import is_td, map_leaves
from td_core._ops.autograd import grad
from td_core._ops.losses import leafwise_loss
from td_core._ops.pointwise import PointwiseMixin
from td_core._ops.stack import cat, stack

if TYPE_CHECKING:
    from td_core._core.contract import TensorDictContract

__all__ = ["TORCH_FUNCTIONS", "implements"]

TORCH_FUNCTIONS: dict[Callable[..., Any], Callable[..., Any]] = {}


def implements(*funcs: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the TensorDict version of `funcs`."""

    def register(impl: Callable[..., Any]) -> Callable[..., Any]:
        for func in funcs:
            TORCH_FUNCTIONS[func] = impl
        return impl

    return register


implements(torch.stack)(stack)
implements(torch.autograd.grad)(grad)
implements(torch.cat, torch.concat, torch.concatenate)(cat)


def _as_method(name: str) -> Callable[..., Any]:
    """`torch.<name>(td, ...)` as `td.<name>(...)` (the TensorDict must come first)."""

    def impl(input: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_td(input):
            return NotImplemented  # torch.add(tensor, td): torch raises its TypeError
        return getattr(input, name)(*args, **kwargs)

    impl.__name__ = f"td_{name}"
    return impl


# torch function -> the TensorDict method taking the same arguments, by position and by name
_SAME_AS_METHOD = {
    **{
        getattr(torch, name): name
        for name in (
            "unbind chunk squeeze unsqueeze permute flatten transpose movedim masked_select "
            "flip fliplr flipud rot90 narrow tile"
        ).split()
    },
    torch.swapaxes: "transpose",
    torch.swapdims: "transpose",
    torch.moveaxis: "movedim",
}
for _func, _name in _SAME_AS_METHOD.items():
    TORCH_FUNCTIONS[_func] = _as_method(_name)


# the torch functions whose arguments have other names in the TensorDict method
@implements(torch.split)
def _split(input: TensorDictContract, split_size_or_sections: Any, dim: int = 0) -> tuple[Any, ...]:
    return input.split(split_size_or_sections, dim)


@implements(torch.reshape)
def _reshape(input: TensorDictContract, shape: Any) -> Any:
    return input.reshape(shape)


@implements(torch.unflatten)
def _unflatten(input: TensorDictContract, dim: int, sizes: Any) -> Any:
    return input.unflatten(dim, sizes)


@implements(torch.broadcast_to)
def _broadcast_to(input: Any, size: Any) -> Any:
    return input.broadcast_to(size)


@implements(torch.clone)
def _clone(input: TensorDictContract, *, memory_format: Any = None) -> Any:
    return input.clone()


def _like(func: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def impl(input: TensorDictContract, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        return map_leaves(
            input,
            lambda t: func(t, *args, **kwargs),
            device=None if device is None else torch.device(device),
        )

    impl.__name__ = f"td_{func.__name__}"
    return impl


for _func in (
    torch.zeros_like,
    torch.ones_like,
    torch.empty_like,
    torch.full_like,
    torch.rand_like,
    torch.randn_like,
):
    TORCH_FUNCTIONS[_func] = _like(_func)


@implements(torch.where)
def _where(condition: torch.Tensor, input: Any, other: Any, *, out: Any = None) -> Any:
    """`torch.where(cond, td, other)`; `torch.where(cond, value, td)` picks `td` where False."""
    if not is_td(input):
        return other.where(condition.logical_not(), input, out=out)
    return input.where(condition, other, out=out)


@implements(torch.gather)
def _gather(
    input: TensorDictContract,
    dim: int,
    index: torch.Tensor,
    *,
    sparse_grad: bool = False,
    out: Any = None,
) -> Any:
    if sparse_grad:
        raise NotImplementedError(
            "torch.gather(tensordict, ..., sparse_grad=True) is not supported"
        )
    return input.gather(dim, index, out=out)


def _atleast(name: str) -> Callable[..., Any]:
    """`torch.atleast_<n>d(td, ...)`: one result per input, a tuple for several, as torch."""

    def impl(*inputs: Any) -> Any:
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            return tuple(_atleast_one(x, name) for x in inputs[0])
        out = tuple(_atleast_one(x, name) for x in inputs)
        return out[0] if len(out) == 1 else out

    return impl


def _atleast_one(x: Any, name: str) -> Any:
    return getattr(x, name)() if is_td(x) else getattr(torch, name)(x)


for _name in ("atleast_1d", "atleast_2d", "atleast_3d"):
    # torch's Python wrapper dispatches one input; several go on to the C function
    implements(getattr(torch, _name), getattr(torch._C._VariableFunctions, _name))(_atleast(_name))


@implements(torch.roll)
def _roll(input: TensorDictContract, shifts: Any, dims: Any = None) -> Any:
    if dims is None:
        raise TypeError(
            "torch.roll of a TensorDict needs dims= (rolling the flattened batch is ambiguous)"
        )
    return input.roll(shifts, dims)


# ------------------------------------------------------------------ reductions
def _reduction(name: str) -> Callable[..., Any]:
    """`torch.<name>(td, ...)` as `td.<name>(...)` (same arguments after the input)."""

    def impl(input: TensorDictContract, *args: Any, **kwargs: Any) -> Any:
        if args and (is_td(args[0]) or isinstance(args[0], torch.Tensor)) and name != "quantile":
            if name in _ELEMENTWISE:  # torch.max(td, other) is the element-wise maximum
                return getattr(input, _ELEMENTWISE[name])(*args, **kwargs)
            return NotImplemented
        if "unbiased" in kwargs:  # torch.std/var's older spelling of correction
            kwargs["correction"] = int(bool(kwargs.pop("unbiased")))
        return getattr(input, name)(*args, **kwargs)

    impl.__name__ = f"td_{name}"
    return impl


_ELEMENTWISE = {"max": "maximum", "min": "minimum"}

for _name in (
    "sum nansum mean nanmean prod std var max min amax amin logsumexp quantile "
    "cummax cummin softmax all any"
).split():
    TORCH_FUNCTIONS[getattr(torch, _name)] = _reduction(_name)


@implements(torch.nn.functional.softmax)
def _f_softmax(
    input: TensorDictContract,
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: torch.dtype | None = None,
) -> Any:
    if dim is None:
        raise TypeError("softmax of a TensorDict needs dim= (a batch dim)")
    return input.softmax(dim, dtype)


@implements(torch.norm)
def _norm(
    input: TensorDictContract,
    p: Any = "fro",
    dim: Any = None,
    keepdim: bool = False,
    out: Any = None,
    dtype: torch.dtype | None = None,
) -> Any:
    if p not in ("fro", 2, 2.0, None) or dim is not None or keepdim:
        raise TypeError(
            "torch.norm of a TensorDict is the 2-norm of each leaf (td.norm()); "
            f"p={p!r}, dim={dim!r}, keepdim={keepdim!r} are not supported"
        )
    return input.norm(out=out, dtype=dtype)


def _loss(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def impl(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        return leafwise_loss(fn, input, target, *args, **kwargs)

    impl.__name__ = f"td_{fn.__name__}"
    return impl


for _loss_fn in (
    torch.nn.functional.l1_loss,
    torch.nn.functional.mse_loss,
    torch.nn.functional.smooth_l1_loss,
):
    TORCH_FUNCTIONS[_loss_fn] = _loss(_loss_fn)


# ------------------------------------------------------------------ pointwise
# every pointwise method that torch also has as a function: torch.maximum, torch.exp, ...
for _name in sorted(dir(PointwiseMixin)):
    _torch_func: Any = getattr(torch, _name, None)
    if not _name.startswith("_") and callable(_torch_func) and _torch_func not in TORCH_FUNCTIONS:
        TORCH_FUNCTIONS[_torch_func] = _as_method(_name)
