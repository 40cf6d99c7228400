"""What a `PersistentTensorDict` does instead of views, and the ops it refuses.

A dense TensorDict's `permute`, `squeeze`, `view`, ... return views whose
writes reach the original. Reads from an HDF5 file are copies, so such a view
could not write through: as upstream, these ops raise `NotSupportedOnFileError`
(a `RuntimeError`) unless they leave the batch dims as they are (then they
return the PersistentTensorDict itself). Their arguments are checked first, so
a bad dim raises the `IndexError` torch raises. Under `set_lazy_legacy(True)`
they return td-core's lazy views, whose reads and writes go through the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from td_core import TensorDict, TensorDictBase, lazy_legacy
from td_memmap._errors import NotSupportedOnFileError

__all__ = ["FileViewsMixin"]

_DENSE_FIRST = "Make it dense first with to_tensordict()"


class FileViewsMixin:
    """Shape views, in-place restructurings and memory ops of `PersistentTensorDict`."""

    if TYPE_CHECKING:
        filename: str

        @property
        def batch_size(self) -> torch.Size: ...
        def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict: ...

    def _refuse(self, what: str, hint: str = _DENSE_FIRST) -> NotSupportedOnFileError:
        return NotSupportedOnFileError(
            f"Cannot call {what} on a PersistentTensorDict ({self.filename!r}): {hint}"
        )

    def _view_or_refuse(self, what: str, fn: Callable[[Any], Any], hint: str = "") -> Any:
        # the same op on an empty TensorDict of this batch size checks the arguments (and
        # raises what it raises); a meta tensor then tells whether anything would move
        fn(TensorDict(batch_size=self.batch_size))
        stand_in = torch.empty(self.batch_size, device="meta")
        out = fn(stand_in)
        if out.shape == stand_in.shape and out.stride() == stand_in.stride():
            return self  # nothing moves: the PersistentTensorDict itself
        raise self._refuse(
            f"`{what}`",
            hint
            or "a view of a file could not write through to it. "
            "Make it dense before calling this method (to_tensordict())",
        )

    def view(self, *args: Any, **kwargs: Any) -> Any:
        """`view(dtype)` reads every leaf as that dtype (an in-memory `TensorDict`); a
        shape view is refused unless it keeps the batch size: call `reshape` instead."""
        if (args and isinstance(args[0], torch.dtype)) or "dtype" in kwargs:
            return self.to_tensordict().view(*args, **kwargs)
        if lazy_legacy():  # a lazy view: it reads and writes through the file
            return TensorDictBase.view(self, *args, **kwargs)  # type: ignore[type-var]
        shape = kwargs.get("size", args[0] if len(args) == 1 else args)
        return self._view_or_refuse(
            "view",
            lambda t: t.view(*shape) if isinstance(shape, (tuple, list)) else t.view(shape),
            "a view of a file could not write through to it. Call `reshape` instead",
        )

    def permute(self, *dims: Any, **kwargs: Any) -> Any:
        """Refused unless the order is the identity (a view could not write to the file)."""
        if lazy_legacy():
            return TensorDictBase.permute(self, *dims, **kwargs)  # type: ignore[type-var]
        order = kwargs.get(
            "dims", dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims
        )
        return self._view_or_refuse("permute", lambda t: t.permute(*order))

    def transpose(self, dim0: int, dim1: int) -> Any:
        """Refused unless `dim0` and `dim1` are the same dim."""
        if lazy_legacy():
            return TensorDictBase.transpose(self, dim0, dim1)  # type: ignore[type-var]
        return self._view_or_refuse("transpose", lambda t: t.transpose(dim0, dim1))

    def squeeze(self, dim: int | None = None) -> Any:
        """Refused unless no dim of size 1 would go."""
        if lazy_legacy():
            return TensorDictBase.squeeze(self, dim)  # type: ignore[type-var]
        return self._view_or_refuse(
            "squeeze", lambda t: t.squeeze() if dim is None else t.squeeze(dim)
        )

    def unsqueeze(self, dim: int) -> Any:
        """Refused: the batch dims would change (a view could not write to the file)."""
        if lazy_legacy():
            return TensorDictBase.unsqueeze(self, dim)  # type: ignore[type-var]
        return self._view_or_refuse("unsqueeze", lambda t: t.unsqueeze(dim))

    def movedim(self, source: Any, destination: Any) -> Any:
        """Refused unless no dim moves."""
        return self._view_or_refuse("movedim", lambda t: t.movedim(source, destination))

    moveaxis = movedim

    def flatten_keys(self, separator: str = ".", inplace: bool = False, is_leaf: Any = None) -> Any:
        """The entries with flat keys, as an in-memory `TensorDict` (not in place)."""
        if inplace:
            raise self._refuse("flatten_keys in_place with a PersistentTensorDict")
        return super().flatten_keys(separator, is_leaf=is_leaf)  # type: ignore[misc]

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> Any:
        """The entries with nested keys, as an in-memory `TensorDict` (not in place)."""
        if inplace:
            raise self._refuse("unflatten_keys in_place with a PersistentTensorDict")
        return super().unflatten_keys(separator)  # type: ignore[misc]

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> Any:
        """Refused: `td.to_tensordict().pin_memory()`."""
        raise self._refuse("pin_memory", "Cannot pin memory of a file; to_tensordict() first")

    def share_memory_(self) -> Any:
        """Refused: `td.to_tensordict().share_memory_()`."""
        raise self._refuse("share_memory_")

    def memmap_(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: `td.memmap(prefix)` copies the file's data to a memmap folder."""
        raise self._refuse(
            "memmap_",
            "Cannot build a memmap TensorDict in-place from it. Use `td.memmap()` instead",
        )

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Read the entries onto a device and/or dtype: an in-memory `TensorDict` (the
        PersistentTensorDict itself if nothing changes)."""
        if kwargs.get("non_blocking_pin"):
            raise self._refuse(
                "to(non_blocking_pin=True)",
                "Cannot use non_blocking_pin=True PersistentTensorDict.to(); to_tensordict() first",
            )
        return super().to(*args, **kwargs)  # type: ignore[misc]
