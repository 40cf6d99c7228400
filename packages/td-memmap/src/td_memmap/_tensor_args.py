"""Argument checks shared by `MemoryMappedTensor`'s constructors: shape, device, mode, target file."""

from __future__ import annotations

import operator
import os
import warnings
from typing import Any

import torch

from td_core.errors import DeviceError
from td_memmap._errors import MemmapExistsError, SymlinkTargetError
from td_memmap._format import MAX_DIMS, dtype_name

__all__ = ["check_mode", "check_device", "parse_shape", "target_file", "construct", "buffer_tensor"]

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


def construct(
    cls: Any,
    source: Any,
    *,
    dtype: torch.dtype | None,
    shape: Any,
    index: Any,
    device: Any,
    handler: Any,
    filename: str | os.PathLike[str] | None,
) -> Any:
    """`MemoryMappedTensor(...)`: dispatch to `cls`'s `from_storage`, `from_handler` or `from_tensor`."""
    check_device(device, "MemoryMappedTensor()")
    if isinstance(source, (str, os.PathLike)):
        raise TypeError(
            f"MemoryMappedTensor({source!r}): to map an existing file use "
            "MemoryMappedTensor.from_filename(filename, dtype, shape)"
        )
    if isinstance(source, torch.TypedStorage):
        dtype = source.dtype if dtype is None else dtype
        source = source.untyped()
    if isinstance(source, torch.UntypedStorage):
        return cls.from_storage(source, shape=shape, dtype=dtype, index=index, filename=filename)
    if handler is not None:
        if source is not None or dtype is None or shape is None:
            raise TypeError("MemoryMappedTensor(handler=...) needs dtype= and shape=, no data")
        return cls.from_handler(handler, dtype, shape, index)
    if source is None:
        raise TypeError(
            "MemoryMappedTensor() needs data (a tensor, array or nested list), a storage or a "
            "handler; for a new one of a given shape use MemoryMappedTensor.empty/zeros/ones/full"
        )
    if isinstance(source, cls) and dtype in (None, source.dtype):
        tensor: torch.Tensor = source
    else:
        tensor = torch.as_tensor(source, dtype=dtype, device="cpu")
    if shape is not None:
        tensor = tensor.reshape(parse_shape((), shape))
    out = cls.from_tensor(tensor, filename=filename)
    return out if index is None else out[index]


def buffer_tensor(
    handler: Any, dtype: torch.dtype, dims: tuple[int, ...]
) -> tuple[torch.Tensor, bool]:
    """A tensor of `dims` viewing the memory of `handler` (or its `.buffer`); whether it is writable.

    Raises:
        TypeError: `handler` exposes no buffer.
        ValueError: the buffer is smaller than `dims` needs.
    """
    buffer = getattr(handler, "buffer", handler)
    try:
        view = memoryview(buffer).cast("B")
    except TypeError:
        raise TypeError(
            f"from_handler expects a buffer or an object with a .buffer, got "
            f"{type(handler).__name__}"
        ) from None
    dtype_name(dtype)
    nbytes = dtype.itemsize
    for d in dims:
        nbytes *= d
    if nbytes > len(view):
        raise ValueError(
            f"from_handler: shape {list(dims)} of {dtype} needs {nbytes} bytes, the buffer "
            f"has {len(view)}"
        )
    if nbytes == 0:
        return torch.empty(dims, dtype=dtype, device="cpu"), not view.readonly
    with warnings.catch_warnings():  # torch warns about read-only buffers: they refuse writes
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.frombuffer(view, dtype=dtype, count=nbytes // dtype.itemsize)
    return tensor.view(dims), not view.readonly
