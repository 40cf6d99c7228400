"""`TensorDictModule`: wrap a callable so it reads and writes TensorDict entries by key."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from td_core import (
    NestedKey,
    TensorDict,
    TensorDictBase,
    is_non_tensor,
)
from td_core._shared.compile import is_tracing
from td_core.errors import KeyNotFoundError
from td_nn._base import (
    TensorDictModuleBase,
    format_keys,
    indent,
    unravel_each,
    wrapped_attribute,
)
from td_nn._dispatch import resolve_or_skip
from td_nn._errors import KeySpecError, NotCallableError, OutputMismatchError
from td_nn._skip import _SKIP

__all__ = ["TensorDictModule", "as_key_list"]

Tensor = torch.Tensor
_NOT_FAST = object()  # returned by `_forward_dense` where the general path must run
_MISSING = object()  # `get`'s default in strict reads: a missing input raises

try:  # the registries `nn.Module.__call__` consults (private: without them, no shortcut)
    from torch.nn.modules.module import (
        _global_backward_hooks,
        _global_backward_pre_hooks,
        _global_forward_hooks,
        _global_forward_pre_hooks,
    )

    _MODULE_CALL: Any = nn.Module.__call__
except ImportError:  # pragma: no cover - another torch layout
    _MODULE_CALL = None
_Module = nn.Module
_is_tracing = is_tracing  # torch's C check where torch.compile traces it (see td-core's flags)


def as_key_list(keys: Any, what: str, owner: str) -> list[NestedKey]:
    """`keys` (one key or a sequence of keys) as a list of unravelled keys."""
    if isinstance(keys, (str, tuple)):
        keys = [keys]
    elif not isinstance(keys, Sequence):
        raise KeySpecError(
            f"{owner} {what} must be of type list, str or tuples of str (a key or a list of "
            f"keys), got {keys!r}"
        )
    return unravel_each(
        keys,
        lambda key: (
            f"{owner} {what} must be of type list, str or tuples of str: {key!r} in "
            f"{keys!r} is not a key"
        ),
    )


def _dropped_output(out: Any) -> bool:
    """Whether the module returned `None` (or a sequence holding one) instead of an output."""
    return out is None or (isinstance(out, (tuple, list)) and any(o is None for o in out))


def _unique(keys: list[NestedKey]) -> list[NestedKey]:
    return list(dict.fromkeys(keys))


# the usual call of a TensorDictModule (see `TensorDictModule._fast_plan`): the
# `_modules` holding the wrapped nn.Module (None: the callable is given instead, as
# it is not an nn.Module), the callable, the str in keys, the single str out key
# (None: the outputs go through `_write_outputs`), `method_kwargs` (a dict, which
# may be filled in place after the plan) and whether the class's forward is ours
_Plan = tuple[
    "dict[str, Any] | None",
    "Callable[..., Any] | None",
    tuple[str, ...],
    "str | None",
    dict[str, Any],
    bool,
]


def _unhooked_forward(module: nn.Module) -> Callable[..., Any]:
    """`module.forward` where calling `module` would only call it (what `nn.Module.__call__`
    does without hooks; the caller has checked the global hooks and tracing), else `module`.

    Saves the wrapped module's own trip through `nn.Module`'s call machinery (~0.6 us).
    """
    if type(module).__call__ is not _MODULE_CALL:  # a class with a call of its own
        return module
    d = module.__dict__
    try:
        if (
            d["_forward_hooks"]
            or d["_forward_pre_hooks"]
            or d["_backward_hooks"]
            or d["_backward_pre_hooks"]
            or ("_compiled_call_impl" in d and d["_compiled_call_impl"] is not None)
        ):
            return module
    except KeyError:  # a module without these fields (unpickled, old torch)
        return module
    return module.forward


def _run_plan(
    plan: _Plan | bool, tensordict: TensorDict, module: TensorDictModule, unhooked: bool
) -> Any:
    """`module`'s forward of a dense `tensordict`, in place, following `plan`.

    `unhooked`: the caller has checked that no global hook is registered and no jit
    tracing is on, so the wrapped module's own call may be skipped (`_unhooked_forward`).

    Returns `_NOT_FAST`, having done nothing, where the general path must run:
    no plan, another mode or option is set, or an input is missing (for its error).
    """
    if plan is False or plan is True:
        return _NOT_FAST
    modules, fn, keys, key, method_kwargs, _ = plan
    if tensordict._pending is not None or method_kwargs or _SKIP.get() is not False:
        return _NOT_FAST
    if modules is not None:
        fn = _unhooked_forward(modules["module"]) if unhooked else modules["module"]
    assert fn is not None
    entries = tensordict._tensordict
    if len(keys) == 1:
        value = entries.get(keys[0])
        if type(value) is not Tensor and (value is None or _value_of(value) is not value):
            # missing, or a non-tensor leaf: the general path
            return _NOT_FAST
        out = fn(value)
    else:
        values = [entries.get(k) for k in keys]
        if None in values:
            return _NOT_FAST
        for v in values:
            if type(v) is not Tensor and _value_of(v) is not v:  # a non-tensor leaf
                return _NOT_FAST
        out = fn(*values)
    if key is not None and type(out) is Tensor:
        tensordict[key] = out  # the container's fastest checked write
        return tensordict
    return module._write_outputs(out, tensordict)


def _value_of(entry: Any) -> Any:
    """What a module is given for `entry`: a non-tensor leaf's value, else the entry."""
    if type(entry) is Tensor or isinstance(entry, Tensor) or not is_non_tensor(entry):
        return entry
    return entry.data


class TensorDictModule(TensorDictModuleBase):
    """Wrap `module` so that it reads its inputs at `in_keys` and writes its outputs at `out_keys`.

    `module` is an `nn.Module` or any callable. Its outputs (a tensor, a
    tuple or list of them, or a mapping or TensorDict holding every out key)
    are written at `out_keys` in order; an output whose key is `"_"` or
    whose value is `None` is not written.

    Calls:
        - `module(td)`: reads from and (by default) writes into `td`, returned.
        - `module(td, tensordict_out=out)` (or `module(td, out)`): writes into `out`.
        - `module(tensor, ...)`, `module(x=tensor, ...)`: positional tensors
          (in in-key order) or keyword tensors named after the in keys
          (nested keys joined by `"_"`) give back the output tensor at the
          current `out_keys` (after `select_out_keys`), or a tuple of them,
          as upstream's `dispatch`; other keyword arguments go to the module.

    Args:
        module: the callable to wrap.
        in_keys: a key or a list of keys, passed positionally in order; or a
            dict, passed as keyword arguments: `{argument: key}` (or
            `{key: argument}` with `out_to_in_map=False`).
        out_keys: a key or a list of keys, one per output.
        out_to_in_map: direction of a dict `in_keys` (default `True`:
            `{argument: key}`).
        inplace: `True` writes into the input TensorDict; `False` into a new
            TensorDict with an empty batch size; `"empty"` into
            `tensordict.empty()` (same batch size, device and class).
        method: call this method of `module` instead of `module` itself.
        method_kwargs: keyword arguments passed at every call.
        strict: a missing input raises `KeyError` at once. When `False`
            (the default, as upstream) `None` is passed instead, and if the
            call then fails the `KeyError` names the missing keys.

    Raises:
        KeyError: naming the missing key(s) and the module.

    Attributes the wrapper lacks (such as `weight`) are read from `module`.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModule
        >>> module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=[("out", "y")])
        >>> td = module(TensorDict(x=torch.ones(2, 3), batch_size=[2]))
        >>> td["out", "y"].shape
        torch.Size([2, 4])
        >>> module(x=torch.ones(5, 3)).shape
        torch.Size([5, 4])
        >>> split = TensorDictModule(lambda x: (x - 1, x + 1), in_keys="x", out_keys=["lo", "hi"])
        >>> split(torch.zeros(()))
        (tensor(-1.), tensor(1.))
        >>> add = TensorDictModule(lambda a, *, b: a + b, in_keys={"a": "x", "b": "x"}, out_keys="y")
        >>> add(TensorDict(x=torch.ones(())))["y"]
        tensor(2.)
    """

    _native_call = True

    def __init__(
        self,
        module: Callable[..., Any],
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[Any, Any],
        out_keys: NestedKey | Sequence[NestedKey],
        *,
        out_to_in_map: bool | None = None,
        inplace: bool | str = True,
        method: str | None = None,
        method_kwargs: dict[str, Any] | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__()
        if not callable(module) or isinstance(module, type):
            raise NotCallableError(
                f"TensorDictModule wraps a callable (an nn.Module instance or a function, not a "
                f"class): Module {module!r} of type {type(module).__name__} is not callable"
            )
        if method is not None and not callable(getattr(module, method, None)):
            raise AttributeError(
                f"TensorDictModule: {type(module).__name__} has no method {method!r}"
            )
        if inplace not in (True, False, "empty"):
            raise ValueError(
                f"TensorDictModule inplace must be True, False or 'empty', got {inplace!r}"
            )
        self.module = module
        owner = f"TensorDictModule({type(module).__name__})"
        if isinstance(in_keys, Mapping):
            if out_to_in_map is False:
                pairs = [(arg, key) for key, arg in in_keys.items()]
            else:
                pairs = list(in_keys.items())
            for arg, _ in pairs:
                if not isinstance(arg, str):
                    raise KeySpecError(f"{owner} in_keys: argument names must be str, got {arg!r}")
            self._arg_names: list[str] | None = [arg for arg, _ in pairs]
            self._read_keys = as_key_list([key for _, key in pairs], "in_keys", owner)
        else:
            if out_to_in_map is not None:
                warnings.warn(
                    f"{owner}: out_to_in_map is not None but is only used when in_key is a "
                    f"dictionary. Got out_to_in_map={out_to_in_map!r} with in_keys={in_keys!r}; "
                    "drop the argument",
                    UserWarning,
                    stacklevel=2,
                )
            self._arg_names = None
            self._read_keys = as_key_list(in_keys, "in_keys", owner)
        self.in_keys = _unique(self._read_keys)
        if "_" in self.in_keys:
            warnings.warn(
                f'{owner}: key "_" is for ignoring output, it should not be used in input keys '
                f"(in_keys={self.in_keys!r})",
                UserWarning,
                stacklevel=2,
            )
        self._out_keys_all = as_key_list(out_keys, "out_keys", owner)
        self.out_keys = [k for k in self._out_keys_all if k != "_"]  # sets the writes too
        # the fast path of forward: positional str in keys (None where it does not apply)
        self._fast_read: tuple[str, ...] | None = (
            tuple(self._read_keys)  # type: ignore[arg-type]
            if self._arg_names is None and all(type(k) is str for k in self._read_keys)
            else None
        )
        self.inplace = inplace
        self.method = method
        self.method_kwargs = dict(method_kwargs or {})
        self.strict = strict

    # ---------------------------------------------------------------- call
    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        self.__dict__["_plan"] = None  # the fast call's plan may have changed (see `_fast_plan`)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        self.__dict__["_plan"] = None

    def _fast_plan(self) -> _Plan | bool:
        """What the usual call does, worked out once (see `_run_plan`), or False where it
        does not apply (another option). Cached in `_plan`; every attribute set or
        delete resets it."""
        plan: _Plan | bool = False
        if (
            self._fast_read is not None
            and self.inplace is True
            and not self.strict
            and self.method is None
        ):
            in_modules = "module" in self._modules
            plan = (
                self._modules if in_modules else None,
                None if in_modules else self.module,
                self._fast_read,
                self._fast_write,
                self.method_kwargs,
                type(self).forward is TensorDictModule.forward,
            )
        self.__dict__["_plan"] = plan
        return plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # `nn.Module.__call__` without hooks only calls `forward`: do that directly
        # (two Python frames less) unless something hooks in (module or global hooks,
        # `compile()`, jit or fx tracing), where the ordinary call runs. The module's
        # own fields are read from its `__dict__`: an attribute of an `nn.Module`
        # costs ~25 ns (its `__getattr__` defeats CPython's attribute cache), a key ~10.
        d = self.__dict__
        try:
            hooked = (
                _Module.__call__ is not _MODULE_CALL
                or d["_forward_hooks"]
                or d["_forward_pre_hooks"]
                or d["_backward_hooks"]
                or d["_backward_pre_hooks"]
                or _global_forward_hooks
                or _global_forward_pre_hooks
                or _global_backward_hooks
                or _global_backward_pre_hooks
                or ("_compiled_call_impl" in d and d["_compiled_call_impl"] is not None)
                or _is_tracing()
            )
            plan = d["_plan"]
        except KeyError:  # a module without these fields (unpickled, old torch): the ordinary call
            hooked, plan = True, False
        if hooked:
            return nn.Module.__call__(self, *args, **kwargs)
        if plan is None:
            plan = self._fast_plan()
        if plan and plan[5] and len(args) == 1 and not kwargs and type(args[0]) is TensorDict:
            out = _run_plan(plan, args[0], self, True)
            if out is not _NOT_FAST:
                return out
        return self.forward(*args, **kwargs)

    def forward(
        self,
        tensordict: TensorDictBase | Tensor | None = None,
        *args: Any,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> Any:
        """Read `in_keys` from `tensordict`, call the module, write `out_keys`."""
        if (
            type(tensordict) is TensorDict
            and not args
            and not kwargs
            and tensordict_out is None
            and self._fast_read is not None
        ):
            plan = self.__dict__.get("_plan")
            out = _run_plan(plan or self._fast_plan(), tensordict, self, False)
            if out is not _NOT_FAST:
                return out
        tensordict, tensordict_out, result = resolve_or_skip(
            self, tensordict, args, tensordict_out, kwargs
        )
        if tensordict is None:
            return result
        get = tensordict.get
        keys = self._read_keys
        if self.strict:  # (get's own default would be None: a sentinel tells missing apart)
            values = [get(key, _MISSING) for key in keys]
            if any(v is _MISSING for v in values):
                raise self._missing_error(tensordict)
        elif len(keys) == 1:
            values = [get(keys[0], None)]
        else:
            values = [get(key, None) for key in keys]
        # a non-tensor entry is passed as its value (a stack as its list), as upstream
        values = [_value_of(v) for v in values]
        fn = self._function()
        if self.method_kwargs:
            kwargs = {**self.method_kwargs, **kwargs}
        try:
            if self._arg_names is None:
                out = fn(*values, **kwargs)
            else:
                out = fn(**dict(zip(self._arg_names, values)), **kwargs)
        except Exception as err:
            # a failure caused by a missing input (passed as None) names the missing keys
            if not self.strict and any(v is None for v in values) and "None" in str(err):
                raise self._missing_error(tensordict) from err
            raise
        if _dropped_output(out) and any(v is None for v in values):
            # the module passed a missing input (None) through: it did not run, say which key
            raise self._missing_error(tensordict)
        if tensordict_out is None:
            inplace = self.inplace
            if inplace is True:
                tensordict_out = tensordict
            elif inplace is False:
                tensordict_out = TensorDict()
            else:
                tensordict_out = tensordict.empty()
        write = self._write
        if type(out) is Tensor and len(write) == 1 and len(self._out_keys_all) == 1:
            key = write[0][1]
            if type(key) is str and type(tensordict_out) is TensorDict:
                tensordict_out[key] = out  # the container's fastest checked write
            else:
                tensordict_out.set(key, out)
            return tensordict_out
        return self._write_outputs(out, tensordict_out)

    def _function(self) -> Callable[..., Any]:
        """The wrapped callable (or its `method`), read without `nn.Module.__getattr__`."""
        modules = self._modules
        module: Any = modules["module"] if "module" in modules else self.module
        return module if self.method is None else getattr(module, self.method)

    def _set_write(self, write: list[tuple[int, NestedKey]]) -> None:
        self._write = write
        # a single str out key and a single output: written without `_outputs`
        only = len(write) == 1 and len(self._out_keys_all) == 1 and type(write[0][1]) is str
        self._fast_write: str | None = write[0][1] if only else None  # type: ignore[assignment]

    def _call_module(self, values: list[Any], kwargs: dict[str, Any]) -> Any:
        # a non-tensor entry is passed as its value (a stack as its list), as upstream
        values = [_value_of(v) for v in values]
        fn = self._function()
        if self.method_kwargs:
            kwargs = {**self.method_kwargs, **kwargs}
        if self._arg_names is None:
            return fn(*values, **kwargs)
        return fn(**dict(zip(self._arg_names, values)), **kwargs)

    def _outputs(self, out: Any) -> Sequence[Any]:
        """The outputs of the module as a sequence aligned with `_out_keys_all`."""
        keys = self._out_keys_all
        if not keys and out is None:  # nothing to write
            return ()
        if type(out) is Tensor:
            outs: Sequence[Any] = (out,)
        elif isinstance(out, (tuple, list)):
            outs = out
        elif isinstance(out, (TensorDictBase, Mapping)) and (
            len(keys) > 1 or (keys[0] != "_" and keys[0] in out)
        ):
            missing = [k for k in keys if k != "_" and k not in out]
            if missing:
                raise KeyNotFoundError(
                    f"{self._name()} returned a {type(out).__name__} without the out keys "
                    f"{missing!r} (it has {list(out.keys())!r})"
                )
            outs = [None if k == "_" else out[k] for k in keys]
        else:
            outs = (out,)
        if len(outs) != len(keys):
            raise OutputMismatchError(
                f"{self._name()} returned {len(outs)} output(s) but has {len(keys)} out_keys "
                f"{keys!r}; give one key per output ('_' drops one)"
            )
        return outs

    def _write_outputs(self, out: Any, dest: TensorDictBase) -> TensorDictBase:
        outs = self._outputs(out)
        for i, key in self._write:
            value = outs[i]
            if value is not None:
                dest.set(key, value)
        return dest

    def _missing_error(self, tensordict: TensorDictBase) -> KeyNotFoundError:
        keys = tensordict.keys(include_nested=True)
        missing = [k for k in self._read_keys if k not in keys]
        return KeyNotFoundError(
            f"{self._name()}: Some tensors that are necessary for the module call may not have "
            f"not been found in the input tensordict: it could not read its input key(s) "
            f"{missing!r} (the input has keys {sorted(map(str, keys))})"
        )

    # ---------------------------------------------------------------- out keys
    def _set_selected_out_keys(self, keys: list[NestedKey]) -> None:
        self._out_keys_apparent = keys
        self._set_write([(i, k) for i, k in enumerate(self._out_keys_all) if k in keys])

    # ---------------------------------------------------------------- display
    def _name(self) -> str:
        return (
            f"TensorDictModule({self._module_name()}, in_keys={self.in_keys!r}, "
            f"out_keys={self.out_keys!r})"
        )

    def _module_name(self) -> str:
        module = self.module
        if isinstance(module, nn.Module):
            return type(module).__name__
        return getattr(module, "__qualname__", None) or type(module).__name__

    def __repr__(self) -> str:
        fields = [f"module={indent(repr(self.module))}"]
        if self.method is not None:
            fields.append(f"method={self.method!r}")
        fields += [f"in_keys={format_keys(self.in_keys)}", f"out_keys={format_keys(self.out_keys)}"]
        return f"{type(self).__name__}(\n    " + ",\n    ".join(fields) + ")"

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError as missing:
            return wrapped_attribute(self, name, "module", missing)
