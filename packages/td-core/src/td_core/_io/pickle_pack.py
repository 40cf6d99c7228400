"""Pickling a TensorDict as one buffer, and sharing it leaf by leaf between processes.

`pickle.dumps(td)` pays torch's per-tensor reduction once per leaf (storage
bookkeeping and fake-mode checks, about 0.1 ms a leaf). A small tree of plain
CPU tensors pickles faster consolidated: one copy into one buffer, then one
storage to write (200 leaves of `[1000, 8]`: a round trip in 5 ms instead of
25). `pickle_pack` decides when that is safe and gives the state to pickle:

- every tensor leaf is an exact, contiguous, strided CPU `torch.Tensor` that
  does not require grad and is not in shared memory (a `Parameter`, a
  `MemoryMappedTensor` or a transposed leaf keeps its type and strides through
  the ordinary path);
- each leaf covers its own storage, and no other object holds it or the tensor
  it views (another TensorDict pickled in the same call, a view, a variable):
  pickle's memo (and `torch.save`'s storage table) keep such sharing, which a
  copy would lose;
- every node is a plain `TensorDict`, or the root is a plain lazy stack of them
  (non-tensor leaves are fine);
- at least `MIN_LEAVES` leaves and at most `MAX_BYTES` of data, so the
  temporary buffer stays small (a large tree is dominated by its bytes, which
  both paths write once).

The unpickled TensorDict is consolidated: its leaves are views of one buffer.

Processes that exchange TensorDicts through `multiprocessing` (queues, pipes,
`DataLoader` workers) use `ForkingPickler`, where torch moves each leaf to
shared memory and the receiver sees the sender's memory. `share_per_leaf`
registers a reduction for that pickler only, which keeps the leaf-by-leaf state
there: a consolidated copy would share a temporary buffer instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._io.consolidate import pack

__all__ = ["MAX_BYTES", "MIN_LEAVES", "pickle_pack", "share_per_leaf"]

#: The fewest tensor leaves worth consolidating for a pickle.
MIN_LEAVES = 2
#: The most data (bytes) consolidated for a pickle: the size of the temporary buffer.
MAX_BYTES = 16 << 20

Tensor = torch.Tensor


def pickle_pack(td: Any, trees: Iterable[TensorDictContract], kind: Any) -> Any | None:
    """What `pack` gives for a consolidated copy of `td`, when that is safe (module doc).

    `trees`: the dense trees that hold `td`'s leaves (`td` itself, or a lazy
    stack's members); `kind`: the one class each of their nodes must be
    (`TensorDict`).
    """
    leaves: list[Tensor] = []
    if not all(_plain_tree(tree, kind, leaves) for tree in trees) or len(leaves) < MIN_LEAVES:
        return None
    if not _held_only_here(leaves):
        return None
    total = 0
    storages: set[int] = set()
    for t in leaves:
        if (
            type(t) is not Tensor
            or t.device.type != "cpu"
            or t.layout != torch.strided
            or t.requires_grad
            or t.is_quantized
            or t.is_conj()
            or t.is_neg()
            or not t.is_contiguous()
            or t.storage_offset() != 0
            or t.untyped_storage().nbytes() != t.numel() * t.element_size()
            or t.is_shared()
        ):
            return None
        storage = t.untyped_storage().data_ptr()
        if storage in storages:
            return None
        storages.add(storage)
        total += t.numel() * t.element_size()
        if total > MAX_BYTES:
            return None
    return pack(td.consolidate())


def _held_only_here(leaves: list[Tensor]) -> bool:
    """Whether no Python object but its own TensorDict holds each of `leaves` (or the
    tensor a leaf is a view of).

    A tensor that another object holds (another TensorDict pickled in the same
    call, a user's variable) is pickled once and shared again on load, by
    pickle's memo or `torch.save`'s storage table; a consolidated copy would
    duplicate it. Probes held the same way (a leaf by one dict, a base by its
    view alone) give the counts to compare with.
    """
    holder = {"probe": torch.empty(0).view(0)}
    leaves.append(holder["probe"])
    try:
        counts = [sys.getrefcount(t) for t in leaves]
        bases = [sys.getrefcount(t._base) for t in leaves if t._base is not None]
    finally:
        leaves.pop()
    return max(counts) <= counts[-1] and max(bases) <= bases[-1]


def _plain_tree(td: TensorDictContract, kind: Any, leaves: list[Tensor]) -> bool:
    """Collect the tensor leaves of `td` if each of its nodes is of type `kind`."""
    if type(td) is not kind:
        return False
    for value in td._values_str():
        if isinstance(value, Tensor):
            leaves.append(value)
        elif isinstance(value, TensorDictContract) and not getattr(value, "_is_non_tensor", False):
            if not _plain_tree(value, kind, leaves):
                return False
    return True


def share_per_leaf(cls: type, state: Callable[[Any], dict[str, Any]]) -> None:
    """Make `ForkingPickler` pickle `cls` instances with `state` (leaf by leaf), not `__getstate__`."""

    def reduce(obj: Any) -> tuple[Any, ...]:
        return _rebuild, (type(obj), state(obj))

    ForkingPickler.register(cls, reduce)


def _rebuild(cls: Any, state: dict[str, Any]) -> Any:
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    return obj
