"""`TensorDictStore`: a TensorDict whose entries live in a Redis (or Dragonfly, KeyDB) server.

A real td kind: it implements td-core's storage primitives (`_get_str`,
`_set_str`, `_del_str`, `_keys_str`, ...) over the layout in `_layout`, and
every other op comes from `TensorDictBase`. Reads give fresh CPU (or
`device`) copies; writes go to the server at once, each in one MULTI/EXEC
transaction, and a write at a batch index (`store[idx] = ...`) rewrites only
the bytes of those rows (SETRANGE). Results of ops (`store + 1`,
`store[0:2]`) are plain, local TensorDicts.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import torch

from td_core import (
    TensorDict,
    TensorDictBase,
    UnbatchedTensor,
    is_non_tensor,
    is_tensor_collection,
    is_tensorclass,
)
from td_core._shared.kinds import InPlaceRouteMixin
from td_core.errors import BatchSizeError, KeyNotFoundError
from td_memmap._classes import class_name
from td_memmap._store import _layout as L
from td_memmap._store._classes import stored_class
from td_memmap._store._server import (
    Server,
    address,
    connect,
    reconnect_settings,
    redis_module,
)
from td_memmap._store._writes import index_plan, subtree_writes

__all__ = ["TensorDictStore", "STORE_BACKENDS"]

STORE_BACKENDS = ("redis", "dragonfly", "keydb")
_NO_DEFAULT: Any = object()
_CLASS = "tensorclass"  # the root metadata field naming the class a tensorclass was stored from


class TensorDictStore(InPlaceRouteMixin):
    """A TensorDict kept in a Redis-protocol key-value server.

    Keyword Args:
        backend: the server kind (`"redis"`, `"dragonfly"`, `"keydb"`): all
            speak the same protocol; kept for information.
        host: the server's host name.
        port: the server's TCP port.
        db: the database number.
        unix_socket_path: connect through this Unix socket instead of TCP.
        prefix: the namespace in front of every Redis key.
        batch_size: the batch size (read from the server when reconnecting
            with `td_id` and no batch size).
        device: the device entries are moved to when read.
        client: a `redis.Redis` client to use instead of making one.
        td_id: the id of the stored TensorDict (a new one when `None`); pass an
            existing id to reconnect to its data.
        cache_metadata: accepted for upstream compatibility (metadata is always
            read from the server, so other processes' writes are seen).
        **redis_kwargs: passed on to `redis.Redis`.

    Examples:
        >>> store = TensorDictStore(port=port, batch_size=[4])  # doctest: +SKIP
        >>> store["obs"] = torch.zeros(4, 3)  # doctest: +SKIP
        >>> store[1:3] = TensorDict({"obs": torch.ones(2, 3)}, [2])  # doctest: +SKIP
        >>> store.to_tensordict()["obs"].sum()  # doctest: +SKIP
        tensor(6.)
    """

    _reads_are_copies = True

    def __init__(
        self,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        batch_size: Any = None,
        device: Any = None,
        client: Any = None,
        td_id: str | None = None,
        cache_metadata: bool = True,
        **redis_kwargs: Any,
    ) -> None:
        if client is None:
            client, where = connect(host, port, db, unix_socket_path, **redis_kwargs)
        else:
            where = repr(client)
        self._backend = backend
        srv = Server(client, where, prefix, td_id if td_id is not None else uuid.uuid4().hex)
        meta = srv.run("read the metadata of", "<root>", lambda: client.hgetall(srv.meta_key))
        if batch_size is None and td_id is not None and meta:
            batch_size = json.loads(meta[b"batch_size"])
            if device is None and meta.get(b"device"):
                device = meta[b"device"].decode()
        self._attach(srv, (), torch.Size(batch_size or ()), device, {})
        self._persist_meta()

    # ------------------------------------------------------------------ construction
    def _attach(
        self,
        srv: Server,
        path: tuple[str, ...],
        batch_size: torch.Size,
        device: Any,
        views: dict[tuple[str, ...], TensorDictStore],
    ) -> None:
        self._srv = srv
        self._path = path
        self._batch_size = torch.Size(batch_size)
        self._device = None if device is None else torch.device(device)
        self._views = views  # the sub-views of this stored TensorDict, shared by all of them
        self._is_locked = False
        views[path] = self

    def _persist_meta(self) -> None:
        srv = self._srv
        mapping = {
            "batch_size": json.dumps(list(self._batch_size)),
            "device": "" if self._device is None else str(self._device),
            "format": L.FORMAT,
        }
        srv.run(
            "write the metadata of",
            "<root>",
            lambda: srv.client.hset(srv.meta_key, mapping=mapping),
        )

    def _view(self, key: str, meta: dict[str, Any]) -> TensorDictStore:
        path = self._path + (key,)
        bs = torch.Size(meta["batch_size"])
        view = self._views.get(path)
        if view is None:
            view = object.__new__(type(self))
            view._backend = self._backend
            view._attach(self._srv, path, bs, self._device, self._views)
            view._is_locked = self._is_locked
        else:
            view._batch_size = bs
        return view

    # ------------------------------------------------------------------ identity
    @property
    def td_id(self) -> str:
        """The id of the stored TensorDict (pass it to `from_store` to reconnect)."""
        return self._srv.td_id

    @property
    def backend(self) -> str:
        """The server kind given at construction."""
        return self._backend

    # ------------------------------------------------------------------ registry
    def _registry(self) -> dict[tuple[str, ...], dict[str, Any]]:
        srv = self._srv
        raw = srv.run(
            "list the keys of", self._path or "<root>", lambda: srv.client.hgetall(srv.keys_key)
        )
        return {L.path_of(k): json.loads(v) for k, v in raw.items()}

    def _children(self) -> list[str]:
        """The keys here, sorted as upstream lists them (a Redis hash keeps no order once big)."""
        n = len(self._path)
        return sorted(p[n] for p in self._registry() if len(p) == n + 1 and p[:n] == self._path)

    # ------------------------------------------------------------------ primitives
    def _keys_str(self) -> list[str]:
        return self._children()

    def _get_str(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        path = self._path + (key,)
        field = L.field(path)
        srv = self._srv

        def read() -> list[Any]:
            pipe = srv.client.pipeline(transaction=True)
            pipe.hget(srv.keys_key, field)
            pipe.get(srv.data_key(field))
            return pipe.execute()

        raw_meta, data = srv.run("read", path if len(path) > 1 else key, read)
        if raw_meta is None:
            return default
        meta = json.loads(raw_meta)
        return self._entry(key, meta, data)

    def _entry(self, key: str, meta: dict[str, Any], data: bytes | None) -> Any:
        kind = meta.get("kind")
        full = self._path + (key,)
        if kind == "tensor":
            value = L.tensor_from_bytes(meta, data, full if len(full) > 1 else key)
            if isinstance(value, UnbatchedTensor):  # it knows the batch it stands outside of
                value = value.with_batch_size(self._batch_size)
            return value if self._device is None else value.to(self._device)
        if kind == "td":
            return self._view(key, meta)
        if kind in ("non_tensor", "non_tensor_stack"):
            return L.non_tensor_from_meta(meta, self._batch_size, self._device)
        raise ValueError(f"entry {full!r} in the key-value store has unknown kind {kind!r}")

    def _items_str(self) -> list[tuple[str, Any]]:
        return [(key, self._get_str(key)) for key in self._children()]

    def _values_str(self) -> list[Any]:
        return [value for _, value in self._items_str()]

    def _set_str(self, key: str, value: Any) -> None:
        path = self._path + (key,)
        self._replace(path, subtree_writes(path, value), path if len(path) > 1 else key)

    def _del_str(self, key: str) -> None:
        path = self._path + (key,)
        self._replace(path, [], path if len(path) > 1 else key)

    def _replace(
        self,
        path: tuple[str, ...],
        writes: list[tuple[str, dict[str, Any], bytes | None]],
        name: Any,
    ) -> None:
        """Replace every entry at or below `path` by `writes`, in one transaction."""
        srv = self._srv
        n = len(path)
        new_fields = {field for field, _, _ in writes}

        def body(pipe: Any) -> None:
            old = [f.decode() for f in pipe.hkeys(srv.keys_key) if L.path_of(f)[:n] == path]
            pipe.multi()
            for f in old:
                if f not in new_fields:  # a rewritten field keeps its place in the order
                    pipe.hdel(srv.keys_key, f)
                pipe.delete(srv.data_key(f))
            for field, meta, data in writes:
                if data is not None:
                    pipe.set(srv.data_key(field), data)
                pipe.hset(srv.keys_key, field, json.dumps(meta))

        def run() -> None:
            srv.transact(body, f"could not write key {name!r}: the entries kept changing under it")

        srv.run("write", name, run)
        for p in [p for p in self._views if p[:n] == path and p != self._path]:
            del self._views[p]

    def _write_all(self, local: TensorDictBase) -> None:
        """Replace all entries of this (sub-)TensorDict by those of `local`, in one transaction."""
        writes: list[tuple[str, dict[str, Any], bytes | None]] = []
        if self._path:
            writes.append(
                (L.field(self._path), {"kind": "td", "batch_size": list(self._batch_size)}, None)
            )
        for key, item in local.items():
            writes.extend(subtree_writes(self._path + (key,), item))
        self._replace(self._path, writes, self._path or "<all keys>")

    def _write_back_all(self, copy: TensorDictBase) -> None:
        """In-place ops (`InPlaceRouteMixin`) run on a local copy, stored in one transaction."""
        self._write_all(copy)

    # ------------------------------------------------------------------ metadata
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        new = torch.Size(value)
        for key, item in self._items_str():
            shape = item.shape if isinstance(item, torch.Tensor) else item.batch_size
            if not is_non_tensor(item) and shape[: len(new)] != new:
                raise BatchSizeError(
                    f"cannot set batch_size {list(new)}: entry {key!r} has shape {list(shape)}"
                )
        self._batch_size = new
        if self._path:
            srv = self._srv
            field = L.field(self._path)
            meta = json.dumps({"kind": "td", "batch_size": list(new)})
            srv.run("write", self._path, lambda: srv.client.hset(srv.keys_key, field, meta))
        else:
            self._persist_meta()

    @property
    def device(self) -> torch.device | None:
        return self._device

    def _set_device(self, device: Any) -> None:
        self._device = None if device is None else torch.device(device)
        if not self._path:
            self._persist_meta()

    # ------------------------------------------------------------------ writes in place
    def _copy_into(self, key: str, dest: Any, item: Any, full_key: Any) -> None:
        TensorDictBase._copy_into(self, key, dest, item, full_key)
        if isinstance(dest, torch.Tensor):  # `dest` was a copy: store the updated values
            self._set_str(key, dest)

    def _setitem_index(self, index: Any, value: Any) -> None:
        """Write `value` at batch `index`: only the affected bytes of each leaf change."""
        srv = self._srv

        def body(pipe: Any) -> None:
            raw = pipe.hgetall(srv.keys_key)
            registry = {L.path_of(k): json.loads(v) for k, v in raw.items()}
            ops = index_plan(self, registry, index, value)
            pipe.multi()
            for op in ops:
                op(pipe)

        def run() -> None:
            srv.transact(body, f"could not write at index {index!r}: the entries kept changing")

        srv.run("write at an index", self._path or index, run)

    # ------------------------------------------------------------------ whole-store helpers
    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """A local TensorDict holding a copy of every entry."""
        out = TensorDict({}, self._batch_size, device=self._device)
        for key, value in self._items_str():
            out._set_str(
                key, value.to_tensordict() if isinstance(value, TensorDictStore) else value
            )
        return self._names_onto(out)

    def _names_onto(self, out: Any) -> Any:
        """`out` (a copy of this store, or a new handle) with this handle's dim names."""
        names = self._raw_names()
        if names is not None:
            out._store_names(names)
        return out

    def to_local(self) -> TensorDict:
        """Same as `to_tensordict`."""
        return self.to_tensordict()

    def contiguous(self, *, inplace: bool = False, canonical: bool = False) -> TensorDict:
        """A local copy (as `to_tensordict`); `inplace=True` is refused (the entries live in the store)."""
        if inplace:
            raise RuntimeError(
                "contiguous(inplace=True) on a TensorDictStore: its entries live in the store, "
                "not in memory; call contiguous() for an in-memory copy"
            )
        return self.to_tensordict()

    def is_contiguous(self) -> bool:
        """False: the entries are not in memory."""
        return False

    def close(self) -> None:
        """Close the connection (the stored data stays on the server)."""
        if not self._srv.closed:
            self._srv.closed = True
            self._srv.client.close()

    def clear_redis(self) -> None:
        """Delete every Redis key of this stored TensorDict (its data and its metadata)."""
        srv = self._srv

        def run() -> None:
            fields = srv.client.hkeys(srv.keys_key)
            pipe = srv.client.pipeline(transaction=True)
            for f in fields:
                pipe.delete(srv.data_key(f.decode()))
            pipe.delete(srv.keys_key, srv.meta_key)
            pipe.execute()

        srv.run("delete", "<all keys>", run)
        self._views.clear()
        self._views[self._path] = self

    def __repr__(self) -> str:
        fields = ", ".join(repr(k) for k in self._children())
        return (
            f"{type(self).__name__}(fields=[{fields}], batch_size={self._batch_size}, "
            f"device={self._device}, backend={self._backend!r}, td_id={self._srv.td_id!r}, "
            f"server={self._srv.where!r}, path={list(self._path)})"
        )

    def clone(self, recurse: bool = True) -> Any:
        """A new stored copy (new `td_id`, same server); `recurse=False`: a handle to the same data."""
        if not recurse:
            out = object.__new__(type(self))
            out._backend = self._backend
            out._attach(self._srv, self._path, self._batch_size, self._device, {})
            return self._names_onto(out)
        copy = type(self)(
            backend=self._backend,
            prefix=self._srv.namespace,
            batch_size=self._batch_size,
            device=self._device,
            client=self._srv.client,
        )
        copy.update(self.to_tensordict())
        return self._names_onto(copy)

    def share_memory_(self) -> Any:
        """Not possible: the entries live in the server (`to_tensordict().share_memory_()`)."""
        raise NotImplementedError(
            f"share_memory_() cannot move the entries of {type(self).__name__} "
            f"{self._srv.td_id!r} into shared memory: they live in the key-value server; "
            "use store.to_tensordict().share_memory_()"
        )

    def set_at_(self, key: Any, value: Any, index: Any, *, non_blocking: bool = False) -> Any:
        """`store[key][index] = value` on the server (allowed when locked; one transaction)."""
        local = self._get_strict(key)  # KeyError naming a missing key, whatever get() defaults to
        if not isinstance(local, torch.Tensor):
            local_td = TensorDict({"v": local}, self._batch_size)
            local_td.set_at_("v", value, index)
            return self.set_(key, local_td.get("v"))
        try:
            local[index] = value
        except (RuntimeError, TypeError, ValueError) as err:
            raise BatchSizeError(
                f"cannot write the value at index {index!r} of entry {key!r}: {err}"
            ) from None
        return self.set_(key, local)

    # ------------------------------------------------------------------ pickling: the handle
    def __getstate__(self) -> dict[str, Any]:
        """The connection settings and the id: unpickling reconnects (the data stay on the server)."""
        return {
            "connection": reconnect_settings(self._srv.client),
            "where": self._srv.where,
            "namespace": self._srv.namespace,
            "td_id": self._srv.td_id,
            "path": self._path,
            "batch_size": list(self._batch_size),
            "device": None if self._device is None else str(self._device),
            "backend": self._backend,
            "locked": self._is_locked,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        client = redis_module().Redis(**state["connection"])
        srv = Server(client, state["where"], state["namespace"], state["td_id"])
        self._backend = state["backend"]
        self._attach(
            srv, tuple(state["path"]), torch.Size(state["batch_size"]), state["device"], {}
        )
        self._is_locked = state["locked"]

    @property
    def _td_id(self) -> str:
        return self._srv.td_id

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_dict(  # type: ignore[override]  # the server's address, as upstream's store takes it
        cls,
        input_dict: Any,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        auto_batch_size: bool = False,
        batch_size: Any = None,
        device: Any = None,
        **kwargs: Any,
    ) -> TensorDictStore:
        """A new store holding the entries of a mapping or TensorDict."""
        if not is_tensor_collection(input_dict):
            input_dict = TensorDict.from_dict(
                input_dict, batch_size=batch_size, auto_batch_size=auto_batch_size
            )
        if batch_size is None:
            batch_size = input_dict.batch_size
        out = cls(
            **address(backend, host, port, db, unix_socket_path, prefix),
            batch_size=batch_size,
            device=device,
            **kwargs,
        )
        out.update(input_dict)
        if is_tensorclass(input_dict):  # read back as the class by from_store, when loaded
            srv = out._srv
            name = class_name(type(input_dict))
            srv.run(
                "write the metadata of",
                "<root>",
                lambda: srv.client.hset(srv.meta_key, _CLASS, name),
            )
        return out

    @classmethod
    def from_tensordict(
        cls,
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
    ) -> TensorDictStore:
        """A new store holding a copy of `td` (same batch size; `device` defaults to td's)."""
        return cls.from_dict(
            td,
            **address(backend, host, port, db, unix_socket_path, prefix),
            batch_size=td.batch_size,
            device=td.device if device is None else device,
            **kwargs,
        )

    @classmethod
    def from_store(
        cls,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        td_id: str,
        device: Any = None,
        tensorclass_cls: type | str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Reconnect to the stored TensorDict `td_id` (from this or another process).

        A store written from a tensorclass comes back as that class over the
        store (writes through it go to the server) when the class is found:
        `tensorclass_cls` (the class, or its dotted path), else the class
        recorded by the upload. Either is looked up among modules already
        imported; nothing is imported.

        Raises:
            KeyNotFoundError: (a `KeyError`) when the server holds no TensorDict `td_id`.
            ValueError: when `tensorclass_cls` is a path naming no loaded tensorclass.
        """
        client = kwargs.pop("client", None)
        if client is None:
            client, _ = connect(host, port, db, unix_socket_path, **kwargs)
        srv = Server(client, "", prefix, td_id)
        if not srv.run("read the metadata of", "<root>", lambda: client.exists(srv.meta_key)):
            raise KeyNotFoundError(
                f"No TensorDictStore with td_id {td_id!r} under prefix {prefix!r} was found on "
                "the server"
            )
        store = cls(backend=backend, prefix=prefix, client=client, td_id=td_id, device=device)
        recorded = srv.run(
            "read the metadata of", "<root>", lambda: client.hget(srv.meta_key, _CLASS)
        )
        found = stored_class(tensorclass_cls, None if recorded is None else recorded.decode())
        return store if found is None else found.from_tensordict(store)
