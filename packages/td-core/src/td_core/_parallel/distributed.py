"""Point-to-point communication of TensorDicts over `torch.distributed`.

`send`/`recv`/`isend`/`irecv` move the tensor leaves one by one (sorted keys
at each level, a lazy stack member by member), tagged `init_tag`,
`init_tag + 1`, ... or with a pseudo-random chain seeded by `init_tag`; the
receiver holds a TensorDict of the same structure (a template) and receives in
place. With `consolidated=True` one message carries the consolidated buffer.
The peer is a global rank (`dst`/`src`) or a rank in `group`
(`group_dst`/`group_src`); `send`/`recv` also take a pipe object.

`init_remote`/`from_remote_init` send the consolidated layout first (keys,
shapes, dtypes, offsets, batch size, lazy stacks member by member, as JSON
bytes in a uint8 tensor, never pickle), then the buffer: the receiver needs no
template and gets a consolidated TensorDict with the sender's layout, ready
for `recv(consolidated=True)`.

`torch.distributed` is imported when one of these is called, not at import.
"""

from __future__ import annotations

import inspect
import json
import operator
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_nt, is_td, rebuild, stack_parts
from td_core._io.consolidate import (
    build_from_layout,
    consolidate,
    consolidated_layout,
    describe_layout,
    whole_buffer,
)
from td_core.errors import NotAPipeError, NotConsolidatedError

__all__ = [
    "PipeMixin",
    "Transfer",
    "send",
    "recv",
    "isend",
    "irecv",
    "init_remote",
    "from_remote_init",
]


def _p2p_leaves(td: Any, out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The stored tensor leaves (not copies), sorted keys at each level, lazy stacks per member."""
    out = [] if out is None else out
    parts = stack_parts(td)
    if parts is not None:
        for member in parts[0]:
            _p2p_leaves(member, out)
        return out
    for _, value in sorted(td._items_str(), key=lambda kv: kv[0]):
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif is_td(value) and not is_nt(value):
            _p2p_leaves(value, out)
    return out


def _check_peer(peer: Any, group_peer: int | None, group: Any, name: str, group_name: str) -> None:
    """Exactly one of the global rank `peer` and the group rank `group_peer`, the latter with `group`."""
    if group_peer is not None:
        if group is None:
            raise ValueError(
                f"`{group_name}` requires `group`: it is a rank within that group; pass it too"
            )
        if peer is not None:
            raise ValueError(
                f"`{name}` and `{group_name}` are mutually exclusive: pass only one of them"
            )
    elif peer is None:
        raise ValueError(
            f"Exactly one of `{name}` (a global rank) and `{group_name}` (a rank within "
            "`group`) must be given"
        )


def _is_rank(peer: Any) -> bool:
    try:
        operator.index(peer)
    except TypeError:
        return False
    return True


def _next_tag(tag: int) -> int:
    """A deterministic pseudo-random successor of `tag` in `[0, 2**31)` (a 64-bit mix, truncated)."""
    x = (tag * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 32
    return x & 0x7FFFFFFF


def _tags(init_tag: int, count: int, pseudo_rand: bool) -> list[int]:
    """The tags of `count` leaves: `init_tag`, `init_tag + 1`, ... or a seeded pseudo-random chain."""
    if not pseudo_rand:
        return list(range(init_tag, init_tag + count))
    tags, tag = [], init_tag - 1
    for _ in range(count):
        tag = _next_tag(tag + 1)
        tags.append(tag)
    return tags


class Transfer(NamedTuple):
    """What `send`/`recv`/`isend`/`irecv` share: the peer, the tags, the form of the data.

    `peer` is the global rank (`dst` or `src`), `group_peer` the rank in `group`
    (`group_dst` or `group_src`); the methods' docstrings say the rest.
    """

    peer: Any
    group: Any
    group_peer: int | None
    init_tag: int
    pseudo_rand: bool
    consolidated: bool


def _peer_kwargs(how: Transfer, side: str) -> dict[str, Any]:
    """Keyword arguments naming the peer for `torch.distributed.<side>` (`"dst"` or `"src"`).

    A group rank goes as `group_dst`/`group_src` when the installed torch takes
    it, else it is translated to a global rank.
    """
    import torch.distributed as dist

    peer, group_peer, group = how.peer, how.group_peer, how.group
    _check_peer(peer, group_peer, group, side, f"group_{side}")
    if group_peer is None:
        return {side: peer, "group": group}
    if f"group_{side}" in inspect.signature(dist.send if side == "dst" else dist.recv).parameters:
        return {f"group_{side}": group_peer, "group": group}
    return {side: dist.get_global_rank(group, group_peer), "group": group}


def _peer_call(op: str, how: Transfer, side: str) -> Callable[[torch.Tensor, int], Any]:
    """`torch.distributed.<op>` (`send`, `isend`, `recv`, `irecv`) bound to the peer: a function
    of a tensor and a tag, giving the op's work (`None` for the blocking ops, which wait).

    A standalone group (made on a store, never registered through `new_group`) is
    unknown to `torch.distributed`'s functions: its own `send`/`recv` take the group rank.
    """
    import torch.distributed as dist

    if how.group_peer is not None and not _registered(how.group):
        _check_peer(how.peer, how.group_peer, how.group, side, f"group_{side}")
        raw = how.group.send if op.endswith("send") else how.group.recv
        blocking = not op.startswith("i")
        rank = how.group_peer

        def call(t: torch.Tensor, tag: int) -> Any:
            work = raw([t], rank, tag)
            if blocking:
                work.wait()
                return None
            return work

        return call
    peer = _peer_kwargs(how, side)
    fn = getattr(dist, op)
    return lambda t, tag: fn(t, tag=tag, **peer)


def _registered(group: Any) -> bool:
    import torch.distributed as dist

    try:
        dist.get_process_group_ranks(group)  # raises for a group c10d does not know
    except (KeyError, ValueError, RuntimeError):
        return False
    return True


def _pipe(peer: Any, group_peer: int | None, method: str) -> Any:
    """`peer.<method>` when `peer` is a pipe (not a rank), else `None`."""
    if peer is None or _is_rank(peer):
        return None
    side = "dst" if method == "send" else "src"
    if group_peer is not None:
        raise ValueError(f"`group_{side}` cannot be used when `{side}` is a pipe")
    return _pipe_method(peer, method, f"a rank as {side}")


def _wait(works: list[Any]) -> None:
    for work in works:
        if work is not None:
            work.wait()


def _layout_to_send(td: TensorDictContract, method: str) -> tuple[list[torch.Tensor], list[int]]:
    """The consolidated layout of `td`, consolidating a copy first when it is not consolidated."""
    layout = consolidated_layout(td)
    if layout is None:
        layout = consolidated_layout(consolidate(td))
    if layout is None or not layout[0]:
        raise ValueError(f"{method}: the TensorDict has no tensor leaf to send")
    return layout


def _recv_buffer(td: TensorDictContract, method: str) -> torch.Tensor:
    """The buffer of the consolidated `td`, or `NotConsolidatedError`."""
    layout = consolidated_layout(td)
    if layout is None or not layout[0]:
        raise NotConsolidatedError(
            f"{method}(consolidated=True) writes into the buffer of a consolidated TensorDict, "
            "but this one is not consolidated: call `consolidate()` on it first, or receive "
            "it with `from_remote_init`"
        )
    return whole_buffer(layout[0][0])


def _messages(
    td: TensorDictContract, how: Transfer, method: str
) -> tuple[list[torch.Tensor], list[int]]:
    """The tensors one transfer moves and their tags: the tensor leaves, or the one
    consolidated buffer (tag 0)."""
    if how.consolidated:
        if method.endswith("send"):
            buffer = whole_buffer(_layout_to_send(td, "send(consolidated=True)")[0][0])
        else:
            buffer = _recv_buffer(td, method)
        return [buffer], [0]
    leaves = _p2p_leaves(td)
    return leaves, _tags(how.init_tag, len(leaves), how.pseudo_rand)


def _last_tag(how: Transfer, tags: list[int]) -> int | None:
    """What `recv`/`isend` return: the tag of the last leaf (`None` if consolidated)."""
    if how.consolidated:
        return None
    return tags[-1] if tags else how.init_tag - 1


def _send_all(td: TensorDictContract, how: Transfer, method: str) -> tuple[list[Any], int | None]:
    """The send path of `send` and `isend` (`method`): every message sent (or started);
    the works and the last tag."""
    call = _peer_call(method, how, "dst")
    tensors, tags = _messages(td, how, method)
    works = [call(t.contiguous(), tag) for t, tag in zip(tensors, tags)]
    return works, _last_tag(how, tags)


def send(td: TensorDictContract, how: Transfer) -> None:
    """Send `td`'s tensor leaves (or its consolidated buffer) to the peer, or through a pipe."""
    pipe = _pipe(how.peer, how.group_peer, "send")
    if pipe is not None:
        pipe(td)
        return
    _send_all(td, how, "send")


def isend(td: TensorDictContract, how: Transfer, return_early: bool) -> Any:
    """Non-blocking `send`: the works with `return_early`, else waits and returns the last tag."""
    works, last = _send_all(td, how, "isend")
    if return_early:
        return works
    _wait(works)
    return last


def recv(td: TensorDictContract, how: Transfer) -> Any:
    """Receive into `td` in place; the last tag, `None` if consolidated, a pipe's result for a pipe."""
    pipe = _pipe(how.peer, how.group_peer, "recv")
    if pipe is not None:
        return pipe(td)
    call = _peer_call("recv", how, "src")
    leaves, tags = _messages(td, how, "recv")
    for t, tag in zip(leaves, tags):
        contiguous = t.is_contiguous()
        buffer = t if contiguous else torch.empty_like(t, memory_format=torch.contiguous_format)
        call(buffer, tag)
        if not contiguous:
            t.copy_(buffer)
    return _last_tag(how, tags)


def irecv(td: TensorDictContract, how: Transfer, return_premature: bool) -> Any:
    """Non-blocking `recv` into `td`'s (contiguous) leaves: the works with `return_premature`, else `None`."""
    call = _peer_call("irecv", how, "src")
    buffers, tags = _messages(td, how, "irecv")
    for t in buffers:
        if not t.is_contiguous():
            raise ValueError(
                f"irecv receives in place, but a leaf of shape {tuple(t.shape)} is not "
                "contiguous: use recv, or make the TensorDict contiguous first"
            )
    works = [call(t, tag) for t, tag in zip(buffers, tags)]
    if return_premature:
        return works
    _wait(works)
    return None


def _stack_tree(td: TensorDictContract, offsets: Iterator[int]) -> dict[str, Any]:
    """The JSON layout of the consolidated `td`: `describe_layout`'s, lazy stacks member by member."""
    parts = stack_parts(td)
    if parts is None:
        for key, value in td._items_str():
            if is_td(value) and not is_nt(value) and _has_stack(value):
                raise ValueError(
                    f"init_remote: the entry {key!r} is a lazy stack inside a TensorDict; "
                    "send `to_tensordict()` of it, or the stack itself"
                )
        return describe_layout(td, offsets)
    members, dim = parts
    return {"stack": dim, "members": [_stack_tree(m, offsets) for m in members]}


def _has_stack(td: TensorDictContract) -> bool:
    if stack_parts(td) is not None:
        return True
    return any(is_td(v) and not is_nt(v) and _has_stack(v) for v in td._values_str())


def _build(tree: Any, buffer: torch.Tensor, total: int, source: str) -> Any:
    if isinstance(tree, dict) and "stack" in tree:
        dim, members = tree["stack"], tree.get("members")
        if not isinstance(dim, int) or not isinstance(members, list) or not members:
            raise ValueError(f"{source}: malformed lazy stack in the layout")
        built = [_build(m, buffer, total, source) for m in members]
        return built[0].lazy_stack(built, dim)
    return build_from_layout(tree, buffer, total, source)


def _move(
    tensor: torch.Tensor, peer: int, group: Any, tag: int, sending: bool, bcast: bool
) -> None:
    """One message of `init_remote`: point-to-point with `tag`, or a broadcast from `peer`."""
    import torch.distributed as dist

    if bcast:
        dist.broadcast(tensor, src=peer, group=group)
    elif sending:
        dist.send(tensor, peer, group=group, tag=tag)
    else:
        dist.recv(tensor, peer, group=group, tag=tag)


def init_remote(
    td: TensorDictContract,
    dst: int | None = None,
    group: Any = None,
    device: Any = None,
    use_broadcast: bool = False,
) -> None:
    """Send the consolidated layout (JSON) and buffer of `td` to `dst`, for `from_remote_init`."""
    import torch.distributed as dist

    if dst is None and not use_broadcast:
        raise ValueError("init_remote: pass the receiver as `dst`, or `use_broadcast=True`")
    leaves, offsets = _layout_to_send(td, "init_remote")
    buffer = whole_buffer(leaves[0])
    tree = _stack_tree(rebuild(td, iter(leaves)), iter(offsets))
    meta = json.dumps({"total": buffer.numel(), "tree": tree}).encode()
    payload = torch.tensor(bytearray(meta), dtype=torch.uint8, device=device)
    size = torch.tensor([payload.numel()], dtype=torch.int64, device=device)
    peer = dist.get_rank() if use_broadcast else dst
    assert peer is not None
    if device is not None:
        buffer = buffer.to(device)
    for tag, tensor in enumerate((size, payload, buffer)):
        _move(tensor, peer, group, tag, True, use_broadcast)


def from_remote_init(
    src: int, group: Any = None, device: Any = None, use_broadcast: bool = False
) -> Any:
    """Receive a TensorDict sent with `init_remote`: a consolidated TensorDict (layout, then buffer)."""
    size = torch.zeros(1, dtype=torch.int64, device=device)
    _move(size, src, group, 0, False, use_broadcast)
    payload = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    _move(payload, src, group, 1, False, use_broadcast)
    source = f"from_remote_init (rank {src})"
    try:
        meta = json.loads(bytes(payload.tolist()).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{source}: the metadata is not valid JSON") from err
    total = meta.get("total") if isinstance(meta, dict) else None
    if not isinstance(total, int) or total < 0:
        raise ValueError(f"{source}: malformed metadata")
    buffer = torch.empty(total, dtype=torch.uint8, device=device)
    _move(buffer, src, group, 2, False, use_broadcast)
    return _build(meta.get("tree"), buffer, total, source)


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

    @staticmethod
    def from_remote_init(
        src: int, group: Any = None, device: Any = None, use_broadcast: bool = False
    ) -> Any:
        """Receive a TensorDict that `init_remote` sent; no template needed.

        Args:
            src: the rank of the sender.
            group: the process group (`None`: the default one).
            device: the device the messages go through and the result lives on
                (`None`: the CPU).
            use_broadcast: receive a broadcast (the sender passed `use_broadcast=True`).

        Returns:
            A consolidated TensorDict (a lazy stack if a lazy stack was sent):
            receive the next batches with `recv(consolidated=True)`.
        """
        return from_remote_init(src, group=group, device=device, use_broadcast=use_broadcast)

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
