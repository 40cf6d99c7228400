"""`TensorDictParams`: a TensorDict that is also an `nn.Module` owning its leaves.

Its storage *is* the module's registries: tensor entries live in
`_parameters` (floating point, converted to `nn.Parameter`) or `_buffers`,
sub-TensorDicts become child `TensorDictParams` modules in `_modules`, so
`parameters()`, `state_dict()`, optimizers and `module.to(device)` all see
them, with dotted names like `"0.weight"`.

`params.to(...)` returns a new `TensorDictParams` and leaves `params` as
it is, as upstream does; a parent module's `module.to(...)` (`nn.Module`'s
own machinery) still casts and moves the registered leaves in place, so
optimizers keep their references.

In-place writes that replace values (`zero_`, `fill_`, `set_`,
`update_`, `apply_`, `copy_`) run under `torch.no_grad()`, as upstream:
they are how parameters are initialised and loaded. In-place arithmetic
(`add_`, ...) is left to autograd, which refuses it on leaf parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from td_core._core.contract import provide
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT, as_device
from td_core._io.repr_compact import with_compact
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict
from td_core._kinds.pytree import register
from td_core._ops.views import moved_back, remember

__all__ = ["TensorDictParams"]

Tensor = torch.Tensor


class TensorDictParams(TensorDictBase, nn.Module):  # type: ignore[misc]  # the TensorDict methods win over nn.Module ones (apply, float, ...), as upstream
    """A TensorDict of parameters and buffers that can be stored in an `nn.Module`.

    Args:
        parameters: the TensorDict (or mapping) to hold.
        no_convert: keep tensors that are not `nn.Parameter` as buffers
            instead of converting floating-point ones to parameters.
        lock: lock the result.
        **kwargs: the entries, when `parameters` is not given
            (`TensorDictParams(w=torch.zeros(3))`).

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, TensorDictParams
        >>> params = TensorDictParams(TensorDict({"w": torch.zeros(3), "nested": {"b": torch.ones(2)}}))
        >>> sorted(name for name, _ in params.named_parameters())
        ['nested.b', 'w']
    """

    _map_refusal = (
        "Cannot call map on a TensorDictParams object: parameters cannot cross process "
        "boundaries; call map on params.data (a TensorDict of their values) instead"
    )

    _caches_when_locked = True  # what depends on keys only: its leaves are not cached
    _writes_values_without_grad = True  # see "value writes under no_grad" below

    def __init__(
        self,
        parameters: Any = None,
        *,
        no_convert: bool = False,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        nn.Module.__init__(self)
        if parameters is None:
            parameters = TensorDict(kwargs)
        elif kwargs:
            raise TypeError(
                "TensorDictParams: pass the entries either as a TensorDict or mapping, or as "
                f"keyword arguments, not both (got parameters and {sorted(kwargs)})"
            )
        elif not is_td(parameters):
            parameters = TensorDict(parameters)
        self._batch_size = parameters.batch_size
        self._device = parameters.device
        self._is_locked = False
        self._no_convert = no_convert
        self._order: dict[str, None] = {}
        self._non_tensor: dict[str, Any] = {}
        self._get_post_hooks: list[Callable[[TensorDictParams, Any], Any]] = []
        for key, value in parameters._items_str():
            self._set_str(key, value)
        names = parameters._raw_names()
        if names is not None:  # the dims keep their names, as upstream
            self._store_names(names)
        if lock:
            self.lock_()

    # ---------------------------------------------------------------- primitives
    def _set_str(self, key: str, value: Any) -> None:
        self._drop(key)
        if isinstance(value, nn.Parameter):
            self._parameters[key] = value
        elif isinstance(value, Tensor):
            if not self._no_convert and (value.is_floating_point() or value.is_complex()):
                self._parameters[key] = nn.Parameter(value)
            else:
                self._buffers[key] = _as_buffer(value)
        elif is_nt(value):
            self._non_tensor[key] = value
        elif isinstance(value, TensorDictParams):
            self._modules[key] = value
        else:
            self._modules[key] = TensorDictParams(
                value, no_convert=self._no_convert, lock=value.is_locked
            )
        self._order[key] = None

    def _drop(self, key: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules, self._non_tensor):
            registry.pop(key, None)

    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        for registry in (self._parameters, self._buffers, self._modules, self._non_tensor):
            value = registry.get(key, NO_DEFAULT)
            if value is not NO_DEFAULT:
                return value
        return default

    def _del_str(self, key: str) -> None:
        self._drop(key)
        del self._order[key]

    def _keys_str(self) -> Any:
        return self._order.keys()

    def _items_str(self) -> Any:
        entries = self._entries()
        return [(key, entries[key]) for key in self._order]

    def _values_str(self) -> Any:
        entries = self._entries()
        return [entries[key] for key in self._order]

    def _entries(self) -> dict[str, Any]:
        """Every entry by key (a key lives in one registry: `_drop` clears the others)."""
        return {**self._non_tensor, **self._modules, **self._buffers, **self._parameters}

    # ------------------------------------------------------------- read hooks
    def register_get_post_hook(self, hook: Callable[[TensorDictParams, Any], Any]) -> None:
        """Call `hook(self, value)` on every leaf read from here (`get`, `[key]`, `values`, `items`).

        A hook's non-`None` result replaces the value read (`lambda self, x: x.data`
        reads detached tensors). Sub-TensorDicts are returned as they are; reads
        of nested keys through this one are hooked.

        Raises:
            ValueError: if `hook` is not callable.
        """
        if not callable(hook):
            raise ValueError(f"Hooks must be callables: got a {type(hook).__name__}")
        self._get_post_hooks.append(hook)

    def _post_get(self, value: Any) -> Any:
        if is_td(value):
            return value
        for hook in self._get_post_hooks:
            new = hook(self, value)
            if new is not None:
                value = new
        return value

    def get(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        """The entry at `key` (see `TensorDict.get`), through the read hooks if any."""
        out = TensorDictBase.get(self, key, *args, **kwargs)
        if not getattr(self, "_get_post_hooks", None):
            return out
        default = args[0] if args else kwargs.get("default", NO_DEFAULT)
        return out if out is default else self._post_get(out)

    def values(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """The entries (see `TensorDict.values`), through the read hooks if any."""
        out = TensorDictBase.values(self, *args, **kwargs)
        if not getattr(self, "_get_post_hooks", None):
            return out
        return (self._post_get(value) for value in out)

    def items(self, *args: Any, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
        """`(key, entry)` pairs (see `TensorDict.items`), through the read hooks if any."""
        out = TensorDictBase.items(self, *args, **kwargs)
        if not getattr(self, "_get_post_hooks", None):
            return out
        return ((key, self._post_get(value)) for key, value in out)

    # ---------------------------------------------------------------- metadata
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        raise RuntimeError("the batch_size of a TensorDictParams is fixed at construction")

    @property
    def device(self) -> torch.device | None:
        return self._device

    def _set_device(self, device: Any) -> None:
        self._device = as_device(device)

    # ----------------------------------------------------- nn.Module semantics
    def to(self, *args: Any, **kwargs: Any) -> TensorDictParams:
        """A new `TensorDictParams` with every leaf moved and/or cast (`self` is unchanged).

        A parent module's `module.to(...)` moves and casts these leaves in place.
        With `batch_size=`, the new `TensorDictParams` has that batch size (its
        leaves are this one's where nothing is moved or cast).
        """
        batch_size = kwargs.pop("batch_size", None)
        result = TensorDictBase.to(self, *args, **kwargs)
        if batch_size is not None:  # ours is fixed: build the new one at that size
            result = TensorDict(result.to_dict(), batch_size=batch_size, device=result.device)
        elif result is self:
            return self
        out = TensorDictParams(result, no_convert=self._no_convert, lock=self._is_locked)
        for name, param in self._parameters.items():  # a cast keeps requires_grad, as upstream
            new = out._parameters.get(name)
            if new is not None and param is not None:
                new.requires_grad_(param.requires_grad)
        return remember(self, out, moved_back)  # `with params.to(d):` writes back

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> TensorDictParams:
        """`nn.Module`'s in-place conversion (a parent's `module.to(device)`), after which the
        device this TensorDict reports is the one its leaves are on."""
        nn.Module._apply(self, fn, recurse)
        if self._device is not None:
            devices = {t.device for t in (*self.parameters(), *self.buffers())}
            if len(devices) == 1:
                self._device = devices.pop()
            elif devices:
                self._device = None
        return self

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> Any:
        """A copy with every leaf in page-locked memory (see `TensorDict.pin_memory`).

        Raises:
            RuntimeError: with `inplace=True`, as upstream: pinning copies each leaf, so
                in place it would replace the parameters that optimizers hold.
        """
        if inplace:
            raise RuntimeError(
                "Cannot pin_memory in-place with TensorDictParams: pinning copies each leaf, "
                "which would replace the parameters optimizers hold; call pin_memory() for a "
                "pinned copy"
            )
        return TensorDictBase.pin_memory(self, num_threads=num_threads)

    def cpu(self) -> TensorDictParams:
        return self.to("cpu")

    def cuda(self, device: Any = None) -> TensorDictParams:
        return self.to(torch.device("cuda") if device is None else torch.device("cuda", device))

    # ---------------------------------------------- value writes under no_grad
    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        with torch.no_grad():
            TensorDictBase._copy_into(self, key, dest, item, full_key)

    def __setitem__(self, index: Any, value: Any) -> None:
        """`params[key] = value` or `params[idx] = value`; indexed writes copy into the leaves
        in place, so they run under `no_grad` (parameters are leaves of the graph)."""
        with torch.no_grad():
            TensorDictBase.__setitem__(self, index, value)

    def zero_(self) -> TensorDictParams:
        """Zero every leaf in place (under `no_grad`: parameters are leaves)."""
        with torch.no_grad():
            TensorDictBase.zero_(self)
        return self

    def fill_(self, key: Any, value: float | bool) -> TensorDictParams:
        """Fill the entry at `key` in place (under `no_grad`)."""
        with torch.no_grad():
            TensorDictBase.fill_(self, key, value)
        return self

    def update_(
        self, input_dict_or_td: Any = None, clone: bool = False, **kwargs: Any
    ) -> TensorDictParams:
        """Copy the input's entries into the existing leaves (under `no_grad`)."""
        with torch.no_grad():
            TensorDictBase.update_(self, input_dict_or_td, clone, **kwargs)
        return self

    def copy_(self, tensordict: Any, non_blocking: bool = False) -> TensorDictParams:
        """Copy every entry of `tensordict` into the existing leaves (under `no_grad`)."""
        return self.update_(tensordict, non_blocking=non_blocking)

    def apply_(self, fn: Any, *others: Any, **kwargs: Any) -> TensorDictParams:
        """Apply `fn` to every leaf and write the results in place (under `no_grad`)."""
        with torch.no_grad():
            TensorDictBase.apply_(self, fn, *others, **kwargs)
        return self

    def clone(self, recurse: bool = True) -> TensorDictParams:
        """A `TensorDictParams` of copies, as upstream.

        Parameters stay parameters (with their `requires_grad`), buffers stay
        buffers (`nn.Buffer` included), and a tensor held under several keys
        (tied weights) gives one copy held under the same keys. With
        `recurse=False` the leaves are shared, not copied. The clone is
        unlocked, as every TensorDict's clone is.
        """
        memo: dict[int, Any] = {}
        return _clone_params(self, memo, recurse)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("TensorDictParams holds parameters; it is not callable")

    @with_compact
    def __repr__(self) -> str:
        return TensorDictBase.__repr__(self)

    __hash__ = nn.Module.__hash__

    @classmethod
    def _from_pytree(
        cls, source: dict[str, Any], batch_size: torch.Size, device: Any
    ) -> TensorDict:
        # inside torch.vmap/func transforms the leaves are transformed tensors: a plain TensorDict
        return TensorDict._new_unsafe(source, batch_size, device)


def _as_buffer(value: Tensor) -> Tensor:
    """`value` as an `nn.Buffer` (an alias of the same storage), as upstream stores buffers.

    A tensor that carries a graph (`requires_grad`) or is transformed by
    `torch.func` is kept as it is: `nn.Buffer` would detach it.
    """
    if (
        _BUFFER is None
        or isinstance(value, _BUFFER)
        or value.requires_grad
        or torch._C._functorch.is_functorch_wrapped_tensor(value)
    ):
        return value
    return _BUFFER(value)


def _copy_leaf(value: Any, memo: dict[int, Any]) -> Any:
    """A copy of one leaf keeping its kind (parameter, `nn.Buffer`, tensor), shared via `memo`."""
    done = memo.get(id(value))
    if done is not None:
        return done
    if isinstance(value, nn.Parameter):
        out: Any = nn.Parameter(value.detach().clone(), requires_grad=value.requires_grad)
    elif _BUFFER is not None and isinstance(value, _BUFFER):
        out = _BUFFER(value.detach().clone())
    elif isinstance(value, Tensor):
        out = value.clone()
    else:  # non-tensor data
        out = value.clone() if hasattr(value, "clone") else value
    memo[id(value)] = out
    return out


def _clone_params(
    params: TensorDictParams, memo: dict[int, Any], recurse: bool
) -> TensorDictParams:
    entries: dict[str, Any] = {}
    for key, value in params._items_str():
        if isinstance(value, TensorDictParams):
            entries[key] = _clone_params(value, memo, recurse)
        else:
            entries[key] = _copy_leaf(value, memo) if recurse else value
    source = TensorDict._new_unsafe(entries, params.batch_size, params.device)
    out = TensorDictParams(source, no_convert=True)
    out._no_convert = params._no_convert
    names = params._raw_names()
    if names is not None:
        out._store_names(names)
    return out  # unlocked, like every TensorDict's clone (upstream's too)


_BUFFER: Any = getattr(nn, "Buffer", None)  # torch >= 2.5

register(TensorDictParams)
provide("TensorDictParams", TensorDictParams)
