"""The allocation constructors of `MemoryMappedTensor`: `empty`, `zeros`, `ones`, `full`, `*_like`.

A mixin of `MemoryMappedTensor`, which provides the `_wrap`, `_map` and
`_nested` primitives these build on. A shape is given as ints, one sequence
or `shape=`; a 2-d integer tensor of per-component shapes gives a nested
(ragged) tensor, stored flat.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar, cast

import torch

from td_memmap._format import dtype_name
from td_memmap._io import allocate_leaf, strides_of
from td_memmap._nested import nested_arg, nested_numel, shape_of
from td_memmap._tensor_args import check_device, parse_shape, target_file

__all__ = ["Factories"]

_T = TypeVar("_T", bound="Factories")
_PathLike = str | os.PathLike


def _as_mmt(cls: type) -> Any:
    """`cls` (a MemoryMappedTensor class) as seen from the mixin, which cannot name it."""
    return cls


class Factories:
    """`MemoryMappedTensor`'s constructors of new tensors (see the class for the rest)."""

    @classmethod
    def empty(
        cls: type[_T],
        *shape: Any,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> _T:
        """An uninitialised memory-mapped tensor (a new file reads as zeros).

        `shape` is given as ints, as one sequence, or as `shape=`; a 2-d
        integer tensor of per-component shapes gives a nested tensor.
        `device` may be None or the CPU; any other raises `DeviceError` (a
        `RuntimeError`), as upstream. Without `filename` the data lives in
        anonymous shared memory; `existsok` allows overwriting `filename`.

        Examples:
            >>> from td_memmap import MemoryMappedTensor
            >>> MemoryMappedTensor.empty(2, 3, dtype=torch.int64).shape
            torch.Size([2, 3])
        """
        check_device(device, "MemoryMappedTensor.empty")
        return _as_mmt(cls)._alloc(shape, kwargs, dtype, filename, existsok, None)

    @classmethod
    def zeros(
        cls: type[_T],
        *shape: Any,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> _T:
        """A memory-mapped tensor of zeros (a sparse file: nothing is written)."""
        check_device(device, "MemoryMappedTensor.zeros")
        return _as_mmt(cls)._alloc(shape, kwargs, dtype, filename, existsok, 0)

    @classmethod
    def ones(
        cls: type[_T],
        *shape: Any,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> _T:
        """A memory-mapped tensor of ones."""
        check_device(device, "MemoryMappedTensor.ones")
        return _as_mmt(cls)._alloc(shape, kwargs, dtype, filename, existsok, 1)

    @classmethod
    def full(
        cls: type[_T],
        *shape: Any,
        fill_value: Any,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        filename: _PathLike | None = None,
        existsok: bool = False,
        **kwargs: Any,
    ) -> _T:
        """A memory-mapped tensor filled with `fill_value`.

        Examples:
            >>> from td_memmap import MemoryMappedTensor
            >>> MemoryMappedTensor.full((2,), fill_value=7, dtype=torch.int32)
            MemoryMappedTensor([7, 7], dtype=torch.int32)
        """
        check_device(device, "MemoryMappedTensor.full")
        return _as_mmt(cls)._alloc(shape, kwargs, dtype, filename, existsok, fill_value)

    @classmethod
    def _alloc(
        cls: type[_T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        dtype: torch.dtype | None,
        filename: _PathLike | None,
        existsok: bool,
        fill: Any,
    ) -> _T:
        shape_kw = kwargs.pop("shape", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
        nested = nested_arg(args, shape_kw)
        dims = parse_shape(args, shape_kw) if nested is None else (nested_numel(nested),)
        dtype = torch.get_default_dtype() if dtype is None else dtype
        dtype_name(dtype)
        numel = 1
        for d in dims:
            numel *= d
        if filename is None:
            # fresh shared memory reads as zeros: no zero-filled tensor copied into it
            storage = torch.UntypedStorage._new_shared(numel * dtype.itemsize)
            out = torch.empty(0, dtype=dtype, device="cpu").set_(storage, 0, dims, strides_of(dims))
            mmt = _as_mmt(cls)._wrap(out, None, True)
        else:
            path = target_file(filename, existsok)
            allocate_leaf(path, numel * dtype.itemsize)
            mmt = _as_mmt(cls)._map(path, dtype, dims, writable=True)
        if fill is not None and fill != 0:
            torch.Tensor.fill_(mmt, fill)
        return cast(_T, mmt if nested is None else mmt._nested(nested))

    @classmethod
    def empty_like(
        cls: type[_T],
        input: torch.Tensor,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
    ) -> _T:
        """An uninitialised memory-mapped tensor with the shape and dtype of `input`."""
        return _as_mmt(cls)._alloc((shape_of(input),), {}, input.dtype, filename, existsok, None)

    @classmethod
    def zeros_like(
        cls: type[_T],
        input: torch.Tensor,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
    ) -> _T:
        """A memory-mapped tensor of zeros with the shape and dtype of `input`."""
        return _as_mmt(cls)._alloc((shape_of(input),), {}, input.dtype, filename, existsok, 0)

    @classmethod
    def ones_like(
        cls: type[_T],
        input: torch.Tensor,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
    ) -> _T:
        """A memory-mapped tensor of ones with the shape and dtype of `input`."""
        return _as_mmt(cls)._alloc((shape_of(input),), {}, input.dtype, filename, existsok, 1)

    @classmethod
    def full_like(
        cls: type[_T],
        input: torch.Tensor,
        fill_value: Any,
        *,
        filename: _PathLike | None = None,
        existsok: bool = False,
    ) -> _T:
        """A memory-mapped tensor of `fill_value` with the shape and dtype of `input`."""
        return _as_mmt(cls)._alloc(
            (shape_of(input),), {}, input.dtype, filename, existsok, fill_value
        )
