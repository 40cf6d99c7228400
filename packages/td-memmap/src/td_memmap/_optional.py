"""Optional dependencies: imported when a feature first needs them, never at `import td_memmap`."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["optional_module"]


def optional_module(name: str, needed_by: str, requirement: str, extra: str) -> Any:
    """The module `name`; without it, an `ImportError` naming the extra that installs it.

    Args:
        name: the module to import (`"h5py"`, `"safetensors.torch"`, ...).
        needed_by: what needs it, to start the message (`"HDF5 support"`).
        requirement: the missing package in words (`"the 'h5py' package"`).
        extra: the td-memmap extra that installs it (`"h5"`).

    Raises:
        ImportError: `"<needed_by> needs <requirement>: pip install 'td-memmap[<extra>]'"`.
    """
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f"{needed_by} needs {requirement}: pip install 'td-memmap[{extra}]'"
        ) from err
