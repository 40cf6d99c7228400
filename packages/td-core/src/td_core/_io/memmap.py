"""Saving and loading as folders of memory-mapped files: the TensorDict side of td-memmap.

The methods live in td-memmap, found through the `memmap` extension (td-core
never imports a sibling); without it they raise `ImportError` naming the
package to install. td-memmap's functions document every argument.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.extensions import delegate, has_extension, load_extension
from td_core._core.keys import NestedKey
from td_core._ops.names import carry_names

__all__ = ["MemmapMixin"]


def _same_names(source: Any, result: Any) -> Any:
    """`result` (a copy of `source` on memory-mapped files) with `source`'s dim names."""
    names = source._raw_names()
    if names is not None and result is not source and result.batch_size == source.batch_size:
        carry_names(result, names)
    return result


class MemmapMixin(TensorDictContract):
    """`memmap`, `load_memmap` and the other methods delegated to td-memmap."""

    __slots__ = ()

    # The memmap methods live in td-memmap (found through the `memmap` extension);
    # td-memmap's functions document every argument. Each method hands its own
    # arguments on with `delegate`: td-memmap's functions use the same names.
    def memmap(
        self,
        prefix: str | os.PathLike[str] | None = None,
        copy_existing: bool = False,
        *,
        num_threads: int | None = None,
        return_early: bool = False,
        share_non_tensor: bool = False,
        existsok: bool = True,
        robust_key: bool | None = True,
        archive: bool | None = None,
        compression: str | int | None = None,
        atomic: bool = False,
        allow_pickle: bool = False,
        durable: bool = False,
    ) -> Any:
        """Write to memory-mapped files under `prefix`; a locked copy on them (needs td-memmap).

        A save over an earlier one is atomic: the earlier save stays loadable
        until the new one is complete. Without `prefix`, leaves move to
        shared memory. See `td_memmap.memmap` for every argument.
        """
        return _same_names(self, delegate(_ext_memmap().memmap, locals(), self))

    def memmap_(
        self,
        prefix: str | os.PathLike[str] | None = None,
        copy_existing: bool = False,
        *,
        num_threads: int | None = None,
        return_early: bool = False,
        share_non_tensor: bool = False,
        existsok: bool = True,
        robust_key: bool | None = True,
        atomic: bool = False,
        allow_pickle: bool = False,
        durable: bool = False,
    ) -> Any:
        """Like `memmap`, replacing this TensorDict's leaves in place (needs td-memmap)."""
        return delegate(_ext_memmap().memmap, locals(), self, inplace=True)

    def memmap_like(
        self,
        prefix: str | os.PathLike[str] | None = None,
        copy_existing: bool = False,
        *,
        existsok: bool = True,
        num_threads: int | None = None,
        return_early: bool = False,
        share_non_tensor: bool = False,
        robust_key: bool | None = True,
        archive: bool | None = None,
        durable: bool = False,
    ) -> Any:
        """Allocate memory-mapped files shaped like this TensorDict, without copying (needs td-memmap)."""
        return _same_names(self, delegate(_ext_memmap().memmap_like, locals(), self))

    def save(
        self,
        prefix: str | os.PathLike[str] | None = None,
        copy_existing: bool = False,
        *,
        num_threads: int | None = None,
        return_early: bool = False,
        share_non_tensor: bool = False,
        robust_key: bool | None = True,
        archive: bool | None = None,
        compression: str | int | None = None,
        atomic: bool = False,
    ) -> Any:
        """Save to `prefix`: the same as `memmap` (needs td-memmap)."""
        return delegate(self.memmap, locals())

    dumps = save

    def is_memmap(self) -> bool:
        """Whether every leaf is memory-mapped (needs td-memmap to be True)."""
        return has_extension("memmap") and bool(_ext_memmap().is_memmap(self))

    @classmethod
    def load_memmap(
        cls,
        prefix: str | os.PathLike[str],
        device: torch.device | str | None = None,
        non_blocking: bool = False,
        *,
        out: TensorDictContract | None = None,
        robust_key: bool | None = True,
        subpath: NestedKey | None = None,
        mode: str | None = None,
        num_threads: int = 0,
        allow_pickle: bool | None = None,
    ) -> Any:
        """Load a TensorDict saved with `memmap` (needs td-memmap).

        Leaves are mapped read-write and shared by default (writes reach the
        files); `mode="r"` gives a locked TensorDict whose leaves refuse writes.
        """
        return delegate(_ext_memmap().load_memmap, locals())

    @classmethod
    def load(
        cls,
        prefix: str | os.PathLike[str],
        device: torch.device | str | None = None,
        non_blocking: bool = False,
        *,
        out: TensorDictContract | None = None,
        robust_key: bool | None = True,
        subpath: NestedKey | None = None,
        mode: str | None = None,
        num_threads: int = 0,
        allow_pickle: bool | None = None,
    ) -> Any:
        """Load a saved TensorDict: the same as `load_memmap` (needs td-memmap)."""
        return delegate(cls.load_memmap, locals())

    def load_memmap_(
        self,
        prefix: str | os.PathLike[str],
        robust_key: bool | None = True,
        *,
        allow_pickle: bool | None = None,
        mode: str | None = None,
    ) -> Any:
        """Replace this TensorDict's content, in place, by the save in `prefix` (needs td-memmap)."""
        return delegate(_ext_memmap().load_memmap_, locals(), self)

    def load_(
        self,
        prefix: str | os.PathLike[str],
        robust_key: bool | None = True,
        *,
        allow_pickle: bool | None = None,
        mode: str | None = None,
    ) -> Any:
        """The same as `load_memmap_` (needs td-memmap)."""
        return delegate(self.load_memmap_, locals())

    def memmap_refresh_(self, *, allow_pickle: bool | None = None) -> Any:
        """Reload in place from the folder this TensorDict was saved to or loaded from (needs td-memmap)."""
        return delegate(_ext_memmap().memmap_refresh_, locals(), self)

    def make_memmap(
        self,
        key: NestedKey,
        shape: Sequence[int] | torch.Size,
        *,
        dtype: torch.dtype | None = None,
        robust_key: bool | None = True,
    ) -> Any:
        """Add a zero-filled memory-mapped leaf `key` in this TensorDict's folder; returns it (needs td-memmap).

        Missing sub-TensorDicts on the way are created; an existing `key` is refused.
        """
        return delegate(_ext_memmap().make_memmap, locals(), self)

    def make_memmap_from_tensor(
        self,
        key: NestedKey,
        tensor: torch.Tensor,
        *,
        copy_data: bool = True,
        existsok: bool = False,
        robust_key: bool | None = True,
    ) -> Any:
        """Add a memory-mapped copy of `tensor` as `key` in this TensorDict's folder (needs td-memmap).

        Missing sub-TensorDicts on the way are created; an existing `key` is
        refused unless `existsok`.
        """
        return delegate(_ext_memmap().make_memmap_from_tensor, locals(), self)

    def make_memmap_from_storage(
        self,
        key: NestedKey,
        storage: torch.UntypedStorage,
        shape: Sequence[int] | torch.Size,
        *,
        dtype: torch.dtype | None = None,
        robust_key: bool | None = True,
    ) -> Any:
        """Add a memory-mapped copy of `storage` viewed as `shape` as `key` (needs td-memmap)."""
        return delegate(_ext_memmap().make_memmap_from_storage, locals(), self)

    def to_store(
        self,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        device: Any = None,
        **kwargs: Any,
    ) -> Any:
        """A copy of this TensorDict kept in a Redis-protocol server (needs `td-memmap[redis]`).

        Returns a `TensorDictStore` (a `LazyStackedTensorDictStore` for a lazy
        stack); td-memmap's `to_store` documents every argument.
        """
        return delegate(_ext_memmap().to_store, locals(), self)

    @property
    def saved_path(self) -> str | None:
        """The folder this TensorDict was last saved to or loaded from by td-memmap, or None."""
        return _ext_memmap().saved_path(self) if has_extension("memmap") else None


def _ext_memmap() -> Any:
    return load_extension("memmap", "td-memmap")
