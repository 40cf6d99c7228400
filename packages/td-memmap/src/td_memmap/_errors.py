"""Exceptions raised by td-memmap.

Each class also subclasses the builtins a caller would reach for (and the one
upstream tensordict raises for the same situation), so `except ValueError`,
`except FileNotFoundError` or `except RuntimeError` all work.
"""

from __future__ import annotations

from td_core.errors import TDError

__all__ = [
    "MemmapError",
    "MemmapFormatError",
    "IncompleteSaveError",
    "MissingLeafError",
    "LeafSizeError",
    "UnsafePathError",
    "PickleNotAllowedError",
    "MemmapExistsError",
    "UnknownClassError",
    "ReadOnlyMemmapError",
    "SymlinkTargetError",
    "UnstorableValueError",
    "NotSupportedOnFileError",
]


class MemmapError(TDError):
    """Base class of every td-memmap exception."""


class MemmapFormatError(MemmapError, ValueError):
    """A saved folder does not follow the td-memmap format (bad metadata, unknown dtype, ...)."""


class IncompleteSaveError(MemmapFormatError, FileNotFoundError):
    """A folder has no metadata file: it is not a save, or its save never finished."""


class MissingLeafError(MemmapFormatError, FileNotFoundError):
    """A data file named by the metadata does not exist."""


class LeafSizeError(MemmapFormatError):
    """A data file's size does not match the shape and dtype in the metadata."""


class UnsafePathError(MemmapFormatError):
    """The metadata names a path that is not a plain name inside its folder."""


class PickleNotAllowedError(MemmapError, ValueError, RuntimeError):
    """A value needs pickle (to save or to load) and the caller did not opt in.

    A `RuntimeError` too: upstream raises one when loading pickled values without
    `allow_pickle=True`.
    """


class MemmapExistsError(MemmapError, FileExistsError, RuntimeError):
    """The target file or folder already exists and `existsok=False`."""


class UnknownClassError(MemmapError, LookupError, RuntimeError):
    """A save holds a tensorclass that is not imported (td-memmap never imports by name).

    Also a `RuntimeError`, which upstream tensordict raises in this case.
    """


class ReadOnlyMemmapError(MemmapError, RuntimeError):
    """A write to a memory-mapped tensor opened read-only (`mode="r"`).

    A `RuntimeError`, as upstream raises for writes to a locked TensorDict.
    """


class SymlinkTargetError(MemmapError, RuntimeError):
    """A file or folder to write is a symbolic link: td-memmap never writes through one.

    A `RuntimeError`, as upstream raises for the same refusal.
    """


class UnstorableValueError(MemmapError, TypeError, RuntimeError):
    """A value a file format cannot hold without pickle (or at all): a non-tensor
    value in HDF5, or a tensor that requires grad.

    A `TypeError`, and a `RuntimeError` as upstream raises in these cases.
    """


class NotSupportedOnFileError(MemmapError, NotImplementedError, ValueError):
    """An op a file-backed `PersistentTensorDict` does not do: a view (`permute`,
    `squeeze`, ...) that could not write through to the file, or an in-place
    restructuring. Make it dense first with `to_tensordict()`.

    A `NotImplementedError` (so a `RuntimeError`) and a `ValueError`, the
    classes upstream raises for these cases.
    """
