"""HashToInt: a stateful map from 64-bit hashes to dense indices, held in tensors."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["HashToInt"]

_MIN_CAPACITY = 16
# 2**64 / golden ratio, as int64: multiplying by it and keeping the top bits
# spreads even structured keys (multiples of a power of two) over the slots.
_FIBONACCI = 0x9E3779B97F4A7C15 - (1 << 64)


def _home_slot(keys: torch.Tensor, slots: int) -> torch.Tensor:
    """The first slot to probe for each key in a table of ``slots`` (a power of two)."""
    bits = slots.bit_length() - 1
    return ((keys * _FIBONACCI) >> (64 - bits)) & (slots - 1)


def _grown(buffer: torch.Tensor, needed: int, fill: int) -> torch.Tensor:
    """``buffer`` with room for at least ``needed`` items (doubling), its content kept."""
    capacity = buffer.numel()
    if needed <= capacity:
        return buffer
    new = torch.full(
        (max(needed, 2 * capacity, _MIN_CAPACITY),), fill, dtype=buffer.dtype, device=buffer.device
    )
    new[:capacity] = buffer
    return new


class HashToInt(nn.Module):
    """Map hash values to dense non-negative int64 indices, in first-seen order.

    The first new hash gets index 0, the next new one 1, and so on; a hash seen
    before always gets its index back. Within one call, new hashes are numbered in
    the order of their first occurrence in the (flattened) input.

    The table lives in tensors: an open-addressing hash table (linear probing,
    load factor at most 1/2, Fibonacci hashing picks the first slot) and ``hashes``, where
    index ``i`` holds the hash that maps to ``i``. Lookups and inserts are a few
    gathers and scatters per probe step over all pending elements at once, so the
    Python loop runs over probe steps (a handful), never over elements; inserting
    costs amortised O(new hashes), whatever the table size.

    ``state_dict()`` holds ``hashes`` (a 1-D int64 tensor), and
    ``load_state_dict`` restores the mapping (of any size) so that it survives a
    restart; torchrl's ``HashToInt.state_dict`` raises instead. A lookup of unseen
    hashes with ``extend=False`` returns ``-1`` for them and inserts nothing
    (torchrl returns the current table size, an index that is out of range).

    The table stays on the device of its buffers (CPU unless moved with ``.to()``);
    inputs on another device are looked up there and the result is returned on the
    input's device.

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

    _by_index: torch.Tensor
    _slot_hash: torch.Tensor
    _slot_index: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self._size = 0
        # hash of each index, with spare capacity at the end
        self.register_buffer("_by_index", torch.empty(0, dtype=torch.int64), persistent=False)
        # the open-addressing table: a power-of-two number of slots, -1 = empty
        self.register_buffer("_slot_hash", torch.empty(0, dtype=torch.int64), persistent=False)
        self.register_buffer("_slot_index", torch.empty(0, dtype=torch.int64), persistent=False)

    @property
    def hashes(self) -> torch.Tensor:
        """The known hashes, in index order (``hashes[i]`` maps to ``i``)."""
        return self._by_index[: self._size]

    def __len__(self) -> int:
        return self._size

    def extra_repr(self) -> str:
        return f"size={len(self)}"

    def clear(self) -> None:
        """Forget every hash (the next new hash gets index 0 again)."""
        empty = self._by_index.new_empty(0)
        self._by_index, self._slot_hash, self._slot_index = empty, empty.clone(), empty.clone()
        self._size = 0

    def forward(self, hashes: torch.Tensor, *, extend: bool = False) -> torch.Tensor:
        """Look up (and with ``extend=True`` insert) hash values.

        Args:
            hashes: an integer tensor of hash values, of any shape.

        Keyword Args:
            extend: if ``True``, hashes not seen before are given the next free
                indices; if ``False`` (default) they map to ``-1`` and the table is
                left unchanged.

        Returns:
            An int64 tensor with the shape and device of ``hashes``.

        Raises:
            TypeError: if ``hashes`` is not an integer tensor.
        """
        if not isinstance(hashes, torch.Tensor):
            raise TypeError(f"HashToInt expects a tensor of hashes, got {type(hashes).__name__}")
        if hashes.dtype.is_floating_point or hashes.dtype.is_complex or hashes.dtype == torch.bool:
            raise TypeError(
                f"HashToInt expects an integer tensor of hashes, got dtype {hashes.dtype}"
            )
        flat = hashes.reshape(-1).to(device=self._by_index.device, dtype=torch.int64)
        index = self._lookup(flat)
        if extend:
            missing = (index < 0).nonzero().squeeze(1)
            if missing.numel():
                index.index_copy_(0, missing, self._insert(flat.index_select(0, missing)))
        return index.reshape(hashes.shape).to(hashes.device)

    # ------------------------------------------------------------------ table
    def _lookup(self, flat: torch.Tensor) -> torch.Tensor:
        """Index of each hash in ``flat``, ``-1`` where absent."""
        if self._size == 0:
            return torch.full_like(flat, -1)
        # (index_select and masked_select: much faster than advanced indexing)
        slot_hash, slot_index = self._slot_hash, self._slot_index
        mask = slot_hash.numel() - 1
        slot = _home_slot(flat, mask + 1)
        index = slot_index.index_select(0, slot)
        occupied = index >= 0
        hit = occupied & (slot_hash.index_select(0, slot) == flat)
        result = torch.where(hit, index, -1)
        # elements whose slot holds another hash probe on; an empty slot ends a probe
        more = occupied & ~hit
        pending = more.nonzero().squeeze(1)
        slot = slot.masked_select(more)
        while pending.numel():
            slot = (slot + 1) & mask
            index = slot_index.index_select(0, slot)
            occupied = index >= 0
            hit = occupied & (slot_hash.index_select(0, slot) == flat.index_select(0, pending))
            result.index_copy_(0, pending.masked_select(hit), index.masked_select(hit))
            more = occupied & ~hit
            pending, slot = pending.masked_select(more), slot.masked_select(more)
        return result

    def _place(self, keys: torch.Tensor, indices: torch.Tensor) -> None:
        """Put distinct hashes absent from the table into free slots."""
        mask = self._slot_hash.numel() - 1
        slot = _home_slot(keys, mask + 1)
        while keys.numel():
            free = self._slot_index.index_select(0, slot) < 0
            claim = slot.masked_select(free)
            claimant = indices.masked_select(free)
            # where several claim one slot, whichever write lands wins
            self._slot_index.index_copy_(0, claim, claimant)
            won = torch.zeros_like(free)
            won.masked_scatter_(free, self._slot_index.index_select(0, claim) == claimant)
            self._slot_hash.index_copy_(0, slot.masked_select(won), keys.masked_select(won))
            # the rest probe on (a slot lost to another claim is taken now)
            lost = ~won
            keys, indices = keys.masked_select(lost), indices.masked_select(lost)
            slot = (slot.masked_select(lost) + 1) & mask

    def _insert(self, new: torch.Tensor) -> torch.Tensor:
        """Insert hashes absent from the table; return the index of each, in order."""
        uniq, inverse = torch.unique(new, sorted=True, return_inverse=True)
        m, size = uniq.numel(), self._size
        arange = torch.arange(new.numel(), device=new.device)
        first = torch.full_like(uniq, new.numel()).scatter_reduce_(0, inverse, arange, "amin")
        by_first_seen = torch.argsort(first)
        ids = torch.empty_like(uniq)
        ids.index_copy_(0, by_first_seen, torch.arange(size, size + m, device=new.device))
        self._by_index = _grown(self._by_index, size + m, 0)
        self._by_index[size : size + m] = uniq.index_select(0, by_first_seen)
        self._size = size + m
        if 2 * self._size > self._slot_hash.numel():
            self._rehash()
        else:
            self._place(uniq, ids)
        return ids.index_select(0, inverse)

    def _rehash(self) -> None:
        """Rebuild the slot table, with at least twice as many slots as hashes."""
        slots = _MIN_CAPACITY
        while slots < 2 * self._size:
            slots *= 2
        device = self._by_index.device
        self._slot_hash = torch.zeros(slots, dtype=torch.int64, device=device)
        self._slot_index = torch.full((slots,), -1, dtype=torch.int64, device=device)
        self._place(self.hashes, torch.arange(self._size, device=device))

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
        elif torch.unique(value).numel() != value.numel():
            problem = "must not hold a hash twice"
        if problem is not None:
            error_msgs.append(f"HashToInt state {key!r} {problem}")
            return
        self._by_index = value.detach().to(self._by_index.device, copy=True)
        self._size = value.numel()
        self._rehash()
