"""The storage contract: what every kind of TensorDict provides, declared once.

Every kind (``TensorDict``, ``LazyStackedTensorDict``, ``TensorDictParams``,
tensorclasses) stores its entries its own way and exposes them through the same
few *primitives*; the op-family modules (``_pointwise``, ``_reductions``,
``_masked``, ...) build the public API on those primitives and nothing else, and
``TensorDictBase`` only assembles the families. The declarations below exist for
the type checker (under ``TYPE_CHECKING``, so they cost nothing at run time and
never shadow an implementation): mypy checks each kind's implementation against
them, and each family's use of them.

The primitives:

- ``_get_str(key, default)``, ``_set_str(key, value)``, ``_del_str(key)``,
  ``_keys_str()``, ``_items_str()``, ``_values_str()``: one level of entries, by
  ``str`` key. ``_set_str`` stores an already validated entry.
- ``batch_size``, ``device``, ``_is_locked``.
- ``_new(entries, batch_size, device)``: a result of this kind built from an
  entry dict without re-validating it (bulk ops build the dict in one pass).

Results that are not of the caller's kind (a mapping turned into a nested
TensorDict, a template rebuilt from metadata) are built with :func:`dense`,
the dense class registered by ``td_core._td``; the base never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["TensorDictContract", "dense", "register_dense"]

_DENSE: list[Callable[..., TensorDictBase]] = []


def register_dense(cls: Callable[..., TensorDictBase]) -> None:
    """Register the dense container class (called once, by ``td_core._td``)."""
    _DENSE[:] = [cls]


def dense(
    source: Mapping[str, Any] | None = None,
    batch_size: torch.Size | Iterable[int] = (),
    device: torch.device | None = None,
) -> TensorDictBase:
    """A new dense TensorDict from ``source`` (validated), without naming its class."""
    return _DENSE[0](source, batch_size=batch_size, device=device)


class TensorDictContract:
    """The primitives every kind implements, declared for the type checker.

    Op-family mixins inherit this class, so the primitives (and the core API
    listed at the end) are typed inside every family; ``TensorDictBase`` and the
    kinds provide the implementations.
    """

    __slots__ = ()

    if TYPE_CHECKING:
        _is_locked: bool

        # ------------------------------------------------------- primitives
        @property
        def batch_size(self) -> torch.Size: ...
        @property
        def device(self) -> torch.device | None: ...
        def _get_str(self, key: str, default: Any = ...) -> Any: ...
        def _set_str(self, key: str, value: Any) -> None: ...
        def _del_str(self, key: str) -> None: ...
        def _keys_str(self) -> Iterable[str]: ...
        def _items_str(self) -> Iterable[tuple[str, Any]]: ...
        def _values_str(self) -> Iterable[Any]: ...
        def _new(
            self, source: dict[str, Any], batch_size: torch.Size, device: Any = ...
        ) -> TensorDictBase: ...
        def __getitem__(self, index: Any) -> Any: ...
        def lock_(self) -> Any: ...
        def unlock_(self) -> Any: ...
