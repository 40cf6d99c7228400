"""Collectives over `torch.distributed`: all_reduce, reduce, broadcast, all_gather, scatter, gather_and_stack.

Every rank of the group calls the same method. Reductions work leaf by leaf
(or bucket by bucket with `bucket_bytes`), in sorted key order, on
TensorDicts of the same structure. The collectives that move whole TensorDicts
(`broadcast`, `all_gather`, `scatter`, `gather_and_stack`) consolidate each one (one
buffer) and send a JSON description of its layout before the buffer, so the
receivers need no template, and nothing is ever pickled: the description is
validated like a file written by `consolidate(filename=...)` (dtype table,
offsets inside the buffer), and non-tensor values must be JSON.

`torch.distributed` is imported when one of these is called, not at import.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import tensor_leaves
from td_core._io.consolidate import (
    _layout,
    build_from_layout,
    consolidate,
    describe_layout,
    is_consolidated,
)

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "CollectivesMixin",
    "all_gather",
    "broadcast",
    "gather_and_stack",
    "reduce_leaves",
    "scatter",
]

Tensor = torch.Tensor


def _dist() -> Any:
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call torch.distributed.init_process_group first"
        )
    return dist


def _keyed_leaves(td: TensorDictContract) -> tuple[list[Any], list[Tensor]]:
    keys = list(td.keys(include_nested=True, leaves_only=True, sort=True))
    return keys, [td.get(k) for k in keys]


def _write_back(td: TensorDictContract, keys: list[Any], results: list[Tensor]) -> None:
    """Copy results into `td` where `get` handed out a copy (a lazy stack stacks on read)."""
    for key, result in zip(keys, results):
        if td.get(key) is not result:
            td.set_(key, result)


def _buckets(leaves: list[Tensor], bucket_bytes: int) -> list[list[int]]:
    """Leaf positions grouped by (device, dtype) into buckets of at most `bucket_bytes`."""
    groups: dict[tuple[torch.device, torch.dtype], list[list[int]]] = {}
    for i, t in enumerate(leaves):
        buckets = groups.setdefault((t.device, t.dtype), [[]])
        size = sum(leaves[j].numel() * leaves[j].element_size() for j in buckets[-1])
        if buckets[-1] and size + t.numel() * t.element_size() > bucket_bytes:
            buckets.append([])
        buckets[-1].append(i)
    return [bucket for buckets in groups.values() for bucket in buckets]


def _reduce_leaves(
    td: TensorDictContract,
    call: Callable[[Tensor], Any],
    *,
    async_op: bool,
    bucket_bytes: int | None,
    write_back: bool,
) -> list[Any]:
    """Run `call` (a collective on one tensor) on every leaf or bucket; copy results back."""
    keys, leaves = _keyed_leaves(td)
    if bucket_bytes is None:
        flats = [t if t.is_contiguous() else t.contiguous() for t in leaves]
        works = [call(t) for t in flats]
        groups = [[i] for i in range(len(leaves))]
        in_place = all(f is t for f, t in zip(flats, leaves)) and all(
            td.get(k) is t for k, t in zip(keys, leaves)
        )
        if in_place:  # the collectives wrote into the leaves themselves: nothing to copy
            return works
    else:
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
        groups = _buckets(leaves, bucket_bytes)
        flats = [torch.cat([leaves[i].reshape(-1) for i in group]) for group in groups]
        works = [call(flat) for flat in flats]
    if async_op:  # the copies back need the results
        for work in works:
            work.wait()
    results = list(leaves)
    for group, flat in zip(groups, flats):
        offset = 0
        for i in group:
            n = leaves[i].numel()
            part = flat[offset : offset + n].view(leaves[i].shape)
            offset += n
            if part.data_ptr() != leaves[i].data_ptr():
                leaves[i].copy_(part)
    if write_back:
        _write_back(td, keys, results)
    return works


def reduce_leaves(
    td: TensorDictContract,
    dst: int | None,
    op: Any,
    group: Any,
    async_op: bool,
    bucket_bytes: int | None,
) -> list[Any]:
    """`all_reduce` (`dst=None`) or `reduce` to rank `dst` of every leaf: the works.

    The result is written back into the leaves on every rank (`all_reduce`) or on `dst`.
    """
    dist = _dist()
    op = dist.ReduceOp.SUM if op is None else op
    if dst is None:
        write_back = True

        def call(t: Tensor) -> Any:
            return dist.all_reduce(t, op=op, group=group, async_op=async_op)
    else:
        write_back = dist.get_rank(group) == dst

        def call(t: Tensor) -> Any:
            return dist.reduce(t, dst, op=op, group=group, async_op=async_op)

    return _reduce_leaves(
        td, call, async_op=async_op, bucket_bytes=bucket_bytes, write_back=write_back
    )


# ------------------------------------------------------------ whole TensorDicts
def _pack(td: TensorDictContract, device: Any = None) -> tuple[TensorDictContract, Tensor, bytes]:
    """`td` consolidated, its buffer as a `uint8` tensor, and the JSON of its layout."""
    c = td if is_consolidated(td) else consolidate(td, device=device)
    leaves = tensor_leaves(c)
    offsets, total = _layout(leaves)
    if leaves:
        storage = leaves[0].untyped_storage()
        buffer = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    else:
        buffer = torch.zeros(total, dtype=torch.uint8)
    description = {"total": total, "tree": describe_layout(c, iter(offsets))}
    return c, buffer, json.dumps(description).encode()


def _unpack(raw: bytes, buffer: Tensor, source: str) -> Any:
    try:
        description = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"{source}: the layout description is not valid JSON: {err}") from None
    total = description.get("total") if isinstance(description, dict) else None
    if not isinstance(total, int) or total > buffer.numel():
        raise ValueError(f"{source}: the layout's size does not match the buffer")
    return build_from_layout(description.get("tree"), buffer[:total], total, source)


def _as_bytes(t: Tensor, n: int) -> bytes:
    return bytes(t[:n].cpu().numpy().tobytes())


def _as_tensor(raw: bytes) -> Tensor:
    """The bytes of a layout description as a `uint8` tensor, ready to send."""
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _sizes(raw: bytes, buffer: Tensor) -> Tensor:
    """The first message of a whole-TensorDict transfer: the description's and the buffer's sizes."""
    return torch.tensor([len(raw), buffer.numel()], dtype=torch.int64)


def _padded(data: bytes | Tensor, size: int, device: Any = None) -> Tensor:
    """`size` zero bytes on `device` (default: the CPU) that start with `data`.

    Collectives move tensors of one size on every rank: each rank's layout
    description and buffer are padded to the largest, and `_unpack` reads back
    only the sizes sent first.
    """
    data = _as_tensor(data) if isinstance(data, bytes) else data
    out = torch.zeros(size, dtype=torch.uint8, device=device)
    out[: data.numel()] = data
    return out


def _zeros(world: int, size: int, device: Any = None) -> list[Tensor]:
    """One receiving tensor of `size` bytes per rank."""
    return [torch.zeros(size, dtype=torch.uint8, device=device) for _ in range(world)]


def broadcast(
    td: TensorDictContract, src: int, *, group: Any = None, device: Any = None
) -> TensorDictContract:
    """See `CollectivesMixin.broadcast`."""
    dist = _dist()
    me = dist.get_rank()
    if me == src:
        c, buffer, raw = _pack(td, device)
        sizes = _sizes(raw, buffer)
    else:
        sizes = torch.zeros(2, dtype=torch.int64)
    dist.broadcast(sizes, src, group=group)
    n_raw, n_buf = (int(x) for x in sizes)
    if me == src:
        dist.broadcast(_as_tensor(raw), src, group=group)
        dist.broadcast(buffer, src, group=group)
        return c
    raw_t = torch.empty(n_raw, dtype=torch.uint8)
    dist.broadcast(raw_t, src, group=group)
    target = torch.device("cpu") if device is None else torch.device(device)
    buffer = torch.empty(n_buf, dtype=torch.uint8, device=target)
    dist.broadcast(buffer, src, group=group)
    return _unpack(_as_bytes(raw_t, n_raw), buffer, f"broadcast from rank {src}")


def all_gather(td: TensorDictContract, *, group: Any = None) -> list[Any]:
    """See `CollectivesMixin.all_gather`."""
    dist = _dist()
    world = dist.get_world_size(group)
    _, buffer, raw = _pack(td)
    all_sizes = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(all_sizes, _sizes(raw, buffer), group=group)
    max_raw = max(int(s[0]) for s in all_sizes)
    max_buf = max(int(s[1]) for s in all_sizes)
    raws = _zeros(world, max_raw)
    dist.all_gather(raws, _padded(raw, max_raw), group=group)
    buffers = _zeros(world, max_buf, buffer.device)
    dist.all_gather(buffers, _padded(buffer, max_buf, buffer.device), group=group)
    return [
        _unpack(_as_bytes(r, int(s[0])), b, f"all_gather from rank {i}")
        for i, (r, b, s) in enumerate(zip(raws, buffers, all_sizes))
    ]


def scatter(
    td: TensorDictContract,
    src: int,
    tensordicts: list[Any] | None = None,
    *,
    group: Any = None,
    device: Any = None,
) -> Any:
    """See `CollectivesMixin.scatter`."""
    dist = _dist()
    me = dist.get_rank(group)
    world = dist.get_world_size(group)
    target = torch.device("cpu") if device is None else torch.device(device)
    # round 1: each rank's sizes and the largest, so every rank can allocate the padded buffers
    sizes = torch.zeros(4, dtype=torch.int64)
    raws: list[bytes] = []
    buffers: list[Tensor] = []
    if me == src:
        if tensordicts is None or len(tensordicts) != world:
            count = None if tensordicts is None else len(tensordicts)
            raise ValueError(
                f"scatter: rank {src} must pass one TensorDict per rank ({world}), got {count}"
            )
        for item in tensordicts:
            _, buffer, raw = _pack(item)
            raws.append(raw)
            buffers.append(buffer)
        max_raw = max(len(r) for r in raws)
        max_buf = max(b.numel() for b in buffers)
        all_sizes = [
            torch.tensor([len(r), b.numel(), max_raw, max_buf], dtype=torch.int64)
            for r, b in zip(raws, buffers)
        ]
        dist.scatter(sizes, all_sizes, src=src, group=group)
    else:
        dist.scatter(sizes, None, src=src, group=group)
    n_raw, n_buf, max_raw, max_buf = (int(x) for x in sizes)
    # round 2: the layout descriptions, then the buffers, padded to the largest
    raw_t = torch.zeros(max_raw, dtype=torch.uint8)
    buf_t = torch.zeros(max_buf, dtype=torch.uint8, device=target)
    if me == src:
        padded_raws = [_padded(raw, max_raw) for raw in raws]
        padded_bufs = [_padded(buffer, max_buf, target) for buffer in buffers]
        dist.scatter(raw_t, padded_raws, src=src, group=group)
        dist.scatter(buf_t, padded_bufs, src=src, group=group)
    else:
        dist.scatter(raw_t, None, src=src, group=group)
        dist.scatter(buf_t, None, src=src, group=group)
    return _unpack(_as_bytes(raw_t, n_raw), buf_t[:n_buf], f"scatter from rank {src}")


def gather_and_stack(
    td: TensorDictContract, dst: int, group: Any = None
) -> TensorDictContract | None:
    """See `CollectivesMixin.gather_and_stack`."""
    dist = _dist()
    me = dist.get_rank()
    world = dist.get_world_size(group)
    if me == dst:
        if not td.batch_size or td.batch_size[0] != world - 1:
            raise ValueError(
                f"gather_and_stack: on rank {dst} the TensorDict needs one row per other rank "
                f"(first batch dim {world - 1}), got batch_size {list(td.batch_size)}"
            )
        sizes = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
        dist.gather(torch.zeros(2, dtype=torch.int64), sizes, dst=dst, group=group)
    else:
        _, buffer, raw = _pack(td)
        dist.gather(_sizes(raw, buffer), dst=dst, group=group)
    # second round: descriptions and buffers, padded to the largest
    max_sizes = torch.zeros(2, dtype=torch.int64)
    if me == dst:
        max_sizes = torch.stack(sizes).max(0).values
    dist.broadcast(max_sizes, dst, group=group)
    max_raw, max_buf = (int(x) for x in max_sizes)
    if me != dst:
        dist.gather(_padded(raw, max_raw), dst=dst, group=group)
        dist.gather(_padded(buffer, max_buf), dst=dst, group=group)
        return None
    raws = _zeros(world, max_raw)
    bufs = _zeros(world, max_buf)
    dist.gather(torch.zeros(max_raw, dtype=torch.uint8), raws, dst=dst, group=group)
    dist.gather(torch.zeros(max_buf, dtype=torch.uint8), bufs, dst=dst, group=group)
    row = 0
    for rank in range(world):
        if rank == dst:
            continue
        n_raw = int(sizes[rank][0])
        td[row] = _unpack(_as_bytes(raws[rank], n_raw), bufs[rank], f"rank {rank}")
        row += 1
    return td


class CollectivesMixin(TensorDictContract):
    """Collectives over `torch.distributed` (gloo, nccl, ...)."""

    __slots__ = ()

    def all_reduce(
        self,
        op: Any = None,
        *,
        group: Any = None,
        async_op: bool = False,
        bucket_bytes: int | None = None,
    ) -> Any:
        """Reduce every leaf over the ranks of `group`, in place, on every rank.

        Args:
            op: a `torch.distributed.ReduceOp` (default: `SUM`).
            group: the process group (default: the world).
            async_op: return the `Work` handles; wait on them before reading
                the leaves. Where results must be copied back (buckets,
                non-contiguous leaves, lazy stacks), the call waits first.
            bucket_bytes: pack the leaves of each device and dtype into buckets of
                at most this many bytes, one collective per bucket: faster with
                many small leaves.

        Returns:
            `None`, or the list of `Work` handles with `async_op=True`.
        """
        works = reduce_leaves(self, None, op, group, async_op, bucket_bytes)
        return works if async_op else None

    def reduce(
        self,
        dst: int,
        op: Any = None,
        async_op: bool = False,
        return_premature: bool = False,
        group: Any = None,
        *,
        bucket_bytes: int | None = None,
    ) -> Any:
        """Reduce every leaf over the ranks of `group` into rank `dst`'s TensorDict.

        On other ranks the values afterwards are undefined (partial results):
        clone first if they are needed. `return_premature` with `async_op`
        returns the `Work` handles at once; without it the call waits for them
        (the values are final on return). Other arguments as `all_reduce`.
        """
        works = reduce_leaves(self, dst, op, group, async_op, bucket_bytes)
        if async_op and return_premature:
            return works
        for work in works if async_op else ():
            work.wait()
        return None

    def broadcast(self, src: int, *, group: Any = None, device: Any = None) -> Any:
        """Send rank `src`'s TensorDict to every rank; returns it on each (no template needed).

        Rank `src` consolidates its TensorDict (if it is not already) and sends
        a JSON description of the layout, then the buffer; the other ranks build
        a new consolidated TensorDict from them, on `device` (default: the CPU).
        Non-tensor values must be JSON.
        """
        return broadcast(self, src, group=group, device=device)

    def all_gather(self, *, group: Any = None) -> list[Self]:
        """Every rank's TensorDict (structures may differ), as a list in rank order, on every rank."""
        return all_gather(self, group=group)

    def scatter(
        self,
        src: int,
        tensordicts: list[Any] | None = None,
        *,
        group: Any = None,
        device: Any = None,
    ) -> Any:
        """Send `tensordicts[i]` from rank `src` to rank `i`; returns, on each rank, the one it gets.

        Every rank of the group calls it. On `src`, `tensordicts` holds one
        TensorDict per rank (structures may differ); each is consolidated and
        sent as a JSON layout plus one buffer, so the receivers need no
        template. The TensorDict the method is called on is not used.

        Args:
            src: the rank that sends.
            tensordicts: on `src`, one TensorDict per rank, in rank order;
                ignored elsewhere.
            group: the process group (default: the world).
            device: where the received buffer (and so the result) lives
                (default: the CPU).

        Returns:
            The TensorDict this rank received (consolidated).

        Raises:
            RuntimeError: if `torch.distributed` is not initialised.
            ValueError: on `src`, if `tensordicts` does not hold one per rank.
        """
        return scatter(self, src, tensordicts, group=group, device=device)

    def gather_and_stack(self, dst: int, group: Any = None) -> Any:
        """Write the other ranks' TensorDicts into the rows of rank `dst`'s TensorDict, in place.

        On `dst` the first batch dim must be `world_size - 1` (one row per
        other rank, in rank order); returns it there and `None` elsewhere.
        """
        return gather_and_stack(self, dst, group)
