"""`PointToPointMixin`: the `send`/`recv`/`isend`/`irecv`/`init_remote` methods.

Each method documents the upstream-compatible arguments and calls the one
implementation in `_distributed.py`.
"""

from __future__ import annotations

from typing import Any

from td_core._core.contract import TensorDictContract
from td_core._parallel.distributed import Transfer, init_remote, irecv, isend, recv, send

__all__ = ["PointToPointMixin"]


class PointToPointMixin(TensorDictContract):
    """`send` / `recv` / `isend` / `irecv` / `init_remote` over `torch.distributed`."""

    __slots__ = ()

    def send(
        self,
        dst: Any = None,
        *,
        group: Any = None,
        group_dst: int | None = None,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        consolidated: bool = False,
    ) -> None:
        """Send the tensor leaves to another rank; the receiver calls `recv` on a template.

        One message per leaf (sorted keys at each level, a lazy stack member by
        member), tagged `init_tag`, `init_tag + 1`, ...; the receiving
        TensorDict must have the same keys, shapes and dtypes. To reach a rank
        that knows nothing of the structure, use `init_remote`.

        Args:
            dst: the global rank of the receiver, or a pipe object with a
                `send(tensordict)` method (the other arguments are then unused).
                Give exactly one of `dst` and `group_dst`.
            group: the process group (`None`: the default one).
            group_dst: the receiver's rank within `group` (which is then required).
            init_tag: the first tag; the receiver passes the same value. Give
                transfers that overlap in time tag ranges that do not overlap.
            pseudo_rand: tag the leaves with a pseudo-random sequence seeded by
                `init_tag` instead of consecutive numbers; the receiver passes
                the same value.
            consolidated: send one message, the buffer of the consolidated
                TensorDict (consolidating a copy first when it is not); the
                receiver calls `recv(consolidated=True)` on a consolidated
                TensorDict of the same structure. `init_tag` and `pseudo_rand`
                are then unused.

        Raises:
            ValueError: if both or none of `dst` and `group_dst` are given, or
                `group_dst` without `group`.
            NotAPipeError: if `dst` is neither a rank nor an object with a `send` method.

        Example:
            ```python
            # rank 1
            TensorDict(a=torch.ones(3), batch_size=[3]).send(dst=0)
            # rank 0
            td = TensorDict(a=torch.zeros(3), batch_size=[3])
            td.recv(src=1)
            ```
        """
        how = Transfer(dst, group, group_dst, init_tag, pseudo_rand, consolidated)
        send(self, how)

    def recv(
        self,
        src: Any = None,
        *,
        group: Any = None,
        group_src: int | None = None,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        consolidated: bool = False,
    ) -> Any:
        """Receive what `send` sent into this TensorDict's leaves, in place.

        This TensorDict is the template: it must have the sender's keys,
        shapes and dtypes.

        Args:
            src: the global rank of the sender, or a pipe object with a
                `recv(tensordict)` method. Give exactly one of `src` and `group_src`.
            group: the process group (`None`: the default one).
            group_src: the sender's rank within `group` (which is then required).
            init_tag: the `init_tag` the sender used.
            pseudo_rand: the `pseudo_rand` the sender used.
            consolidated: receive one message into the buffer of this
                TensorDict, which must be consolidated (see `consolidate`, or a
                result of `from_remote_init`), updating every leaf at once.

        Returns:
            The tag of the last leaf received; `None` with `consolidated=True`;
            with a pipe, what the pipe's `recv` returns (use it: it may be
            another TensorDict).

        Raises:
            ValueError: if both or none of `src` and `group_src` are given, or
                `group_src` without `group`.
            NotConsolidatedError: (an `AttributeError`) with `consolidated=True`
                on a TensorDict that is not consolidated.
            NotAPipeError: if `src` is neither a rank nor an object with a `recv` method.
        """
        how = Transfer(src, group, group_src, init_tag, pseudo_rand, consolidated)
        return recv(self, how)

    def isend(
        self,
        dst: int | None = None,
        *,
        group: Any = None,
        group_dst: int | None = None,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        return_early: bool = False,
        consolidated: bool = False,
    ) -> Any:
        """Send the tensor leaves to another rank, all transfers started at once.

        As `send`, with asynchronous transfers. With `return_early=True` the
        call returns the work handles at once: `wait()` on each before
        changing this TensorDict. The receiver calls `irecv` or `recv`.

        Args:
            dst: the global rank of the receiver. Give exactly one of `dst`
                and `group_dst`.
            group: the process group (`None`: the default one).
            group_dst: the receiver's rank within `group` (which is then required).
            init_tag: the first tag; the receiver passes the same value.
            pseudo_rand: pseudo-random tags seeded by `init_tag`, as in `send`.
            return_early: return the work handles without waiting for them.
            consolidated: send one message, the consolidated buffer (a
                TensorDict that is not consolidated is consolidated, i.e.
                copied, on every call).

        Returns:
            The list of work handles with `return_early=True`; otherwise the
            tag of the last leaf sent, or `None` with `consolidated=True`.

        Raises:
            ValueError: if both or none of `dst` and `group_dst` are given, or
                `group_dst` without `group`.

        Example:
            ```python
            works = td.isend(dst=1, return_early=True)
            ...  # work that leaves td unchanged
            for work in works:
                work.wait()
            ```
        """
        how = Transfer(dst, group, group_dst, init_tag, pseudo_rand, consolidated)
        return isend(self, how, return_early)

    def irecv(
        self,
        src: int | None = None,
        *,
        group: Any = None,
        group_src: int | None = None,
        return_premature: bool = False,
        init_tag: int = 0,
        pseudo_rand: bool = False,
        consolidated: bool = False,
    ) -> Any:
        """Receive what `isend` or `send` sent into this TensorDict's leaves, all transfers at once.

        The leaves are written in place, so they must be contiguous. With
        `return_premature=True` the call returns the work handles at once:
        `wait()` on each before reading this TensorDict.

        Args:
            src: the global rank of the sender. Give exactly one of `src` and `group_src`.
            group: the process group (`None`: the default one).
            group_src: the sender's rank within `group` (which is then required).
            return_premature: return the work handles without waiting for them.
            init_tag: the `init_tag` the sender used.
            pseudo_rand: the `pseudo_rand` the sender used.
            consolidated: receive one message into the buffer of this
                consolidated TensorDict.

        Returns:
            The list of work handles with `return_premature=True`, else `None`.

        Raises:
            ValueError: if both or none of `src` and `group_src` are given,
                `group_src` without `group`, or a leaf is not contiguous.
            NotConsolidatedError: (an `AttributeError`) with `consolidated=True`
                on a TensorDict that is not consolidated.
        """
        how = Transfer(src, group, group_src, init_tag, pseudo_rand, consolidated)
        return irecv(self, how, return_premature)

    def init_remote(
        self,
        dst: int | None = None,
        group: Any = None,
        device: Any = None,
        use_broadcast: bool = False,
    ) -> None:
        """Send the structure, then the data, to a rank that has no template.

        The TensorDict is consolidated (a copy, unless it is already), its
        layout goes as JSON (never pickled), then its buffer as one message.
        The receiver calls `TensorDict.from_remote_init` and gets a
        consolidated TensorDict with the same layout: send the next batches
        with `send(consolidated=True)` into it. A lazy stack arrives as a lazy
        stack, a tensorclass as a TensorDict.

        Args:
            dst: the global rank of the receiver; unused with `use_broadcast`.
            group: the process group (`None`: the default one).
            device: the device the messages go through (a CUDA device with
                `nccl`); `None`: the CPU.
            use_broadcast: broadcast to every rank of `group` instead; each of
                them calls `from_remote_init(src=<this rank>, use_broadcast=True)`.

        Raises:
            ValueError: if `dst` is missing without `use_broadcast`, there is no
                tensor leaf, or a lazy stack sits inside a TensorDict (send
                `to_tensordict()` of it).
        """
        init_remote(self, dst, group=group, device=device, use_broadcast=use_broadcast)
