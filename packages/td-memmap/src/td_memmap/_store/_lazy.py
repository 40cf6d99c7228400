"""`LazyStackedTensorDictStore`: a lazy stack whose members live in a key-value server.

The members are the sub-TensorDicts `"0"`, `"1"`, ... of one stored
TensorDict (batch size `[]`) whose metadata hash also records the stack
(`stack`: `{"count", "stack_dim", "inner_batch_size"}` as JSON). Members may
hold different keys and shapes; each is a `TensorDictStore` view, so every
lazy-stack op of td-core reads from and writes to the server.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from td_core import LazyStackedTensorDict, TensorDict, TensorDictBase
from td_core.errors import KeyNotFoundError
from td_memmap._store._kind import TensorDictStore
from td_memmap._store._server import address

__all__ = ["LazyStackedTensorDictStore"]


class LazyStackedTensorDictStore(LazyStackedTensorDict):
    """A `LazyStackedTensorDict` of `count` members kept in a Redis-protocol server.

    The connection arguments (`backend`, `host`, `port`, `db`,
    `unix_socket_path`, `prefix`, `device`, `client`, `td_id`,
    `cache_metadata` and any `redis.Redis` keyword) are those of `TensorDictStore`.

    Keyword Args:
        count: the number of stacked members (new stores start with empty members).
        stack_dim: the dim the members are stacked along.
        inner_batch_size: each member's batch size.

    Examples:
        >>> lazy = LazyStackedTensorDict(TensorDict({"a": torch.zeros(2)}, [2]),
        ...                              TensorDict({"a": torch.ones(2)}, [2]))  # doctest: +SKIP
        >>> stored = LazyStackedTensorDictStore.from_lazy_stack(lazy, port=port)  # doctest: +SKIP
        >>> stored["a"].shape  # doctest: +SKIP
        torch.Size([2, 2])
    """

    def __init__(
        self,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        count: int,
        stack_dim: int = 0,
        inner_batch_size: Any,
        device: Any = None,
        client: Any = None,
        td_id: str | None = None,
        cache_metadata: bool = True,
        **redis_kwargs: Any,
    ) -> None:
        if count < 1:
            raise ValueError(f"a LazyStackedTensorDictStore needs count >= 1, got {count}")
        root = TensorDictStore(
            **address(backend, host, port, db, unix_socket_path, prefix),
            batch_size=(),
            device=device,
            client=client,
            td_id=td_id,
            **redis_kwargs,
        )
        inner = torch.Size(inner_batch_size)
        stack = {"count": count, "stack_dim": stack_dim, "inner_batch_size": list(inner)}
        srv = root._srv
        srv.run(
            "write the stack metadata of",
            "<root>",
            lambda: srv.client.hset(srv.meta_key, "stack", json.dumps(stack)),
        )
        existing = set(root._keys_str())
        for i in range(count):
            if str(i) not in existing:
                root._set_str(str(i), TensorDict({}, inner, device=device))
        self._root = root
        LazyStackedTensorDict.__init__(
            self, *[root._get_str(str(i)) for i in range(count)], stack_dim=stack_dim
        )

    # ------------------------------------------------------------------ identity
    @property
    def td_id(self) -> str:
        """The id of the stored stack (pass it to `from_store` to reconnect)."""
        return self._root.td_id

    def close(self) -> None:
        """Close the connection (the data stays on the server)."""
        self._root.close()

    def clear_redis(self) -> None:
        """Delete every Redis key of this stored stack."""
        self._root.clear_redis()

    def to_local(self) -> Any:
        """A local copy: a TensorDict of the stacked entries, as upstream (see `to_lazy_local`)."""
        return self.to_lazy_local().contiguous()

    def to_lazy_local(self) -> LazyStackedTensorDict:
        """A local lazy stack holding copies of the members (keys and shapes may differ)."""
        members = [
            td.to_tensordict() if isinstance(td, TensorDictStore) else td.clone()
            for td in self.tensordicts
        ]
        return LazyStackedTensorDict(*members, stack_dim=self.stack_dim)

    def _setitem_index(self, index: Any, value: Any) -> None:
        """`stack[index] = value`: each selected member writes its part to the server."""
        split = self._split_index(index)
        if split is None:
            LazyStackedTensorDict._setitem_index(self, index, value)  # raises, naming the index
            return
        stack_item, rest, result_dim = split
        picked = self._members_for(stack_item)
        parts = self._member_parts(index, value, stack_item, result_dim, len(picked))
        for i, part in zip(picked, parts):
            self.tensordicts[i][rest if rest else ...] = part

    def __getstate__(self) -> dict[str, Any]:
        """The root store's handle and the stack layout (unpickling reconnects)."""
        return {"root": self._root, "stack_dim": self.stack_dim, "count": len(self.tensordicts)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        root = state["root"]
        self._root = root
        LazyStackedTensorDict.__init__(
            self,
            *[root._get_str(str(i)) for i in range(state["count"])],
            stack_dim=state["stack_dim"],
        )

    @property
    def _td_id(self) -> str:
        return self._root.td_id

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(td_id={self.td_id!r}, server={self._root._srv.where!r}, "
            f"count={len(self.tensordicts)}, stack_dim={self.stack_dim}, "
            f"batch_size={self.batch_size})"
        )

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_lazy_stack(
        cls,
        lazy_td: LazyStackedTensorDict,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        device: Any = None,
        **kwargs: Any,
    ) -> LazyStackedTensorDictStore:
        """A new stored stack holding copies of `lazy_td`'s members (one transaction each).

        The keyword arguments say where the server is, as for `TensorDictStore`.
        """
        members: list[TensorDictBase] = list(lazy_td.tensordicts)
        out = cls(
            **address(backend, host, port, db, unix_socket_path, prefix),
            count=len(members),
            stack_dim=lazy_td.stack_dim,
            inner_batch_size=members[0].batch_size,
            device=lazy_td.device if device is None else device,
            **kwargs,
        )
        for i, member in enumerate(members):
            out._root._set_str(str(i), member)
        out.tensordicts = [out._root._get_str(str(i)) for i in range(len(members))]
        return out

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
        **kwargs: Any,
    ) -> LazyStackedTensorDictStore:
        """Reconnect to the stored stack `td_id`.

        Raises:
            KeyNotFoundError: (a `KeyError`) when the server holds no stack `td_id`.
        """
        probe = TensorDictStore.from_store(
            **address(backend, host, port, db, unix_socket_path, prefix),
            td_id=td_id,
            **kwargs,
        )
        srv = probe._srv
        raw = srv.run(
            "read the stack metadata of", "<root>", lambda: srv.client.hget(srv.meta_key, "stack")
        )
        if raw is None:
            raise KeyNotFoundError(
                f"the stored TensorDict {td_id!r} is not a lazy stack (it has no stack metadata)"
            )
        stack = json.loads(raw)
        return cls(
            backend=backend,
            prefix=prefix,
            client=srv.client,
            td_id=td_id,
            count=stack["count"],
            stack_dim=stack["stack_dim"],
            inner_batch_size=stack["inner_batch_size"],
            device=device,
        )

    @classmethod
    def from_dict(cls, *args: Any, **kwargs: Any) -> Any:
        """Not supported: build the lazy stack, then use `from_lazy_stack`."""
        raise NotImplementedError(
            f"{cls.__name__}.from_dict is not supported: build a LazyStackedTensorDict and "
            "use LazyStackedTensorDictStore.from_lazy_stack(lazy_td, ...)"
        )
