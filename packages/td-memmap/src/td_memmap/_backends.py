"""The `PersistentTensorDict` backends by name (`backend="h5"`, `backend="zarr"`)."""

from __future__ import annotations

from typing import Any

from td_memmap._h5_backend import H5Backend
from td_memmap._persist_backend import StoreBackend
from td_memmap._zarr_backend import ZarrBackend

__all__ = ["BACKENDS", "backend_named"]

BACKENDS: dict[str, type[StoreBackend]] = {"h5": H5Backend, "zarr": ZarrBackend}


def backend_named(name: Any) -> StoreBackend:
    """A new backend instance for `name`, or `ValueError` listing the known ones."""
    cls = BACKENDS.get(name)
    if cls is None:
        raise ValueError(
            f"PersistentTensorDict: unknown backend {name!r}; supported backends are "
            f"{sorted(BACKENDS)}"
        )
    return cls()
