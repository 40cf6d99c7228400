"""The module td-core finds through the `td_core.extensions` entry point `memmap`.

`TensorDict.memmap`, `memmap_`, `memmap_like`, `save`, `is_memmap`,
`load_memmap_`, `memmap_refresh_`, `make_memmap*`, `saved_path`, the class
methods `load_memmap`/`load`, and the interchange methods (`to_safetensors`,
`from_safetensors`, `to_h5`, `from_h5`) delegate here; keep it thin.
"""

from __future__ import annotations

from td_memmap._api import is_memmap, load_memmap, memmap, memmap_like
from td_memmap._h5 import PersistentTensorDict, from_h5, to_h5
from td_memmap._inplace import (
    load_memmap_,
    make_memmap,
    make_memmap_from_storage,
    make_memmap_from_tensor,
    memmap_refresh_,
    saved_path,
)
from td_memmap._safetensors import from_safetensors, to_safetensors
from td_memmap._tensor import MemoryMappedTensor

__all__ = [
    "memmap",
    "memmap_like",
    "load_memmap",
    "is_memmap",
    "load_memmap_",
    "memmap_refresh_",
    "make_memmap",
    "make_memmap_from_tensor",
    "make_memmap_from_storage",
    "saved_path",
    "MemoryMappedTensor",
    "to_safetensors",
    "from_safetensors",
    "to_h5",
    "from_h5",
    "PersistentTensorDict",
]
