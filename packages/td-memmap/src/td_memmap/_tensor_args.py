"""Argument checks shared by `MemoryMappedTensor`'s constructors: shape, device, mode, target file."""

from __future__ import annotations

import operator
import os
from typing import Any

import torch

from td_core.errors import DeviceError
from td_memmap._errors import MemmapExistsError, SymlinkTargetError
from td_memmap._format import MAX_DIMS

__all__ = ["check_mode", "check_device", "parse_shape", "target_file"]

_MODES = (None, "r", "r+")


def check_mode(mode: object) -> None:
    """Refuse a `mode` other than None, `"r"` or `"r+"`."""
    if mode not in _MODES:
        raise ValueError(f"mode must be None, 'r' or 'r+', got {mode!r}")


def check_device(device: Any, where: str) -> None:
    """Refuse any device but the CPU (None means the CPU): the data lives in a file or shared memory.

    Raises:
        DeviceError: (a `ValueError` and a `RuntimeError`) for `"meta"`,
            `"cuda"` or any other non-CPU device.
    """
    if device is None:
        return
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise DeviceError(f"{where}: {device!r} is not a device") from None
    if kind != "cpu":
        raise DeviceError(
            f"{where}: device={device!r} is not supported: memory-mapped tensors live in a file or "
            "shared memory on the CPU (Only CPU tensors are supported); create it on the CPU and "
            "use .to(device) for a copy elsewhere"
        )


def parse_shape(args: tuple[Any, ...], shape: Any, where: str = "") -> tuple[int, ...]:
    """The dims given as ints (`args`), one sequence (`args[0]`) or `shape=`.

    Raises:
        TypeError: no shape at all, both forms, or something that is not ints.
        ValueError: a negative dim or more than 64 dims.
    """
    if shape is not None:
        if args:
            raise TypeError("give the shape either positionally or as shape=, not both")
        args = (shape,)
    elif not args:
        raise TypeError(
            f"missing shape{where}: give the dims as ints, one sequence (() for a scalar) or shape="
        )
    if len(args) == 1 and not isinstance(args[0], int):
        args = tuple(args[0])
    try:
        dims = tuple(operator.index(s) for s in args)
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, got {args!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {list(dims)} has a negative dimension{where}")
    if len(dims) > MAX_DIMS:
        raise ValueError(
            f"shape has {len(dims)} dims{where}: tensors have at most {MAX_DIMS} (torch's limit)"
        )
    return dims


def target_file(filename: str | os.PathLike[str], existsok: bool) -> str:
    """The absolute path of a file to create, refused if it exists (unless `existsok`) or is a link.

    Raises:
        MemmapExistsError: the file exists and `existsok` is False.
        SymlinkTargetError: the path is a symbolic link (td-memmap never writes through one).
    """
    path = os.path.abspath(os.fspath(filename))
    if os.path.islink(path):
        raise SymlinkTargetError(
            f"refusing to write memory-mapped tensor through symlink {path!r} (it points to "
            f"{os.readlink(path)!r}): give the real path or remove the link"
        )
    if not existsok and os.path.exists(path):
        raise MemmapExistsError(f"file {path!r} already exists: pass existsok=True to overwrite it")
    return path
