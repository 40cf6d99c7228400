"""Refusing writes to tensors opened read-only (`mode="r"`).

A read-only leaf is a private (copy-on-write) mapping of its file: a write would
change this process's copy only and be lost, a silent drop. Its class routes
every torch operation through `guarded_call`, which raises before any
operation that writes into a read-only tensor (in-place methods, `out=`,
`inplace=True`, item assignment) and marks results that share its memory
(views, `numpy()`) read-only in turn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from td_memmap._errors import ReadOnlyMemmapError

__all__ = ["guarded_call", "is_read_only"]

# in-place operators: `t += 1` calls `Tensor.__iadd__`
_INPLACE_DUNDERS = frozenset(
    f"__i{op}__"
    for op in ("add sub mul matmul truediv floordiv div mod pow lshift rshift and or xor".split())
) | {"__setitem__"}
# trailing-underscore methods that change metadata only, never the data
_METADATA_ONLY = frozenset({"requires_grad_", "share_memory_", "retain_grad", "rename_", "detach_"})
_NUMPY = frozenset({"numpy", "__array__"})
_disabled = torch._C.DisableTorchFunctionSubclass


def is_read_only(x: object) -> bool:
    """Whether `x` is a tensor opened read-only."""
    return isinstance(x, torch.Tensor) and getattr(x, "_mm_writable", True) is False


def _any_read_only(x: object) -> torch.Tensor | None:
    if isinstance(x, (list, tuple)):
        return next((t for t in x if is_read_only(t)), None)
    return x if is_read_only(x) else None  # type: ignore[return-value]


def _written(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The read-only tensor `func(*args, **kwargs)` would write into, if any."""
    out = kwargs.get("out")
    if out is not None and (target := _any_read_only(out)) is not None:
        return target
    if not args:
        return None
    name = getattr(func, "__name__", "")
    if (
        name in _INPLACE_DUNDERS
        or (name.endswith("_") and not name.endswith("__") and name not in _METADATA_ONLY)
        or kwargs.get("inplace") is True
    ):
        return _any_read_only(args[0])
    return None


def _storage_ptr(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _protect(result: Any, sources: list[Any], cls: Any, numpy: bool) -> Any:
    """`result` with every tensor sharing a source's memory wrapped read-only."""
    if isinstance(result, (list, tuple)) and not hasattr(result, "_fields"):
        return type(result)(_protect(r, sources, cls, numpy) for r in result)
    if numpy and isinstance(result, np.ndarray):
        result.flags.writeable = False
        return result
    if not isinstance(result, torch.Tensor) or is_read_only(result):
        return result
    ptr = _storage_ptr(result)
    if not ptr:
        return result
    for src in sources:
        if _storage_ptr(src) == ptr:
            return cls._wrap(result, src._mm_file, False, getattr(src, "_mm_parent_shape", None))
    return result


def guarded_call(
    cls: Any, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`func(*args, **kwargs)` as plain tensors; raises if it writes into a read-only tensor."""
    target = _written(func, args, kwargs)
    if target is not None:
        name = getattr(func, "__name__", repr(func))
        where = target._mm_file if target._mm_file is not None else "shared memory"
        raise ReadOnlyMemmapError(
            f"{name} would write into a MemoryMappedTensor opened read-only (mode='r') from "
            f"{where!r}: the file cannot change and a private copy would silently drop the "
            "write. Load with mode='r+' to write to the file, or .clone() it "
            "for a writable copy in memory"
        )
    with _disabled():
        result = func(*args, **kwargs)
    sources = [a for a in args if is_read_only(a)]
    if not sources:
        return result
    return _protect(result, sources, cls, getattr(func, "__name__", "") in _NUMPY)
