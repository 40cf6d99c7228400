"""td-memmap: memory-mapped tensors and safe, crash-proof on-disk TensorDicts.

This module is also what td-core finds through the `td_core.extensions` entry point
`memmap`: `TensorDict.memmap`, `memmap_`, `memmap_like`, `save`, `is_memmap`,
`load_memmap_`, `memmap_refresh_`, `make_memmap*`, `saved_path`, the class methods
`load_memmap`/`load`, and the interchange methods (`to_safetensors`, `from_safetensors`,
`to_h5`, `from_h5`, `to_zarr`, `from_zarr`, `to_mds`) delegate to the functions of the
same names here.
"""

from td_memmap import _errors, _inplace
from td_memmap._api import is_memmap, load, load_memmap, memmap, memmap_, memmap_like, save
from td_memmap._append import append_memmap
from td_memmap._archive import (
    is_memmap_archive,
    pack_memmap,
    refresh_archive_checksums,
    unpack_memmap,
)
from td_memmap._errors import *  # noqa: F403  (the names of `_errors.__all__`)
from td_memmap._format import DTYPES, encode_key
from td_memmap._h5 import PersistentTensorDict
from td_memmap._h5_io import from_h5, to_h5
from td_memmap._inplace import *  # noqa: F403  (the names of `_inplace.__all__`)
from td_memmap._mds import to_mds
from td_memmap._safetensors import from_safetensors, to_safetensors
from td_memmap._shared import SharedNonTensorData, SharedNonTensorStack
from td_memmap._store import (
    STORE_BACKENDS,
    LazyStackedTensorDictStore,
    StoreConnectionError,
    TensorDictStore,
    to_store,
)
from td_memmap._tensor import MemoryMappedTensor
from td_memmap._threads import default_threads
from td_memmap._version import __version__
from td_memmap._zarr import from_zarr, to_zarr

__all__ = [
    "__version__",
    # the tensor
    "MemoryMappedTensor",
    # saving and loading TensorDicts
    "save",
    "load",
    "memmap",
    "memmap_",
    "memmap_like",
    "load_memmap",
    "is_memmap",
    "append_memmap",
    "default_threads",
    # single-file archives
    "pack_memmap",
    "unpack_memmap",
    "is_memmap_archive",
    "refresh_archive_checksums",
    # other formats
    "to_safetensors",
    "from_safetensors",
    "to_h5",
    "from_h5",
    "to_zarr",
    "from_zarr",
    "to_mds",
    "PersistentTensorDict",
    # TensorDicts kept in a Redis-protocol server (needs td-memmap[redis])
    "TensorDictStore",
    "LazyStackedTensorDictStore",
    "STORE_BACKENDS",
    "StoreConnectionError",
    "to_store",
    # non-tensor values shared between processes
    "SharedNonTensorData",
    "SharedNonTensorStack",
    # the format
    "DTYPES",
    "encode_key",
]
# each listed once, in its own module
__all__ += _inplace.__all__  # load_memmap_, memmap_refresh_, make_memmap*, saved_path
__all__ += _errors.__all__  # the exceptions
