"""`EnsembleModule`: independent copies of a module run at once with `torch.vmap`."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from td_core import TensorDictBase, from_module, from_modules
from td_nn._base import TensorDictModuleBase, indent

__all__ = ["EnsembleModule"]


def _reset(module: nn.Module) -> None:
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()


class EnsembleModule(TensorDictModuleBase):
    """Run `num_copies` copies of `module`, each with its own re-initialised parameters.

    The copies' parameters are stacked in `params_td` (a `TensorDictParams`
    of batch size `[num_copies]`, trained like any parameters); a call runs
    `module` once per copy with `torch.vmap`, so every output gets a
    leading dim of size `num_copies`. `module` itself keeps its own
    parameters, which the call does not use.

    Args:
        module: a TensorDict module; its `in_keys`/`out_keys` become the ensemble's.
        num_copies: the number of copies.
        expand_input: give every copy the same input (else the input must
            already have a leading dim of size `num_copies`, as after another
            ensemble, and copy `i` reads row `i`).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_core import TensorDict
        >>> from td_nn import EnsembleModule, TensorDictModule
        >>> net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
        >>> ensemble = EnsembleModule(TensorDictModule(net, in_keys=["a"], out_keys=["b"]), num_copies=3)
        >>> out = ensemble(TensorDict(a=torch.randn(10, 4), batch_size=[10]))
        >>> out.batch_size, out["b"].shape
        (torch.Size([3, 10]), torch.Size([3, 10, 2]))
    """

    _native_call = True

    def __init__(self, module: nn.Module, num_copies: int, expand_input: bool = True) -> None:
        super().__init__()
        if not hasattr(module, "in_keys") or not hasattr(module, "out_keys"):
            raise TypeError(
                f"EnsembleModule needs a module with in_keys and out_keys, got {type(module).__name__}"
            )
        if not isinstance(num_copies, int) or isinstance(num_copies, bool) or num_copies < 1:
            raise ValueError(
                f"EnsembleModule num_copies must be a positive int, got {num_copies!r}"
            )
        copies = []
        for _ in range(num_copies):
            twin = copy.deepcopy(module)
            # re-initialise the twin's parameters through `module` itself, so a custom
            # (or patched) `reset_parameters` of `module` runs once per copy, as upstream
            with torch.no_grad(), from_module(twin).to_module(module):
                _reset(module)
            copies.append(twin)
        self.params_td = from_modules(*copies, as_module=True)
        self.module = module
        self.num_copies = num_copies
        self.expand_input = expand_input
        self.in_keys = list(module.in_keys)  # type: ignore[arg-type]  # torch stubs: Tensor | Module
        self.out_keys = list(module.out_keys)  # type: ignore[arg-type]  # torch stubs: Tensor | Module

    def _call_one(self, params: TensorDictBase, tensordict: TensorDictBase) -> Any:
        with params.to_module(self.module):
            return self.module(tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run every copy on `tensordict`; the result has batch size `[num_copies, *batch]`."""
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(
                f"EnsembleModule is called with a TensorDict, got {type(tensordict).__name__}"
            )
        if self.expand_input:
            tensordict = tensordict.expand(self.num_copies, *tensordict.batch_size)
        elif tensordict.batch_size[:1] != torch.Size([self.num_copies]):
            raise ValueError(
                f"EnsembleModule(expand_input=False) needs a leading batch dim of size "
                f"{self.num_copies}, got batch_size {list(tensordict.batch_size)}"
            )
        return torch.vmap(self._call_one, (0, 0))(self.params_td.copy(), tensordict)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(\n    module={indent(repr(self.module))},\n"
            f"    num_copies={self.num_copies},\n    expand_input={self.expand_input})"
        )
