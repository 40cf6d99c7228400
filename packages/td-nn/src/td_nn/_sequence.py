"""`TensorDictSequential`: run modules one after the other on one TensorDict."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from torch import nn

from td_core import NestedKey, TensorDict, TensorDictBase
from td_core.errors import KeyNotFoundError
from td_nn._base import TensorDictModuleBase, format_keys, indent
from td_nn._common import as_key_list
from td_nn._dispatch import resolve_call
from td_nn._errors import UnknownKeyError
from td_nn._skip import skips
from td_nn._wrap import WrapModule

__all__ = ["TensorDictSequential", "sequence_keys"]


def sequence_keys(modules: Iterable[Any]) -> tuple[list[NestedKey], list[NestedKey]]:
    """`(in_keys, out_keys)` of modules run in order.

    The in keys are those some module reads before any earlier module wrote
    them (they must come from outside); the out keys are everything written.
    """
    in_keys: dict[NestedKey, None] = {}
    out_keys: dict[NestedKey, None] = {}
    for module in modules:
        for key in as_key_list(module.in_keys, "in_keys", type(module).__name__):
            if key not in out_keys:
                in_keys[key] = None
        for key in as_key_list(module.out_keys, "out_keys", type(module).__name__):
            if key != "_":
                out_keys[key] = None
    return list(in_keys), list(out_keys)


def _check_module(module: Any, index: Any) -> nn.Module:
    """`module` as a member: a keyed module as is, a plain callable wrapped in `WrapModule`.

    A callable without `in_keys`/`out_keys` (a function or an `nn.Module` from
    TensorDict to TensorDict) runs on the whole TensorDict, as upstream.
    """
    if hasattr(module, "in_keys") and hasattr(module, "out_keys"):
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"TensorDictSequential: module {index!r} is a {type(module).__name__}, not an "
                "nn.Module; wrap it with TensorDictModule(fn, in_keys=..., out_keys=...)"
            )
        return module
    if not callable(module):
        raise TypeError(
            f"TensorDictSequential: module {index!r} is a {type(module).__name__}, which is not "
            "callable; pass nn.Modules with in_keys/out_keys or functions of a TensorDict"
        )
    return WrapModule(module)


def _check_ran(module: Any, index: int, td: TensorDictBase, out: Any) -> None:
    """Raise `KeyError` if a member wrote none of its outputs because an input was missing.

    A member that skips its work on a missing input would otherwise hand on a
    TensorDict without its outputs, and a later member (or the caller) fails far
    from the cause. Members that handle missing inputs and still write their
    outputs pass; `partial_tolerant=True` sequences skip such members instead.
    """
    if not isinstance(out, TensorDictBase):
        return
    for key in module.out_keys:
        if out.get(key, None) is None:
            break
    else:
        return
    missing = [k for k in module.in_keys if td.get(k, None) is None]
    if missing:
        raise KeyNotFoundError(
            f"TensorDictSequential: module {index} ({type(module).__name__}, in_keys="
            f"{list(module.in_keys)!r}) needs the input key(s) {missing!r}, which are not in the "
            f"TensorDict (keys: {sorted(map(str, td.keys(include_nested=True)))}); pass them, "
            "or build the sequence with partial_tolerant=True to skip such modules"
        )


class TensorDictSequential(TensorDictModuleBase):
    """Run TensorDict modules in order, each reading from and writing to the same TensorDict.

    Any `nn.Module` with `in_keys`/`out_keys` whose forward maps a
    TensorDict to a TensorDict can be a member. `in_keys` lists what must
    come from outside (keys read before any member writes them) and
    `out_keys` everything the members write.

    Args:
        *modules: the members, or one `OrderedDict` of named members.
        partial_tolerant: skip the members whose inputs are missing instead
            of raising.
        selected_out_keys: keep only these outputs (and the inputs) in the
            result; intermediate outputs are removed.
        inplace: `True`: the out keys are written into the input TensorDict,
            which is returned (even where a member returns a new TensorDict);
            `None`: whatever the last member returns (the input, for members
            that write in place); `False`: a new TensorDict (empty batch size)
            holding only the out keys; `"empty"`: `tensordict.empty()` holding them.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_nn import TensorDictModule, TensorDictSequential
        >>> seq = TensorDictSequential(
        ...     TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["h"]),
        ...     TensorDictModule(lambda h, z: h * z, in_keys=["h", "z"], out_keys=["y"]),
        ... )
        >>> seq.in_keys, seq.out_keys
        (['x', 'z'], ['h', 'y'])
        >>> seq(TensorDict(x=torch.ones(2), z=torch.full((2,), 3.0), batch_size=[2]))["y"]
        tensor([6., 6.])
        >>> seq.select_subsequence(out_keys=["h"]).out_keys
        ['h']
        >>> len(seq[1:])
        1
    """

    _native_call = True

    def __init__(
        self,
        *modules: nn.Module | Callable[..., Any] | Mapping[str, Any],
        partial_tolerant: bool = False,
        selected_out_keys: Sequence[NestedKey] | NestedKey | None = None,
        inplace: bool | str | None = None,
    ) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            named = OrderedDict((name, _check_module(m, name)) for name, m in modules[0].items())
            self.module: nn.ModuleDict | nn.ModuleList = nn.ModuleDict(named)
        else:
            self.module = nn.ModuleList([_check_module(m, i) for i, m in enumerate(modules)])
        if inplace not in (None, True, False, "empty"):
            raise ValueError(
                f"TensorDictSequential inplace must be None, True, False or 'empty', got {inplace!r}"
            )
        self.partial_tolerant = partial_tolerant
        self.inplace = inplace
        self._dropped: list[NestedKey] = []
        self.in_keys, self.out_keys = sequence_keys(self._members())
        if selected_out_keys is not None:
            self.select_out_keys(
                *as_key_list(selected_out_keys, "selected_out_keys", "TensorDictSequential")
            )

    def _members(self) -> list[Any]:  # modules with in_keys and out_keys
        return list(self.module._modules.values())

    # ---------------------------------------------------------------- call
    def forward(
        self,
        tensordict: TensorDictBase | Any = None,
        *args: Any,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run every member on `tensordict` in order."""
        tensordict, tensordict_out, result = resolve_call(
            self, self.forward, tensordict, args, tensordict_out, kwargs
        )
        if tensordict is None:
            return result
        if kwargs:
            raise TypeError(
                f"TensorDictSequential got unexpected keyword arguments {sorted(kwargs)}"
            )
        if skips(self, tensordict):
            return tensordict
        inplace = self.inplace
        copy = tensordict_out is not None or (inplace is not None and inplace is not True)
        td = tensordict.copy() if copy else tensordict
        module: Any  # a member: it has in_keys and out_keys
        if self.partial_tolerant:
            for module in self.module._modules.values():
                present = td.keys(include_nested=True)
                if all(key in present for key in module.in_keys):
                    td = module(td)
        else:
            for i, module in enumerate(self.module._modules.values()):
                out = module(td)
                _check_ran(module, i, td, out)
                td = out
        if self._dropped:
            td.exclude(*self._dropped, inplace=True)
        if not copy:
            if inplace is True and td is not tensordict:
                # a member returned a new TensorDict: the outputs still go into the input
                tensordict_out = tensordict
            else:
                return td
        if tensordict_out is None:
            tensordict_out = TensorDict() if inplace is False else tensordict.empty()
        for key in self.out_keys:
            value = td.get(key, None)
            if value is not None:
                tensordict_out.set(key, value)
        return tensordict_out

    # ---------------------------------------------------------------- out keys
    def _set_selected_out_keys(self, keys: list[NestedKey]) -> None:
        self._out_keys_apparent = keys
        every = self.out_keys_source
        self._dropped = [k for k in every if k not in keys and k not in self.in_keys]

    # ---------------------------------------------------------------- structure
    def _rebuild(
        self, modules: list[nn.Module], names: list[str] | None = None
    ) -> TensorDictSequential:
        """A sequence of `modules` like this one (named by `names` when this one is named)."""
        return TensorDictSequential(
            *self._as_args(modules, names), partial_tolerant=self.partial_tolerant
        )

    def _as_args(self, modules: list[nn.Module], names: list[str] | None) -> list[Any]:
        """`modules` as constructor arguments: one `OrderedDict` when named."""
        if names is None or not isinstance(self.module, nn.ModuleDict):
            return modules
        return [OrderedDict(zip(names, modules))]

    def select_subsequence(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
    ) -> TensorDictSequential:
        """A new sequence of only the members needed (the members are shared, not copied).

        Args:
            in_keys: keep the members that read these keys, directly or through
                the outputs of other kept members (the keys that change).
            out_keys: keep the members needed to compute these keys.

        Raises:
            ValueError: (also a `KeyError`) naming the `out_keys` entries this
                sequence does not write; or if no member is left.
        """
        members = self._members()
        keep = [True] * len(members)
        if in_keys is not None:
            changed = set(as_key_list(in_keys, "in_keys", "select_subsequence"))
            for i, module in enumerate(members):
                if type(module) is TensorDictSequential:  # nested: select inside it
                    try:
                        module = members[i] = module.select_subsequence(in_keys=list(changed))
                    except ValueError:
                        keep[i] = False
                        continue
                    changed.update(module.out_keys)
                elif any(k in changed for k in module.in_keys):
                    changed.update(module.out_keys)
                else:
                    keep[i] = False
        if out_keys is not None:
            wanted = as_key_list(out_keys, "out_keys", "select_subsequence")
            every = self.out_keys_source
            unknown = [k for k in wanted if k not in every]
            if unknown:
                raise UnknownKeyError(
                    f"select_subsequence: {unknown!r} are not written by this sequence "
                    f"(out_keys: {every!r})"
                )
            needed = set(wanted)
            for i in reversed(range(len(members))):
                module = members[i]
                if keep[i] and any(k in needed for k in module.out_keys):
                    if type(module) is TensorDictSequential:  # nested: select inside it
                        wanted_here = [k for k in module.out_keys if k in needed]
                        module = members[i] = module.select_subsequence(out_keys=wanted_here)
                    needed.update(module.in_keys)
                else:
                    keep[i] = False
        kept = [m for m, k in zip(members, keep) if k]
        names = [n for n, k in zip(self.module._modules, keep) if k]
        if not kept:
            raise ValueError(
                f"select_subsequence(in_keys={in_keys!r}, out_keys={out_keys!r}) leaves no module "
                f"(in_keys: {self.in_keys!r}, out_keys: {self.out_keys!r})"
            )
        return self._rebuild(kept, names)

    def __setitem__(self, index: int | str, module: nn.Module) -> None:
        """Replace a member; the sequence's `in_keys` and `out_keys` are computed again."""
        member = _check_module(module, index)
        if isinstance(self.module, nn.ModuleDict):
            self.module[str(index)] = member
        else:
            self.module[int(index)] = member
        self._refresh_keys()

    def __delitem__(self, index: int | slice | str) -> None:
        """Remove members; the sequence's `in_keys` and `out_keys` are computed again."""
        del self.module[index]  # type: ignore[arg-type]
        self._refresh_keys()

    def _refresh_keys(self) -> None:
        self.in_keys, self.out_keys = sequence_keys(self._members())

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._rebuild(self._members()[index], list(self.module._modules)[index])
        if isinstance(self.module, nn.ModuleDict) and isinstance(index, str):
            return self.module[index]
        return self._members()[index]

    def __len__(self) -> int:
        return len(self.module)

    def __iter__(self) -> Iterator[nn.Module]:
        return iter(self._members())

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(\n    module={indent(repr(self.module))},\n"
            f"    in_keys={format_keys(self.in_keys)},\n    out_keys={format_keys(self.out_keys)})"
        )
