"""What a parsed metadata file gives: the entries of one folder and the folder itself.

`_meta.parse_folder` builds these after validating the metadata; the loader,
the writers (which keep a previous save intact) and the archive code read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import torch

__all__ = ["Pack", "TensorEntry", "DirEntry", "NonTensorEntry", "MetaEntry", "FolderMeta"]


@dataclass(slots=True)
class Pack:
    """The one data file of a packed save (format version 2) and what its metadata names in it."""

    root: str  # the folder whose meta.json describes the whole save
    path: str  # the data file, a plain name in `root`
    size: int  # its size in bytes when the save was parsed
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (offset, end, key) per leaf


@dataclass(slots=True)
class TensorEntry:
    key: str
    path: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int
    unbatched: bool = False  # an `UnbatchedTensor`: its shape lacks the batch dims
    offset: int = -1  # where its bytes start in the packed data file `path`; -1: all of `path`
    nested: list[list[int]] | None = None  # a nested tensor: its components' shapes (flat data)


@dataclass(slots=True)
class DirEntry:
    key: str
    folder: FolderMeta | None = None  # set once the sub-folder is parsed


@dataclass(slots=True)
class NonTensorEntry:
    key: str
    batch_size: tuple[int, ...]
    stacked: bool
    encoding: str  # "json" or "pickle"
    value: Any  # the JSON payload, for "json"
    path: str | None  # the pickle file, for "pickle"
    shared: str | None = None  # the file holding the live value, for shared values


MetaEntry = Union[TensorEntry, DirEntry, NonTensorEntry]  # noqa: UP007 (runtime alias, 3.10)


@dataclass(slots=True)
class FolderMeta:
    path: str
    kind: str
    batch_size: tuple[int, ...]
    device: str | None
    entries: tuple[MetaEntry, ...] = ()
    stack_dim: int = 0
    members: list[FolderMeta] = field(default_factory=list)  # lazy stacks: the members, in order
    class_name: str | None = None  # tensorclasses: "module:qualname"
    generation: int = 0  # the save that wrote it (see `_save`): larger is newer
    pack: Pack | None = None  # a packed save's data file (every folder of the save shares it)
    upstream: bool = False  # saved by upstream tensordict: loaded read-only unless asked
    names: tuple[str | None, ...] | None = None  # the batch dims' names, if any is named
