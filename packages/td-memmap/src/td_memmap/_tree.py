"""The container-agnostic tree the writer and reader work on.

`_convert` turns TensorDicts, lazy stacks and tensorclasses into this tree and
back, so the on-disk core never depends on td-core's classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import torch

__all__ = ["Node", "NonTensorLeaf", "Entry", "KIND_TD", "KIND_LAZY", "KIND_CLASS"]

#: The kinds of folder (the `kind` field of the metadata).
KIND_TD = "TensorDict"
KIND_LAZY = "LazyStackedTensorDict"
KIND_CLASS = "tensorclass"


@dataclass
class NonTensorLeaf:
    """A non-tensor value: one value for the whole batch, or (`stacked`) an object array.

    `shared` is the file holding the live value when it is shared between
    processes (`share_non_tensor=True`); `value` is then its value when read.
    """

    value: Any
    batch_size: tuple[int, ...]
    stacked: bool = False
    shared: str | None = None


@dataclass
class Node:
    """One folder: a kind, batch size, device and ordered entries.

    A `KIND_LAZY` node's entries are its members, keyed `"0"`, `"1"`, ...
    in order, and `stack_dim` is where they are stacked. A `KIND_CLASS`
    node's entries are the fields of a tensorclass instance; `class_name` is
    the class as `"module:qualname"` and `cls` the class itself once known.
    """

    batch_size: tuple[int, ...]
    device: str | None = None
    entries: dict[str, Entry] = field(default_factory=dict)
    kind: str = KIND_TD
    stack_dim: int = 0
    class_name: str | None = None
    cls: type | None = None
    path: str | None = None  # the folder it was saved to or loaded from
    # keys of the tensor entries that are `UnbatchedTensor`s (shapes without the batch dims)
    unbatched: set[str] = field(default_factory=set)
    read_only: bool = False  # its leaves were mapped read-only (mode "r", asked or by default)
    names: tuple[str | None, ...] | None = None  # the batch dims' names, if any is named

    def empty_like(self) -> Node:
        """A node of the same kind, batch size, device, class, unbatched keys and names, without entries."""
        return Node(
            self.batch_size,
            self.device,
            {},
            self.kind,
            self.stack_dim,
            self.class_name,
            self.cls,
            unbatched=set(self.unbatched),
            names=self.names,
        )


Entry = Union[torch.Tensor, Node, NonTensorLeaf]  # noqa: UP007 (a runtime alias, kept for 3.10)
