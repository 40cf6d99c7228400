"""``MemoryMappedTensor``: a ``torch.Tensor`` whose storage is a file (or shared memory)."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

import torch

from td_memmap._errors import MemmapExistsError
from td_memmap._format import dtype_from_name, dtype_name
from td_memmap._io import allocate_leaf, check_leaf, map_leaf, map_leaves, write_leaf

__all__ = ["MemoryMappedTensor"]

_PathLike = str | os.PathLike
_make_subclass = torch.Tensor._make_subclass
_getitem = torch.Tensor.__getitem__


def _parse_shape(args: tuple[Any, ...], shape: Any) -> tuple[int, ...]:
    if shape is not None:
        if args:
            raise TypeError("give the shape either positionally or as shape=, not both")
        args = (shape,)
    if len(args) == 1 and not isinstance(args[0], int):
        args = tuple(args[0])
    try:
        dims = tuple(operator.index(s) for s in args)
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, got {args!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {list(dims)} has a negative dimension")
    return dims


def _target(filename: _PathLike, existsok: bool) -> str:
    path = os.path.abspath(os.fspath(filename))
    if not existsok and os.path.exists(path):
        raise MemmapExistsError(f"file {path!r} already exists: pass existsok=True to overwrite it")
    return path


class MemoryMappedTensor(torch.Tensor):
    """A tensor whose data lives in a file, shared by every process that maps it.

    Build one with :meth:`from_tensor`, :meth:`empty`, :meth:`zeros`,
    :meth:`ones`, :meth:`full`, the ``*_like`` variants, or map an existing raw
    file with :meth:`from_filename`. Without ``filename`` the data lives in
    anonymous shared memory instead.

    Results of operations are plain tensors, except basic indexing (ints,
    slices, ``None``, ``...``), which gives a memory-mapped view of the same
    file, as upstream does. Pickling sends the file name, shape, strides and
    offset, not the data, so a worker process maps the same file (an anonymous
    one pickles as an ordinary tensor, which ``torch.multiprocessing`` shares).

    A mapping opened read-only (``writable=False``) is copy-on-write: in-place
    writes change this process's memory, never the file, and another process
    that maps the file does not see them.

    Examples:
        >>> import tempfile, os, pickle, torch
        >>> folder = tempfile.mkdtemp()
        >>> t = MemoryMappedTensor.from_tensor(torch.arange(6.0).view(2, 3),
        ...                                    filename=os.path.join(folder, "x.bin"))
        >>> t[1]
        MemoryMappedTensor([3., 4., 5.])
        >>> pickle.loads(pickle.dumps(t[1])).filename == t.filename
        True
    """

    # class defaults: an instance made by ``as_subclass`` behaves as a shared-memory one
    _mm_file: str | None = None
    _mm_writable: bool = True

    @staticmethod
    def __new__(cls, *args: Any, **kwargs: Any) -> MemoryMappedTensor:
        raise TypeError(
            "MemoryMappedTensor is built with MemoryMappedTensor.from_tensor, .empty, .zeros, "
            ".ones, .full, .from_filename or the *_like constructors"
        )

    # ---------------------------------------------------------------------------- internals

    @classmethod
    def _wrap(cls, tensor: torch.Tensor, file: str | None, writable: bool) -> MemoryMappedTensor:
        out = _make_subclass(cls, tensor)
        out._mm_file = file
        out._mm_writable = writable
        return out  # type: ignore[return-value]

    @classmethod
    def _map(
        cls,
        path: str,
        dtype: torch.dtype,
        shape: tuple[int, ...],
        *,
        writable: bool,
        nbytes: int | None = None,
    ) -> MemoryMappedTensor:
        out = _make_subclass(cls, map_leaf(path, dtype, shape, writable=writable, nbytes=nbytes))
        out._mm_file = path
        out._mm_writable = writable
        return out  # type: ignore[return-value]

    @classmethod
    def _map_many(
        cls, leaves: Sequence[tuple[str, torch.dtype, tuple[int, ...], int]], *, writable: bool
    ) -> list[MemoryMappedTensor]:
        """``_map`` of many ``(path, dtype, shape, nbytes)`` whose sizes are checked."""
        out = map_leaves(leaves, writable=writable)
        for (path, _, _, _), tensor in zip(leaves, out):
            # each tensor is new and referenced only here: retyping it in place is
            # the same as wrapping it in a subclass view, at half the cost
            tensor.__class__ = cls
            tensor._mm_file = path
            tensor._mm_writable = writable
        return out  # type: ignore[return-value]

    # Operations run at plain-tensor speed and give plain tensors; only basic
    # indexing is intercepted, to keep views of the file memory-mapped.
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __getitem__(self, index: Any) -> torch.Tensor:
        out = _getitem(self, index)
        if out._is_view():
            return MemoryMappedTensor._wrap(out, self._mm_file, self._mm_writable)
        return out

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        text = repr(_make_subclass(torch.Tensor, self))
        name = type(self).__name__
        pad = " " * (len(name) - len("tensor"))
        return name + text[len("tensor") :].replace("\n", "\n" + pad)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        plain = torch.Tensor._make_subclass(torch.Tensor, self)
        if self._mm_file is None:
            return (_rebuild_anonymous, (plain,))
        storage = plain.untyped_storage()
        return (
            _rebuild_file,
            (
                self._mm_file,
                dtype_name(plain.dtype),
                tuple(plain.shape),
                tuple(plain.stride()),
                plain.storage_offset(),
                storage.nbytes(),
                self._mm_writable,
            ),
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        # a deep copy owns its data: an in-memory tensor, never the same file
        out = self.clone()
        memo[id(self)] = out
        return out

    # ---------------------------------------------------------------------------- public

    @property
    def filename(self) -> str:
        """Absolute path of the file behind this tensor.

        Raises:
            RuntimeError: if the tensor lives in anonymous shared memory.
        """
        if self._mm_file is None:
            raise RuntimeError("this MemoryMappedTensor has no file: it lives in shared memory")
        return self._mm_file

    @classmethod
    def from_tensor(
        cls,
        input: torch.Tensor,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
        copy_data: bool = True,
    ) -> MemoryMappedTensor:
        """A memory-mapped copy of ``input`` (or, with ``copy_data=False``, zeros of its shape).

        The file is written with one sequential write through a temporary name,
        then mapped for reading and writing.

        Raises:
            MemmapExistsError: (a ``FileExistsError``) if ``filename`` exists and not ``existsok``.
            TypeError: for sparse or quantized tensors, which have no raw-bytes form.
        """
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"from_tensor expects a tensor, got {type(input).__name__}")
        dtype_name(input.dtype)  # rejects dtypes with no raw storage early
        shape = tuple(input.shape)
        if filename is None:
            out = torch.empty(shape, dtype=input.dtype)
            if copy_data:
                out.copy_(input.detach())
            else:
                out.zero_()
            return cls._wrap(out.share_memory_(), None, True)
        path = _target(filename, existsok)
        if copy_data:
            write_leaf(path, input)
        else:
            allocate_leaf(path, input.numel() * input.element_size())
        return cls._map(path, input.dtype, shape, writable=True)

    @classmethod
    def from_filename(
        cls,
        filename: _PathLike,
        dtype: torch.dtype,
        shape: Sequence[int] | torch.Size,
        *,
        writable: bool = True,
    ) -> MemoryMappedTensor:
        """Map an existing raw file (C order, native byte order) as a tensor.

        Args:
            filename: the file; its size must be exactly ``numel * itemsize``.
            dtype: element type.
            shape: tensor shape.
            writable: map for writing (writes go to the file); otherwise the
                file is opened read-only and writes stay in this process (copy-on-write).

        Raises:
            FileNotFoundError: if the file is missing.
            ValueError: if its size does not match ``shape`` and ``dtype``.
        """
        path = os.path.abspath(os.fspath(filename))
        dims = _parse_shape((), shape)
        dtype_name(dtype)
        numel = 1
        for d in dims:
            numel *= d
        check_leaf(path, numel * dtype.itemsize, what=f"{dtype} tensor of shape {list(dims)}")
        return cls._map(path, dtype, dims, writable=writable)

    @classmethod
    def empty(
        cls,
        *shape: Any,
        dtype: torch.dtype | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> MemoryMappedTensor:
        """An uninitialised memory-mapped tensor (a new file reads as zeros).

        ``shape`` is given as ints, as one sequence, or as ``shape=``.

        Examples:
            >>> MemoryMappedTensor.empty(2, 3, dtype=torch.int64).shape
            torch.Size([2, 3])
        """
        return cls._alloc(shape, kwargs, dtype, filename, existsok, None)

    @classmethod
    def zeros(
        cls,
        *shape: Any,
        dtype: torch.dtype | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> MemoryMappedTensor:
        """A memory-mapped tensor of zeros (a sparse file: nothing is written)."""
        return cls._alloc(shape, kwargs, dtype, filename, existsok, 0)

    @classmethod
    def ones(
        cls,
        *shape: Any,
        dtype: torch.dtype | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> MemoryMappedTensor:
        """A memory-mapped tensor of ones."""
        return cls._alloc(shape, kwargs, dtype, filename, existsok, 1)

    @classmethod
    def full(
        cls,
        *shape: Any,
        fill_value: Any,
        dtype: torch.dtype | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> MemoryMappedTensor:
        """A memory-mapped tensor filled with ``fill_value``.

        Examples:
            >>> MemoryMappedTensor.full((2,), fill_value=7, dtype=torch.int32)
            MemoryMappedTensor([7, 7], dtype=torch.int32)
        """
        return cls._alloc(shape, kwargs, dtype, filename, existsok, fill_value)

    @classmethod
    def _alloc(
        cls,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        dtype: torch.dtype | None,
        filename: _PathLike | None,
        existsok: bool,
        fill: Any,
    ) -> MemoryMappedTensor:
        shape_kw = kwargs.pop("shape", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
        dims = _parse_shape(args, shape_kw)
        dtype = torch.get_default_dtype() if dtype is None else dtype
        dtype_name(dtype)
        if filename is None:
            out = torch.zeros(dims, dtype=dtype).share_memory_()
            mmt = cls._wrap(out, None, True)
        else:
            path = _target(filename, existsok)
            numel = 1
            for d in dims:
                numel *= d
            allocate_leaf(path, numel * dtype.itemsize)
            mmt = cls._map(path, dtype, dims, writable=True)
        if fill is not None and fill != 0:
            torch.Tensor.fill_(mmt, fill)
        return mmt

    @classmethod
    def empty_like(
        cls, input: torch.Tensor, *, filename: _PathLike | None = None, existsok: bool = False
    ) -> MemoryMappedTensor:
        """An uninitialised memory-mapped tensor with the shape and dtype of ``input``."""
        return cls._alloc((tuple(input.shape),), {}, input.dtype, filename, existsok, None)

    @classmethod
    def zeros_like(
        cls, input: torch.Tensor, *, filename: _PathLike | None = None, existsok: bool = False
    ) -> MemoryMappedTensor:
        """A memory-mapped tensor of zeros with the shape and dtype of ``input``."""
        return cls._alloc((tuple(input.shape),), {}, input.dtype, filename, existsok, 0)

    @classmethod
    def ones_like(
        cls, input: torch.Tensor, *, filename: _PathLike | None = None, existsok: bool = False
    ) -> MemoryMappedTensor:
        """A memory-mapped tensor of ones with the shape and dtype of ``input``."""
        return cls._alloc((tuple(input.shape),), {}, input.dtype, filename, existsok, 1)

    @classmethod
    def full_like(
        cls,
        input: torch.Tensor,
        fill_value: Any,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A memory-mapped tensor of ``fill_value`` with the shape and dtype of ``input``."""
        return cls._alloc((tuple(input.shape),), {}, input.dtype, filename, existsok, fill_value)


def _rebuild_anonymous(tensor: torch.Tensor) -> MemoryMappedTensor:
    if not tensor.is_shared():
        tensor.share_memory_()
    return MemoryMappedTensor._wrap(tensor, None, True)


def _rebuild_file(
    path: str,
    dtype: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
    nbytes: int,
    writable: bool,
) -> MemoryMappedTensor:
    dt = dtype_from_name(dtype)
    if dt is None:
        raise ValueError(f"unknown dtype {dtype!r} for memory-mapped file {path!r}")
    check_leaf(path, nbytes, what="unpickled MemoryMappedTensor")
    whole = map_leaf(path, dt, (nbytes // dt.itemsize,), writable=writable)
    view = whole.as_strided(shape, stride, offset)
    return MemoryMappedTensor._wrap(view, path, writable)
