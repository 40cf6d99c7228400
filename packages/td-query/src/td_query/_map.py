"""TensorDictMap: a content-addressed store of TensorDict rows, keyed by other rows."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
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


# Storage rows on CPU are copied by numpy, on one thread, viewing each row as one
# opaque item (any dtype, bfloat16 included): faster than torch's index_select and
# index_copy_ for small rows, and free of the OpenMP stalls those show when other
# processes hold the cores. Other devices use torch ops.


def _rows(t: torch.Tensor) -> np.ndarray | None:
    """The rows of a contiguous CPU tensor as a 1-D numpy array of opaque items
    sharing its memory, or `None` (other devices, rows of no bytes)."""
    width = t[0].numel() * t.element_size() if t.shape[0] else 0
    if t.device.type != "cpu" or width == 0 or not t.is_contiguous():
        return None
    return t.view(torch.uint8).numpy().reshape(-1).view(np.dtype((np.void, width)))


def _zeros(like: torch.Tensor, rows: int) -> torch.Tensor:
    """A zero tensor of `rows` rows shaped like the rows of `like`, on its device."""
    shape = (rows, *like.shape[1:])
    nbytes = math.prod(shape) * like.element_size()
    if like.device.type != "cpu" or nbytes == 0:
        return like.new_zeros(shape)
    return torch.from_numpy(np.zeros(nbytes, dtype=np.uint8)).view(like.dtype).reshape(shape)


def _take(column: torch.Tensor, index: torch.Tensor, host: np.ndarray) -> torch.Tensor:
    """`column.index_select(0, index)`; `host` is `index` as a numpy array."""
    rows = _rows(column)
    if rows is None:
        return column.index_select(0, index.to(column.device))
    taken = torch.from_numpy(rows.take(host).view(np.uint8))
    return taken.view(column.dtype).reshape(host.size, *column.shape[1:])


def _put(column: torch.Tensor, index: torch.Tensor, host: np.ndarray, value: torch.Tensor) -> None:
    """`column.index_copy_(0, index, value)` for distinct indices."""
    rows, values = _rows(column), _rows(value.resolve_conj().resolve_neg().contiguous())
    if rows is None or values is None:
        column.index_copy_(0, index.to(column.device), value)
    else:
        rows[host] = values


def _last_occurrences(index: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`None` if `index` (non-empty) holds no value twice, else `(values, last)`:
    its distinct values and the position of the last occurrence of each."""
    ordered = np.sort(index)
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    order = np.argsort(index, kind="stable")  # equal values keep their order
    is_last = np.append(ordered[1:] != ordered[:-1], True)
    return ordered[is_last], order[is_last]


class TensorDictMap(nn.Module):
    """A store of TensorDict rows addressed by the content of other rows.

    `td_map[keys] = values` stores each row of `values` (detached from
    autograd) under the content of the matching row of `keys` (its entries at the
    query module's `in_keys`); `td_map[keys]` returns the stored rows;
    `td_map.contains(keys)` says which rows are stored. Writing the same key
    again overwrites its row; within one write, the last of several equal keys
    wins.

    Keys are hashed by a `QueryModule`, whose `HashToInt` gives each
    distinct key a dense index; that index is the row of a TensorDict storage that
    grows (by doubling) as new keys arrive, so there is no `max_size` to choose.
    The storage takes its schema (`out_keys`, dtypes, feature shapes, device)
    from the first write (`out_keys` from the constructor if given); `.to()`
    moves it with the module.

    `state_dict()` holds the hash table and the stored rows (plain tensors, so
    `torch.load(weights_only=True)` reads it); `load_state_dict` restores both.

    Keyword Args:
        query_module: the `QueryModule` addressing rows. Its `hash_to_int`
            must map unseen hashes to `-1` on lookups (the default
            `HashToInt` does).
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
        # bookkeeping on the host (the indices come from a host-side HashToInt):
        # which storage rows hold a value, how many, and how many rows are in use
        self._filled = np.zeros(0, dtype=bool)
        self._count = 0
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
        """A map from rows like `source` (read at `in_keys`) to rows like `dest`.

        Nothing is written: `source` and `dest` only tell the keys apart and
        check that `in_keys` and `out_keys` exist.

        Args:
            source: an example of the TensorDicts used as keys.
            dest: an example of the TensorDicts stored.
            in_keys: the entries of `source` that address a row.
            out_keys: the entries of `dest` stored. Defaults to all its leaves.

        Keyword Args:
            hash_module: passed to the `QueryModule`.

        Raises:
            KeyError: if an in_key is not in `source` or an out_key not in `dest`.
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
        """The keys whose content addresses a row (the query module's `in_keys`)."""
        return self.query_module.in_keys

    def __len__(self) -> int:
        """The number of distinct keys stored."""
        return self._count

    @property
    def storage(self) -> Any:
        """A TensorDict of the storage rows (row `i` is the key with index `i`)."""
        return _tensordict([self._size], {k: v[: self._size] for k, v in self._columns.items()})

    def extra_repr(self) -> str:
        return f"in_keys={self.in_keys!r}, out_keys={self.out_keys!r}, size={len(self)}"

    # -------------------------------------------------------------------- lookup
    def _indices(self, keys: Any) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Storage index of each row of `keys` (flat; as a tensor and on the host)
        and whether it is stored."""
        _check_td(keys, "key")
        hashes = self.query_module.hash(keys).reshape(-1)
        index = self.query_module.hash_to_int(hashes, extend=False).reshape(-1).long()
        host = index.cpu().numpy()
        present = (host >= 0) & (host < self._size)
        if self._count != self._size:  # some rows in use hold no value
            present &= self._filled[np.clip(host, 0, max(self._size - 1, 0))]
        return index, host, present

    def contains(self, keys: Any) -> torch.Tensor:
        """A bool tensor of shape `keys.batch_size`: which rows of `keys` are stored."""
        index, _, present = self._indices(keys)
        return torch.from_numpy(present).reshape(keys.batch_size).to(index.device)

    def __getitem__(self, keys: Any) -> Any:
        """The stored rows for the rows of `keys`, as a TensorDict of the same batch size.

        Raises:
            KeyError: if some row of `keys` is not stored (see `contains`).
        """
        index, host, present = self._indices(keys)
        if not present.all():
            missing = int((~present).sum())
            first = int(np.flatnonzero(~present)[0])
            raise KeyNotFoundError(
                f"{missing} of {present.size} rows of the query are not in the TensorDictMap "
                f"(the first is row {first} in flattened order); check with contains() first"
            )
        batch = list(keys.batch_size)
        return _tensordict(
            batch,
            {
                k: _take(v, index, host).reshape(*batch, *v.shape[1:])
                for k, v in self._columns.items()
            },
        )

    def forward(self, tensordict: Any) -> Any:
        """Write the stored `out_keys` of each row of `tensordict` into it; return it."""
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
            value = values.get(key, None)
            if value is None:
                raise KeyNotFoundError(
                    f"TensorDictMap out_key {key!r} not found in the values, which have keys "
                    f"{_leaf_keys(values)!r}"
                )
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
        capacity = self._filled.size
        if needed <= capacity and self._columns:
            return
        new_capacity = max(needed, 2 * capacity, 16)
        if not self._columns:  # the first write sets the schema
            self._columns = {k: _zeros(v, new_capacity) for k, v in like.items()}
        else:
            for key, column in self._columns.items():
                grown = _zeros(column, new_capacity)
                rows, old = _rows(grown), _rows(column)
                if rows is None or old is None:
                    grown[:capacity] = column
                else:
                    rows[:capacity] = old
                self._columns[key] = grown
        filled = np.zeros(new_capacity, dtype=bool)
        filled[:capacity] = self._filled
        self._filled = filled

    def __setitem__(self, keys: Any, values: Any) -> None:
        """Store each row of `values` under the content of the matching row of `keys`.

        Raises:
            ValueError: if the batch sizes differ, or `values` does not fit the
                storage's schema (dtype or feature shape of an out_key).
            KeyError: if an in_key is missing from `keys` or an out_key from `values`.
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
        index = self.query_module.hash_to_int(hashes, extend=True).reshape(-1).long()
        host = index.cpu().numpy()
        if n and host.min() < 0:
            raise RuntimeError("the query module's hash_to_int returned a negative index on insert")
        if self.out_keys is None:
            self.out_keys = list(gathered)
        if n == 0:
            return
        top = int(host.max()) + 1
        self._grow(top, gathered)
        duplicates = _last_occurrences(host)
        if duplicates is not None:  # equal keys in one write: the last one wins
            host, last = duplicates
            index = torch.from_numpy(host)
            last_t = torch.from_numpy(last)
            gathered = {k: v.index_select(0, last_t.to(v.device)) for k, v in gathered.items()}
        for key, value in gathered.items():
            _put(self._columns[key], index, host, value)
        self._count += int(np.count_nonzero(~self._filled[host]))
        self._filled[host] = True
        self._size = max(self._size, top)

    def clear(self) -> None:
        """Forget every key and stored row (`out_keys` are kept)."""
        self._columns = {}
        self._filled = np.zeros(0, dtype=bool)
        self._count = 0
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
        return self

    # ---------------------------------------------------------------- state dict
    def get_extra_state(self) -> dict[str, Any]:
        keys = list(self._columns)
        return {
            "out_keys": list(self.out_keys) if self.out_keys is not None else None,
            "keys": keys,
            "values": [self._columns[k][: self._size] for k in keys],
            "filled": torch.from_numpy(self._filled[: self._size].copy()),
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
        self._filled = filled.detach().cpu().numpy().astype(bool)  # a copy
        self._count = int(np.count_nonzero(self._filled))
        self._size = size
