"""Other file formats: safetensors, HDF5, zarr and MDS, written and read by td-memmap.

td-core never imports td-memmap: these methods and functions find it through
the `memmap` extension entry point (as `TensorDictBase.memmap` does)
and raise `ImportError` naming the package when it is missing. The formats
themselves need optional extras: `td-memmap[safetensors]`, `td-memmap[h5]`,
`td-memmap[zarr]`, `td-memmap[mds]`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from td_core._core.contract import TensorDictContract
from td_core._core.extensions import delegate, load_extension
from td_core._ops.names import carry_names

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["InterchangeMixin", "from_h5", "from_safetensors", "from_zarr", "to_safetensors"]


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
    return delegate(_ext().from_h5, locals())


def from_zarr(
    zarr_file: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> Any:
    """Read a zarr store into a TensorDict (needs `td-memmap[zarr]`).

    Args:
        zarr_file: a directory path or a `zarr.abc.store.Store`.
        mode: the zarr mode to open it with.
        auto_batch_size: use the leading dims every leaf shares.
        batch_dims: at most this many of those dims.
        batch_size: the batch size (default: the one `to_zarr` stored, else the
            leading dims every entry shares).
    """
    # not `delegate`: td-memmap names the store `filename`
    return _ext().from_zarr(
        zarr_file,
        mode=mode,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        batch_size=batch_size,
    )


class InterchangeMixin(TensorDictContract):
    """`to_safetensors`, `from_safetensors`, `to_h5`, `from_h5`, `to_zarr`, `from_zarr`, `to_mds`."""

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
        out = _ext().to_h5(self, filename, **kwargs)
        names = (
            self._raw_names()
        )  # kept on the returned object (not stored in the file), as upstream
        return out if names is None else carry_names(out, names)

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
        # not `delegate`: td-memmap names the file `h5_file`
        return _ext().from_h5(
            filename,
            mode=mode,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            batch_size=batch_size,
        )

    def to_zarr(self, filename: Any, **kwargs: Any) -> Any:
        """Write to a zarr store and return it read back (needs `td-memmap[zarr]`).

        Args:
            filename: a directory path (replaced if it exists) or a `zarr.abc.store.Store`.
            **kwargs: passed to `zarr.Group.create_array` (`chunks=...`, `compressors=...`).
        """
        return _ext().to_zarr(self, filename, **kwargs)

    @classmethod
    def from_zarr(
        cls,
        filename: Any,
        *,
        mode: str = "r",
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        batch_size: Any = None,
    ) -> Any:
        """Read a zarr store written by `to_zarr` (or another tool) (needs `td-memmap[zarr]`)."""
        return delegate(_ext().from_zarr, locals())

    def to_mds(
        self,
        *,
        columns: dict[str, str] | None = None,
        out: str | tuple[str, str],
        keep_local: bool = False,
        compression: str | None = None,
        hashes: list[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        writer: Any = None,
        **kwargs: Any,
    ) -> None:
        """Write a MosaicML Streaming (MDS) dataset, one sample per row (needs `td-memmap[mds]`).

        Args:
            columns: column name to MDS encoding; inferred from the first row if omitted.
            out: the output directory, or `(local, remote)`.
            keep_local: keep the local copy after uploading to a remote.
            compression: MDS shard compression (e.g. `"zstd"`).
            hashes: hash algorithms for the shards.
            size_limit: shard size limit in bytes (or `"64mb"`).
            writer: an `MDSWriter` to use instead of making one.
            **kwargs: passed to `MDSWriter`.
        """
        delegate(_ext().to_mds, locals(), self)
