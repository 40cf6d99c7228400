"""HashToInt: a stateful map from 64-bit hashes to dense indices, held in host memory."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["HashToInt"]

_MIN_SLOTS = 16
# 2**64 / golden ratio, as int64: multiplying by it and keeping the top bits
# spreads even structured keys (multiples of a power of two) over the slots.
_FIBONACCI = np.int64(0x9E3779B97F4A7C15 - (1 << 64))


def _home_slot(keys: np.ndarray, slots: int) -> np.ndarray:
    """The first slot to probe for each key in a table of `slots` (a power of two).

    The product wraps around in int64 (numpy does not check overflow of arrays);
    its top bits pick the slot (`>>` is arithmetic, so the mask drops the sign).
    """
    bits = slots.bit_length() - 1
    return ((keys * _FIBONACCI) >> (64 - bits)) & (slots - 1)


class HashToInt(nn.Module):
    """Map hash values to dense non-negative int64 indices, in first-seen order.

    The first new hash gets index 0, the next new one 1, and so on; a hash seen
    before always gets its index back. Within one call, new hashes are numbered in
    the order of their first occurrence in the (flattened) input.

    The table is an open-addressing hash table (linear probing, load factor at most
    1/4 so that probes stay short, Fibonacci hashing picks the first slot) plus
    `hashes`, where index `i` holds the hash that maps to `i`: about 100 bytes
    per hash in all. Lookups and inserts are a few numpy gathers
    and scatters per probe step over all pending elements at once, so the Python
    loop runs over probe steps (a handful), never over elements; inserting costs
    amortised O(new hashes), whatever the table size.

    The table lives in host memory, whatever the device of the hashes: a probe
    loop waits for each step's result before the next, so on an accelerator it
    would synchronise at every step and gain nothing. Hashes on another device
    are copied to the host (8 bytes each) and the indices are returned on the
    hashes' device; `.to()` leaves the table where it is.

    `state_dict()` holds `hashes` (a 1-D int64 tensor), and
    `load_state_dict` restores the mapping (of any size) so that it survives a
    restart; torchrl's `HashToInt.state_dict` raises instead. A lookup of unseen
    hashes with `extend=False` returns `-1` for them and inserts nothing
    (torchrl returns the current table size, an index that is out of range).

    Examples:
        >>> import torch
        >>> from td_query import HashToInt
        >>> h2i = HashToInt()
        >>> h2i(torch.tensor([50, 30, 50, 70]), extend=True)
        tensor([0, 1, 0, 2])
        >>> h2i(torch.tensor([70, 99]))
        tensor([ 2, -1])
        >>> len(h2i)
        3
        >>> restored = HashToInt()
        >>> _ = restored.load_state_dict(h2i.state_dict())
        >>> restored(torch.tensor([30, 70]))
        tensor([1, 2])
    """

    def __init__(self) -> None:
        super().__init__()
        self._size = 0
        # the hash of each index, with spare capacity at the end
        self._by_index = np.empty(0, dtype=np.int64)
        # the open-addressing table: a power-of-two number of slots, index -1 = empty
        self._slot_hash = np.empty(0, dtype=np.int64)
        self._slot_index = np.empty(0, dtype=np.int64)

    @property
    def hashes(self) -> torch.Tensor:
        """The known hashes, in index order (`hashes[i]` maps to `i`)."""
        return torch.from_numpy(self._by_index[: self._size])

    def __len__(self) -> int:
        return self._size

    def extra_repr(self) -> str:
        return f"size={len(self)}"

    def clear(self) -> None:
        """Forget every hash (the next new hash gets index 0 again)."""
        self._by_index = np.empty(0, dtype=np.int64)
        self._slot_hash = np.empty(0, dtype=np.int64)
        self._slot_index = np.empty(0, dtype=np.int64)
        self._size = 0

    def forward(self, hashes: torch.Tensor, *, extend: bool = False) -> torch.Tensor:
        """Look up (and with `extend=True` insert) hash values.

        Args:
            hashes: an integer tensor of hash values, of any shape and device.

        Keyword Args:
            extend: if `True`, hashes not seen before are given the next free
                indices; if `False` (default) they map to `-1` and the table is
                left unchanged.

        Returns:
            An int64 tensor with the shape and device of `hashes`.

        Raises:
            TypeError: if `hashes` is not an integer tensor.
        """
        if not isinstance(hashes, torch.Tensor):
            raise TypeError(f"HashToInt expects a tensor of hashes, got {type(hashes).__name__}")
        if hashes.dtype.is_floating_point or hashes.dtype.is_complex or hashes.dtype == torch.bool:
            raise TypeError(
                f"HashToInt expects an integer tensor of hashes, got dtype {hashes.dtype}"
            )
        flat = hashes.detach().reshape(-1).to("cpu", torch.int64).numpy()  # read only
        index = self._lookup(flat)
        if extend and flat.size:
            if self._size == 0:  # all missing (the common first call)
                index = self._insert(flat)
            else:
                missing = np.flatnonzero(index < 0)
                if missing.size:
                    index[missing] = self._insert(flat[missing])
        return torch.from_numpy(index).reshape(hashes.shape).to(hashes.device)

    # ------------------------------------------------------------------ table
    def _lookup(self, flat: np.ndarray) -> np.ndarray:
        """Index of each hash in `flat`, `-1` where absent (a new array)."""
        if self._size == 0:
            return np.full(flat.shape, -1, dtype=np.int64)
        slot_hash, slot_index = self._slot_hash, self._slot_index
        mask = slot_hash.size - 1
        slot = _home_slot(flat, mask + 1)
        index = slot_index[slot]
        occupied = index >= 0
        hit = occupied & (slot_hash[slot] == flat)
        result = np.where(hit, index, -1)
        # elements whose slot holds another hash probe on; an empty slot ends a probe
        pending = np.flatnonzero(occupied & ~hit)
        slot = slot[pending]
        while pending.size:
            slot = (slot + 1) & mask
            index = slot_index[slot]
            occupied = index >= 0
            hit = occupied & (slot_hash[slot] == flat[pending])
            result[pending[hit]] = index[hit]
            more = occupied & ~hit
            pending, slot = pending[more], slot[more]
        return result

    def _place(self, keys: np.ndarray, first_id: int) -> np.ndarray:
        """Put hashes absent from the table into free slots; return each one's slot.

        `keys[i]` is entered with index `first_id + i`; of several equal
        hashes, one (any) is entered and the others get its slot. Each step of the
        loop moves every pending hash one slot on, so it runs as many times as the
        longest probe, never once per hash.
        """
        slot_hash, slot_index = self._slot_hash, self._slot_index
        mask = slot_hash.size - 1
        slot = _home_slot(keys, mask + 1)
        slot_of = np.empty(keys.size, dtype=np.int64)
        pending = np.arange(keys.size, dtype=np.int64)
        while pending.size:
            free = slot_index[slot] < 0
            claims = np.flatnonzero(free)
            claimed, claimant = slot[claims], pending[claims] + first_id
            # where several claim one slot, one of the writes lands: that one wins
            slot_index[claimed] = claimant
            won = slot_index[claimed] == claimant
            slot_hash[claimed[won]] = keys[claims[won]]
            slot_of[claimant[won] - first_id] = claimed[won]
            # the others are settled too if their slot now holds an equal hash
            others = np.concatenate([np.flatnonzero(~free), claims[~won]])
            equal = slot_hash[slot[others]] == keys[others]
            slot_of[pending[others[equal]]] = slot[others[equal]]
            more = others[~equal]
            keys, pending, slot = keys[more], pending[more], (slot[more] + 1) & mask
        return slot_of

    def _insert(self, new: np.ndarray) -> np.ndarray:
        """Insert hashes absent from the table; return the index of each, in order."""
        size, m = self._size, new.size
        if size + m > self._by_index.size:
            grown = np.zeros(max(size + m, 2 * self._by_index.size, _MIN_SLOTS), dtype=np.int64)
            grown[:size] = self._by_index[:size]
            self._by_index = grown
        if 4 * (size + m) > self._slot_hash.size:
            self._rehash(size + m)
        slot = self._place(new, size)
        ids = self._slot_index[slot]
        if np.array_equal(ids, np.arange(size, size + m)):  # no hash twice
            self._by_index[size : size + m] = new
            self._size = size + m
            return ids
        # equal hashes: number the distinct ones in the order of their first occurrence
        first = np.full(m, m, dtype=np.int64)
        np.minimum.at(first, ids - size, np.arange(m))  # per entered hash
        first = first[ids - size]  # per element: where its hash first occurs
        is_first = np.zeros(m, dtype=bool)
        is_first[first] = True
        ids = size + (np.cumsum(is_first) - 1)[first]
        self._slot_index[slot] = ids
        distinct = new[is_first]
        self._by_index[size : size + distinct.size] = distinct
        self._size = size + distinct.size
        return ids

    def _rehash(self, room: int) -> None:
        """Rebuild the slot table with at least four times `room` slots."""
        slots = _MIN_SLOTS
        while slots < 4 * room:
            slots *= 2
        self._slot_hash = np.zeros(slots, dtype=np.int64)
        self._slot_index = np.full(slots, -1, dtype=np.int64)
        self._place(self._by_index[: self._size], 0)

    # ------------------------------------------------------------- state dict
    def _save_to_state_dict(
        self, destination: dict[str, Any], prefix: str, keep_vars: bool
    ) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "hashes"] = self.hashes.clone()

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        key = prefix + "hashes"
        if strict:
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k != key)
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            return
        value = state_dict[key]
        problem = None
        if not isinstance(value, torch.Tensor) or value.dtype != torch.int64:
            problem = (
                f"must be an int64 tensor, got {getattr(value, 'dtype', type(value).__name__)}"
            )
        elif value.dim() != 1:
            problem = f"must be 1-D, got shape {list(value.shape)}"
        else:
            hashes = value.detach().cpu().numpy().copy()
            if np.unique(hashes).size != hashes.size:
                problem = "must not hold a hash twice"
        if problem is not None:
            error_msgs.append(f"HashToInt state {key!r} {problem}")
            return
        self._by_index = hashes
        self._size = hashes.size
        self._rehash(self._size)
