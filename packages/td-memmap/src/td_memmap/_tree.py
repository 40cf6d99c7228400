"""The container-agnostic tree the writer and reader work on.

``_convert`` turns TensorDicts into this tree and back, so the on-disk core
never depends on td-core's classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import torch

__all__ = ["Node", "NonTensorLeaf", "Entry"]


@dataclass
class NonTensorLeaf:
    """A non-tensor value: one value for the whole batch, or (``stacked``) an object array."""

    value: Any
    batch_size: tuple[int, ...]
    stacked: bool = False


@dataclass
class Node:
    """One folder: a kind, batch size, device and ordered entries."""

    batch_size: tuple[int, ...]
    device: str | None = None
    entries: dict[str, Entry] = field(default_factory=dict)
    kind: str = "TensorDict"


Entry = Union[torch.Tensor, Node, NonTensorLeaf]  # noqa: UP007 (a runtime alias, kept for 3.10)
