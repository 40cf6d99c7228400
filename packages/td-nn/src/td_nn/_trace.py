"""`symbolic_trace`: a TensorDict module as a `torch.fx.GraphModule`.

The graph takes the TensorDict, reads the keys that come from outside
(`getitem` nodes), runs the wrapped networks (traced like any module:
`torch.nn` layers stay `call_module` nodes) and writes the out keys with
`set` nodes, so `graph_module(td)` does what `td_module(td)` does, and
`graph_module(td, tensordict_out=out)` what `td_module(td, tensordict_out=out)`
does (the input is left as it was and the out keys are written into `out`).

`TensorDictModule` and `TensorDictSequential` members are opened up, so
values flow between them as tensors; any other member (a probabilistic
module, a custom `TensorDictModuleBase`) is called as one `call_module`
node on the TensorDict.
"""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from td_core import NestedKey, TensorDict, TensorDictBase
from td_nn._common import TensorDictModule
from td_nn._sequence import TensorDictSequential

__all__ = ["symbolic_trace"]


def new_tensordict() -> TensorDict:
    """An empty TensorDict (the destination of `inplace=False` modules in traced graphs)."""
    return TensorDict()


def source_for(tensordict: TensorDictBase, tensordict_out: Any) -> TensorDictBase:
    """The TensorDict a traced graph runs on: the input, or a copy when the outputs go elsewhere."""
    return tensordict if tensordict_out is None else tensordict.copy()


def deliver(
    result: TensorDictBase, tensordict_out: Any, out_keys: tuple[NestedKey, ...]
) -> TensorDictBase:
    """The graph's result, or `tensordict_out` with the out keys of the result written into it."""
    if tensordict_out is None:
        return result
    if not isinstance(tensordict_out, TensorDictBase):
        raise TypeError(f"tensordict_out must be a TensorDict, got {type(tensordict_out).__name__}")
    for key in out_keys:
        value = result.get(key, None)
        if value is not None:
            tensordict_out.set(key, value)
    return tensordict_out


def _is_td_module(module: Any) -> bool:
    return hasattr(module, "in_keys") and hasattr(module, "out_keys")


def _openable(module: Any) -> bool:
    if isinstance(module, TensorDictModule):
        return type(module).forward is TensorDictModule.forward and module.inplace is True
    if isinstance(module, TensorDictSequential):
        return (
            type(module).forward is TensorDictSequential.forward
            and not module.partial_tolerant
            and module.inplace in (None, True)
        )
    return False


class _Tracer(fx.Tracer):
    """Keeps TensorDict modules that cannot be opened up as single nodes."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return _is_td_module(m) or super().is_leaf_module(m, module_qualified_name)


class _State:
    """The TensorDict proxy, and the values written but not yet set into it."""

    def __init__(self, td: Any) -> None:
        self.td = td  # an fx.Proxy of the TensorDict
        self.pending: dict[NestedKey, Any] = {}
        self.reads: dict[NestedKey, Any] = {}
        self.dropped: list[NestedKey] = []

    def read(self, key: NestedKey) -> Any:
        if key in self.pending:
            return self.pending[key]
        if key not in self.reads:
            self.reads[key] = self.td[key]
        return self.reads[key]

    def flush(self) -> None:
        for key, value in self.pending.items():
            self.td = self.td.set(key, value)
        self.pending.clear()
        self.reads.clear()


def _run(module: Any, state: _State) -> None:
    if isinstance(module, TensorDictModule) and _openable(module):
        values = [state.read(k) for k in module._read_keys]
        out = module._call_module(values, dict(module.method_kwargs))
        keys = module._out_keys_all
        if isinstance(out, fx.Proxy) and len(keys) > 1:
            outs: Any = [out[i] for i in range(len(keys))]  # type: ignore[index]  # torch stubs: Proxy.__getitem__ is added at run time
        else:
            outs = module._outputs(out)
        for i, key in module._write:
            state.pending[key] = outs[i]
        return
    if isinstance(module, TensorDictSequential) and _openable(module):
        for member in module.module._modules.values():
            _run(member, state)
        if module._dropped:
            state.dropped.extend(module._dropped)
            for key in module._dropped:
                state.pending.pop(key, None)
        return
    state.flush()
    state.td = module(state.td)


class _Root(nn.Module):
    def __init__(self, td_module: nn.Module) -> None:
        super().__init__()
        self.module = td_module

    def forward(
        self, tensordict: TensorDictBase, tensordict_out: TensorDictBase | None = None
    ) -> TensorDictBase:
        module: Any = self.module
        tracer = tensordict.tracer  # type: ignore[attr-defined]  # an fx.Proxy while tracing
        source = tracer.create_proxy("call_function", source_for, (tensordict, tensordict_out), {})
        state = _State(source)
        _run(module, state)
        if state.dropped:
            state.flush()
            state.td = state.td.exclude(*state.dropped, inplace=True)
        inplace = getattr(module, "inplace", True)
        if inplace is None or inplace is True:
            state.flush()
            dest = state.td
        else:
            if inplace is False:
                dest = tracer.create_proxy("call_function", new_tensordict, (), {})
            else:
                dest = state.td.empty()
            for key in module.out_keys:
                dest = dest.set(key, state.read(key))
        out_keys = tuple(module.out_keys)
        return tracer.create_proxy("call_function", deliver, (dest, tensordict_out, out_keys), {})


def symbolic_trace(td_module: nn.Module) -> fx.GraphModule:
    """Trace a TensorDict module into a `torch.fx.GraphModule` that computes the same thing.

    The result takes a TensorDict (and, as the module does, an optional
    `tensordict_out` that receives the out keys, leaving the input as it
    was) and returns the TensorDict the module returns; its code is plain tensor operations between `getitem` reads and
    `set` writes, which `torch.compile` and fx passes handle. It keeps
    `in_keys` and `out_keys`. The wrapped networks must be fx-traceable
    (no data-dependent Python control flow). `set_skip_existing` is
    not consulted by the graph.

    Args:
        td_module: a `TensorDictModule`, `TensorDictSequential` or
            any module with `in_keys`/`out_keys` (called as one node).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModule, TensorDictSequential, symbolic_trace
        >>> seq = TensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["h"]),
        ...     TensorDictModule(torch.relu, in_keys=["h"], out_keys=["y"]),
        ... )
        >>> graph_module = symbolic_trace(seq)
        >>> isinstance(graph_module, torch.fx.GraphModule)
        True
        >>> td = TensorDict(x=torch.randn(2, 3), batch_size=[2])
        >>> torch.equal(graph_module(td.copy())["y"], seq(td.copy())["y"])
        True
    """
    if not _is_td_module(td_module):
        raise TypeError(
            f"symbolic_trace expects a module with in_keys and out_keys, got {type(td_module).__name__}"
        )
    root = _Root(td_module)
    graph = _Tracer().trace(root)
    gm = fx.GraphModule(root, graph, class_name=f"{type(td_module).__name__}Graph")
    gm.in_keys = list(td_module.in_keys)  # type: ignore[arg-type,assignment]  # torch stubs: Tensor | Module
    gm.out_keys = list(td_module.out_keys)  # type: ignore[arg-type,assignment]  # torch stubs: Tensor | Module
    return gm
