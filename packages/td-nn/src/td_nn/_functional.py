"""The functional API of the seeds: `make_functional` and friends, on top of `to_module`.

Upstream tensordict removed these functions; td keeps them, as the seeds
document. A functional module's `forward` (and any other method named in
`funs_to_decorate`), and those of its sub-modules, accept the parameters as
a TensorDict: `module(x, params=params)`, or as the last positional argument
for modules made functional by `make_functional`. The call runs inside
`params.to_module(module)`, which swaps the tensors in and back out, so it
composes with `torch.vmap` over a stack of parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from td_core import TensorDict, TensorDictBase, TensorDictParams, is_tensor_collection

__all__ = ["make_functional", "get_functional", "is_functional", "repopulate_module"]

_M = TypeVar("_M", bound=nn.Module)
_FLAG = "_td_functional"


class _FunctionalMethod:
    """Instance attribute replacing a method: swap `params` in around the original call."""

    def __init__(self, module: nn.Module, name: str, positional: bool) -> None:
        self.module = module
        self.name = name
        self.positional = positional

    def __call__(self, *args: Any, params: TensorDictBase | None = None, **kwargs: Any) -> Any:
        if params is None and self.positional and len(args) >= 2 and is_tensor_collection(args[-1]):
            params, args = args[-1], args[:-1]
        module = self.module
        method = getattr(type(module), self.name).__get__(module)
        if params is None:
            return method(*args, **kwargs)
        with params.to_module(module):
            return method(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<functional {type(self.module).__name__}.{self.name}>"


def is_functional(module: nn.Module) -> bool:
    """Whether `make_functional` (or `get_functional`) was called on `module`.

    Examples:
        >>> from torch import nn
        >>> from td_nn import is_functional, make_functional
        >>> model = nn.Linear(2, 2)
        >>> is_functional(model)
        False
        >>> _ = make_functional(model)
        >>> is_functional(model)
        True
    """
    return bool(module.__dict__.get(_FLAG, False))


def _to_meta(module: nn.Module) -> None:
    """Empty every parameter and buffer slot: keep shape and dtype on the meta device."""
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None and param.device.type != "meta":
                sub._parameters[name] = nn.Parameter(
                    torch.empty_like(param, device="meta"), requires_grad=param.requires_grad
                )
        for name, buffer in sub._buffers.items():
            if buffer is not None and buffer.device.type != "meta":
                sub._buffers[name] = torch.empty_like(buffer, device="meta")


def _unshared(params: TensorDictBase) -> TensorDictBase:
    """`params` with every `TensorDictParams` inside it rebuilt as a plain TensorDict.

    `from_module` keeps a `TensorDictParams` child of the module as that very object
    (as upstream), so emptying the module's slots (`_to_meta`) would empty it too; the
    plain TensorDict holds the same parameter tensors (no copy).
    """
    if not any(isinstance(v, TensorDictParams) for v in _collections(params)):
        return params
    return _plain(params)


def _collections(td: TensorDictBase) -> list[Any]:
    found = [td]
    for value in td.values():
        if is_tensor_collection(value):
            found += _collections(value)
    return found


def _plain(td: TensorDictBase) -> TensorDict:
    entries = {
        key: _plain(value) if is_tensor_collection(value) else value for key, value in td.items()
    }
    return TensorDict(entries, batch_size=td.batch_size, device=td.device)


def make_functional(
    module: nn.Module,
    funs_to_decorate: Sequence[str] | None = None,
    keep_params: bool = False,
    return_params: bool = True,
) -> TensorDict | None:
    """Make `module` and its sub-modules functional, in place, and return its parameters.

    The parameters and buffers come back as a TensorDict nested like the
    module tree (`params["0", "weight"]` is `model[0].weight`: the same
    tensors, not copies). Unless `keep_params`, the module is left without
    them (its slots hold shape-only tensors on the `meta` device), so it must
    be called with parameters: `model(x, params=params)` or `model(x, params)`;
    sub-modules too: `model[0](x, params["0"])`.

    Args:
        module: the module to convert.
        funs_to_decorate: the methods that take `params` (default `["forward"]`).
        keep_params: leave the parameters in the module as well (see `get_functional`).
        return_params: return the parameters (else `None`).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_nn import make_functional
        >>> model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4))
        >>> params = make_functional(model)
        >>> x = torch.randn(10, 3)
        >>> out = model(x, params=params)
        >>> torch.testing.assert_close(out, model[1](model[0](x, params["0"]), params["1"]))
        >>> params_stack = torch.stack([params, params], 0)
        >>> torch.vmap(model, (None, 0))(x, params_stack).shape
        torch.Size([2, 10, 4])
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"make_functional expects an nn.Module, got {type(module).__name__}")
    names = ["forward"] if funs_to_decorate is None else list(funs_to_decorate)
    for name in names:
        if not callable(getattr(type(module), name, None)):
            raise AttributeError(
                f"make_functional: {type(module).__name__} has no method {name!r} to decorate"
            )
    params = TensorDict.from_module(module) if return_params else None
    if params is not None and not keep_params:
        params = _unshared(params)
    for sub in module.modules():
        for name in names:
            if callable(getattr(type(sub), name, None)):
                current = sub.__dict__.get(name)
                if isinstance(current, _FunctionalMethod):
                    current.positional = current.positional and not keep_params
                else:
                    object.__setattr__(sub, name, _FunctionalMethod(sub, name, not keep_params))
        object.__setattr__(sub, _FLAG, True)
    if not keep_params:
        _to_meta(module)
    return params


def get_functional(module: _M, funs_to_decorate: Sequence[str] | None = None) -> _M:
    """Make `module` functional in place but keep its parameters; return it.

    It still works as before, and also takes parameters by keyword:
    `module(x, params=params)` (not positionally, since the module keeps its
    usual positional signature).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_core import TensorDict
        >>> from td_nn import get_functional
        >>> model = get_functional(nn.Linear(2, 2))
        >>> zeros = TensorDict.from_module(model).apply(torch.zeros_like)
        >>> model(torch.ones(1, 2), params=zeros)  # parameters stay parameters, as upstream
        tensor([[0., 0.]], grad_fn=<AddmmBackward0>)
    """
    make_functional(module, funs_to_decorate, keep_params=True, return_params=False)
    return module


def repopulate_module(model: _M, tensordict: TensorDictBase) -> _M:
    """Put the parameters of `tensordict` (nested like the module tree) into `model`; return it.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_nn import make_functional, repopulate_module
        >>> model = nn.Linear(2, 2)
        >>> params = make_functional(model)
        >>> model.weight.device.type
        'meta'
        >>> repopulate_module(model, params).weight is params["weight"]
        True
    """
    tensordict.to_module(model, return_swap=False)
    return model
