"""Other file formats: safetensors and HDF5, written and read by td-memmap.

td-core never imports td-memmap: these methods and functions find it through
the `memmap` extension entry point (as `TensorDictBase.memmap` does)
and raise `ImportError` naming the package when it is missing. The formats
themselves need optional extras: `td-memmap[safetensors]`, `td-memmap[h5]`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from td_core._core.contract import TensorDictContract
from td_core._core.extensions import load_extension

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["InterchangeMixin", "from_h5", "from_safetensors", "to_safetensors"]


def _ext() -> Any:
    return load_extension("memmap", "td-memmap")


def to_safetensors(data: TensorDictContract, path: str | os.PathLike) -> None:
    """Write `data` to a safetensors file (needs `td-memmap[safetensors]`)."""
    _ext().to_safetensors(data, path)


def from_safetensors(path: str | os.PathLike, *, device: Any = None) -> Any:
    """Load a TensorDict from a safetensors file (needs `td-memmap[safetensors]`)."""
    return _ext().from_safetensors(path, device=device)


def from_h5(
    h5_file: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> Any:
    """Open an HDF5 file or group as a `PersistentTensorDict` (needs `td-memmap[h5]`).

    Args:
        h5_file: a path, or an open `h5py.File`/`h5py.Group`.
        mode: the h5py mode for a path.
        auto_batch_size: use the leading dims every dataset shares.
        batch_dims: at most this many of those dims.
        batch_size: the batch size (default: the one `to_h5` stored, else `[]`).
    """
    return _ext().from_h5(
        h5_file,
        mode=mode,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        batch_size=batch_size,
    )


class InterchangeMixin(TensorDictContract):
    """`to_safetensors`, `from_safetensors`, `to_h5`, `from_h5`."""

    __slots__ = ()

    def to_safetensors(self, path: str | os.PathLike) -> None:
        """Write to a safetensors file at `path` (needs `td-memmap[safetensors]`).

        Args:
            path: the file to write; nested keys, batch sizes and JSON-able
                non-tensor values are kept.
        """
        _ext().to_safetensors(self, path)

    @classmethod
    def from_safetensors(cls, path: str | os.PathLike, *, device: Any = None) -> Self:
        """Load a TensorDict written by `to_safetensors` (or any safetensors file)."""
        return _ext().from_safetensors(path, device=device)

    def to_h5(self, filename: str | os.PathLike, **kwargs: Any) -> Self:
        """Write to an HDF5 file and return it as a `PersistentTensorDict` (needs `td-memmap[h5]`).

        Args:
            filename: the file to write (replaced if it exists).
            **kwargs: passed to h5py's `create_dataset` (e.g. `compression="gzip"`).
        """
        return _ext().to_h5(self, filename, **kwargs)

    @classmethod
    def from_h5(
        cls,
        filename: Any,
        *,
        mode: str = "r",
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        batch_size: Any = None,
    ) -> Self:
        """Open an HDF5 file as a `PersistentTensorDict` (needs `td-memmap[h5]`)."""
        return _ext().from_h5(
            filename,
            mode=mode,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            batch_size=batch_size,
        )
