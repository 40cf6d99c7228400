"""Point-to-point communication of TensorDicts over `torch.distributed`.

`send`/`recv`/`isend`/`irecv` move the tensor leaves one by one, in
sorted key order, with consecutive tags starting at `init_tag`; the receiver
holds a TensorDict of the same structure (a template) and receives in place.

`init_remote`/`from_remote_init` send the structure first (keys, shapes,
dtypes, batch size, as JSON bytes in a uint8 tensor, never pickle), so the
receiver needs no template.

`torch.distributed` is imported when one of these is called, not at import.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch

from td_core._contract import TensorDictContract, dense
from td_core._map import is_td
from td_core.errors import NotAPipeError

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["PipeMixin", "send", "recv", "isend", "irecv", "init_remote", "from_remote_init"]

_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    )
}


def _leaves(td: TensorDictBase) -> list[torch.Tensor]:
    return [td.get(k) for k in td.keys(include_nested=True, leaves_only=True, sort=True)]


def send(td: TensorDictBase, dst: int, *, init_tag: int = 0, group: Any = None) -> int:
    """Send every tensor leaf to rank `dst`; returns the next free tag."""
    import torch.distributed as dist

    tag = init_tag
    for t in _leaves(td):
        dist.send(t.contiguous(), dst, group=group, tag=tag)
        tag += 1
    return tag


def recv(td: TensorDictBase, src: int, *, init_tag: int = 0, group: Any = None) -> int:
    """Receive every tensor leaf from rank `src` into `td` (in place); returns the next free tag."""
    import torch.distributed as dist

    tag = init_tag
    for t in _leaves(td):
        buffer = (
            t if t.is_contiguous() else torch.empty_like(t, memory_format=torch.contiguous_format)
        )
        dist.recv(buffer, src, group=group, tag=tag)
        if buffer is not t:
            t.copy_(buffer)
        tag += 1
    return tag


def isend(
    td: TensorDictBase,
    dst: int,
    *,
    init_tag: int = 0,
    group: Any = None,
    return_early: bool = False,
) -> Any:
    """Non-blocking `send`; waits unless `return_early`, then returns the list of work handles."""
    import torch.distributed as dist

    works = [
        dist.isend(t.contiguous(), dst, group=group, tag=init_tag + i)
        for i, t in enumerate(_leaves(td))
    ]
    if return_early:
        return works
    for work in works:
        if work is not None:
            work.wait()
    return init_tag + len(works)


def irecv(
    td: TensorDictBase,
    src: int,
    *,
    init_tag: int = 0,
    group: Any = None,
    return_premature: bool = False,
) -> Any:
    """Non-blocking `recv` into `td`'s (contiguous) leaves; waits unless `return_premature`."""
    import torch.distributed as dist

    leaves = _leaves(td)
    for key, t in zip(td.keys(include_nested=True, leaves_only=True, sort=True), leaves):
        if not t.is_contiguous():
            raise ValueError(f"irecv receives in place, but leaf {key!r} is not contiguous")
    works = [dist.irecv(t, src, group=group, tag=init_tag + i) for i, t in enumerate(leaves)]
    if return_premature:
        return works
    for work in works:
        if work is not None:
            work.wait()
    return init_tag + len(works)


def _describe(td: TensorDictBase) -> dict[str, Any]:
    out: dict[str, Any] = {"batch_size": list(td.batch_size), "entries": {}}
    for key, value in sorted(td._items_str(), key=lambda kv: kv[0]):
        if isinstance(value, torch.Tensor):
            out["entries"][key] = {
                "shape": list(value.shape),
                "dtype": str(value.dtype).removeprefix("torch."),
            }
        elif is_td(value):
            out["entries"][key] = {"tensordict": _describe(value)}
    return out


def _allocate(meta: dict[str, Any], device: Any) -> TensorDictBase:
    td = dense(None, meta["batch_size"], device)
    for key, entry in meta["entries"].items():
        if "tensordict" in entry:
            td.set(key, _allocate(entry["tensordict"], device))
            continue
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(
                f"from_remote_init: unsupported dtype {entry['dtype']!r} for key {key!r}"
            )
        td.set(key, torch.empty(entry["shape"], dtype=dtype, device=device))
    return td


def init_remote(td: TensorDictBase, dst: int, *, group: Any = None) -> int:
    """Send the structure (as JSON) and then the data to `dst`, for `from_remote_init`."""
    import torch.distributed as dist

    payload = torch.tensor(bytearray(json.dumps(_describe(td)).encode()), dtype=torch.uint8)
    dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst, group=group, tag=0)
    dist.send(payload, dst, group=group, tag=1)
    return send(td, dst, init_tag=2, group=group)


def from_remote_init(src: int, *, group: Any = None, device: Any = None) -> TensorDictBase:
    """Receive a TensorDict sent with `init_remote`: structure first, then data."""
    import torch.distributed as dist

    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src, group=group, tag=0)
    payload = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.recv(payload, src, group=group, tag=1)
    try:
        meta = json.loads(bytes(payload.tolist()).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"from_remote_init: rank {src} sent metadata that is not valid JSON"
        ) from err
    td = _allocate(meta, device)
    recv(td, src, init_tag=2, group=group)
    return td


def _pipe_method(pipe: Any, name: str, instead: str) -> Any:
    """`pipe.<name>`, or `NotAPipeError` naming the torch.distributed method to use instead."""
    method = getattr(pipe, name, None)
    if method is None:
        raise NotAPipeError(
            f"{name}: {type(pipe).__name__} is not a pipe (it has no {name} method); "
            f"use {instead} for torch.distributed"
        )
    return method


class PipeMixin(TensorDictContract):
    """`asend` / `arecv`: awaitable transfers through a pipe object (upstream's UCXX pipes)."""

    __slots__ = ()

    async def asend(self, dst: Any) -> None:
        """Send this TensorDict through the pipe `dst`, awaiting `dst.asend(self)`.

        td ships no pipe of its own: upstream's `TensorDictPipe` needs the
        optional `ucxx` package. Any object with an awaitable
        `asend(tensordict)` method works.

        Args:
            dst: the pipe to send through.

        Raises:
            NotAPipeError: (a `TypeError` and `AttributeError`) if `dst` has no `asend` method.
        """
        await _pipe_method(dst, "asend", "send(dst_rank)")(self)

    async def arecv(self, src: Any, *, device: Any = None) -> Any:
        """Receive a TensorDict from the pipe `src`, awaiting `src.arecv(self, device=device)`.

        The pipe may write into this TensorDict (when its layout matches) or
        return another one: use the return value.

        Args:
            src: the pipe to receive from (any object with an awaitable
                `arecv(tensordict, device=...)` method).
            device: where the pipe allocates a new structure.

        Returns:
            The received TensorDict (this one or another).

        Raises:
            NotAPipeError: (a `TypeError` and `AttributeError`) if `src` has no `arecv` method.
        """
        return await _pipe_method(src, "arecv", "recv(src_rank)")(self, device=device)
