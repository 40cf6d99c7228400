"""TensorDictMap: a content-addressed store of TensorDict rows, keyed by other rows."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from td_core.errors import KeyNotFoundError
from td_query._keys import NestedKey, key_list
from td_query._query import QueryModule

__all__ = ["TensorDictMap"]

Key = str | tuple[str, ...]


def _tensordict(batch_size: Sequence[int], entries: dict[Key, torch.Tensor]) -> Any:
    from td_core import TensorDict

    out = TensorDict({}, batch_size=batch_size)
    for key, value in entries.items():
        out.set(key, value)
    return out


def _check_td(obj: Any, what: str) -> None:
    if not (hasattr(obj, "batch_size") and hasattr(obj, "get") and hasattr(obj, "keys")):
        raise TypeError(f"TensorDictMap {what} must be a TensorDict, got {type(obj).__name__}")


def _leaf_keys(td: Any) -> list[Key]:
    return list(td.keys(include_nested=True, leaves_only=True))


class TensorDictMap(nn.Module):
    """A store of TensorDict rows addressed by the content of other rows.

    ``td_map[keys] = values`` stores each row of ``values`` (detached from
    autograd) under the content of the matching row of ``keys`` (its entries at the
    query module's ``in_keys``); ``td_map[keys]`` returns the stored rows;
    ``td_map.contains(keys)`` says which rows are stored. Writing the same key
    again overwrites its row; within one write, the last of several equal keys
    wins.

    Keys are hashed by a :class:`QueryModule`, whose :class:`HashToInt` gives each
    distinct key a dense index; that index is the row of a TensorDict storage that
    grows (by doubling) as new keys arrive, so there is no ``max_size`` to choose.
    The storage takes its schema (``out_keys``, dtypes, feature shapes, device)
    from the first write (``out_keys`` from the constructor if given); ``.to()``
    moves it with the module.

    ``state_dict()`` holds the hash table and the stored rows (plain tensors, so
    ``torch.load(weights_only=True)`` reads it); ``load_state_dict`` restores both.

    Keyword Args:
        query_module: the :class:`QueryModule` addressing rows. Its ``hash_to_int``
            must map unseen hashes to ``-1`` on lookups (the default
            :class:`HashToInt` does).
        out_keys: the keys stored and returned. Defaults to every leaf of the
            first TensorDict written.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_query import QueryModule, TensorDictMap
        >>> td_map = TensorDictMap(query_module=QueryModule(["obs", "action"]))
        >>> keys = TensorDict({"obs": torch.tensor([[0.0], [1.0]]), "action": torch.tensor([[1], [0]])}, [2])
        >>> td_map[keys] = TensorDict({"value": torch.tensor([10.0, 20.0])}, [2])
        >>> td_map[keys[1:]]["value"]
        tensor([20.])
        >>> other = TensorDict({"obs": torch.tensor([[1.0], [5.0]]), "action": torch.tensor([[0], [0]])}, [2])
        >>> td_map.contains(other)
        tensor([ True, False])
        >>> len(td_map)
        2
    """

    def __init__(
        self, *, query_module: QueryModule, out_keys: Sequence[NestedKey] | None = None
    ) -> None:
        super().__init__()
        if not isinstance(query_module, QueryModule):
            raise TypeError(
                f"TensorDictMap query_module must be a QueryModule, got {type(query_module).__name__}"
            )
        self.query_module = query_module
        self.out_keys: list[Key] | None = (
            None if out_keys is None else key_list(out_keys, "TensorDictMap out_keys")
        )
        self._columns: dict[Key, torch.Tensor] = {}
        self._filled = torch.zeros(0, dtype=torch.bool)
        self._size = 0

    @classmethod
    def from_tensordict_pair(
        cls,
        source: Any,
        dest: Any,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        *,
        hash_module: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> TensorDictMap:
        """A map from rows like ``source`` (read at ``in_keys``) to rows like ``dest``.

        Nothing is written: ``source`` and ``dest`` only tell the keys apart and
        check that ``in_keys`` and ``out_keys`` exist.

        Args:
            source: an example of the TensorDicts used as keys.
            dest: an example of the TensorDicts stored.
            in_keys: the entries of ``source`` that address a row.
            out_keys: the entries of ``dest`` stored. Defaults to all its leaves.

        Keyword Args:
            hash_module: passed to the :class:`QueryModule`.

        Raises:
            KeyError: if an in_key is not in ``source`` or an out_key not in ``dest``.
        """
        _check_td(source, "source")
        _check_td(dest, "dest")
        query_module = QueryModule(in_keys, hash_module=hash_module)
        for key in query_module.in_keys:
            if key not in source.keys(include_nested=True):
                raise KeyNotFoundError(
                    f"in_key {key!r} not found in source with keys {_leaf_keys(source)!r}"
                )
        keys = (
            _leaf_keys(dest) if out_keys is None else key_list(out_keys, "TensorDictMap out_keys")
        )
        for key in keys:
            if key not in dest.keys(include_nested=True):
                raise KeyNotFoundError(
                    f"out_key {key!r} not found in dest with keys {_leaf_keys(dest)!r}"
                )
        return cls(query_module=query_module, out_keys=keys)

    # ---------------------------------------------------------------- properties
    @property
    def in_keys(self) -> list[Key]:
        """The keys whose content addresses a row (the query module's ``in_keys``)."""
        return self.query_module.in_keys

    def __len__(self) -> int:
        """The number of distinct keys stored."""
        return int(self._filled.sum())

    @property
    def storage(self) -> Any:
        """A TensorDict of the storage rows (row ``i`` is the key with index ``i``)."""
        return _tensordict([self._size], {k: v[: self._size] for k, v in self._columns.items()})

    def extra_repr(self) -> str:
        return f"in_keys={self.in_keys!r}, out_keys={self.out_keys!r}, size={len(self)}"

    # -------------------------------------------------------------------- lookup
    def _indices(self, keys: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Storage index of each row of ``keys`` (flat) and whether it is stored."""
        _check_td(keys, "key")
        hashes = self.query_module.hash(keys).reshape(-1)
        index = (
            self.query_module.hash_to_int(hashes, extend=False).reshape(-1).to(self._filled.device)
        )
        if self._size == 0:
            return index, torch.zeros_like(index, dtype=torch.bool)
        valid = (index >= 0) & (index < self._size)
        present = self._filled.index_select(0, index.clamp(0, self._size - 1)) & valid
        return index, present

    def contains(self, keys: Any) -> torch.Tensor:
        """A bool tensor of shape ``keys.batch_size``: which rows of ``keys`` are stored."""
        return self._indices(keys)[1].reshape(keys.batch_size)

    def __getitem__(self, keys: Any) -> Any:
        """The stored rows for the rows of ``keys``, as a TensorDict of the same batch size.

        Raises:
            KeyError: if some row of ``keys`` is not stored (see :meth:`contains`).
        """
        index, present = self._indices(keys)
        if not bool(present.all()):
            missing = int((~present).sum())
            first = int((~present).nonzero()[0, 0])
            raise KeyNotFoundError(
                f"{missing} of {present.numel()} rows of the query are not in the TensorDictMap "
                f"(the first is row {first} in flattened order); check with contains() first"
            )
        batch = list(keys.batch_size)
        return _tensordict(
            batch,
            {
                k: v.index_select(0, index.to(v.device)).reshape(*batch, *v.shape[1:])
                for k, v in self._columns.items()
            },
        )

    def forward(self, tensordict: Any) -> Any:
        """Write the stored ``out_keys`` of each row of ``tensordict`` into it; return it."""
        found = self[tensordict]
        for key in self.out_keys or ():
            tensordict.set(key, found.get(key))
        return tensordict

    # --------------------------------------------------------------------- write
    def _gather_values(self, values: Any, n: int) -> dict[Key, torch.Tensor]:
        out_keys = self.out_keys if self.out_keys is not None else _leaf_keys(values)
        if not out_keys:
            raise ValueError("TensorDictMap values hold no tensor to store")
        batch_dims = len(values.batch_size)
        gathered = {}
        for key in out_keys:
            try:
                value = values.get(key)
            except KeyError:
                raise KeyNotFoundError(
                    f"TensorDictMap out_key {key!r} not found in the values, which have keys "
                    f"{_leaf_keys(values)!r}"
                ) from None
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"TensorDictMap stores tensors; out_key {key!r} holds {type(value).__name__}"
                )
            value = value.detach().reshape(n, *value.shape[batch_dims:])
            column = self._columns.get(key)
            if column is not None:
                if value.dtype != column.dtype or value.shape[1:] != column.shape[1:]:
                    raise ValueError(
                        f"TensorDictMap out_key {key!r} stores rows of shape {list(column.shape[1:])} "
                        f"and dtype {column.dtype}, got shape {list(value.shape[1:])} and dtype {value.dtype}"
                    )
                value = value.to(column.device)
            gathered[key] = value
        return gathered

    def _grow(self, needed: int, like: dict[Key, torch.Tensor]) -> None:
        capacity = self._filled.numel()
        if needed <= capacity and self._columns:
            return
        new_capacity = max(needed, 2 * capacity, 16)
        if not self._columns:  # the first write sets the schema
            device = next(iter(like.values())).device
            self._columns = {k: v.new_zeros((new_capacity, *v.shape[1:])) for k, v in like.items()}
            self._filled = torch.zeros(new_capacity, dtype=torch.bool, device=device)
            return
        for key, column in self._columns.items():
            grown = column.new_zeros((new_capacity, *column.shape[1:]))
            grown[:capacity] = column
            self._columns[key] = grown
        filled = self._filled.new_zeros(new_capacity)
        filled[:capacity] = self._filled
        self._filled = filled

    def __setitem__(self, keys: Any, values: Any) -> None:
        """Store each row of ``values`` under the content of the matching row of ``keys``.

        Raises:
            ValueError: if the batch sizes differ, or ``values`` does not fit the
                storage's schema (dtype or feature shape of an out_key).
            KeyError: if an in_key is missing from ``keys`` or an out_key from ``values``.
        """
        _check_td(keys, "key")
        _check_td(values, "value")
        if tuple(keys.batch_size) != tuple(values.batch_size):
            raise ValueError(
                f"TensorDictMap keys and values must have the same batch size, got "
                f"{list(keys.batch_size)} and {list(values.batch_size)}"
            )
        n = math.prod(keys.batch_size)
        gathered = self._gather_values(values, n)  # validate before touching any state
        hashes = self.query_module.hash(keys).reshape(-1)
        index = self.query_module.hash_to_int(hashes, extend=True).reshape(-1)
        if n and int(index.min()) < 0:
            raise RuntimeError("the query module's hash_to_int returned a negative index on insert")
        if self.out_keys is None:
            self.out_keys = list(gathered)
        if n == 0:
            return
        top = int(index.max()) + 1
        self._grow(top, gathered)
        index = index.to(self._filled.device)
        uniq, inverse = torch.unique(index, return_inverse=True)
        if uniq.numel() != n:  # equal keys in one write: the last one wins
            last = torch.full_like(uniq, -1).scatter_reduce_(
                0, inverse, torch.arange(n, device=index.device), "amax"
            )
            index = uniq
            gathered = {k: v.index_select(0, last.to(v.device)) for k, v in gathered.items()}
        for key, value in gathered.items():
            self._columns[key].index_copy_(0, index.to(value.device), value)
        self._filled.index_fill_(0, index, True)
        self._size = max(self._size, top)

    def clear(self) -> None:
        """Forget every key and stored row (``out_keys`` are kept)."""
        self._columns = {}
        self._filled = torch.zeros(0, dtype=torch.bool)
        self._size = 0
        clear = getattr(self.query_module.hash_to_int, "clear", None)
        if clear is not None:
            clear()

    def _apply(
        self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> TensorDictMap:
        # .to(), .cuda(), .double(), ... reach the storage like they reach buffers
        super()._apply(fn, recurse)
        self._columns = {key: fn(column) for key, column in self._columns.items()}
        self._filled = fn(self._filled)
        return self

    # ---------------------------------------------------------------- state dict
    def get_extra_state(self) -> dict[str, Any]:
        keys = list(self._columns)
        return {
            "out_keys": list(self.out_keys) if self.out_keys is not None else None,
            "keys": keys,
            "values": [self._columns[k][: self._size] for k in keys],
            "filled": self._filled[: self._size],
        }

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, dict) or set(state) != {"out_keys", "keys", "values", "filled"}:
            raise RuntimeError(
                f"TensorDictMap state must be a dict with out_keys, keys, values, filled, got {state!r:.200}"
            )
        keys, values, filled = state["keys"], state["values"], state["filled"]
        size = filled.numel()
        if len(keys) != len(values) or any(v.shape[:1] != (size,) for v in values):
            raise RuntimeError(
                f"TensorDictMap state holds {len(keys)} keys and {len(values)} columns of mismatched sizes"
            )
        out_keys = state["out_keys"]
        if (
            self.out_keys is not None
            and out_keys is not None
            and list(out_keys) != list(self.out_keys)
        ):
            raise RuntimeError(
                f"TensorDictMap state has out_keys {out_keys!r}, this map has {self.out_keys!r}"
            )
        self.out_keys = (
            None if out_keys is None else [k if isinstance(k, str) else tuple(k) for k in out_keys]
        )
        self._columns = {
            (k if isinstance(k, str) else tuple(k)): v.clone() for k, v in zip(keys, values)
        }
        self._filled = filled.clone().to(torch.bool)
        self._size = size
