"""Non-tensor values shared between processes (`share_non_tensor=True`).

A shared value lives in its own small file of the saved folder,
`<stem>.nt.json`, holding the value's JSON form (the encoding of the
metadata's `value` fields). A shared leaf keeps only the file's path: every
read of its `data` re-reads the file, and `leaf.data = value` writes the
new value to a temporary file renamed over the old one. A reader, in any
process, sees the old value or the new one, never a mix, without locks; of
concurrent writers the last rename wins. Pickling a shared leaf sends the
path, so worker processes share the value too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, overload

import numpy as np
import torch

from td_core import NonTensorData, NonTensorStack
from td_memmap._errors import MemmapFormatError, MissingLeafError
from td_memmap._format import object_array, value_from_json, value_to_json
from td_memmap._io import read_json, write_bytes

__all__ = [
    "SharedNonTensorData",
    "SharedNonTensorStack",
    "make_shared",
    "read_value",
    "shared_value",
    "encode_value",
    "write_value",
]


def read_value(path: str, stacked: bool, batch_size: tuple[int, ...]) -> Any:
    """The value stored in the shared-value file `path` (an object array if `stacked`).

    Raises:
        MissingLeafError: (a `FileNotFoundError`) the file is gone.
        MemmapFormatError: (a `ValueError`) it does not hold a value td-memmap wrote.
    """
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise MissingLeafError(f"shared non-tensor value file {path!r} is missing") from None
    try:
        value = value_from_json(data)
        return object_array(value, batch_size) if stacked else value
    except (ValueError, TypeError, RecursionError) as e:
        raise MemmapFormatError(f"shared non-tensor value file {path!r}: bad value ({e})") from None


def shared_value(data: bytes, path: str, stacked: bool, batch_size: tuple[int, ...]) -> Any:
    """The value a shared-value file holds, given its bytes (read from an archive)."""
    try:
        value = value_from_json(json.loads(data.decode("utf-8")))
        return object_array(value, batch_size) if stacked else value
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError) as e:
        raise MemmapFormatError(f"shared non-tensor value file {path!r}: bad value ({e})") from None


def encode_value(value: Any, stacked: bool, batch_size: tuple[int, ...]) -> bytes:
    """The file contents for `value`; `TypeError` if it has no JSON form.

    A `stacked` value is an object array (or nested lists) of shape `batch_size`.
    """
    if stacked:
        value = value.tolist() if isinstance(value, np.ndarray) else value
        try:
            object_array(value, batch_size)
        except ValueError as e:
            raise ValueError(f"cannot write a stacked value: {e}") from None
    return json.dumps(value_to_json(value), allow_nan=False).encode("utf-8")


def write_value(path: str, value: Any, stacked: bool, batch_size: tuple[int, ...]) -> None:
    """Replace the value in `path` atomically (a temporary file renamed over it)."""
    write_bytes(path, encode_value(value, stacked, batch_size), mode="atomic")


class _SharedFile:
    """What both shared leaves share: their value lives in the file `_file`."""

    __slots__ = ()
    _file: str
    _stacked: ClassVar[bool]
    data: Any  # a property of each leaf class, reading and writing `_file`
    batch_size: torch.Size
    device: torch.device | None

    def _write_(self, value: Any) -> bool:
        self.data = value
        return True

    @property
    def filename(self) -> str:
        """The file holding the value (a stack's values)."""
        return self._file

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        device = None if self.device is None else str(self.device)
        return (make_shared, (self._file, tuple(self.batch_size), self._stacked, device))


class SharedNonTensorData(_SharedFile, NonTensorData):
    """A non-tensor value for the whole batch, shared between processes through a file.

    Reading `data` (what `td[key]` gives) re-reads the file; assigning
    `leaf.data = value` writes it, and every process holding the leaf (or
    one pickled from it), or loading the folder, sees the new value. Made by
    `memmap(..., share_non_tensor=True)` and by `load_memmap(...,
    writable=True)` of such a save.

    `td.set_(key, value)` and `td.update_(...)` write into the file too
    (through td-core's `_write_` hook), as does `td.get(key).data = value`.
    So do `td.set_at_(key, value, index)` and item assignment into the list
    `td[key]` gives, for a stack; for this one value, a write at an index
    must give every element the same value (anything else raises
    `ValueError`: the file holds one value).

    Examples:
        >>> import tempfile
        >>> from td_core import TensorDict
        >>> td = TensorDict(batch_size=[2])
        >>> td["mode"] = "train"
        >>> shared = td.memmap(tempfile.mkdtemp(), share_non_tensor=True)
        >>> shared.get("mode").data = "eval"  # seen by every process sharing it
        >>> shared["mode"], shared[1]["mode"]
        ('eval', 'eval')
    """

    __slots__ = ("_file",)
    _stacked = False

    @property
    def data(self) -> Any:
        return read_value(self._file, False, ())

    @data.setter
    def data(self, value: Any) -> None:
        write_value(self._file, value, False, ())

    def _map_batch(self, fn: Callable[..., Any], lead: torch.Size, n: int) -> NonTensorData:
        return make_shared(self._file, lead + self.batch_size[n:], False, self.device)

    def _map_batch_multi(self, fn: Callable[..., Sequence[torch.Tensor]]) -> list[Any]:
        positions = torch.arange(self.batch_size.numel()).view(self.batch_size)
        return [make_shared(self._file, idx.shape, False, self.device) for idx in fn(positions)]

    def clone(self, recurse: bool = True) -> NonTensorData:
        """An ordinary (unshared) leaf holding the current value."""
        return NonTensorData(self.data, self.batch_size, self.device)

    def __deepcopy__(self, memo: dict[int, Any]) -> NonTensorData:
        return NonTensorData(copy.deepcopy(self.data, memo), self.batch_size, self.device)

    def __repr__(self) -> str:
        return (
            f"SharedNonTensorData(data={self.data!r}, batch_size={self.batch_size}, "
            f"device={self.device}, filename={self._file!r})"
        )


class SharedNonTensorStack(_SharedFile, NonTensorStack):
    """One non-tensor value per batch element, shared between processes through a file.

    As `SharedNonTensorData`: reads re-read the file, and `leaf.data =
    values` (nested lists, or an object array, of the batch shape) writes it.
    Indexing gives ordinary leaves holding the values read.
    """

    __slots__ = ("_file",)
    _stacked = True

    @property
    def _values(self) -> np.ndarray:  # a read-only view of the file
        return read_value(self._file, True, tuple(self.batch_size))

    @property
    def data(self) -> list[Any]:
        return self._values.tolist()

    @data.setter
    def data(self, values: Any) -> None:
        write_value(self._file, values, True, tuple(self.batch_size))

    def clone(self, recurse: bool = True) -> NonTensorStack:
        """An ordinary (unshared) stack holding the current values."""
        return NonTensorStack(self._values, device=self.device)

    def __deepcopy__(self, memo: dict[int, Any]) -> NonTensorStack:
        return NonTensorStack(copy.deepcopy(self._values, memo), device=self.device)

    def __repr__(self) -> str:
        return (
            f"SharedNonTensorStack({self.data!r}, batch_size={self.batch_size}, "
            f"device={self.device}, filename={self._file!r})"
        )


@overload
def make_shared(
    path: str,
    batch_size: Sequence[int],
    stacked: Literal[False],
    device: torch.device | str | None = None,
) -> SharedNonTensorData: ...
@overload
def make_shared(
    path: str,
    batch_size: Sequence[int],
    stacked: bool,
    device: torch.device | str | None = None,
) -> SharedNonTensorData | SharedNonTensorStack: ...
def make_shared(
    path: str,
    batch_size: Sequence[int],
    stacked: bool,
    device: torch.device | str | None = None,
) -> SharedNonTensorData | SharedNonTensorStack:
    """A shared leaf reading `path` (nothing is read now)."""
    cls: type[SharedNonTensorData] | type[SharedNonTensorStack]
    cls = SharedNonTensorStack if stacked else SharedNonTensorData
    leaf = object.__new__(cls)
    leaf._file = path
    leaf.batch_size = torch.Size(batch_size)
    leaf.device = None if device is None else torch.device(device)
    return leaf
