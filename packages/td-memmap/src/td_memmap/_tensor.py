"""`MemoryMappedTensor`: a `torch.Tensor` whose storage is a file (or shared memory)."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from typing import Any, cast

import torch

from td_memmap._factories import Factories
from td_memmap._format import dtype_from_name, dtype_name
from td_memmap._io import allocate_leaf, check_leaf, map_leaf, map_leaves, strides_of, write_leaf
from td_memmap._nested import (
    nested_arg,
    nested_numel,
    nested_values,
    nested_view,
    sizes_tensor,
)
from td_memmap._readonly import guarded_call
from td_memmap._tensor_args import (
    buffer_tensor,
    check_device,
    check_mode,
    construct,
    parse_shape,
    target_file,
)

__all__ = ["MemoryMappedTensor", "shared_zeros"]

_PathLike = str | os.PathLike
_make_subclass = torch.Tensor._make_subclass
_getitem = torch.Tensor.__getitem__


class MemoryMappedTensor(Factories, torch.Tensor):
    """A tensor whose data lives in a file, shared by every process that maps it.

    Build one with `from_tensor`, `empty`, `zeros`,
    `ones`, `full`, the `*_like` variants, or map an existing raw
    file with `from_filename`. Without `filename` the data lives in
    anonymous shared memory instead.

    Results of operations are plain tensors, except basic indexing (ints,
    slices, `None`, `...`), which gives a memory-mapped view of the same
    file, as upstream does. Pickling sends the file name, shape, strides and
    offset, not the data, so a worker process maps the same file (an anonymous
    one pickles as an ordinary tensor, which `torch.multiprocessing` shares).

    A tensor opened read-only (`mode="r"`) refuses every write with a
    `ReadOnlyMemmapError`, and so do its views: a write can never be
    silently dropped. A writable one (the default) writes through to the file,
    seen by every process that maps it.

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

    # class defaults: an instance made by `as_subclass` behaves as a shared-memory one
    _mm_file: str | None = None
    _mm_writable: bool = True
    _mm_parent_shape: tuple[int, ...] | None = None

    @staticmethod
    def __new__(
        cls,
        source: Any = None,
        *,
        dtype: torch.dtype | None = None,
        shape: Sequence[int] | torch.Size | None = None,
        index: Any = None,
        device: torch.device | str | None = None,
        handler: Any = None,
        filename: _PathLike | None = None,
    ) -> MemoryMappedTensor:
        """Build one from data, a storage or a handler, as upstream's constructor does.

        `MemoryMappedTensor(data)` is `from_tensor(torch.as_tensor(data, dtype=dtype))`
        (a copy in shared memory, or in `filename`), reshaped to `shape` if
        given; a storage goes to `from_storage`, a `handler` to
        `from_handler`. `index` is applied to the result.
        """
        return construct(
            cls,
            source,
            dtype=dtype,
            shape=shape,
            index=index,
            device=device,
            handler=handler,
            filename=filename,
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # everything happens in __new__ (torch.Tensor's __init__ takes no arguments)
        pass

    # ---------------------------------------------------------------------------- internals

    @staticmethod
    def _wrap(
        tensor: torch.Tensor,
        file: str | None,
        writable: bool,
        parent_shape: tuple[int, ...] | None = None,
    ) -> MemoryMappedTensor:
        out = _make_subclass(MemoryMappedTensor if writable else _ReadOnly, tensor)
        out._mm_file = file
        out._mm_writable = writable
        out._mm_parent_shape = parent_shape
        return out

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
        tensor = map_leaf(path, dtype, shape, writable=writable, nbytes=nbytes)
        return MemoryMappedTensor._wrap(tensor, path, writable, shape)

    @classmethod
    def _map_many(
        cls, leaves: Sequence[tuple[str, torch.dtype, tuple[int, ...], int]], *, writable: bool
    ) -> list[MemoryMappedTensor]:
        """`_map` of many `(path, dtype, shape, nbytes)` whose sizes are checked."""
        out = map_leaves(leaves, writable=writable)
        klass = MemoryMappedTensor if writable else _ReadOnly
        tensor: Any  # a MemoryMappedTensor once retyped
        for (path, _, shape, _), tensor in zip(leaves, out):
            # each tensor is new and referenced only here: retyping it in place is
            # the same as wrapping it in a subclass view, at half the cost
            tensor.__class__ = klass
            tensor._mm_file = path
            tensor._mm_writable = writable
            tensor._mm_parent_shape = shape
        return out  # type: ignore[return-value]

    @classmethod
    def _adopt(
        cls,
        tensors: list[torch.Tensor],
        shapes: Sequence[tuple[int, ...]],
        file: str,
        writable: bool,
    ) -> list[MemoryMappedTensor]:
        """`_wrap` of each tensor of `tensors` (of the shape of `shapes`), all on `file`.

        Only for tensors just made and referenced nowhere else (as `_map_many`'s):
        the same result as `_wrap`, at a fraction of its per-leaf cost.
        """
        klass = MemoryMappedTensor if writable else _ReadOnly
        tensor: Any  # a MemoryMappedTensor once retyped
        for tensor, shape in zip(tensors, shapes):  # retyped in place
            tensor.__class__ = klass
            tensor._mm_file = file
            tensor._mm_writable = writable
            tensor._mm_parent_shape = shape
        return tensors  # type: ignore[return-value]

    # Operations run at plain-tensor speed and give plain tensors; only basic
    # indexing is intercepted, to keep views of the file memory-mapped.
    __torch_function__: Any = torch._C._disabled_torch_function_impl

    def __getitem__(self, index: Any) -> torch.Tensor:
        out = _getitem(self, index)
        if out._is_view():
            return MemoryMappedTensor._wrap(
                out, self._mm_file, self._mm_writable, self._mm_parent_shape
            )
        return out

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch's is untyped
        text = repr(_make_subclass(torch.Tensor, self))
        if self.is_nested:
            return f"MemoryMappedTensor({text})"
        name = "MemoryMappedTensor"
        pad = " " * (len(name) - len("tensor"))
        return name + text[len("tensor") :].replace("\n", "\n" + pad)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        plain = torch.Tensor._make_subclass(torch.Tensor, self)
        storage = plain.untyped_storage()
        if plain.is_nested:  # the flat buffer and the components' shapes
            sizes = plain._nested_tensor_size().tolist()
            if self._mm_file is None:
                numel = storage.nbytes() // plain.element_size()
                flat = torch.empty(0, dtype=plain.dtype, device="cpu").set_(
                    storage, 0, (numel,), (1,)
                )
                return (_rebuild_anonymous, (flat, sizes))
            file = (self._mm_file, dtype_name(plain.dtype), (), (), 0, storage.nbytes())
            return (_rebuild_file, (*file, self._mm_writable, sizes))
        if self._mm_file is None:
            return (_rebuild_anonymous, (plain,))
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

    @property
    def parent_shape(self) -> torch.Size:
        """Shape of the whole mapped tensor this one was indexed from (its own shape if none)."""
        shape = self._mm_parent_shape
        return torch.Size(self.shape if shape is None else shape)

    @classmethod
    def from_storage(
        cls,
        storage: torch.UntypedStorage,
        *,
        shape: Sequence[int] | torch.Size | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        index: Any = None,
        filename: _PathLike | None = None,
        handler: Any = None,
    ) -> MemoryMappedTensor:
        """A MemoryMappedTensor viewing `storage` (no copy), shaped `shape`, optionally indexed.

        `storage` should live in shared memory or a file (e.g. the storage of
        another memory-mapped tensor); `filename` records which file, so the
        result pickles by name. `handler` is accepted for upstream
        compatibility and must be None.

        Examples:
            >>> t = MemoryMappedTensor.from_storage(torch.arange(4).untyped_storage(),
            ...                                     shape=(2, 2), dtype=torch.int64)
            >>> t[1]
            MemoryMappedTensor([2, 3])
        """
        if handler is not None:
            raise TypeError("handler is an upstream internal that td-memmap does not use")
        check_device(device, "MemoryMappedTensor.from_storage")
        dtype = torch.get_default_dtype() if dtype is None else dtype
        dtype_name(dtype)
        numel = storage.nbytes() // dtype.itemsize
        nested = nested_arg((), shape)
        if nested is not None:
            dims: tuple[int, ...] = (nested_numel(nested),)
        else:
            dims = (numel,) if shape is None else parse_shape((), shape)
        needed = dtype.itemsize
        for d in dims:
            needed *= d
        if needed > storage.nbytes():
            raise ValueError(
                f"shape {list(dims)} of {dtype} needs {needed} bytes, the storage has "
                f"{storage.nbytes()}"
            )
        tensor = torch.empty(0, dtype=dtype, device="cpu").set_(storage, 0, dims, strides_of(dims))
        file = None if filename is None else os.path.abspath(os.fspath(filename))
        return cls._wrap(tensor, file, True, dims)._shaped(nested, index)

    @classmethod
    def from_handler(
        cls,
        handler: Any,
        dtype: torch.dtype,
        shape: Sequence[int] | torch.Size,
        index: Any = None,
    ) -> MemoryMappedTensor:
        """A MemoryMappedTensor viewing the memory of `handler` (no copy); deprecated.

        Upstream rebuilds tensors from its private shared-memory handler
        objects with this method (pickles of tensordict 0.14 and earlier call
        it); it is deprecated there too, with no replacement. Any object with a
        `buffer` attribute that exposes the buffer protocol (upstream's
        handlers, an `mmap.mmap` wrapper) or a buffer itself (`mmap.mmap`,
        `bytearray`) is accepted. A read-only buffer gives a tensor that
        refuses writes. Prefer `from_storage` or `from_filename`.

        Args:
            handler: the memory, or an object holding it as `.buffer`.
            dtype: element type.
            shape: the shape of the tensor (a nested tensor's shape tensor is
                not supported: `TypeError`).
            index: applied to the result, as `tensor[index]`.

        Raises:
            TypeError: `handler` exposes no buffer, or `shape` is a tensor.
            ValueError: the buffer is smaller than `shape` needs.

        Example:
            ```python
            import mmap, warnings, torch
            from td_memmap import MemoryMappedTensor

            memory = mmap.mmap(-1, 24)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                t = MemoryMappedTensor.from_handler(memory, torch.float32, (2, 3))
            t.fill_(1.0)
            assert memory[:4] == torch.ones(1).numpy().tobytes()
            ```
        """
        warnings.warn(
            "MemoryMappedTensor.from_handler() is deprecated (as upstream, where handlers are "
            "private): use MemoryMappedTensor.from_storage or from_filename",
            DeprecationWarning,
            stacklevel=2,
        )
        nested = nested_arg((), shape)
        dims = parse_shape((), shape) if nested is None else (nested_numel(nested),)
        tensor, writable = buffer_tensor(handler, dtype, dims)
        return cls._wrap(tensor, None, writable, dims)._shaped(nested, index)

    @classmethod
    def from_tensor(
        cls,
        input: torch.Tensor,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
        copy_existing: bool = False,
        copy_data: bool = True,
    ) -> MemoryMappedTensor:
        """A memory-mapped copy of `input` (or, with `copy_data=False`, zeros of its shape).

        The file is written with one sequential write through a temporary name,
        then mapped for reading and writing. Without `filename` the copy lives
        in anonymous shared memory.

        As upstream, a `MemoryMappedTensor` already where it is asked to be
        (no `filename` and no file, or `filename` its own file) is returned
        as is, not copied.

        Args:
            input: the tensor to copy.
            filename: the file to create; None for shared memory.
            existsok: overwrite `filename` if it exists.
            copy_existing: allow copying a file-backed `MemoryMappedTensor`
                into another file (refused by default, to avoid duplicating
                data on disk by mistake).
            copy_data: False for zeros of `input`'s shape and dtype.

        Raises:
            MemmapExistsError: (a `FileExistsError`) if `filename` exists and not `existsok`.
            SymlinkTargetError: (a `RuntimeError`) if `filename` is a symbolic link.
            RuntimeError: `input` has a file, `filename` names another one, and
                `copy_existing` is False.
            TypeError: for sparse or quantized tensors, which have no raw-bytes form.
        """
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"from_tensor expects a tensor, got {type(input).__name__}")
        if hasattr(input, "full_tensor"):  # a DTensor: the whole tensor (a collective call)
            input = input.full_tensor()
        if isinstance(input, MemoryMappedTensor) and copy_data:
            own = input._mm_file
            path = None if filename is None else os.path.abspath(os.fspath(filename))
            if own == path:
                return input
            if own is not None and path is not None and not copy_existing:
                raise RuntimeError(
                    f"from_tensor: A filename was provided but the tensor already has a file "
                    f"associated ({own!r}); to copy it to {path!r} pass copy_existing=True"
                )
        return cls._copy_of(input, filename, existsok, copy_data)

    @classmethod
    def _copy_of(
        cls, input: torch.Tensor, filename: _PathLike | None, existsok: bool, copy_data: bool
    ) -> MemoryMappedTensor:
        """`from_tensor` without its shortcut: always a new file or shared memory."""
        dtype_name(input.dtype)  # rejects dtypes with no raw storage early
        if input.is_nested:
            flat = cls._copy_of(nested_values(input), filename, existsok, copy_data)
            return flat._nested(input._nested_tensor_size())
        shape = tuple(input.shape)
        if filename is None:
            out = shared_zeros(shape, input.dtype)
            if copy_data:
                out.copy_(input.detach())
            return cls._wrap(out, None, True)
        path = target_file(filename, existsok)
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
        index: Any = None,
        mode: str | None = None,
    ) -> MemoryMappedTensor:
        """Map an existing raw file (C order, native byte order) as a tensor.

        The file is never modified by opening it (nor grown, nor truncated).

        Args:
            filename: the file; its size must be exactly `numel * itemsize`.
            dtype: element type.
            shape: tensor shape (at most 64 dims).
            index: applied to the result, as `tensor[index]`.
            mode: `"r+"`: mapped shared, in-place writes reach the file and
                every process mapping it (`PermissionError` if the file is
                not writable). `"r"`: read-only; every write raises
                `ReadOnlyMemmapError` (upstream maps it copy-on-write
                instead). None (the default): `"r+"` if the file is
                writable, else `"r"`.

        Raises:
            FileNotFoundError: if the file is missing.
            ValueError: if its size does not match `shape` and `dtype`, or
                `shape` has more than 64 dims; `mode` is not one of the above.
        """
        check_mode(mode)
        path = os.path.abspath(os.fspath(filename))
        nested = nested_arg((), shape, f" (file {path!r})")
        if nested is None:
            dims = parse_shape((), shape, f" (file {path!r})")
            what = f"{dtype} tensor of shape {list(dims)}"
        else:
            dims = (nested_numel(nested),)
            what = f"nested {dtype} tensor of shapes {nested.tolist()}"
        dtype_name(dtype)
        numel = 1
        for d in dims:
            numel *= d
        check_leaf(path, numel * dtype.itemsize, what=what)
        writable = mode != "r" and os.access(path, os.W_OK)
        if mode == "r+" and not writable:
            raise PermissionError(f"cannot open {path!r} with mode='r+': the file is not writable")
        return cls._map(path, dtype, dims, writable=writable)._shaped(nested, index)

    def _shaped(self, nested: torch.Tensor | None, index: Any) -> MemoryMappedTensor:
        """This flat tensor viewed as nested tensor of shapes `nested` (if any), then `[index]`."""
        out = self if nested is None else self._nested(nested)
        return out if index is None else out[index]  # type: ignore[return-value]

    def _nested(self, shape: torch.Tensor) -> MemoryMappedTensor:
        """This flat tensor viewed as a nested tensor of `shape` (same file, same memory)."""
        return MemoryMappedTensor._wrap(
            nested_view(_make_subclass(torch.Tensor, self), shape), self._mm_file, self._mm_writable
        )


def shared_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros of `shape` in a new segment of shared memory, for torch's sharing strategy.

    The segment is allocated shared (a new shared-memory file reads as zeros), so
    the data is written once; `empty(...).share_memory_()` would allocate private
    memory and copy it into a segment.
    """
    storage = _new_shared_storage(math.prod(shape) * dtype.itemsize)
    return torch.empty(0, dtype=dtype, device="cpu").set_(storage, 0, shape, strides_of(shape))


def _new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """`nbytes` of zeros that torch shares between processes without copying them.

    Under the `file_descriptor` strategy (Linux's default) the storage maps a
    `memfd` sized with `ftruncate`: its pages are allocated when first written,
    by the thread that copies the leaf in (torch's own allocator reserves, and so
    zeroes, every page in the calling thread first: a third of an anonymous
    memmap's time). It is the kind of storage torch itself rebuilds in a process
    it sends one to. Elsewhere (other strategies or systems), torch's allocator.
    """
    from_fd = getattr(torch.UntypedStorage, "_new_shared_fd_cpu", None)
    memfd_create = getattr(os, "memfd_create", None)
    if (
        from_fd is not None
        and memfd_create is not None
        and torch.multiprocessing.get_sharing_strategy() == "file_descriptor"
    ):
        fd = memfd_create("td-memmap", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.ftruncate(fd, nbytes)
            return cast(torch.UntypedStorage, from_fd(fd, nbytes))  # maps its own copy of fd
        finally:
            os.close(fd)
    return cast(torch.UntypedStorage, torch.UntypedStorage._new_shared(nbytes))


def _rebuild_anonymous(
    tensor: torch.Tensor, nested: list[list[int]] | None = None
) -> MemoryMappedTensor:
    if not tensor.is_shared():
        tensor.share_memory_()
    out = MemoryMappedTensor._wrap(tensor, None, True)
    return out if nested is None else out._nested(sizes_tensor(nested))


def _rebuild_file(
    path: str,
    dtype: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
    nbytes: int,
    writable: bool,
    nested: list[list[int]] | None = None,
) -> MemoryMappedTensor:
    dt = dtype_from_name(dtype)
    if dt is None:
        raise ValueError(f"unknown dtype {dtype!r} for memory-mapped file {path!r}")
    check_leaf(path, nbytes, what="unpickled MemoryMappedTensor")
    whole = map_leaf(path, dt, (nbytes // dt.itemsize,), writable=writable)
    if nested is not None:
        return MemoryMappedTensor._wrap(whole, path, writable)._nested(sizes_tensor(nested))
    view = whole.as_strided(shape, stride, offset)
    return MemoryMappedTensor._wrap(view, path, writable)


class _ReadOnly(MemoryMappedTensor):
    """A MemoryMappedTensor opened read-only: operations run as on plain tensors, writes raise.

    `isinstance(t, MemoryMappedTensor)` holds; see `_readonly` for what counts as a write.
    """

    _mm_writable = False

    @classmethod
    def __torch_function__(
        cls,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return guarded_call(MemoryMappedTensor, func, args, kwargs or {})
