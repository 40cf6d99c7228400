"""Key-value-store backed TensorDicts (Redis, Dragonfly, KeyDB): see `_kind` and `_layout`."""

from td_memmap._store._api import to_store
from td_memmap._store._kind import STORE_BACKENDS, TensorDictStore
from td_memmap._store._lazy import LazyStackedTensorDictStore
from td_memmap._store._server import StoreConnectionError

__all__ = [
    "STORE_BACKENDS",
    "LazyStackedTensorDictStore",
    "StoreConnectionError",
    "TensorDictStore",
    "to_store",
]
