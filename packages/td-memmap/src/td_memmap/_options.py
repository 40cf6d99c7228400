"""`SaveOptions`: how a save writes, carried as one object from `memmap` to the writers.

The public functions (`memmap`, `memmap_`, `memmap_like`) spell every option
out in their signatures; from there the options travel as one frozen object,
so the writers (`save_tree`, `save_archive`, `share_tree`) do not repeat the
keyword list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["SaveOptions"]


@dataclass(frozen=True, slots=True)
class SaveOptions:
    """The options a save's writers read; the defaults are those of a plain internal save.

    Attributes:
        copy_existing: copy leaves already memory-mapped from another folder
            (otherwise a `RuntimeError`).
        num_threads: threads writing the leaves (0: the calling thread; None:
            chosen by the save from the leaves' sizes).
        like: allocate zero-filled leaves without copying data (`memmap_like`).
        allow_pickle: store values that have no JSON form with pickle.
        existsok: overwrite an existing save (otherwise `MemmapExistsError`).
        durable: also fsync every data file.
        share_non_tensor: write each non-tensor value to a file of its own,
            read and written by every process holding the result.
        layout: `"packed"`, `"files"`, or None (see `memmap`).
        compression: archives only: how the tensor payloads are compressed.
    """

    copy_existing: bool = False
    num_threads: int | None = 0
    like: bool = False
    allow_pickle: bool = False
    existsok: bool = True
    durable: bool = False
    share_non_tensor: bool = False
    layout: str | None = None
    compression: str | int | None = None

    @classmethod
    def of(cls, arguments: Mapping[str, Any], **changes: Any) -> SaveOptions:
        """The options found among `arguments` (a public function's parameters), then `changes`.

        Examples:
            >>> options = SaveOptions.of({"td": None, "durable": True, "robust_key": True}, like=True)
            >>> options.durable, options.like, options.existsok
            (True, True, True)
        """
        given = {f.name: arguments[f.name] for f in fields(cls) if f.name in arguments}
        return cls(**{**given, **changes})
