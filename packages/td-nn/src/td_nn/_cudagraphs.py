"""`CudaGraphModule`: record a function (or td module) as a CUDA graph and replay it.

Without CUDA the wrapper passes every call through to the function (as
upstream, with a warning at construction). With CUDA, the first
`warmup - 1` calls run on a side stream, the next one records the graph on
static copies of the inputs, and later calls copy their inputs into those
copies, replay the graph and return clones of its outputs. Inputs are
flattened with `torch.utils._pytree` (TensorDicts are pytree nodes), so
tensors, TensorDicts and nests of them are all accepted.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from td_core import NestedKey, is_tensor_collection

__all__ = ["CudaGraphModule"]

_REQUIRES_GRAD_ERROR = (
    "CudaGraphModule cannot record inputs that require gradients; pass such tensors as "
    "constants of the function (e.g. a default argument) instead"
)


class CudaGraphModule:
    """Record `module` as a CUDA graph at call `warmup` and replay it afterwards.

    Not an `nn.Module` (as upstream), so its parameters are not collected
    twice. Between calls the inputs may change values but not structure,
    shapes, dtypes or devices; non-tensor arguments must not change.

    Args:
        module: a function of tensors / TensorDicts returning tensors,
            TensorDicts or pytrees of them (a td module included).
        warmup: the call that records the graph (`>= 1`).
        in_keys: the module's in_keys (read from `module` when it has them).
        out_keys: the module's out_keys (read from `module` when it has them).
        device: the CUDA device of the side streams (default: the current one).

    Raises:
        ValueError: for `warmup < 1`, or inputs whose structure changed
            since the capture.
        RuntimeError: for inputs that require gradients (on CUDA).

    Examples:
        >>> import warnings, torch
        >>> from td_nn import CudaGraphModule
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # no CUDA here: calls pass through
        ...     plus_one = CudaGraphModule(lambda x: x + 1)
        >>> plus_one(torch.zeros(2))
        tensor([1., 1.])
    """

    def __init__(
        self,
        module: Callable[..., Any],
        warmup: int = 2,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | None = None,
    ) -> None:
        if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 1:
            raise ValueError(f"warmup must be an integer greater than 0, got {warmup!r}")
        self.module = module
        self.counter = 0
        self._warmup = warmup
        self.device = device
        self.in_keys = list(getattr(module, "in_keys", in_keys) or [])
        self.out_keys = list(getattr(module, "out_keys", out_keys) or [])
        self._has_cuda = torch.cuda.is_available()
        if not self._has_cuda:
            warnings.warn(
                "CudaGraphModule was built on a machine without CUDA: its calls pass through "
                "to the wrapped function, with no graph and no speed-up",
                UserWarning,
                stacklevel=2,
            )
            return
        self._warmup_stream = torch.cuda.Stream(device)
        self._capture_stream = torch.cuda.Stream(device)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static: tuple[list[Any], Any] | None = None
        self._static_out: Any = None
        self._static_first: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._has_cuda:
            return self.module(*args, **kwargs)
        if self.counter < self._warmup - 1:
            self.counter += 1
            torch.cuda.synchronize()
            with torch.cuda.stream(self._warmup_stream):
                out = self.module(*args, **kwargs)
            torch.cuda.synchronize()
            return out
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if any(isinstance(x, torch.Tensor) and x.requires_grad for x in leaves):
            raise RuntimeError(_REQUIRES_GRAD_ERROR)
        if self._graph is None:
            self._capture(leaves, spec)
        else:
            self._copy_inputs(leaves, spec)
            self._graph.replay()
        self.counter += 1
        out = pytree.tree_map(
            lambda x: x.clone() if isinstance(x, torch.Tensor) else x, self._static_out
        )
        first: Any = args[0] if args else None
        if is_tensor_collection(first) and self._static_out is self._static_first:
            return first.update(out)  # the module wrote into its input: keep the caller's object
        return out

    def _capture(self, leaves: list[Any], spec: Any) -> None:
        static = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        self._static = (static, spec)
        args, kwargs = pytree.tree_unflatten(static, spec)
        self._static_first = args[0] if args else None
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self._capture_stream):
            self._static_out = self.module(*args, **kwargs)
        torch.cuda.synchronize()
        self._graph = graph
        # the capture itself does not run the kernels: replay once for this call's outputs
        graph.replay()

    def _copy_inputs(self, leaves: list[Any], spec: Any) -> None:
        assert self._static is not None
        static, static_spec = self._static
        if spec != static_spec:
            raise ValueError(
                "CudaGraphModule: the inputs' structure changed since the graph was recorded"
            )
        for i, (dest, src) in enumerate(zip(static, leaves)):
            if isinstance(dest, torch.Tensor):
                if src.shape != dest.shape or src.dtype != dest.dtype:
                    raise ValueError(
                        f"CudaGraphModule: input {i} has shape {list(src.shape)} and dtype "
                        f"{src.dtype}; the graph was recorded with {list(dest.shape)}, {dest.dtype}"
                    )
                dest.copy_(src)
            elif src is not dest and src != dest:
                raise ValueError(
                    f"CudaGraphModule: non-tensor input {i} changed from {dest!r} to {src!r} "
                    "since the graph was recorded"
                )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(module={self.module!r}, warmup={self._warmup})"
