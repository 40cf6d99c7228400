"""In-place ops on a `PersistentTensorDict`: run on staged copies, then written to the store.

A read from an HDF5 file or a zarr store is a copy, so an op that writes into the leaves it
reads (`add_`, `apply_`, `zero_`, `td[idx] = value`, `update_`, ...) would
change only those copies. Such ops run *staged*: while one runs, every dataset
it reads is read once and handed out as the same tensor, the op writes into
those tensors, and when it returns each staged tensor is written back to its
array. If the op raises, nothing is written: the store is left as it was.
Nested staged ops (`zero_` calling `apply_`) share the outermost stage.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import torch

from td_memmap._persist_backend import StoreBackend

__all__ = [
    "staged",
    "staged_if_inplace",
    "staged_read",
    "staging",
    "forget",
    "run_staged",
    "is_staged",
]

F = TypeVar("F", bound=Callable[..., Any])

# (store name, array path) -> (backend, array, staged tensor); None outside a staged op
_Stage = dict[tuple[str, str], tuple[StoreBackend, Any, torch.Tensor]]
_STAGE: ContextVar[_Stage | None] = ContextVar("td_h5_stage", default=None)


def staged_read(backend: StoreBackend, ds: Any, device: torch.device | None) -> torch.Tensor:
    """The array `ds` as a tensor: the staged one inside a staged op, else a fresh read."""
    stage = _STAGE.get()
    if stage is None:
        return backend.read(ds, device=device)
    key = backend.node_id(ds)
    hit = stage.get(key)
    if hit is None:
        tensor = backend.read(ds, device=device)
        stage[key] = (backend, ds, tensor)
        return tensor
    return hit[2]


def staging() -> bool:
    """Whether a staged op is running (reads must then go through `staged_read`)."""
    return _STAGE.get() is not None


def is_staged(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a staged read of the running staged op (written when it returns)."""
    stage = _STAGE.get()
    if not stage:
        return False
    return any(staged is tensor for _, _, staged in stage.values())


def forget(backend: StoreBackend, group: Any, key: str) -> None:
    """Drop staged tensors at or below `group[key]` (it is being replaced or deleted)."""
    stage = _STAGE.get()
    if not stage:
        return
    name, where = backend.node_id(group)
    path = f"{where.rstrip('/')}/{key}"
    for staged_key in [k for k in stage if k[0] == name]:
        if staged_key[1] == path or staged_key[1].startswith(path + "/"):
            del stage[staged_key]


def run_staged(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` with reads staged, then the staged tensors written back."""
    if _STAGE.get() is not None:
        return fn(*args, **kwargs)
    stage: _Stage = {}
    token = _STAGE.set(stage)
    try:
        result = fn(*args, **kwargs)
    finally:
        _STAGE.reset(token)
    for backend, ds, tensor in stage.values():
        backend.write_at(ds, (), tensor)
    return result


def staged(method: F) -> F:
    """`method` (an in-place op of the base class) run staged on a writable file."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._backend.check_writable(self._group, f"run {method.__name__} (an in-place write)")
        result = run_staged(method, self, *args, **kwargs)
        return result

    return run  # type: ignore[return-value]


def staged_if_inplace(method: F) -> F:
    """`method` run staged when called with `inplace=True` (`apply`, `named_apply`)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("inplace"):
            return method(self, *args, **kwargs)
        self._backend.check_writable(self._group, f"run {method.__name__}(inplace=True)")
        return run_staged(method, self, *args, **kwargs)

    return run  # type: ignore[return-value]
