"""`to_store`: what td-core's `TensorDict.to_store` delegates to."""

from __future__ import annotations

from typing import Any

from td_core import LazyStackedTensorDict, TensorDictBase
from td_memmap._classes import like_source
from td_memmap._store._kind import TensorDictStore
from td_memmap._store._lazy import LazyStackedTensorDictStore
from td_memmap._store._server import address

__all__ = ["to_store"]


def to_store(
    td: TensorDictBase,
    *,
    backend: str = "redis",
    host: str = "localhost",
    port: int = 6379,
    db: int = 0,
    unix_socket_path: str | None = None,
    prefix: str = "tensordict",
    device: Any = None,
    **kwargs: Any,
) -> Any:
    """Upload `td` to a Redis-protocol server; a lazy stack gives a `LazyStackedTensorDictStore`.

    Args:
        td: the TensorDict to copy to the server.

    `backend`, `host`, `port`, `db`, `unix_socket_path` and `prefix` say
    where to store it, as for `TensorDictStore`.

    Keyword Args:
        device: the device entries are read to (default: `td.device`).
        **kwargs: passed on to the store's constructor (`client`, `td_id`, ...).

    Returns:
        The stored copy; for a tensorclass, an instance of its class over the store.
    """
    where = address(backend, host, port, db, unix_socket_path, prefix)
    if isinstance(td, LazyStackedTensorDict) and not isinstance(td, LazyStackedTensorDictStore):
        return LazyStackedTensorDictStore.from_lazy_stack(td, device=device, **where, **kwargs)
    store = TensorDictStore.from_tensordict(td, device=device, **where, **kwargs)
    return like_source(td, store)
