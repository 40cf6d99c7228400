"""The storage interface under `PersistentTensorDict`: one backend per file format.

`PersistentTensorDict` keeps its entries in a hierarchical store (an HDF5 file
through h5py, a zarr store through zarr-python): groups are sub-TensorDicts,
arrays are leaves. Everything it does to the store goes through a
`StoreBackend`, so the container logic (batch sizes, staged in-place ops,
index reads and writes that touch only the rows asked for) is written once.
A backend works on the library's own node objects (h5py groups and datasets,
zarr groups and arrays) and never holds TensorDict state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from td_core import NonTensorData
from td_memmap._errors import ReadOnlyMemmapError
from td_memmap._h5_index import indexed_shape

__all__ = ["Snapshot", "StoreBackend", "whole"]


def whole(index: Any) -> bool:
    """Whether `index` selects everything (`()`, as reads without an index pass it)."""
    return isinstance(index, tuple) and not index


class Snapshot:
    """The nodes under a group, and tensors already read from them, for one read of the group.

    A backend that lists a whole tree at once (or reads many arrays at once)
    faster than group by group gives its `snapshot`; the default reads
    through the backend as it goes.
    """

    def __init__(
        self,
        backend: StoreBackend,
        children: dict[str, list[tuple[str, Any]]] | None = None,
        tensors: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self._backend = backend
        self._children = children  # group path -> its (key, node) pairs, in order
        self._tensors = tensors if tensors is not None else {}  # array path -> whole tensor

    def children(self, group: Any) -> list[tuple[str, Any]]:
        """The `(key, node)` pairs of `group`, as `StoreBackend.children` gives them."""
        if self._children is None:
            return self._backend.children(group)
        return self._children.get(self._backend.path(group), [])

    def read(self, node: Any, index: Any, device: Any) -> torch.Tensor:
        """The tensor in `node` (the rows `index` selects): read already, or now."""
        if whole(index):
            done = self._tensors.pop(self._backend.path(node), None)
            if done is not None:
                return done if device is None else done.to(device)
        return self._backend.read(node, index, device)


class StoreBackend:
    """What `PersistentTensorDict` needs from a file format (abstract).

    Attributes:
        name: the backend's name (`"h5"`, `"zarr"`), as given to `backend=`.
        what: how messages name one store (`"HDF5 file"`, `"zarr store"`).
        reopen: how messages tell a user to open a store for writing.
    """

    name = ""
    what = ""
    reopen = ""

    # ------------------------------------------------------------ opening
    def open(self, filename: Any, mode: str) -> Any:
        """The root group of the store `filename`, opened with `mode`."""
        raise NotImplementedError

    def write_new(self, td: Any, filename: Any, kwargs: dict[str, Any]) -> Any:
        """Write `td` to the new store `filename` (replaced; nothing is created if a
        value is refused) and return its root group opened for writing."""
        raise NotImplementedError

    def close(self, group: Any) -> None:
        """Close the store holding `group` (nothing if already closed)."""
        raise NotImplementedError

    def getstate(self, group: Any) -> dict[str, Any]:
        """What a pickle of a TensorDict on `group` carries to reopen it."""
        raise NotImplementedError

    def setstate(self, state: dict[str, Any]) -> Any:
        """The group `getstate` described, reopened."""
        raise NotImplementedError

    # ------------------------------------------------------------ naming
    def filename(self, node: Any) -> str:
        """The store's name, for messages and pickles."""
        raise NotImplementedError

    def path(self, node: Any) -> str:
        """The node's path from the store's root (`"/"` for the root)."""
        raise NotImplementedError

    def node_id(self, node: Any) -> tuple[str, str]:
        """A key naming the node in its store (the same node gives the same key)."""
        return (self.filename(node), self.path(node))

    def readonly(self, node: Any) -> bool:
        """Whether the store was opened read-only."""
        raise NotImplementedError

    def check_writable(self, node: Any, what: str) -> None:
        """Raise `ReadOnlyMemmapError` (naming the store and `what`) if read-only."""
        if self.readonly(node):
            raise ReadOnlyMemmapError(
                f"cannot {what}: the {self.what} {self.filename(node)!r} is open read-only; "
                f"open it with mode='r+' ({self.reopen})"
            )

    # ------------------------------------------------------------ structure
    def child(self, group: Any, key: str) -> Any:
        """The node `key` of `group`, or None."""
        raise NotImplementedError

    def children(self, group: Any) -> list[tuple[str, Any]]:
        """The `(key, node)` pairs of `group`, in a stable order."""
        raise NotImplementedError

    def keys(self, group: Any) -> list[str]:
        """The keys of `group` (no node is opened)."""
        return [key for key, _ in self.children(group)]

    def is_group(self, node: Any) -> bool:
        """Whether `node` is a group (a sub-TensorDict)."""
        raise NotImplementedError

    def is_text(self, node: Any) -> bool:
        """Whether the array `node` holds a non-tensor value."""
        raise NotImplementedError

    def delete(self, group: Any, key: str) -> None:
        """Remove the node `key` of `group` and all below it."""
        raise NotImplementedError

    def structure_changed(self, group: Any) -> None:
        """Called after nodes were created or deleted under `group`."""

    def check_key(self, key: Any) -> str:
        """`key` if it can name a node, else `ValueError` naming it."""
        raise NotImplementedError

    def check_value(self, value: Any, path: Any) -> None:
        """Refuse, before anything is written, what the store cannot hold (names `path`)."""
        raise NotImplementedError

    # ------------------------------------------------------------ batch sizes
    def stored_batch_size(self, group: Any) -> torch.Size | None:
        """The batch size recorded on `group`, or None."""
        raise NotImplementedError

    def store_batch_size(self, group: Any, size: torch.Size) -> None:
        """Record `size` as the batch size of `group`."""
        raise NotImplementedError

    def sub_batch_size(self, group: Any, parent: torch.Size) -> torch.Size:
        """The batch size of the sub-group `group` under a TensorDict of batch size `parent`."""
        stored = self.stored_batch_size(group)
        return parent if stored is None else stored

    def stored_names(self, group: Any) -> list[str | None] | None:
        """The dim names recorded on `group`, or None."""
        return None

    def stack_of(self, group: Any) -> tuple[int, int] | None:
        """`(stack_dim, count)` when `group` holds a lazy stack, else None."""
        return None

    def tensor_leaves(self, group: Any) -> Iterator[tuple[str, tuple[int, ...]]]:
        """`(path, shape)` of every tensor array under `group`, at any depth, but inside a
        lazy stack (whose members have batch sizes and shapes of their own)."""
        for _, node in self.children(group):
            if self.is_group(node):
                if self.stack_of(node) is None:
                    yield from self.tensor_leaves(node)
            elif not self.is_text(node):
                yield self.path(node), self.shape(node)

    def auto_batch_size(self, group: Any, batch_dims: int | None = None) -> torch.Size:
        """The longest leading shape every array under `group` shares (at most `batch_dims`)."""
        shapes = [shape for _, shape in self.tensor_leaves(group)]
        common: list[int] = []
        for dims in zip(*shapes):
            if len(set(dims)) != 1:
                break
            common.append(dims[0])
        if not shapes:
            common = []
        return torch.Size(common if batch_dims is None else common[:batch_dims])

    # ------------------------------------------------------------ data
    def shape(self, node: Any) -> tuple[int, ...]:
        """The shape of the array `node`."""
        return tuple(node.shape)

    def read(self, node: Any, index: Any = (), device: Any = None) -> torch.Tensor:
        """The tensor in the array `node` (only the rows `index` selects)."""
        raise NotImplementedError

    def snapshot(self, group: Any, index: Any) -> Snapshot:
        """What a read of `group` (the rows `index` selects) uses: see `Snapshot`."""
        return Snapshot(self)

    def read_text(self, node: Any) -> Any:
        """The non-tensor value in the array `node`."""
        raise NotImplementedError

    def text_entry(self, node: Any, batch_size: torch.Size, device: Any, index: Any = ()) -> Any:
        """The non-tensor entry in the array `node` of a TensorDict of `batch_size` (only
        the rows `index` selects): one value, or a `NonTensorStack` where the backend keeps
        one value per element."""
        return NonTensorData(self.read_text(node), indexed_shape(batch_size, index), device)

    def meta(self, node: Any) -> torch.Tensor:
        """A `meta` tensor with the shape and dtype of the array `node` (no data read)."""
        raise NotImplementedError

    def create(self, group: Any, key: str, tensor: torch.Tensor, kwargs: dict[str, Any]) -> None:
        """Write `tensor` as the new array `key` of `group` (replacing a node there)."""
        raise NotImplementedError

    def create_text(self, group: Any, key: str, value: Any, path: Any) -> None:
        """Write the non-tensor `value` as the new array `key` of `group`."""
        raise NotImplementedError

    def write_group(self, group: Any, key: str, td: Any, kwargs: dict[str, Any]) -> None:
        """Write the TensorDict `td` as the group `key` of `group` (checked first)."""
        raise NotImplementedError

    def write_at(self, node: Any, index: Any, tensor: torch.Tensor) -> None:
        """Write `tensor` into the rows `index` of the array `node` (all of it for `()`)."""
        raise NotImplementedError

    def copy_to(self, group: Any, newfile: Any, batch_sizes: dict[str, Any]) -> None:
        """Copy every node of `group` to the new store `newfile` (`batch_sizes`: relative
        group path -> batch size to record)."""
        raise NotImplementedError
