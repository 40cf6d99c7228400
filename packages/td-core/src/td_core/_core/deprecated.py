"""Names upstream deprecates (removal in tensordict 0.17), kept for ported code.

Reading one gives the value with the same `DeprecationWarning` upstream
gives; they are not in `td_core.__all__`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

__all__ = ["deprecated_attribute"]


def _numpy_to_torch() -> dict[np.dtype[Any], torch.dtype]:
    """The torch dtypes numpy has a dtype of the same name for (`bool`, `float32`, ...)."""
    out: dict[np.dtype[Any], torch.dtype] = {}
    for name in sorted(dir(torch)):
        dtype = getattr(torch, name, None)
        if isinstance(dtype, torch.dtype) and str(dtype) == f"torch.{name}":
            try:
                out[np.dtype(name)] = dtype
            except TypeError:  # no numpy dtype of that name (bfloat16, float8_*, qint8, ...)
                continue
    return out


_NUMPY_TO_TORCH = _numpy_to_torch()
_DEPRECATED: dict[str, Any] = {
    "NUMPY_TO_TORCH_DTYPE_DICT": _NUMPY_TO_TORCH,
    "TORCH_TO_NUMPY_DTYPE_DICT": {v: k for k, v in _NUMPY_TO_TORCH.items()},
}


def deprecated_attribute(module: str, name: str) -> Any:
    """The deprecated `name` of `module` (with a `DeprecationWarning`), or `AttributeError`.

    Examples:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     table = deprecated_attribute("td_core", "NUMPY_TO_TORCH_DTYPE_DICT")
        >>> table[np.dtype("float32")]
        torch.float32
    """
    if name not in _DEPRECATED:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} is deprecated and will be removed with upstream tensordict 0.17 "
        "(map dtypes with torch.from_numpy(np.empty(0, dtype)).dtype instead)",
        DeprecationWarning,
        stacklevel=3,
    )
    return _DEPRECATED[name]
