"""A spare for the byte buffer of `consolidate`: the last large CPU buffer, reused once it is free.

A large buffer (more than 1 MiB) costs more to obtain than to fill: the kernel
maps and zeroes every page on first touch, and unmaps them all when the last
view goes away. A loop that consolidates a batch, sends it and drops it (a
data pipeline, upstream's benchmark) pays both for every batch. So, as torch's
CUDA caching allocator does for GPU memory, `consolidate` keeps the last such
buffer it made and hands it out again for the next buffer of the same size
once nothing else holds it.

"Nothing else holds it" is read from the storage's reference count: every
tensor, view, storage object, numpy array or DLPack capsule over the buffer
counts. A buffer that went to shared memory (another process may map it) or
to page-locked memory is never reused. The memory kept is one buffer of at
most `MAX_BYTES`; `td_core.empty_cache()` lets go of it.
"""

from __future__ import annotations

import os
import sys
import threading

import torch

__all__ = ["MAX_BYTES", "empty_cache", "take_buffer"]

Tensor = torch.Tensor
MAX_BYTES = 256 << 20  # the most memory kept back after the user dropped it
_use_count = getattr(torch._C, "_storage_Use_Count", None)
_lock = threading.Lock()
_spare: list[Tensor] = []  # at most one: the last buffer handed out


def _holders(buffer: Tensor) -> tuple[int, int, bool]:
    """(references to `buffer`'s storage, to its Python object, whether shared between processes).

    Every tensor over the storage counts in the first number; a Python storage
    object (`t.untyped_storage()`, one per storage while alive) counts once
    there, and its own holders in the second.
    """
    storage = buffer.untyped_storage()
    return _use_count(storage._cdata), sys.getrefcount(storage), storage.is_shared()  # type: ignore[misc]


# what `_holders` reads for a buffer nothing but one tensor holds, on this Python and torch
_ALONE = _holders(torch.empty(1)) if _use_count is not None else None


def _free(buffer: Tensor) -> bool:
    """Whether only `_spare` holds `buffer`'s memory (and this process alone maps it)."""
    return _holders(buffer) == _ALONE


def _plain_eager() -> bool:
    """Whether tensors made now are ordinary ones: no mode, no tracing, no inference mode."""
    return not (
        torch._C._len_torch_dispatch_stack()  # FakeTensorMode, ...
        or torch._C._is_torch_function_mode_enabled()
        or torch.is_inference_mode_enabled()  # its tensors refuse writes outside it
        or torch.compiler.is_compiling()
    )


def take_buffer(total: int) -> Tensor:
    """An uninitialised CPU `uint8` buffer of `total` bytes: the spare when free, else a new one.

    The caller asks only for buffers worth keeping (`consolidate`: those over 1 MiB,
    which it does not need zeroed); one over `MAX_BYTES` is never kept.
    """
    if total > MAX_BYTES or _use_count is None or not _plain_eager():
        return torch.empty(total, dtype=torch.uint8, device="cpu")
    with _lock:
        if _spare and _spare[0].numel() == total and _free(_spare[0]):
            return _spare[0].view(-1)  # a new tensor: the spare is busy until it is dropped
    buffer = torch.empty(total, dtype=torch.uint8, device="cpu")
    out = buffer.view(-1)  # made before `buffer` is the spare: else it looks free to other threads
    with _lock:
        _spare[:] = [buffer]
    return out


def empty_cache() -> None:
    """Free the memory td keeps for reuse: the spare buffer of `consolidate`.

    `consolidate` keeps its last large CPU buffer (1 to 256 MiB) after the
    result is dropped, to hand it out again to the next consolidation of the
    same size instead of asking the kernel for new pages. Like
    `torch.cuda.empty_cache`, this gives that memory back; a buffer still in
    use stays valid and is freed with its last view.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, empty_cache
        >>> TensorDict({"a": torch.zeros(1 << 19)}).consolidate()["a"].sum().item()
        0.0
        >>> empty_cache()
    """
    with _lock:
        _spare.clear()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a lock held by another thread at fork would never be released


os.register_at_fork(after_in_child=_after_fork)
