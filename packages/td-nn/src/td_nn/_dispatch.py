"""Calling TensorDict functions and modules with tensors: `dispatch`.

Two entry points share the key-naming rule (a nested key `("a", "c")` is the
keyword `a_c` with the default separator):

- `dispatch` decorates a function or method taking a `tensordict`; a call
  with tensors returns tensors (one, or a tuple), as upstream.
- `call_with_tensors` is what td-nn modules do when called without a
  TensorDict: positional or keyword tensors in, the output tensors (at the
  module's current `out_keys`) back.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from td_core import NestedKey, TensorDict, is_tensor_collection, unravel_key_list
from td_nn._errors import DuplicateInputError
from td_nn._skip import skips

if TYPE_CHECKING:
    from td_core import TensorDictBase

__all__ = ["dispatch", "call_with_tensors", "arg_name"]


def arg_name(key: NestedKey, separator: str = "_") -> str:
    """The keyword argument naming `key`: its parts joined with `separator`."""
    return key if type(key) is str else separator.join(key)


def _gather(
    keys: Sequence[NestedKey],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    separator: str,
    *,
    owner: str,
) -> tuple[dict[Any, Any], tuple[Any, ...], dict[str, Any]]:
    """Entries `{key: value}` from positional and keyword tensors, as upstream's `dispatch`.

    The keys take the positional arguments in order, then the keyword
    arguments named after them. Returns the entries, the positional arguments
    left over and the keyword arguments naming no key (both are passed on).
    """
    entries: dict[Any, Any] = dict(zip(keys, args))
    rest = tuple(args[len(keys) :])
    extra = dict(kwargs)
    for key in keys:
        name = arg_name(key, separator)
        if name not in extra:
            continue
        if key in entries:
            raise DuplicateInputError(
                f"{owner}: Duplicated argument: input {key!r} was given both positionally and "
                f"as the keyword {name!r}; give it once"
            )
        entries[key] = extra.pop(name)
    return entries, rest, extra


def _to_td(entries: dict[Any, Any], auto_batch_size: bool) -> TensorDict:
    td = TensorDict()
    for key, value in entries.items():
        td.set(key, value)
    if auto_batch_size:
        td.auto_batch_size_()
    return td


def _outputs(td: Any, keys: Sequence[NestedKey]) -> Any:
    values = tuple(td.get(k) for k in keys if k != "_")
    return values[0] if len(values) == 1 else values


def call_with_tensors(
    module: Any,
    forward: Callable[..., Any],
    first: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    auto_batch_size: bool = False,
) -> Any:
    """Run `forward` (a TensorDict to TensorDict call of `module`) on tensors; return tensors.

    Positional tensors fill `module.in_keys` in order, then keyword tensors
    named after the remaining keys (nested keys joined by `"_"`); they are put
    in a new TensorDict (batch size `[]`, or the longest leading shape the
    inputs share with `auto_batch_size`). Positional arguments left over and
    keyword arguments naming no key are passed on to `forward`. The result
    is the entries at `module.out_keys` (after any `select_out_keys`): one
    tensor, or a tuple in `out_keys` order.
    """
    positional = args if first is None else (first, *args)
    owner = type(module).__name__
    entries, rest, extra = _gather(module.in_keys, positional, kwargs, "_", owner=owner)
    out = forward(_to_td(entries, auto_batch_size), *rest, **extra)
    return _outputs(out, module.out_keys)


def resolve_call(
    module: Any,
    forward: Callable[..., Any],
    tensordict: Any,
    args: tuple[Any, ...],
    tensordict_out: Any,
    kwargs: dict[str, Any],
) -> tuple[TensorDictBase | None, TensorDictBase | None, Any]:
    """Normalise the arguments of a module's `forward`.

    Returns `(tensordict, tensordict_out, None)` for a TensorDict call (the
    input may also come as `tensordict=` and the output TensorDict as a second
    positional argument), or `(None, None, result)` after running the call on
    tensors (see `call_with_tensors`).
    """
    if not is_tensor_collection(tensordict):
        if tensordict is None and is_tensor_collection(kwargs.get("tensordict")):
            tensordict = kwargs.pop("tensordict")
        else:
            return None, None, call_with_tensors(module, forward, tensordict, args, kwargs)
    if args:
        if tensordict_out is not None or len(args) > 1 or not is_tensor_collection(args[0]):
            raise TypeError(
                f"{type(module).__name__} takes a TensorDict and an optional tensordict_out, "
                f"got extra positional arguments {args!r}"
            )
        tensordict_out = args[0]
    return tensordict, tensordict_out, None


def resolve_or_skip(
    module: Any,
    tensordict: Any,
    args: tuple[Any, ...],
    tensordict_out: TensorDictBase | None,
    kwargs: dict[str, Any],
) -> tuple[TensorDictBase | None, TensorDictBase | None, Any]:
    """`resolve_call` for `module.forward`, then `set_skip_existing`: a skipped call gets its input.

    Returns `(tensordict, tensordict_out, None)` for a TensorDict call to run,
    else `(None, None, result)`: the result of the call on tensors, or the
    input TensorDict itself where `module` skips its call on it.
    """
    tensordict, tensordict_out, result = resolve_call(
        module, module.forward, tensordict, args, tensordict_out, kwargs
    )
    if tensordict is not None and skips(module, tensordict):
        return None, None, tensordict
    return tensordict, tensordict_out, result


def dispatch(
    func: Callable[..., Any] | None = None,
    /,
    *,
    separator: str = "_",
    source: str | Sequence[NestedKey] = "in_keys",
    dest: str | Sequence[NestedKey] = "out_keys",
    auto_batch_size: bool = True,
) -> Any:
    """Let a function of a `tensordict` be called with tensors.

    Decorate a function whose first argument (after `self` for a method) is
    named `tensordict`. A call with a TensorDict goes straight through. A
    call with tensors puts them in a new TensorDict at the `source` keys
    (positional arguments in order; keyword arguments by name, nested keys
    joined with `separator`), calls the function, and returns the entries at
    the `dest` keys: one tensor, or a tuple. Other keyword arguments are
    passed on to the function.

    Args:
        func: the function (when used as `@dispatch` without arguments).
        separator: joins the parts of a nested key into a keyword name.
        source: the input keys, or the name of the attribute of `self` holding them.
        dest: the output keys, or the name of the attribute of `self` holding them.
        auto_batch_size: give the new TensorDict the longest leading shape
            shared by the inputs (else an empty batch size).

    Raises:
        TypeError: at decoration if the function has no `tensordict` first
            argument; at a call if an input is given twice or `source` names
            an attribute on a plain function.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from td_nn import dispatch
        >>> class Add(nn.Module):
        ...     in_keys = [("a", "c"), "d"]
        ...     out_keys = ["b"]
        ...     @dispatch(separator="__")
        ...     def forward(self, tensordict):
        ...         tensordict["b"] = tensordict["a", "c"] + tensordict["d"]
        ...         return tensordict
        >>> Add()(a__c=torch.zeros(2), d=torch.ones(2))
        tensor([1., 1.])
        >>> @dispatch(source=["x"], dest=["y", "z"])
        ... def f(tensordict):
        ...     return tensordict.set("y", tensordict["x"] + 1).set("z", tensordict["x"] - 1)
        >>> f(torch.zeros(()))
        (tensor(1.), tensor(-1.))
    """
    if func is None:
        return functools.partial(
            dispatch, separator=separator, source=source, dest=dest, auto_batch_size=auto_batch_size
        )
    params = list(inspect.signature(func).parameters)
    is_method = bool(params) and params[0] == "self"
    index = 1 if is_method else 0
    if len(params) <= index or params[index] != "tensordict":
        raise TypeError(
            f"dispatch decorates functions whose first argument{' after self' if is_method else ''} "
            f"is named 'tensordict'; {getattr(func, '__qualname__', func)!r} has arguments {params}"
        )
    fixed_src = None if isinstance(source, str) else unravel_key_list(source)
    fixed_dst = None if isinstance(dest, str) else unravel_key_list(dest)

    def keys_of(owner: Any, spec: Any, fixed: Any) -> Any:
        if fixed is not None:
            return fixed
        if owner is None:
            raise TypeError(
                f"dispatch(source/dest={spec!r}) names an attribute, which needs a method; "
                "pass the keys as a list for a plain function"
            )
        return unravel_key_list(getattr(owner, spec))

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        owner = args[0] if is_method else None
        rest = args[1:] if is_method else args
        if (rest and is_tensor_collection(rest[0])) or is_tensor_collection(
            kwargs.get("tensordict")
        ):
            return func(*args, **kwargs)
        src = keys_of(owner, source, fixed_src)
        entries, more, extra = _gather(
            src, rest, kwargs, separator, owner=getattr(func, "__qualname__", "function")
        )
        td = _to_td(entries, auto_batch_size)
        out = func(owner, td, *more, **extra) if is_method else func(td, *more, **extra)
        return _outputs(out, keys_of(owner, dest, fixed_dst))

    return wrapper
