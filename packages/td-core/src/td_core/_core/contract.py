"""The storage contract: what every kind of TensorDict provides, declared once.

Every kind (`TensorDict`, `LazyStackedTensorDict`, `TensorDictParams`,
tensorclasses) stores its entries its own way and exposes them through the same
few *primitives*; the op-family modules (`_pointwise`, `_reductions`,
`_masked`, ...) build the public API on those primitives and nothing else, and
`TensorDictBase` only assembles the families. The declarations below exist for
the type checker (under `TYPE_CHECKING`, so they cost nothing at run time and
never shadow an implementation): mypy checks each kind's implementation against
them, and each family's use of them.

The primitives:

- `_get_str(key, default)`, `_set_str(key, value)`, `_del_str(key)`,
  `_keys_str()`, `_items_str()`, `_values_str()`: one level of entries, by
  `str` key. `_set_str` stores an already validated entry.
- `batch_size`, `device`, `_is_locked`.
- `_new(entries, batch_size, device)`: a result of this kind built from an
  entry dict without re-validating it (bulk ops build the dict in one pass).

Results that are not of the caller's kind (a mapping turned into a nested
TensorDict, a template rebuilt from metadata, a lazy stack of results) are built
through the *registry* below: each kind provides itself (and the few
functions of the layers above that a lower layer must reach, such as
`from_module`) when it is imported, and a lower layer looks it up by name at
call time. So imports run one way, from each layer to the ones below it, and
no module imports a concrete kind it sits under. `td_core/__init__.py`
imports every layer, so every name is registered before user code runs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from td_core._core.utils import BatchMeta

if TYPE_CHECKING:
    pass

__all__ = ["TD", "TensorDictContract", "dense", "lazy", "one_tensorclass", "provide", "provided"]

# a helper that returns the container it was given (or one of the same kind) is typed with TD
TD = TypeVar("TD", bound="TensorDictContract")
T = TypeVar("T")

_REGISTRY: dict[str, Any] = {}


def provide(name: str, obj: T) -> T:
    """Record `obj` (a kind, or a function of an upper layer) under `name`; returns `obj`.

    The names in use: `"TensorDict"`, `"LazyStackedTensorDict"`,
    `"TensorDictParams"`, `"tensorclass"`, `"from_module"`,
    `"from_modules"`, `"to_module"`, `"to_attrs"`, `"attrs_of"`, `"from_pandas"`.
    """
    _REGISTRY[name] = obj
    return obj


def provided(name: str) -> Any:
    """What an upper layer registered under `name` (see `provide`)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LookupError(
            f"nothing is registered under {name!r}: import td_core (not one of its private "
            f"modules alone) before using it; registered: {sorted(_REGISTRY)}"
        ) from None


def dense(
    source: Mapping[str, Any] | None = None,
    batch_size: torch.Size | Iterable[int] = (),
    device: torch.device | None = None,
) -> Any:
    """A new dense TensorDict from `source` (validated), without naming its class."""
    return _REGISTRY["TensorDict"](source, batch_size=batch_size, device=device)


def one_tensorclass(items: list[Any]) -> Any:
    """The tensorclass every one of `items` is an instance of, or `None`."""
    cls = type(items[0]) if items else None
    if cls is None or not getattr(cls, "_td_tensorclass", False):
        return None
    return cls if all(type(item) is cls for item in items) else None


def lazy(members: Iterable[Any], stack_dim: int = 0, **how: Any) -> Any:
    """A new lazy stack of `members` along `stack_dim`, without naming its class.

    Instances of one tensorclass give, as upstream, that class over a lazy stack
    of the TensorDicts they hold (writes through it reach theirs). `how` is the
    stack's other keywords (`stack_dim_name`, `strict_shape`).
    """
    items = members if type(members) is list else list(members)
    if items and getattr(type(items[0]), "_td_tensorclass", False):
        cls = one_tensorclass(items)
        if cls is not None:
            tds = [item._tensordict for item in items]
            return cls._wrap(_REGISTRY["LazyStackedTensorDict"](*tds, stack_dim=stack_dim, **how))
    return _REGISTRY["LazyStackedTensorDict"](*items, stack_dim=stack_dim, **how)


class TensorDictContract(BatchMeta):
    """The primitives every kind implements, declared for the type checker.

    Op-family mixins inherit this class, so the primitives (and the core API
    listed at the end) are typed inside every family; `TensorDictBase` and the
    kinds provide the implementations.
    """

    __slots__ = ()
    # True on a kind whose entries are its `_tensordict` dict (new keys under compile in
    # `_pending`), read as stored: two trees of it may be walked without the primitives
    _plain_nodes: ClassVar[bool] = False
    # True on a kind whose `_is_locked` is its own (or its `_lock_owner`'s) and whose writes go
    # through its primitives: results may be cached on it while it is locked (`_ops.lock_cache`)
    _caches_when_locked: ClassVar[bool] = False
    #: the TensorDict whose lock this one shares and whose leaves its reads view (a lazy legacy
    #: view's source): results cached on it are dropped with that TensorDict's (`lock_cache`)
    _lock_owner: Any = None
    #: True where reading a leaf gives a copy (a view at an advanced index): in-place ops write back
    _reads_are_copies: bool = False
    #: True on lazy stacks (which hold members and define `_stack_parts`): see `traverse.is_stack`
    _td_lazy_stack: ClassVar[bool] = False
    #: True on tensorclasses; a class flag every kind has, so the look-up is a hit (not a miss
    #: that raises AttributeError inside getattr) on hot paths such as nested lazy reads
    _td_tensorclass: ClassVar[bool] = False
    #: True on a view whose writes go into another TensorDict (a sub-TensorDict, a lazy legacy
    #: view): shape ops outside legacy mode and in-place select/exclude refuse it
    _writes_through: ClassVar[bool] = False
    #: True on a kind whose in-place value writes (`update_`, `zero_`, `copy_`, ...) run under
    #: `torch.no_grad()` (`TensorDictParams`: they initialise and load parameters)
    _writes_values_without_grad: ClassVar[bool] = False

    if TYPE_CHECKING:
        # properties, so that the slotted mixins may assign them and kinds may
        # implement them as properties (device is read-only on some kinds)
        @property
        def _is_locked(self) -> bool: ...
        @_is_locked.setter
        def _is_locked(self, value: bool) -> None: ...

        # ------------------------------------------------------- primitives
        @property
        def batch_size(self) -> torch.Size: ...
        @batch_size.setter
        def batch_size(self, value: Any) -> None: ...
        @property
        def device(self) -> torch.device | None: ...

        def _get_str(self, key: str, default: Any = ...) -> Any: ...
        def _set_str(self, key: str, value: Any) -> None: ...
        def _del_str(self, key: str) -> None: ...
        def _keys_str(self) -> Collection[str]: ...
        def _items_str(self) -> Collection[tuple[str, Any]]: ...
        def _key_items(self) -> Collection[tuple[str, Any]]: ...
        def _key_nodes(self) -> Collection[tuple[str, Any]]: ...
        def _values_str(self) -> Collection[Any]: ...
        def _new(
            self, source: dict[str, Any], batch_size: torch.Size, device: Any = ...
        ) -> Any: ...
        def lock_(self) -> Any: ...
        def unlock_(self) -> Any: ...

        # ---------------------------------------------- the core API families use
        # Implemented once in the base or a family; declared here so that every
        # family can call every other through `self` with checked types.
        @property
        def is_locked(self) -> bool: ...
        def keys(
            self,
            include_nested: bool = False,
            leaves_only: bool = False,
            is_leaf: Callable[[type], bool] | None = None,
            *,
            sort: bool = False,
        ) -> Any: ...
        def items(
            self,
            include_nested: bool = False,
            leaves_only: bool = False,
            is_leaf: Callable[[type], bool] | None = None,
            *,
            sort: bool = False,
        ) -> Iterator[tuple[Any, Any]]: ...
        def values(
            self,
            include_nested: bool = False,
            leaves_only: bool = False,
            is_leaf: Callable[[type], bool] | None = None,
            *,
            sort: bool = False,
        ) -> Iterator[Any]: ...
        def get(self, key: Any, default: Any = ...) -> Any: ...
        def set(
            self, key: Any, item: Any, inplace: bool = False, *, non_blocking: bool = False
        ) -> Any: ...
        def set_(self, key: Any, item: Any, *, non_blocking: bool = False) -> Any: ...
        def del_(self, key: Any) -> Any: ...
        def __getitem__(self, index: Any) -> Any: ...
        def __setitem__(self, index: Any, value: Any) -> None: ...
        def _parent_for(self, key: tuple[str, ...], *, create: bool) -> Any: ...
        def _validate(self, value: Any, key: Any, *, adopt: bool = True) -> Any: ...
        def _getter(self) -> Callable[[str, Any], Any]: ...
        def _subtrees(self) -> list[Any]: ...
        def _index(self, index: Any) -> Any: ...
        def _raw_names(self) -> Any: ...
        def _missing(self, key: str) -> Exception: ...
        def _new_validated(
            self, source: Mapping[str, Any], batch_size: torch.Size, key: Any
        ) -> Any: ...
        def _set_device(self, device: Any) -> None: ...
        def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None: ...
        def _to_consolidated(self, device: torch.device, non_blocking: bool) -> Any | None: ...
        # the families' public methods, called across families with their own signatures
        def apply(self, *args: Any, **kwargs: Any) -> Any: ...
        def update(self, *args: Any, **kwargs: Any) -> Any: ...
        def update_(self, *args: Any, **kwargs: Any) -> Any: ...
        def select(self, *args: Any, **kwargs: Any) -> Any: ...
        def exclude(self, *args: Any, **kwargs: Any) -> Any: ...
        def clone(self, *args: Any, **kwargs: Any) -> Any: ...
        def to(self, *args: Any, **kwargs: Any) -> Any: ...
        def unbind(self, *args: Any, **kwargs: Any) -> Any: ...
        def is_shared(self, *args: Any, **kwargs: Any) -> Any: ...
        def unsqueeze(self, *args: Any, **kwargs: Any) -> Any: ...
        def squeeze(self, *args: Any, **kwargs: Any) -> Any: ...
        def reshape(self, *args: Any, **kwargs: Any) -> Any: ...
        def view(self, *args: Any, **kwargs: Any) -> Any: ...
        def permute(self, *args: Any, **kwargs: Any) -> Any: ...
        def transpose(self, *args: Any, **kwargs: Any) -> Any: ...
        def movedim(self, *args: Any, **kwargs: Any) -> Any: ...
        def flatten(self, *args: Any, **kwargs: Any) -> Any: ...
        def unflatten(self, *args: Any, **kwargs: Any) -> Any: ...
        def split(self, *args: Any, **kwargs: Any) -> Any: ...
        def chunk(self, *args: Any, **kwargs: Any) -> Any: ...
        def flip(self, *args: Any, **kwargs: Any) -> Any: ...
        def roll(self, *args: Any, **kwargs: Any) -> Any: ...
        def expand(self, *args: Any, **kwargs: Any) -> Any: ...
        def named_apply(self, *args: Any, **kwargs: Any) -> Any: ...
        def flatten_keys(self, *args: Any, **kwargs: Any) -> Any: ...
        def empty(self, *args: Any, **kwargs: Any) -> Any: ...
        def copy(self, *args: Any, **kwargs: Any) -> Any: ...
        def get_item_shape(self, *args: Any, **kwargs: Any) -> Any: ...
        def gather(self, *args: Any, **kwargs: Any) -> Any: ...
        def masked_select(self, *args: Any, **kwargs: Any) -> Any: ...
        def softmax(self, *args: Any, **kwargs: Any) -> Any: ...
        def norm(self, *args: Any, **kwargs: Any) -> Any: ...
