"""Module parameters as TensorDicts: `from_module`, `from_modules`, `to_module`.

The module tree becomes nested keys (`model[0].weight` is `("0", "weight")`).
`to_module` writes a TensorDict's tensors into a module's parameter and buffer
slots and returns the values it replaced, as a TensorDict that restores them
when used as a context manager:

```python
with params.to_module(model):
    out = model(x)          # runs with params
# model has its own parameters back
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from td_core._core.contract import provide
from td_core._core.first_class import is_first_class_tensor
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import NO_DEFAULT
from td_core._kinds.dense import TensorDict
from td_core._kinds.lazy import LazyStackedTensorDict
from td_core._kinds.params import TensorDictParams
from td_core._leaves.nontensor import NonTensorData
from td_core.errors import BatchSizeError, KeyNotFoundError, OptionsConflictError

if TYPE_CHECKING:
    from td_core._kinds.base import TensorDictBase

__all__ = ["from_module", "from_modules", "to_module", "make_tensordict", "ModuleSwap"]

Tensor = torch.Tensor
_EMPTY = torch.Size()


class ModuleSwap(TensorDict):
    """What `to_module` replaced; as a context manager it puts it back on exit."""

    __slots__ = ("_inplace", "_module")
    _plain_results = True  # ops on what was swapped out give plain TensorDicts
    _inplace: bool
    _module: nn.Module

    def __enter__(self) -> ModuleSwap:
        return self

    def __exit__(self, *exc: object) -> None:
        _swap(self, self._module, inplace=self._inplace, swap=None, path=())


def _collect(module: nn.Module, filter_empty: bool = True) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for name, param in module._parameters.items():
        if param is not None:
            entries[name] = param
    for name, buffer in module._buffers.items():
        if buffer is not None:
            entries[name] = buffer
    for name, child in module._modules.items():
        if child is None:
            continue
        if isinstance(child, TensorDictParams):  # it is already the TensorDict: kept, as upstream
            entries[name] = child
            continue
        sub = _collect(child, filter_empty)
        if sub or not filter_empty:
            entries[name] = TensorDict._new_unsafe(sub, _EMPTY)
    return entries


def from_module(
    module: nn.Module,
    as_module: bool = False,
    lock: bool = False,
    use_state_dict: bool = False,
    *,
    filter_empty: bool = True,
) -> TensorDictBase:
    """The parameters and buffers of `module` as a TensorDict, nested like the module tree.

    The leaves are the module's own `nn.Parameter` and buffer objects (no copy).

    Args:
        as_module: return a `TensorDictParams` (an `nn.Module`) instead.
        lock: lock the result.
        use_state_dict: build from `module.state_dict()` (so state-dict hooks apply;
            the leaves are the detached tensors it gives, not the parameters).
        filter_empty: leave out sub-modules without parameters or buffers
            (`False` keeps an empty TensorDict for each, so the result has
            the whole module tree).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_core import TensorDict
        >>> model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4))
        >>> params = TensorDict.from_module(model)
        >>> params["0", "weight"] is model[0].weight
        True
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"from_module expects an nn.Module, got {type(module).__name__}")
    if isinstance(module, TensorDictParams):  # it is already the TensorDict, as upstream
        return module.lock_() if lock else module
    if use_state_dict:
        # detached, as `state_dict()` gives them: the values its hooks saw, as upstream
        td = TensorDict(dict(module.state_dict())).unflatten_keys(".")
    else:
        td = TensorDict._new_unsafe(_collect(module, filter_empty), _EMPTY)
    if as_module:
        return TensorDictParams(td, no_convert=True, lock=lock)
    return td.lock_() if lock else td


def _stack_leaves(values: list[Any], expand_identical: bool) -> Any:
    first = values[0]
    if expand_identical and all(v is first for v in values):
        # a view of the shared parameter, so its gradient reaches the parameter itself
        return first.expand(len(values), *first.shape)
    out = torch.stack([v.detach() for v in values])
    if isinstance(first, nn.Parameter):
        return nn.Parameter(out, requires_grad=first.requires_grad)
    return out


def _stack_params(
    tds: list[TensorDictBase], expand_identical: bool, prefix: tuple[str, ...]
) -> TensorDict:
    first = tds[0]
    for i, td in enumerate(tds[1:], 1):
        if set(td._keys_str()) != set(first._keys_str()):
            raise KeyNotFoundError(
                f"from_modules: module {i} differs from module 0 at {prefix or 'the root'!r}: keys "
                f"{sorted(set(td._keys_str()) ^ set(first._keys_str()))}; use lazy_stack=True for different structures"
            )
    entries = {}
    for key, value in first._items_str():
        values = [td._get_str(key) for td in tds]
        if is_td(value):
            entries[key] = _stack_params(values, expand_identical, (*prefix, key))
        else:
            shapes = {tuple(v.shape) for v in values}
            if len(shapes) > 1:  # upstream raises RuntimeError: this is both
                raise BatchSizeError(
                    f"from_modules: parameter {(*prefix, key)!r} has different shapes {sorted(shapes)}; "
                    "use lazy_stack=True to keep them apart"
                )
            entries[key] = _stack_leaves(values, expand_identical)
    return TensorDict._new_unsafe(entries, torch.Size([len(tds)]))


def from_modules(
    *modules: nn.Module,
    as_module: bool = False,
    lock: bool = True,
    use_state_dict: bool = False,
    lazy_stack: bool = False,
    expand_identical: bool = False,
) -> TensorDictBase:
    """The parameters of several modules of the same structure, stacked along a new dim 0.

    Dense stacking (the default) makes new leaf parameters that receive the
    gradients (the modules' own parameters are left untouched). With
    `lazy_stack=True` the modules' own parameters are kept, stacked on read.

    Args:
        as_module: return a `TensorDictParams`. Exclusive with `lazy_stack`.
        lock: lock the result (default True).
        use_state_dict: read each module through its `state_dict()`.
        lazy_stack: keep references to the original parameters.
        expand_identical: a parameter shared (same object) by every module is
            expanded rather than copied: the entry is a view of that parameter
            (not a new `nn.Parameter`), so gradients reach it. Ignored with
            `lazy_stack`.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_core import from_modules
        >>> params = from_modules(nn.Linear(3, 4), nn.Linear(3, 4))
        >>> params.batch_size, params["weight"].shape
        (torch.Size([2]), torch.Size([2, 4, 3]))
    """
    if not modules:
        raise ValueError("from_modules needs at least one module")
    for i, module in enumerate(modules):
        if any(is_lazy(t) for t in (*module.parameters(), *module.buffers())):
            if lazy_stack:
                raise RuntimeError(
                    f"from_modules: lasy_stack=True is not compatible with lazy modules. Module "
                    f"{i} has uninitialized parameters (a lazy module such as nn.LazyLinear), "
                    "which a lazy stack cannot read; run the modules once to initialize them"
                )
            # upstream stacks them into parameters that materialize batched inside its
            # patched vmap; td's vmap goes through pytree flattening and patches nothing
            raise RuntimeError(
                f"from_modules: module {i} has uninitialized parameters (a lazy module such as "
                "nn.LazyLinear), which td cannot stack; run each module once on an input to "
                "initialize them, then call from_modules"
            )
    if lazy_stack and as_module:
        raise OptionsConflictError(
            "from_modules: lazy_stack=True cannot be combined with as_module=True: a lazy "
            "stack of the modules' own parameters cannot be registered within a TensorDictParams; "
            "use one of the two"
        )
    tds = [from_module(m, use_state_dict=use_state_dict) for m in modules]
    if lazy_stack:
        result: TensorDictBase = LazyStackedTensorDict(*tds, stack_dim=0)
    else:
        result = _stack_params(tds, expand_identical, ())
    if as_module:
        return TensorDictParams(result, no_convert=True, lock=lock)
    return result.lock_() if lock else result


def _swap(
    td: TensorDictBase,
    module: nn.Module,
    *,
    inplace: bool,
    swap: dict[str, Any] | None,
    path: tuple[str, ...],
    preserve: bool = True,
    seen: dict[tuple[int, str], Any] | None = None,
) -> None:
    # a module reachable twice (a shared layer) is swapped twice: each visit must record
    # what the slot held before the *first* one, or the way back restores the new values
    seen = {} if seen is None else seen
    for key, value in td._items_str():
        if is_td(value):
            child = module._modules.get(key)
            if child is None:
                raise KeyNotFoundError(
                    f"to_module: {type(module).__name__} at {path or 'the root'!r} has no sub-module {key!r}"
                )
            sub: dict[str, Any] | None = {} if swap is not None else None
            _swap(
                value,
                child,
                inplace=inplace,
                swap=sub,
                path=(*path, key),
                preserve=preserve,
                seen=seen,
            )
            if swap is not None:
                swap[key] = TensorDict._new_unsafe(sub, _EMPTY)  # type: ignore[arg-type]
            continue
        if is_first_class_tensor(value):  # bound by a first-class dim: never a Parameter
            _set_plain(module, key, value, swap, seen, path)
            continue
        if not isinstance(value, Tensor):
            if (
                is_nt(value)
                and value.data is None
                and (key in module._parameters or key in module._buffers)
            ):
                # restoring a slot that held None before to_module filled it
                (module._parameters if key in module._parameters else module._buffers)[key] = None
            continue
        slots: dict[str, Any]
        if key in module._parameters:
            slots = module._parameters
        elif key in module._buffers:
            slots = module._buffers
        elif _is_tensor(module.__dict__.get(key)):  # unregistered by preserve_module_state=False
            first = seen.get((id(module), key), NO_DEFAULT)
            if first is not NO_DEFAULT:  # unregistered earlier in this call: stays unregistered
                if swap is not None:
                    swap[key] = first
                module.__dict__[key] = value
                continue
            if swap is not None:
                swap[key] = module.__dict__[key]
                seen[(id(module), key)] = swap[key]
            del module.__dict__[key]
            if isinstance(value, nn.Parameter):
                module._parameters[key] = value
            else:
                module._buffers[key] = value
            continue
        else:
            raise KeyNotFoundError(
                f"to_module: {type(module).__name__} at {path or 'the root'!r} has no parameter or buffer {key!r}"
            )
        old = slots[key]
        first = seen.get((id(module), key), NO_DEFAULT)
        if inplace and old is not None:
            if swap is not None:
                swap[key] = old.detach().clone() if first is NO_DEFAULT else first
                seen.setdefault((id(module), key), swap[key])
            with torch.no_grad():
                old.copy_(value)
            continue
        if swap is not None:
            saved = NonTensorData(None) if old is None else old
            swap[key] = saved if first is NO_DEFAULT else first
            seen.setdefault((id(module), key), swap[key])
        if isinstance(old, nn.Parameter) and not isinstance(value, nn.Parameter):
            if not preserve:  # the historical behaviour: a plain attribute replaces the parameter
                del slots[key]
                module.__dict__[key] = value
                continue
            if not value.requires_grad and not _is_batched(value):
                try:
                    value = nn.Parameter(value, requires_grad=old.requires_grad)
                except RuntimeError:
                    # a tensor subclass whose detach() changes its type (a memory-mapped
                    # leaf) cannot be a Parameter: it goes in as it is, sharing its storage
                    pass
        elif preserve and slots is module._buffers and isinstance(value, nn.Parameter):
            value = value.detach()  # a buffer slot keeps a buffer (as upstream's `Buffer`)
        slots[key] = value


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor) or is_first_class_tensor(value)


def _set_plain(
    module: nn.Module,
    key: str,
    value: Any,
    swap: dict[str, Any] | None,
    seen: dict[tuple[int, str], Any],
    path: tuple[str, ...],
) -> None:
    """Put `value` in `module`'s slot `key` as a plain attribute (what was there goes to `swap`)."""
    for slots in (module._parameters, module._buffers, module.__dict__):
        if key in slots and (slots is not module.__dict__ or _is_tensor(slots[key])):
            break
    else:
        raise KeyNotFoundError(
            f"to_module: {type(module).__name__} at {path or 'the root'!r} has no parameter or buffer {key!r}"
        )
    old = slots.pop(key)
    if swap is not None:
        first = seen.setdefault((id(module), key), NonTensorData(None) if old is None else old)
        swap[key] = first
    module.__dict__[key] = value


def _is_batched(value: Tensor) -> bool:
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(value))


def to_module(
    td: TensorDictBase,
    module: nn.Module,
    *,
    inplace: bool | None = False,
    return_swap: bool = True,
    swap_dest: TensorDictBase | None = None,
    use_state_dict: bool = False,
    non_blocking: bool = False,
    preserve_module_state: bool = True,
) -> Any:
    """Write `td`'s tensors into `module`'s parameters and buffers.

    Args:
        inplace: copy into the existing parameters (under `no_grad`) instead
            of replacing them; use this to load a checkpoint into a model's
            own parameters.
        return_swap: return what was replaced (a context manager restoring it).
        swap_dest: with `return_swap`, also copy what was replaced into this TensorDict.
        use_state_dict: go through `module.load_state_dict` (hooks apply).
        non_blocking: accepted for upstream compatibility.
        preserve_module_state: a plain tensor written over an `nn.Parameter`
            becomes a parameter (with the old `requires_grad`) unless it
            requires grad itself or is batched by `vmap`; with `False` it
            replaces the parameter as a plain attribute.
    """
    inplace = bool(inplace)
    if use_state_dict:
        flat = {
            k if type(k) is str else ".".join(k): v
            for k, v in td.items(include_nested=True, leaves_only=True)
        }
        module.load_state_dict(flat)
        return None
    swap: dict[str, Any] | None = {} if return_swap else None
    _swap(td, module, inplace=inplace, swap=swap, path=(), preserve=preserve_module_state)
    if swap is None:
        return None
    result = ModuleSwap._new_unsafe(swap, _EMPTY)
    result._module = module
    result._inplace = inplace
    if swap_dest is not None:
        swap_dest.update(result)
    return result


def make_tensordict(
    input_dict: dict[str, Any] | None = None,
    batch_size: Any = None,
    device: Any = None,
    auto_batch_size: bool | None = None,
    **kwargs: Any,
) -> TensorDict:
    """A TensorDict from a dict and/or keyword arguments; the batch size is inferred if not given.

    Args:
        input_dict: the entries (nested dicts and TensorDicts are merged, keys may be tuples).
        batch_size: the batch size; by default it is inferred.
        device: the device of the result.
        auto_batch_size: infer the batch size (the longest leading shape every
            leaf shares); default: when no `batch_size` is given. `False`
            without a `batch_size` gives `[]`.
        **kwargs: more entries by name.

    Examples:
        >>> import torch
        >>> from td_core import make_tensordict
        >>> make_tensordict(a=torch.zeros(3, 4), b=torch.zeros(3, 4, 5)).batch_size
        torch.Size([3, 4])
    """
    source = dict(input_dict.items() if input_dict is not None else (), **kwargs)
    if auto_batch_size is None:
        auto_batch_size = batch_size is None
    return TensorDict.from_dict(
        source, batch_size=batch_size, device=device, auto_batch_size=auto_batch_size
    )


provide("from_module", from_module)
provide("from_modules", from_modules)
provide("to_module", to_module)
