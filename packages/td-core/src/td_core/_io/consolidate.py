"""Consolidation: every tensor leaf copied into one contiguous byte buffer, leaves as views of it.

A consolidated TensorDict moves as one block: `to(device)` transfers the
buffer once and re-views it, pickling and `torch.save` write one storage.
Whether a TensorDict is consolidated is read off its leaves, not stored: every
tensor leaf is a contiguous view of one storage, laid out in traversal order at
aligned offsets after a 16-byte header, covering the storage exactly. So
`td[0]` or `td.clone()` of a consolidated TensorDict is not consolidated (its
leaves no longer cover the buffer), nothing can go stale, and an ordinary
TensorDict (whose leaves start at offset 0 of their own storages) never looks
consolidated, even with a single leaf.

With `filename`, the buffer is a shared file mapping, followed by a JSON
description of the layout, its length (8 bytes, little endian) and a magic
tag; `from_consolidated` maps it back after validating the description
(dtypes from a fixed table, offsets and sizes inside the buffer, string keys).
No pickle is involved.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_td, map_leaves, rebuild, stack_parts, tensor_leaves
from td_core._core.utils import as_device
from td_core._io.consolidate_format import (
    ALIGN,
    MAGIC,
    TRAILER,
    build_from_layout,
    describe_layout,
    from_consolidated,
    jagged_parts,
)
from td_core._io.spare_buffer import take_buffer

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "ConsolidateMixin",
    "TensorDictFuture",
    "build_from_layout",
    "consolidate",
    "consolidated_layout",
    "describe_layout",
    "from_consolidated",
    "is_consolidated",
    "leaf_parts",
    "to_consolidated",
    "whole_buffer",
]

Tensor = torch.Tensor
_HEADER = 16  # reserved bytes before the first leaf: the layout's signature
_CLEAR_WHOLE = 1 << 20  # buffers up to this size are allocated zeroed (padding included)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def leaf_parts(t: Tensor) -> list[Tensor]:
    """The strided tensors a leaf is stored as: itself, or a nested jagged tensor's components.

    Raises:
        ValueError: for a layout that has no such components (sparse, strided nested).
    """
    if t.is_nested and t.layout == torch.jagged:
        values, offsets, lengths = jagged_parts(t)
        return [values, offsets] + ([] if lengths is None else [lengths])
    if t.is_nested or t.layout != torch.strided:
        raise ValueError(
            "consolidate needs strided or nested jagged (torch.jagged) tensor leaves; "
            f"a leaf has layout {t.layout}" + (" (nested)" if t.is_nested else "")
        )
    return [t]


def _all_parts(leaves: list[Tensor]) -> list[Tensor]:
    return [p for t in leaves for p in leaf_parts(t)]


def _layout(leaves: list[Tensor]) -> tuple[list[int], int]:
    """Byte offsets of each part of `leaves` (see `leaf_parts`) in the buffer, and its size."""
    offsets, total = [], _HEADER
    for t in _all_parts(leaves):
        offsets.append(total)
        total += _aligned(t.numel() * t.element_size())
    return offsets, total


# One strided tensor of a consolidated buffer: dtype, shape, stride (elements), byte offset.
Part = tuple[torch.dtype, tuple[int, ...], tuple[int, ...], int]
# One leaf: a strided part, or ("jagged", ragged dim, (values, offsets, lengths or None)).
Slot = Part | tuple[str, int, tuple[Part, Part, Part | None]]


def _contiguous_stride(shape: torch.Size) -> tuple[int, ...]:
    stride, step = [], 1
    for n in reversed(shape):
        stride.append(step)
        step *= max(n, 1)
    return tuple(reversed(stride))


def _views_at(buffer: Tensor, slots: list[Slot]) -> list[Tensor]:
    """The leaves at `slots` as views of `buffer` (`uint8`, a whole storage)."""
    typed: dict[torch.dtype, Tensor] = {}

    def view(part: Part) -> Tensor:
        dtype, shape, stride, offset = part
        base = typed.get(dtype)
        if base is None:
            base = typed[dtype] = buffer.view(dtype)
        return base.as_strided(shape, stride, offset // dtype.itemsize)

    out = []
    for slot in slots:
        if slot[0] == "jagged":
            _, ragged, (values, offsets, lengths) = slot
            out.append(
                torch.nested.nested_tensor_from_jagged(
                    view(values),
                    view(offsets),
                    lengths=None if lengths is None else view(lengths),
                    jagged_dim=ragged,
                )
            )
        else:
            out.append(view(slot))  # type: ignore[arg-type]
    return out


def _slots(leaves: list[Tensor], offsets: list[int], *, contiguous: bool = False) -> list[Slot]:
    """The slots of `leaves` whose parts lie at `offsets` (`contiguous`: as fresh copies)."""
    at = iter(offsets)

    def part(t: Tensor) -> Part:
        stride = _contiguous_stride(t.shape) if contiguous else t.stride()
        return (t.dtype, tuple(t.shape), stride, next(at))

    slots: list[Slot] = []
    for t in leaves:
        if t.is_nested:
            parts = [part(p) for p in leaf_parts(t)]
            lengths = parts[2] if len(parts) > 2 else None
            slots.append(
                ("jagged", int(getattr(t, "_ragged_idx", 1)), (parts[0], parts[1], lengths))
            )
        else:
            slots.append(part(t))
    return slots


def _first_part(td: TensorDictContract) -> Tensor | None:
    """The first stored tensor in traversal order, found without listing the others."""
    parts = stack_parts(td)
    for value in parts[0] if parts is not None else td._values_str():
        if isinstance(value, Tensor):
            return value.values() if value.is_nested else value
        if is_td(value):
            leaf = _first_part(value)
            if leaf is not None:
                return leaf
    return None


def consolidated_layout(td: TensorDictContract) -> tuple[list[Tensor], list[int]] | None:
    """`(leaves, byte offsets of their parts)` when `td` is consolidated, else `None`.

    Consolidated: every stored tensor (a strided leaf, or the values, offsets
    and lengths of a nested jagged one) is a contiguous view of the first
    one's storage at the offset `consolidate` gives it, and they cover that
    storage exactly. A cheap test on the first one rejects ordinary TensorDicts.
    """
    first = _first_part(td)
    if first is None or first.storage_offset() * first.element_size() != _HEADER:
        return None
    leaves = tensor_leaves(td)
    storage = first.untyped_storage()
    # meta tensors have no addresses: their offsets and sizes are all there is to check
    base = None if first.device.type == "meta" else first.data_ptr() - _HEADER
    offsets, total = [], _HEADER
    try:
        parts = _all_parts(leaves)
    except ValueError:
        return None
    for t in parts:
        size = t.element_size()
        if t.storage_offset() * size != total or not t.is_contiguous():
            return None
        if base is not None and (
            t.data_ptr() != base + total or t.untyped_storage().data_ptr() != storage.data_ptr()
        ):
            return None
        offsets.append(total)
        total += _aligned(t.numel() * size)
    return (leaves, offsets) if total == storage.nbytes() else None


def is_consolidated(td: TensorDictContract) -> bool:
    """Whether every tensor leaf of `td` is a view of one buffer laid out by `consolidate`."""
    return consolidated_layout(td) is not None


def _leaf_device(td: TensorDictContract, leaves: list[Tensor]) -> torch.device | None:
    """Where the buffer goes when no device is asked for: where the leaves already are."""
    if td.device is not None:
        return td.device
    devices = {t.device for t in leaves}
    if len(devices) > 1:
        raise ValueError(
            f"consolidate: the leaves are on several devices {sorted(map(str, devices))}; "
            "pass device=... to pick the one the buffer goes to"
        )
    return next(iter(devices), None)


def _on_cpu(device: torch.device | None) -> bool:
    return (device if device is not None else torch.get_default_device()).type == "cpu"


def _buffer(
    total: int,
    *,
    filename: str | os.PathLike[str] | None,
    device: torch.device | None,
    share_memory: bool,
    pin_memory: bool,
) -> Tensor:
    if filename is not None:
        if device is not None and device.type != "cpu":
            raise ValueError(
                f"consolidate(filename=...) maps a file, which lives on the CPU; got device={device}"
            )
        path = Path(filename)
        if path.exists():
            path.unlink()  # from_file maps an existing file as is: start from an empty one
        return torch.from_file(str(path), shared=True, size=total, dtype=torch.uint8)
    if not (share_memory or pin_memory) and _on_cpu(device) and total > _CLEAR_WHOLE:
        # a large buffer costs more to obtain than to fill: the spare of an earlier call
        # when free (a small one comes zeroed from the heap, and is not kept)
        return take_buffer(total)
    # a small buffer is cheaper to clear whole than padding byte by padding byte
    alloc = torch.zeros if total <= _CLEAR_WHOLE else torch.empty
    buffer = alloc(total, dtype=torch.uint8, device=device)
    if share_memory:
        buffer.share_memory_()
    if pin_memory:
        buffer = buffer.pin_memory()
    return buffer


def consolidate(
    td: TensorDictContract,
    filename: str | os.PathLike[str] | None = None,
    *,
    device: torch.device | str | None = None,
    non_blocking: bool = False,
    inplace: bool = False,
    share_memory: bool = False,
    pin_memory: bool = False,
) -> Any:
    """`ConsolidateMixin.consolidate` in this thread (`use_buffer` is `share_memory` here)."""
    plain = filename is None and device is None and not (share_memory or pin_memory)
    if plain and consolidated_layout(td) is not None:
        return td  # already one buffer (upstream returns the same object too)
    leaves = tensor_leaves(td)
    offsets, total = _layout(leaves)
    dev = as_device(device)
    if filename is not None and dev is None:
        dev = torch.device("cpu")  # a file mapping lives in CPU memory: say so
    buffer = _buffer(
        total,
        filename=filename,
        device=dev if dev is not None else _leaf_device(td, leaves),
        share_memory=share_memory,
        pin_memory=pin_memory,
    )
    parts = _all_parts(leaves)
    targets = _views_at(buffer, _slots(parts, offsets, contiguous=True))
    jagged = len(parts) != len(leaves)
    if filename is None and total > _CLEAR_WHOLE:  # a new file and a small buffer start zeroed
        buffer[:_HEADER] = 0
        _zero_padding(buffer, parts, offsets)
    if targets:
        with torch.no_grad():
            torch._foreach_copy_(targets, parts, non_blocking=non_blocking)
    # without nested jagged leaves the parts are the leaves, and their views the result's
    views = _views_at(buffer, _slots(leaves, offsets, contiguous=True)) if jagged else targets
    if filename is not None:
        description = json.dumps(
            {"total": total, "device": None, "tree": describe_layout(td, iter(offsets))}
        ).encode()
        with open(filename, "ab") as f:
            f.write(description)
            f.write(TRAILER.pack(len(description), MAGIC))
    if not inplace:
        out = rebuild(td, iter(views))
        # the views are on `dev` already: to() only records the device (no copy)
        return out if dev is None else out.to(dev)
    _replace_leaves(td, iter(views))
    return td


def _zero_padding(buffer: Tensor, parts: list[Tensor], offsets: list[int]) -> None:
    """Zero the alignment bytes after each part, so equal TensorDicts give equal buffers."""
    if buffer.device.type == "meta":
        return
    where: list[int] = []
    for t, o in zip(parts, offsets):
        end = o + t.numel() * t.element_size()
        where.extend(range(end, _aligned(end)))
    if where:  # at most 15 bytes a part: one write for all of them
        buffer.index_fill_(0, torch.tensor(where, device=buffer.device), 0)


class TensorDictFuture(Future):
    """The result of an operation started with `return_early=True` (a `concurrent.futures.Future`).

    `result()` waits for the operation and returns the TensorDict it made (or
    raises its error).
    """


def _in_thread(run: Callable[[], Any]) -> TensorDictFuture:
    """`run()` in a daemon thread: a future of its result (or of its error)."""
    future = TensorDictFuture()

    def work() -> None:
        try:
            future.set_result(run())
        except BaseException as err:  # handed to the caller through the future
            future.set_exception(err)

    threading.Thread(target=work, daemon=True).start()
    return future


def whole_buffer(leaf: Tensor) -> Tensor:
    """The `uint8` tensor over all of `leaf`'s storage (the buffer of a consolidated TensorDict)."""
    storage = (leaf.values() if leaf.is_nested else leaf).untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def to_consolidated(
    td: TensorDictContract, device: torch.device, *, non_blocking: bool = False
) -> Any | None:
    """`td.to(device)` as one transfer when `td` is consolidated (else `None`).

    The buffer is moved once and the leaves of the result are views of the
    moved buffer at the same offsets, so the result is consolidated too.
    """
    layout = consolidated_layout(td)
    if layout is None:
        return None
    leaves, offsets = layout
    moved = whole_buffer(leaves[0]).to(device, non_blocking=non_blocking)
    views = iter(_views_at(moved, _slots(leaves, offsets)))
    return map_leaves(
        td, lambda _: next(views), device=device, keep_non_tensor=lambda v: v.to(device)
    )


_PLACEHOLDER = torch.empty(0, device="meta")


def pack(td: TensorDictContract) -> tuple[Tensor, Any, list[Slot]] | None:
    """A consolidated `td` as (its buffer, a skeleton, the slots of its leaves); else `None`.

    Pickling these moves the buffer once (pickling each view would copy the
    whole storage once per leaf). Every tensor leaf of the skeleton is the
    same empty `meta` tensor, which pickle writes once; the slots are plain
    values.
    """
    layout = consolidated_layout(td)
    if layout is None:
        return None
    leaves, offsets = layout
    skeleton = rebuild(td, itertools.repeat(_PLACEHOLDER))
    return whole_buffer(leaves[0]), skeleton, _slots(leaves, offsets)


def unpack(buffer: Tensor, skeleton: TensorDictContract, slots: list[Slot]) -> Any:
    """Inverse of `pack`: the skeleton with views of `buffer` as its leaves."""
    return rebuild(skeleton, iter(_views_at(buffer, slots)))


def _replace_leaves(td: TensorDictContract, views: Iterator[Tensor]) -> None:
    for key, value in list(td._items_str()):
        if isinstance(value, Tensor):
            td._set_str(key, next(views))
        elif is_td(value):
            _replace_leaves(value, views)


class ConsolidateMixin(TensorDictContract):
    """`consolidate`, `is_consolidated`, `from_consolidated`."""

    __slots__ = ()

    def _to_consolidated(self, device: torch.device, non_blocking: bool) -> Any | None:
        """`self.to(device)` as one transfer of the buffer when consolidated, else `None`."""
        return to_consolidated(self, device, non_blocking=non_blocking)

    def consolidate(
        self,
        filename: str | os.PathLike[str] | None = None,
        *,
        num_threads: int = 0,
        device: torch.device | str | None = None,
        non_blocking: bool = False,
        inplace: bool = False,
        return_early: bool = False,
        use_buffer: bool = False,
        share_memory: bool = False,
        pin_memory: bool = False,
        metadata: bool = False,
    ) -> Any:
        """Copy every tensor leaf into one contiguous buffer; the leaves become views of it.

        A consolidated TensorDict moves as one block (`to(device)`, pickling,
        `send`). Non-tensor leaves are kept as they are.

        Args:
            filename: back the buffer with this file (shared mapping), readable
                later with `from_consolidated`.
            num_threads: accepted for upstream compatibility; each copy uses torch's threads.
            device: where the buffer lives (default: the TensorDict's device, or
                its leaves' one; the CPU with `filename`).
            non_blocking: asynchronous copies into the buffer.
            inplace: replace this TensorDict's leaves with the views (returns `self`).
            return_early: run in a thread; returns a `TensorDictFuture` (a
                `concurrent.futures.Future`). Not with `use_buffer` or
                `non_blocking`, whose copies the thread could not wait for.
            use_buffer: build the buffer in shared memory (as `share_memory`).
            share_memory: put the buffer in shared memory (for worker processes).
            pin_memory: put the buffer in page-locked memory (needs an accelerator).
            metadata: accepted for upstream compatibility; the layout is always known.

        Returns:
            The consolidated TensorDict (or a future of it with `return_early`).

        Raises:
            NotImplementedError: `return_early` with `use_buffer` or `non_blocking`.
            ValueError: a leaf that is neither strided nor nested jagged, or
                leaves on several devices and no `device`.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3, 2)}}, [3])
            >>> c = td.consolidate()
            >>> c.is_consolidated(), td.is_consolidated()
            (True, False)
            >>> c["a"].untyped_storage().data_ptr() == c["b", "c"].untyped_storage().data_ptr()
            True
        """
        # num_threads, metadata: one copy per leaf (torch threads each copy); layout is implicit
        _ = (num_threads, metadata)
        if return_early and (use_buffer or non_blocking):
            which = "use_buffer" if use_buffer else "non_blocking"
            raise NotImplementedError(
                f"consolidate(return_early=True) cannot be combined with {which}=True: the "
                "background thread could not wait for those copies; drop one of the two"
            )
        run = functools.partial(
            consolidate,
            self,
            filename,
            device=device,
            non_blocking=non_blocking,
            inplace=inplace,
            share_memory=share_memory or use_buffer,
            pin_memory=pin_memory,
        )
        return _in_thread(run) if return_early else run()

    @property
    def _consolidated(self) -> dict[str, Tensor]:
        """Upstream's private record of a consolidated TensorDict, kept for compatibility.

        `{"storage": buffer}`, the `uint8` tensor over the whole buffer the
        leaves are views of (writes to it show in the leaves). Computed from the
        leaves, never stored, so it cannot go stale. Raises `AttributeError`
        when the TensorDict is not consolidated, so `hasattr(td, "_consolidated")`
        tells whether it is, as upstream.
        """
        layout = consolidated_layout(self)
        if layout is None:
            raise AttributeError(
                f"this {type(self).__name__} is not consolidated, so it has no '_consolidated' "
                "buffer: call consolidate() first"
            )
        return {"storage": whole_buffer(layout[0][0])}

    def is_consolidated(self) -> bool:
        """Whether the tensor leaves are views of one buffer laid out by `consolidate`."""
        return is_consolidated(self)

    @classmethod
    def from_consolidated(cls, filename: str | os.PathLike[str]) -> Self:
        """Map back a TensorDict saved with `consolidate(filename=...)` (no pickle)."""
        return from_consolidated(filename)
