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
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract, dense
from td_core._core.traverse import is_nt, is_td, map_leaves, rebuild, stack_parts, tensor_leaves
from td_core._core.utils import as_device
from td_core._leaves.nontensor import NonTensorData

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "ConsolidateMixin",
    "build_from_layout",
    "consolidate",
    "consolidated_layout",
    "describe_layout",
    "from_consolidated",
    "is_consolidated",
    "to_consolidated",
    "whole_buffer",
]

Tensor = torch.Tensor
_ALIGN = 16  # covers every dtype's itemsize, so each view starts on its element boundary
_HEADER = 16  # reserved bytes before the first leaf: the layout's signature
_MAGIC = b"TDCONS01"
_TRAILER = struct.Struct("<Q8s")
_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex32,
        torch.complex64,
        torch.complex128,
    )
}


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _layout(leaves: list[Tensor]) -> tuple[list[int], int]:
    """Byte offsets of each leaf in the buffer, and the buffer's size."""
    offsets, total = [], _HEADER
    for t in leaves:
        offsets.append(total)
        total += _aligned(t.numel() * t.element_size())
    return offsets, total


# One leaf of a consolidated buffer: dtype, shape, stride (elements), byte offset in the buffer.
Slot = tuple[torch.dtype, tuple[int, ...], tuple[int, ...], int]


def _contiguous_stride(shape: torch.Size) -> tuple[int, ...]:
    stride, step = [], 1
    for n in reversed(shape):
        stride.append(step)
        step *= max(n, 1)
    return tuple(reversed(stride))


def _views_at(buffer: Tensor, slots: list[Slot]) -> list[Tensor]:
    """Views of `buffer` (`uint8`, a whole storage) at `slots`: one `as_strided` each."""
    typed: dict[torch.dtype, Tensor] = {}
    out = []
    for dtype, shape, stride, offset in slots:
        base = typed.get(dtype)
        if base is None:
            base = typed[dtype] = buffer.view(dtype)
        out.append(base.as_strided(shape, stride, offset // dtype.itemsize))
    return out


def _views(buffer: Tensor, leaves: list[Tensor], offsets: list[int]) -> list[Tensor]:
    """Contiguous views of `buffer` shaped and typed like `leaves`, at `offsets`."""
    return _views_at(
        buffer,
        [(t.dtype, t.shape, _contiguous_stride(t.shape), o) for t, o in zip(leaves, offsets)],
    )


def _first_leaf(td: TensorDictContract) -> Tensor | None:
    """The first tensor leaf in traversal order, found without listing the others."""
    parts = stack_parts(td)
    for value in parts[0] if parts is not None else td._values_str():
        if isinstance(value, Tensor):
            return value
        if is_td(value):
            leaf = _first_leaf(value)
            if leaf is not None:
                return leaf
    return None


def consolidated_layout(td: TensorDictContract) -> tuple[list[Tensor], list[int]] | None:
    """`(leaves, byte offsets)` when `td` is consolidated, else `None`.

    Consolidated: every tensor leaf is a contiguous view of the first leaf's
    storage at the offset `consolidate` gives it, and the leaves cover that
    storage exactly. A cheap test on the first leaf rejects ordinary TensorDicts.
    """
    first = _first_leaf(td)
    if first is None or first.storage_offset() * first.element_size() != _HEADER:
        return None
    leaves = tensor_leaves(td)
    storage = first.untyped_storage()
    # meta tensors have no addresses: their offsets and sizes are all there is to check
    base = None if first.device.type == "meta" else first.data_ptr() - _HEADER
    offsets, total = [], _HEADER
    for t in leaves:
        size = t.element_size()
        if t.storage_offset() * size != total or not t.is_contiguous():
            return None
        if base is not None and t.data_ptr() != base + total:
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
    buffer = torch.empty(total, dtype=torch.uint8, device=device)
    if share_memory:
        buffer.share_memory_()
    if pin_memory:
        buffer = buffer.pin_memory()
    return buffer


def describe_layout(td: TensorDictContract, offsets: Iterator[int]) -> dict[str, Any]:
    """The JSON layout of `td`: its batch size and, per key, a tensor slot, a sub-tree or a value."""
    entries: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            entries[key] = {
                "tensor": {
                    "dtype": str(value.dtype).removeprefix("torch."),
                    "shape": list(value.shape),
                    "offset": next(offsets),
                }
            }
        elif is_nt(value):
            if not isinstance(value, NonTensorData):
                raise TypeError(
                    f"consolidate(filename=...) stores one non-tensor value per key; {key!r} "
                    "holds a stack of values: store them as a list in one NonTensorData"
                )
            data = value.data
            try:
                json.dumps(data)
            except TypeError:
                raise TypeError(
                    f"consolidate(filename=...) stores non-tensor values as JSON; the value at "
                    f"{key!r} ({type(data).__name__}) is not JSON-serialisable"
                ) from None
            entries[key] = {"non_tensor": data}
        else:
            entries[key] = {"tensordict": describe_layout(value, offsets)}
    return {"batch_size": list(td.batch_size), "entries": entries}


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
    for t in leaves:
        if t.is_nested or t.layout != torch.strided:
            raise ValueError(
                f"consolidate needs strided tensor leaves; a leaf has layout {t.layout}"
                + (" (nested)" if t.is_nested else "")
            )
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
    views = _views(buffer, leaves, offsets)
    buffer[:_HEADER] = 0
    if views:
        with torch.no_grad():
            torch._foreach_copy_(views, leaves, non_blocking=non_blocking)
    if filename is not None:
        description = json.dumps(
            {"total": total, "device": None, "tree": describe_layout(td, iter(offsets))}
        ).encode()
        with open(filename, "ab") as f:
            f.write(description)
            f.write(_TRAILER.pack(len(description), _MAGIC))
    if not inplace:
        out = rebuild(td, iter(views))
        # the views are on `dev` already: to() only records the device (no copy)
        return out if dev is None else out.to(dev)
    _replace_leaves(td, iter(views))
    return td


def _in_thread(run: Callable[[], Any]) -> Future[Any]:
    """`run()` in a daemon thread: a future of its result (or of its error)."""
    future: Future[Any] = Future()

    def work() -> None:
        try:
            future.set_result(run())
        except BaseException as err:  # handed to the caller through the future
            future.set_exception(err)

    threading.Thread(target=work, daemon=True).start()
    return future


def whole_buffer(leaf: Tensor) -> Tensor:
    """The `uint8` tensor over all of `leaf`'s storage (the buffer of a consolidated TensorDict)."""
    storage = leaf.untyped_storage()
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


def _slots(leaves: list[Tensor], offsets: list[int]) -> list[Slot]:
    """The slots of contiguous `leaves` at `offsets`."""
    return [(t.dtype, tuple(t.shape), t.stride(), o) for t, o in zip(leaves, offsets)]


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


def from_consolidated(filename: str | os.PathLike[str]) -> Any:
    """Map a file written by `consolidate(filename=...)` back as a consolidated TensorDict.

    Raises:
        ValueError: naming the file, if it is not such a file or its layout is invalid.
    """
    path = Path(filename)
    size = path.stat().st_size
    if size < _TRAILER.size:
        raise ValueError(f"{path}: too small to be a consolidated TensorDict ({size} bytes)")
    with open(path, "rb") as f:
        f.seek(size - _TRAILER.size)
        length, magic = _TRAILER.unpack(f.read(_TRAILER.size))
        if magic != _MAGIC or length > size - _TRAILER.size:
            raise ValueError(f"{path}: not a file written by consolidate(filename=...)")
        f.seek(size - _TRAILER.size - length)
        try:
            description = json.loads(f.read(length))
        except ValueError as err:
            raise ValueError(f"{path}: the layout description is not valid JSON: {err}") from None
    total = description.get("total") if isinstance(description, dict) else None
    if not isinstance(total, int) or total != size - _TRAILER.size - length:
        raise ValueError(f"{path}: the layout's size does not match the file")
    buffer = torch.from_file(str(path), shared=True, size=total, dtype=torch.uint8)
    return build_from_layout(description.get("tree"), buffer, total, path)


def build_from_layout(tree: Any, buffer: Tensor, total: int, path: object) -> Any:
    """A TensorDict of views of `buffer` described by `tree` (validated; `path` names the source in errors)."""
    if not isinstance(tree, dict) or not isinstance(tree.get("entries"), dict):
        raise ValueError(f"{path}: malformed layout description")
    batch_size = tree.get("batch_size")
    if not isinstance(batch_size, list) or not all(
        isinstance(d, int) and d >= 0 for d in batch_size
    ):
        raise ValueError(f"{path}: malformed batch_size {batch_size!r}")
    out = dense(None, torch.Size(batch_size))
    for key, entry in tree["entries"].items():
        if not isinstance(key, str) or not isinstance(entry, dict) or len(entry) != 1:
            raise ValueError(f"{path}: malformed entry {key!r}")
        ((kind, spec),) = entry.items()
        if kind == "tensor":
            out.set(key, _tensor(spec, buffer, total, path, key))
        elif kind == "tensordict":
            out.set(key, build_from_layout(spec, buffer, total, path))
        elif kind == "non_tensor":
            out.set(key, NonTensorData(spec, out.batch_size))
        else:
            raise ValueError(f"{path}: unknown entry kind {kind!r} at {key!r}")
    return out


def _tensor(spec: Any, buffer: Tensor, total: int, path: object, key: str) -> Tensor:
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: malformed tensor entry {key!r}")
    name = spec.get("dtype")
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    shape, offset = spec.get("shape"), spec.get("offset")
    if dtype is None:
        raise ValueError(f"{path}: unknown dtype {spec.get('dtype')!r} at {key!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > 64
        or not all(isinstance(d, int) and d >= 0 for d in shape)
    ):
        raise ValueError(f"{path}: malformed shape {shape!r} at {key!r}")
    nbytes = torch.Size(shape).numel() * dtype.itemsize
    if not isinstance(offset, int) or offset < 0 or offset % _ALIGN or offset + nbytes > total:
        raise ValueError(f"{path}: entry {key!r} lies outside the buffer")
    return buffer[offset : offset + nbytes].view(dtype).view(shape)


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
            return_early: run in a thread; returns a `concurrent.futures.Future`.
            use_buffer: build the buffer in shared memory (as `share_memory`).
            share_memory: put the buffer in shared memory (for worker processes).
            pin_memory: put the buffer in page-locked memory (needs an accelerator).
            metadata: accepted for upstream compatibility; the layout is always known.

        Returns:
            The consolidated TensorDict (or a future of it with `return_early`).

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

    def is_consolidated(self) -> bool:
        """Whether the tensor leaves are views of one buffer laid out by `consolidate`."""
        return is_consolidated(self)

    @classmethod
    def from_consolidated(cls, filename: str | os.PathLike[str]) -> Self:
        """Map back a TensorDict saved with `consolidate(filename=...)` (no pickle)."""
        return from_consolidated(filename)
