"""QueryModule: hash selected entries of each row of a TensorDict into storage indices."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from td_core.errors import KeyNotFoundError, LockedError
from td_query._hash_to_int import HashToInt
from td_query._keys import NestedKey, key_list, unravel
from td_query._siphash import SipHash, row_bytes

__all__ = ["QueryModule"]

HashFn = Callable[[torch.Tensor], torch.Tensor]


def _check_callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} must be callable, got {type(fn).__name__} {fn!r}")


def _join(tensors: list[torch.Tensor], *, stack: bool) -> torch.Tensor:
    """`torch.stack(tensors, -1)` if `stack` else `torch.cat(tensors)`.

    CPU tensors are joined by numpy, on one thread: torch copies megabytes with
    OpenMP threads, which stall for milliseconds when other processes hold the
    cores.
    """
    if all(t.device.type == "cpu" for t in tensors):
        arrays = [t.numpy() for t in tensors]
        return torch.from_numpy(np.stack(arrays, -1) if stack else np.concatenate(arrays))
    return torch.stack(tensors, -1) if stack else torch.cat(tensors)


def _shallow_copy(tensordict: Any) -> Any:
    copy = getattr(tensordict, "copy", None)
    if copy is not None:
        return copy()
    return tensordict.clone(recurse=False)


class QueryModule(nn.Module):
    """Map the content of selected entries of each row of a TensorDict to a storage index.

    For each of `in_keys`, every row (all dims after the TensorDict's batch dims)
    is hashed by a hash module (`SipHash` by default); with several keys the
    per-key hashes of a row are combined by `aggregator`; the row's hash is then
    mapped by `hash_to_int` (a `HashToInt` by default) to a dense int64
    index, written at `index_key`. Rows with equal content in every in_key get the
    same index. The hash is written at `hash_key` too (unless `write_hash=False`).

    Hashing is vectorised: a hash module receives the entry with its batch dims
    flattened into one (shape `[n, *feature_dims]`) and returns `n` hashes, so
    TensorDicts of any batch size work (torchrl only supports one batch dim).

    The module is an `nn.Module` with `in_keys` and `out_keys`
    (`[index_key, hash_key]`), so it composes in a `TensorDictSequential`, and
    its `state_dict` holds the hash table: a mapping survives a restart.

    Args:
        in_keys: the key, or list of keys, whose content is hashed. A tuple is one
            nested key; a list of several keys hashes them jointly.
        index_key: where the int64 indices are written. Defaults to `"_index"`.

    Keyword Args:
        hash_key: where the int64 hashes are written. Defaults to `"_hash"`.
        hash_module: a callable mapping a `[n, ...]` tensor to `n` integer hashes
            (like `SipHash`, the default), used for every key, or a list of
            such callables, one per in_key (its length must equal `len(in_keys)`).
        hash_to_int: a stateful callable `(hashes, extend=...) -> indices` mapping
            hashes to non-negative storage indices. Defaults to a new
            `HashToInt`, with which unseen rows looked up with
            `extend=False` get `-1`.
        aggregator: a callable combining the `[n, len(in_keys)]` int64 per-key hashes
            into `n` hashes; only allowed with more than one in_key. If omitted:
            the single `hash_module` if one was given, else a `SipHash`.
        clone: if `True`, `forward` writes into a shallow copy of its input
            instead of the input itself. `None` (default) means `False`.

    Raises:
        ValueError: if a list of hash modules does not have one per in_key, if
            `aggregator` is given with a single in_key, or if `in_keys` is
            empty or repeats a key.
        TypeError: if a hash module, the aggregator or `hash_to_int` is not
            callable, or a key is not a string or tuple of strings.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict
        >>> from td_query import QueryModule, SipHash
        >>> query_module = QueryModule(
        ...     in_keys=["key1", "key2"],
        ...     index_key="index",
        ...     hash_module=SipHash(),
        ... )
        >>> query = TensorDict(
        ...     {
        ...         "key1": torch.Tensor([[1], [1], [1], [2]]),
        ...         "key2": torch.Tensor([[3], [3], [2], [3]]),
        ...         "other": torch.randn(4),
        ...     },
        ...     batch_size=(4,),
        ... )
        >>> res = query_module(query)
        >>> # The first two pairs of key1 and key2 match
        >>> assert res["index"][0] == res["index"][1]
        >>> # The last three pairs of key1 and key2 have at least one mismatching value
        >>> assert res["index"][1] != res["index"][2]
        >>> assert res["index"][2] != res["index"][3]
        >>> res["index"]
        tensor([0, 0, 1, 2])
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        index_key: NestedKey = "_index",
        *,
        hash_key: NestedKey = "_hash",
        hash_module: HashFn | Sequence[HashFn] | None = None,
        hash_to_int: Callable[..., torch.Tensor] | None = None,
        aggregator: HashFn | None = None,
        clone: bool | None = None,
    ) -> None:
        super().__init__()
        self.in_keys = key_list(in_keys, "QueryModule in_keys")
        self.index_key = unravel(index_key, "QueryModule index_key")
        self.hash_key = unravel(hash_key, "QueryModule hash_key")
        if self.index_key == self.hash_key:
            raise ValueError(
                f"QueryModule index_key and hash_key must differ, both are {self.index_key!r}"
            )
        n_keys = len(self.in_keys)

        self.hash_module: HashFn | nn.ModuleList | list[HashFn]
        if hash_module is None:
            self.hash_module = SipHash()
            fns: list[HashFn] = [self.hash_module] * n_keys
            default_aggregator: HashFn = SipHash()
        elif isinstance(hash_module, Sequence) and not isinstance(hash_module, nn.Module):
            modules = list(hash_module)
            if len(modules) != n_keys:
                raise ValueError(
                    f"QueryModule got {len(modules)} hash modules for {n_keys} in_keys "
                    f"{self.in_keys!r}: pass one hash module per in_key, or a single one for all"
                )
            for key, fn in zip(self.in_keys, modules):
                _check_callable(fn, f"hash_module for in_key {key!r}")
            nn_modules = [fn for fn in modules if isinstance(fn, nn.Module)]
            if len(nn_modules) == len(modules):
                self.hash_module = nn.ModuleList(nn_modules)
            else:
                self.hash_module = modules
            fns = modules
            default_aggregator = SipHash()
        else:
            _check_callable(hash_module, "hash_module")
            self.hash_module = hash_module
            fns = [hash_module] * n_keys
            default_aggregator = hash_module
        self._hash_fns = fns

        if aggregator is not None:
            if n_keys == 1:
                raise ValueError(
                    f"QueryModule aggregator combines the hashes of several in_keys, but only "
                    f"one in_key was given ({self.in_keys[0]!r}): drop the aggregator"
                )
            _check_callable(aggregator, "aggregator")
        if aggregator is None:
            aggregator = default_aggregator
        self.aggregator = aggregator if n_keys > 1 else None

        if hash_to_int is None:
            hash_to_int = HashToInt()
        _check_callable(hash_to_int, "hash_to_int")
        self.hash_to_int = hash_to_int
        self.clone = bool(clone)
        self.out_keys = [self.index_key, self.hash_key]

    def extra_repr(self) -> str:
        return f"in_keys={self.in_keys!r}, out_keys={self.out_keys!r}"

    def _rows(self, tensordict: Any, key: Any, n: int, batch_dims: int) -> torch.Tensor:
        """The entry at `key` with its batch dims flattened: `[n, *feature_dims]`."""
        value = tensordict.get(key, None)
        if value is None:
            keys = list(tensordict.keys(include_nested=True, leaves_only=True))
            raise KeyNotFoundError(
                f"QueryModule in_key {key!r} not found in the input {type(tensordict).__name__} "
                f"with keys {keys!r}"
            )
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"QueryModule in_key {key!r} must hold a tensor, got {type(value).__name__}; "
                f"to hash a sub-TensorDict, list its leaves as in_keys"
            )
        return value.reshape(n, *value.shape[batch_dims:])

    def _hash_entries(self, rows: list[torch.Tensor], n: int) -> list[torch.Tensor]:
        """The hash of each row of each entry.

        Entries hashed by the same plain `SipHash` whose rows have the same
        number of bytes go through it in one call: SipHash hashes bytes only, so
        hashing their byte rows together gives the same values with fewer ops.
        """
        hashes: list[torch.Tensor | None] = [None] * len(rows)
        groups: dict[tuple[int, torch.device, int], list[int]] = {}
        for i, (fn, value) in enumerate(zip(self._hash_fns, rows)):
            if type(fn) is SipHash and fn.as_tensor and fn.batch_dims == 1 and value.dim():
                width = math.prod(value.shape[1:]) * value.element_size()
                groups.setdefault((id(fn), value.device, width), []).append(i)
            else:
                hashes[i] = fn(value)
        for members in groups.values():
            fn = self._hash_fns[members[0]]
            if len(members) == 1:
                hashes[members[0]] = fn(rows[members[0]])
                continue
            joint = fn(_join([row_bytes(rows[i], 1) for i in members], stack=False))
            for j, i in enumerate(members):
                hashes[i] = joint[j * n : (j + 1) * n]
        return [
            self._check_hashes(h, n, f"hash_module for in_key {key!r}")
            for h, key in zip(hashes, self.in_keys)
        ]

    @staticmethod
    def _check_hashes(hashes: Any, n: int, what: str) -> torch.Tensor:
        if not isinstance(hashes, torch.Tensor):
            raise TypeError(
                f"{what} must return a tensor of {n} integer hashes, got {type(hashes).__name__}"
            )
        if hashes.dtype.is_floating_point or hashes.dtype.is_complex or hashes.dtype == torch.bool:
            raise TypeError(f"{what} must return integer hashes, got dtype {hashes.dtype}")
        if hashes.numel() != n:
            raise ValueError(
                f"{what} must return one hash per row ({n} rows), got shape {list(hashes.shape)}"
            )
        return hashes.reshape(n).to(torch.int64)

    def hash(self, tensordict: Any) -> torch.Tensor:
        """The (aggregated) int64 hash of each row of `tensordict`, of shape `batch_size`."""
        batch = tensordict.batch_size
        n = math.prod(batch)
        rows = [self._rows(tensordict, key, n, len(batch)) for key in self.in_keys]
        hashes = self._hash_entries(rows, n)
        if self.aggregator is None:
            combined = hashes[0]
        else:
            stacked = _join(hashes, stack=True)
            combined = self._check_hashes(self.aggregator(stacked), n, "aggregator")
        return combined.reshape(batch)

    def forward(
        self,
        tensordict: Any,
        *,
        extend: bool = True,
        write_hash: bool = True,
        clone: bool | None = None,
    ) -> Any:
        """Write the storage index (and hash) of each row of `tensordict`.

        Args:
            tensordict: a TensorDict holding every in_key.

        Keyword Args:
            extend: if `True` (default), rows never seen get new indices; if
                `False` the table is left unchanged and, with the default
                `HashToInt`, unseen rows get `-1`.
            write_hash: also write the hashes at `hash_key`. Defaults to `True`.
            clone: write into a shallow copy rather than the input; `None` uses
                the module's `clone` setting.

        Returns:
            The TensorDict written to (the input itself unless cloning), with int64
            indices of shape `batch_size` at `index_key`.

        Raises:
            KeyError: if an in_key is missing from `tensordict`.
            TypeError: if `tensordict` is not a TensorDict, or an in_key holds
                something other than a tensor.
            RuntimeError: (`td_core.errors.LockedError`) if `tensordict` is
                locked and not cloned; the table is then left unchanged.
        """
        if not (
            hasattr(tensordict, "batch_size")
            and hasattr(tensordict, "get")
            and hasattr(tensordict, "set")
        ):
            raise TypeError(f"QueryModule expects a TensorDict, got {type(tensordict).__name__}")
        clone = self.clone if clone is None else clone
        if not clone and getattr(tensordict, "is_locked", False):
            # checked first: a failed call must not have extended the table
            raise LockedError(
                f"QueryModule cannot write {self.index_key!r} into a locked TensorDict: "
                f"call it with clone=True, or unlock_() the TensorDict"
            )
        hashes = self.hash(tensordict)
        index = self.hash_to_int(hashes, extend=extend)
        if not isinstance(index, torch.Tensor):
            raise TypeError(
                f"hash_to_int must return a tensor of indices, got {type(index).__name__}"
            )
        index = index.reshape(hashes.shape).to(torch.int64)
        out = _shallow_copy(tensordict) if clone else tensordict
        out.set(self.index_key, index)
        if write_hash:
            out.set(self.hash_key, hashes)
        return out
