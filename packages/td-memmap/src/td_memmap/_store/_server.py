"""The connection a TensorDictStore and its sub-views share, with errors that name the key."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from td_memmap._optional import optional_module

__all__ = [
    "Server",
    "StoreConnectionError",
    "address",
    "connect",
    "reconnect_settings",
    "redis_module",
]

T = TypeVar("T")
_RETRIES = 16  # optimistic transactions retried when another client changed the entries
_SETTINGS = (
    "host",
    "port",
    "db",
    "username",
    "password",
    "socket_timeout",
    "socket_connect_timeout",
)


class StoreConnectionError(ConnectionError):
    """The key-value server could not be reached (or went away) during an operation."""


def redis_module() -> Any:
    """redis-py, or `ImportError` naming the extra that installs it."""
    return optional_module(
        "redis", "TensorDictStore", "the 'redis' package, which is not installed", "redis"
    )


def address(
    backend: str, host: str, port: int, db: int, unix_socket_path: str | None, prefix: str
) -> dict[str, Any]:
    """The arguments that say where a store lives, as keywords to pass on (`**address(...)`)."""
    return {
        "backend": backend,
        "host": host,
        "port": port,
        "db": db,
        "unix_socket_path": unix_socket_path,
        "prefix": prefix,
    }


def connect(
    host: str, port: int, db: int, unix_socket_path: str | None, **kwargs: Any
) -> tuple[Any, str]:
    """A redis-py client for the given address, and that address in words."""
    redis = redis_module()
    if unix_socket_path is not None:
        return redis.Redis(unix_socket_path=unix_socket_path, db=db, **kwargs), (
            f"unix:{unix_socket_path} (db {db})"
        )
    return redis.Redis(host=host, port=port, db=db, **kwargs), f"{host}:{port} (db {db})"


def reconnect_settings(client: Any) -> dict[str, Any]:
    """The settings a new `redis.Redis` needs to reach the same server as `client`."""
    kwargs = client.connection_pool.connection_kwargs
    out = {k: kwargs[k] for k in _SETTINGS if k in kwargs}
    if "path" in kwargs:  # a Unix socket connection
        out["unix_socket_path"] = kwargs["path"]
        out.pop("host", None)
        out.pop("port", None)
    return out


class Server:
    """A client plus the names of one stored TensorDict's Redis keys."""

    def __init__(self, client: Any, where: str, namespace: str, td_id: str) -> None:
        self.client = client
        self.where = where
        self.namespace = namespace
        self.td_id = td_id
        base = f"{namespace}:{td_id}"
        self.meta_key = f"{base}:meta"
        self.keys_key = f"{base}:keys"
        self._data_prefix = f"{base}:data:"
        self.closed = False

    def data_key(self, field: str) -> str:
        """The Redis key holding the bytes of the entry registered as `field`."""
        return self._data_prefix + field

    @contextlib.contextmanager
    def guard(self, action: str, key: object) -> Iterator[None]:
        """Turn redis-py's connection errors into `StoreConnectionError` naming `key`."""
        redis = redis_module()
        if self.closed:
            raise StoreConnectionError(
                f"cannot {action} key {key!r}: this TensorDictStore was closed"
            )
        try:
            yield
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as err:
            raise StoreConnectionError(
                f"cannot {action} key {key!r}: the key-value server at {self.where} is "
                f"unreachable ({err}); nothing was written by this operation"
                if action.startswith("write")
                else f"cannot {action} key {key!r}: the key-value server at {self.where} is "
                f"unreachable ({err})"
            ) from err

    def run(self, action: str, key: object, fn: Callable[[], T]) -> T:
        """`fn()` under `guard`."""
        with self.guard(action, key):
            return fn()

    def transact(self, body: Callable[[Any], None], failure: str) -> None:
        """Run `body(pipe)` as one optimistic transaction on this TensorDict's keys.

        `pipe` watches the registry of keys: `body` reads what it needs, calls
        `pipe.multi()` and queues its writes, which run together. When another
        client changed the registry meanwhile, the whole `body` runs again (at
        most `_RETRIES` times, then `RuntimeError(failure)`); a connection lost
        during the transaction raises redis-py's `ConnectionError`.
        """
        redis = redis_module()
        for _ in range(_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.keys_key)
                    body(pipe)
                    pipe.execute()
                    return
                except redis.exceptions.WatchError as err:
                    # redis-py also raises WatchError for a link that dropped mid-transaction
                    if "Watched variable changed" not in str(err):
                        raise redis.exceptions.ConnectionError(str(err)) from err
        raise RuntimeError(failure)
