"""`TensorDictModuleBase`: the `in_keys`/`out_keys` contract of td-nn modules.

A subclass writes `forward(self, tensordict)`; the base makes every such
forward accept tensors too (positional or keyword tensors give the output
tensors back, as upstream's `dispatch`) and honour `set_skip_existing`. td-nn's
own modules do both inline (flag `_native_call`), which is faster.
"""

from __future__ import annotations

import abc
import functools
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from td_core import (
    NestedKey,
    TensorDictBase,
    is_tensor_collection,
    unravel_key,
    unravel_key_list,
)
from td_core.errors import BatchSizeError
from td_nn._dispatch import call_with_tensors
from td_nn._errors import KeySpecError, UnknownKeyError
from td_nn._skip import skips

__all__ = ["TensorDictModuleBase", "format_keys", "indent", "unravel_each", "wrapped_attribute"]


def _tensordict_forward(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`forward` accepting tensors and skipping existing outputs, as every td-nn module does."""

    @functools.wraps(forward)
    def wrapper(self: Any, tensordict: Any = None, *args: Any, **kwargs: Any) -> Any:
        if tensordict is None and is_tensor_collection(kwargs.get("tensordict")):
            tensordict = kwargs.pop("tensordict")
        if not is_tensor_collection(tensordict):
            return call_with_tensors(
                self,
                lambda td, *a, **k: forward(self, td, *a, **k),
                tensordict,
                args,
                kwargs,
                auto_batch_size=True,
            )
        if skips(self, tensordict):
            return tensordict
        return forward(self, tensordict, *args, **kwargs)

    wrapper._td_forward = True  # type: ignore[attr-defined]
    return wrapper


def format_keys(keys: Any) -> str:
    return repr(list(keys))


def unravel_each(keys: Iterable[Any], problem: Callable[[Any], str]) -> list[NestedKey]:
    """Each of `keys` unravelled (`("a", ("b",))` -> `("a", "b")`).

    Raises:
        KeySpecError: (a `ValueError` and `TypeError`) with the message
            `problem(key)` for the first item that is not a key.
    """
    out = []
    for key in keys:
        try:
            out.append(unravel_key(key))
        except (TypeError, KeyError):
            raise KeySpecError(problem(key)) from None
    return out


def indent(text: str, spaces: int = 4) -> str:
    pad = " " * spaces
    return text.replace("\n", "\n" + pad)


def wrapped_attribute(owner: Any, name: str, field: str, missing: AttributeError) -> Any:
    """Attribute `name` of the module `owner` wraps in its `field`, once `owner`'s own lookup failed.

    A module that wraps another (`TensorDictModule` its `module`,
    `TensorDictModuleWrapper` its `td_module`) forwards the attributes it lacks.

    Raises:
        AttributeError: `missing` again for dunder names, for `field` itself and
            before `field` is set; else one naming `owner`, the wrapped module's
            type and `name`.
    """
    if name.startswith("__") or name == field:
        raise missing
    inner = owner.__dict__.get(field, owner.__dict__["_modules"].get(field))
    if inner is None:
        raise missing
    try:
        return getattr(inner, name)
    except AttributeError:
        raise AttributeError(
            f"neither {type(owner).__name__} nor its {field} ({type(inner).__name__}) has an "
            f"attribute {name!r}"
        ) from None


class _KeyedModuleMeta(abc.ABCMeta):
    """Makes `isinstance(m, TensorDictModuleBase)` hold for any key-wired `nn.Module`.

    Siblings such as td-query build modules that compose with
    `TensorDictSequential` (an `nn.Module` declaring `in_keys` and
    `out_keys`) without importing td-nn, since packages depend on td-core
    only. Recognising them here by what they declare is simpler than moving
    this base class (with its forward wrapping and skip logic) into td-core.
    Only the base itself answers this way: `isinstance(m, TensorDictSequential)`
    and other subclasses are ordinary checks, and `issubclass` is unchanged.
    (Deriving from `ABCMeta` lets subclasses mix in `abc.ABC`.)
    """

    def __instancecheck__(cls, instance: Any) -> bool:
        if super().__instancecheck__(instance):
            return True
        return cls is TensorDictModuleBase and _declares_keys(instance)


def _declares_keys(obj: Any) -> bool:
    if not isinstance(obj, nn.Module):
        return False
    in_keys = getattr(obj, "in_keys", None)
    out_keys = getattr(obj, "out_keys", None)
    return isinstance(in_keys, (list, tuple)) and isinstance(out_keys, (list, tuple))


class TensorDictModuleBase(nn.Module, metaclass=_KeyedModuleMeta):
    """Base of the modules that read `in_keys` from a TensorDict and write `out_keys`.

    Subclass it and write `forward(self, tensordict) -> TensorDict`; set
    `in_keys` and `out_keys` as class attributes or in `__init__`.
    `TensorDictSequential` reads them to chain modules. The subclass's
    `forward` also accepts tensors (`module(a=x)` or `module(x)` return the
    output tensors, in a TensorDict whose batch size is the longest leading
    shape of the inputs inside `forward`) and skips its call inside
    `set_skip_existing` when its outputs are present.

    `isinstance(m, TensorDictModuleBase)` also holds for any `nn.Module`
    that declares list `in_keys` and `out_keys` without subclassing this
    (td-query's `QueryModule`, for one): siblings stay free of td-nn.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModuleBase
        >>> class AddOne(TensorDictModuleBase):
        ...     in_keys = ["a"]
        ...     out_keys = ["b", "c"]
        ...     def forward(self, tensordict):
        ...         b = tensordict["a"] + 1
        ...         return tensordict.set("b", b).set("c", b + 1)
        >>> AddOne()(TensorDict(a=torch.zeros(2), batch_size=[2]))["c"]
        tensor([2., 2.])
        >>> AddOne()(a=torch.zeros(2))
        (tensor([1., 1.]), tensor([2., 2.]))
        >>> module = AddOne().select_out_keys("c")
        >>> sorted(module(TensorDict(a=torch.zeros(2), batch_size=[2])).keys())
        ['a', 'c']
    """

    _native_call = True  # the base itself has no forward to wrap

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        forward = cls.__dict__.get("forward")
        if (
            forward is not None
            and not cls.__dict__.get("_native_call", False)
            and not getattr(forward, "_td_forward", False)
        ):
            cls.forward = _tensordict_forward(forward)
        # keys given as class attributes go behind the properties (unravelled once)
        for name in ("in_keys", "out_keys"):
            value = cls.__dict__.get(name)
            if value is None or isinstance(value, property):
                continue
            keys = unravel_key_list(value)
            delattr(cls, name)
            if name == "in_keys":
                cls._in_keys = keys
            else:
                cls._out_keys = cls._out_keys_apparent = keys

    # ---------------------------------------------------------------- keys
    @property
    def in_keys(self) -> list[NestedKey]:
        """The keys read from the input TensorDict (unravelled)."""
        return self._in_keys

    @in_keys.setter
    def in_keys(self, value: Any) -> None:
        self._in_keys = unravel_key_list(value)

    @property
    def out_keys(self) -> list[NestedKey]:
        """The keys written in the output, after any `select_out_keys` (unravelled).

        Setting them makes them the module's outputs and drops any selection.
        """
        return self._out_keys_apparent

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        keys = unravel_key_list(value)
        self._out_keys = keys
        self._set_selected_out_keys(keys)

    @property
    def out_keys_source(self) -> list[NestedKey]:
        """Every key the module writes, before any `select_out_keys`."""
        return self._out_keys

    # ---------------------------------------------------------------- out keys
    def select_out_keys(self, *out_keys: NestedKey) -> TensorDictModuleBase:
        """Keep only `out_keys` in the output (the others are still computed). Returns self.

        Raises:
            ValueError: (a `TypeError` too) if an argument is not a key, such as a
                list of keys (unpack it: `select_out_keys(*keys)`); (a `KeyError`
                too) naming the keys that are not among `self.out_keys_source`.
        """
        keys = unravel_each(
            out_keys,
            lambda key: (
                f"select_out_keys: each key should be a str or a tuple of str, got "
                f"{key!r}; pass several keys as separate arguments: select_out_keys(*keys)"
            ),
        )
        every = self.out_keys_source
        unknown = [k for k in keys if k not in every]
        if unknown:
            hint = ""
            if any(isinstance(k, tuple) and k[0] in every for k in unknown):
                hint = "; to select several keys, pass them as separate arguments, not as one tuple"
            raise UnknownKeyError(
                f"select_out_keys: Can't select non existent key(s) {unknown!r} of "
                f"{type(self).__name__} (out_keys: {every!r}){hint}"
            )
        self._set_selected_out_keys([k for k in every if k in keys])
        return self

    def reset_out_keys(self) -> TensorDictModuleBase:
        """Undo `select_out_keys`: write every output again. Returns self."""
        self._set_selected_out_keys(self.out_keys_source)
        return self

    def _set_selected_out_keys(self, keys: list[NestedKey]) -> None:
        """Make the call write only `keys` of `out_keys_source`.

        Subclasses that can do it natively override this (and set
        `_out_keys_apparent`); the base drops the others from the output.
        """
        self._out_keys_apparent = keys
        every = self.out_keys_source
        in_keys = getattr(self, "_in_keys", [])
        dropped = [k for k in every if k not in keys and k not in in_keys]
        handle = self.__dict__.get("_select_hook")
        if handle is not None:
            handle.remove()
            self._select_hook = None
        if dropped:

            def hook(module: nn.Module, args: Any, output: Any) -> Any:
                if isinstance(output, TensorDictBase):
                    return output.exclude(*dropped, inplace=True)
                return output

            self._select_hook = self.register_forward_hook(hook)

    # ---------------------------------------------------------------- parameters
    def reset_parameters_recursive(
        self, parameters: TensorDictBase | None = None
    ) -> TensorDictBase | None:
        """Call `reset_parameters()` on every sub-module that has one.

        Args:
            parameters: a TensorDict of this module's parameters (as from
                `TensorDict.from_module(module)`, often a copy). When given, its
                values are re-initialised in place and returned, and the module's
                own parameters are left untouched (the functional form).

        Returns:
            `parameters`, or `None` when it is not given.

        Raises:
            RuntimeError: (a `ValueError` too) if `parameters` has a batch size:
                one set of parameters is reset at a time.

        Warns:
            UserWarning: when no sub-module has a `reset_parameters` to call.
        """
        if parameters is None:
            if not self._reset_all():
                warnings.warn(
                    f"{type(self).__name__}.reset_parameters_recursive was called without the "
                    "parameters argument and did not find any parameters to reset: no "
                    "sub-module has a reset_parameters method",
                    UserWarning,
                    stacklevel=2,
                )
            return None
        if not is_tensor_collection(parameters):
            raise TypeError(
                f"reset_parameters_recursive takes a TensorDict of parameters (or nothing), "
                f"got a {type(parameters).__name__}"
            )
        if parameters.batch_dims:
            raise BatchSizeError(
                f"reset_parameters_recursive resets one set of parameters: got a TensorDict with "
                f"batch_size {list(parameters.batch_size)}; reset each of them (e.g. over "
                "parameters.unbind(0)) or build them with EnsembleModule"
            )
        with torch.no_grad(), parameters.to_module(self):
            self._reset_all()
        return parameters

    def _reset_all(self) -> bool:
        """Call every sub-module's `reset_parameters`; whether there was any."""
        module: Any  # torch stubs type a module's attributes as Tensor | Module
        found = False
        for module in self.modules():
            if module is not self and callable(getattr(module, "reset_parameters", None)):
                module.reset_parameters()
                found = True
        return found
