"""What a parsed metadata file gives: the entries of one folder and the folder itself.

`_meta.parse_folder` builds these after validating the metadata; the loader,
the writers (which keep a previous save intact) and the archive code read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import torch

__all__ = [
    "PackPart",
    "Pack",
    "TensorEntry",
    "DirEntry",
    "NonTensorEntry",
    "MetaEntry",
    "FolderMeta",
]


@dataclass(slots=True)
class PackPart:
    """One data file of a packed save and the bytes its metadata names in it."""

    path: str  # the data file, a plain name in the save's folder
    size: int  # its size in bytes when the save was parsed
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (offset, end, key) per leaf


@dataclass(slots=True)
class Pack:
    """The data files of a packed save: one (format version 2) or more (version 3)."""

    root: str  # the folder whose meta.json describes the whole save
    version: int  # the version of every metadata object of the save
    parts: list[PackPart]  # in the order the metadata lists them (a leaf's `part` indexes it)

    def name_for(self, part: object) -> str:
        """The data file a leaf's `part` names, for messages (all of them when it names none)."""
        if type(part) is int and 0 <= part < len(self.parts):
            return self.parts[part].path
        return self.parts[0].path if len(self.parts) == 1 else str([p.path for p in self.parts])


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
    pack: Pack | None = None  # a packed save's data files (every folder of the save shares them)
    upstream: bool = False  # saved by upstream tensordict: loaded read-only unless asked
    names: tuple[str | None, ...] | None = None  # the batch dims' names, if any is named
