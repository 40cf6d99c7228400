"""A folder's `index`: the metadata of every folder below it, as the save that wrote it saw them.

Identifying one version of a metadata file (`meta_stamp`) and reading the
`generation` of parsed metadata are the index's vocabulary; `_meta` uses them
while parsing, `_save` while writing.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from td_memmap._errors import MemmapFormatError
from td_memmap._files import Files

__all__ = ["Index", "meta_stamp", "generation_of"]

_lstat = os.lstat
_S_ISREG = stat.S_ISREG


def meta_stamp(st: os.stat_result) -> list[int]:
    """What identifies one version of a metadata file, from its `lstat`.

    Inode, size and mtime: a save publishes a metadata file by renaming it
    into place (which keeps all three); another save, an edit or a touch
    changes at least one.
    """
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def generation_of(data: Any) -> int:
    """The `generation` of parsed metadata (0 when absent or malformed; checked when parsed)."""
    gen = data.get("generation", 0) if type(data) is dict else 0
    return gen if type(gen) is int else 0


class Index:
    """A folder's `index`: sub-folder path -> `[stamp, metadata]` of every folder below it.

    Written by the save that wrote the folder's own metadata, it is that
    save's view of the whole tree: a loader takes a sub-folder's record
    rather than its `meta.json` (which a save publishes only after the
    top folder's, so it may be older or missing after a crash), unless that
    file is newer: another stamp and a `generation` at least the record's
    (the sub-folder was saved again on its own since). Records are validated
    exactly as files would be.
    """

    __slots__ = ("records", "path", "base", "files")

    def __init__(
        self, records: dict[str, Any], path: str, base: str, files: Files | None = None
    ) -> None:
        self.records = records
        self.path = path  # the metadata file holding it, for errors
        self.base = base  # where that file's folder is, from the folder loaded ("" for itself)
        self.files = files  # None: the OS's

    def lookup(self, rel: str, meta_path: str) -> tuple[Any, bool]:
        """The record of sub-folder `rel` (None if absent), and whether it is current.

        Current: the sub-folder's `meta.json` is missing (not yet published)
        or has the recorded stamp; otherwise the caller compares generations.
        """
        if self.base:
            rel = rel[len(self.base) + 1 :]
        record = self.records.get(rel)
        if record is None:
            return None, False
        if type(record) is not list or len(record) != 2 or type(record[0]) is not list:
            raise MemmapFormatError(
                f"{self.path!r}: 'index' record {rel!r} is not [stamp, metadata]"
            )
        try:
            st = _lstat(meta_path) if self.files is None else self.files.lstat(meta_path)
        except FileNotFoundError:
            return record[1], True
        except OSError:
            return None, False  # reading the file gives the precise error
        return record[1], _S_ISREG(st.st_mode) and record[0] == meta_stamp(st)
