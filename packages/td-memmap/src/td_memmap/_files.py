"""Where the loader reads a save's files from, when not from the OS (an archive)."""

from __future__ import annotations

import os
from typing import Any, Protocol

__all__ = ["Files"]


class Files(Protocol):
    """Where the files of a save are read from, when they are not the OS's (an archive).

    `parse_folder` reads the real file system unless given one of these. Paths
    are absolute strings under `root`, joined with `os.sep`; the same checks
    run on them as on real files, and errors name them.
    """

    root: str

    def lstat(self, path: str) -> os.stat_result:
        """The `lstat` of `path`; `FileNotFoundError` if there is none."""
        ...

    def is_dir(self, path: str) -> bool:
        """Whether `path` is a folder."""
        ...

    def read_json(self, path: str) -> Any:
        """The parsed JSON file `path` (`IncompleteSaveError` if it is missing)."""
        ...
