"""Compatibility shims: private upstream tensordict helpers that user code calls.

Code ported from tensordict sometimes reaches for a few private methods of
upstream's `TensorDictBase`. They are kept here, thin and typed, as aliases of
public behaviour, so such code runs unchanged on every kind; new code should
use the public spelling named in each docstring.
"""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_nt, is_td, stack_parts
from td_core._leaves.unbatched import is_unbatched
from td_core.errors import BatchSizeError, DeviceError

__all__ = ["CompatMixin"]


class CompatMixin(TensorDictContract):
    """Upstream's private `_has_names`, `_check_batch_size`, `_check_device` and `_has_non_tensor`."""

    __slots__ = ()

    def _has_names(self) -> bool:
        """Whether any batch dim is named (compatibility shim; public: `any(td.names)`)."""
        return any(name is not None for name in self.names)  # type: ignore[attr-defined]

    @property
    def _has_non_tensor(self) -> bool:
        """Whether a non-tensor leaf is stored at any depth (compatibility shim).

        Public spelling: `any(td.is_non_tensor(v) for v in td.values(True, True))`
        with non-tensor leaves counted as leaves.
        """
        parts = stack_parts(self)
        if parts is not None:
            return any(member._has_non_tensor for member in parts[0])
        for value in self._values_str():
            if is_nt(value) or (is_td(value) and value._has_non_tensor):
                return True
        return False

    def _check_batch_size(self, *, raise_exception: bool = True) -> bool:
        """Whether every entry, at any depth, starts with its container's batch size.

        Compatibility shim for upstream's private check; td validates the batch
        size on every write, so this only fails after an entry is changed in place
        behind the container's back.

        Args:
            raise_exception: raise instead of returning `False`.

        Returns:
            `True` when the batch sizes agree, `False` (with `raise_exception=False`)
            when they do not.

        Raises:
            BatchSizeError: (a `RuntimeError`) an entry whose leading dims are not
                the batch size, naming its key and shape.
        """
        return _verdict(_batch_size_problem(self, ()), BatchSizeError, raise_exception)

    def _check_device(self, *, raise_exception: bool = True) -> bool:
        """Whether every entry, at any depth, is on the device of its container (if it has one).

        Compatibility shim for upstream's private check; td moves entries to
        the device on every write, so this only fails after a leaf is moved
        behind the container's back.

        Args:
            raise_exception: raise instead of returning `False`.

        Returns:
            `True` when the devices agree, `False` (with `raise_exception=False`)
            when they do not.

        Raises:
            DeviceError: (a `RuntimeError`) an entry on another device, naming its
                key and both devices.
        """
        return _verdict(_device_problem(self, ()), DeviceError, raise_exception)


def _verdict(problem: str | None, error: type[Exception], raise_exception: bool) -> bool:
    """The answer of a `_check_*` shim: `True` without a `problem`, else raise it or `False`."""
    if problem is None:
        return True
    if raise_exception:
        raise error(problem)
    return False


def _device_problem(td: Any, prefix: tuple[str, ...]) -> str | None:
    """A sentence describing the first entry of `td` on another device than `td`'s, or `None`."""
    device = td.device
    parts = stack_parts(td)
    entries = (
        [(prefix, member) for member in parts[0]]
        if parts is not None
        else [((*prefix, key), value) for key, value in td._key_items()]
    )
    for path, value in entries:
        if device is not None and value.device != device:
            return (
                f"devices are incongruent: entry {path!r} is on {value.device}, expected "
                f"{device} (the device of the TensorDict holding it)"
            )
        if is_td(value):
            problem = _device_problem(value, path)
            if problem is not None:
                return problem
    return None


def _batch_size_problem(td: Any, prefix: tuple[str, ...]) -> str | None:
    """A sentence describing the first entry of `td` that breaks its batch size, or `None`."""
    batch_size: torch.Size = td.batch_size
    parts = stack_parts(td)
    if parts is not None:
        members, dim = parts
        expected = batch_size[:dim] + batch_size[dim + 1 :]
        for i, member in enumerate(members):
            if member.batch_size != expected:
                return (
                    f"batch_size are incongruent: member {i} of the lazy stack at {prefix!r} has "
                    f"batch_size {list(member.batch_size)}, expected {list(expected)}"
                )
            problem = _batch_size_problem(member, prefix)
            if problem is not None:
                return problem
        return None
    n = len(batch_size)
    for key, value in td._items_str():
        if is_unbatched(value):
            continue
        if is_td(value):
            problem = _batch_size_problem(value, (*prefix, key))
            if problem is not None:
                return problem
        shape = value.batch_size if is_td(value) or is_nt(value) else value.shape
        if tuple(shape[:n]) != tuple(batch_size):
            return (
                f"batch_size are incongruent: entry {(*prefix, key)!r} has shape {list(shape)}, "
                f"whose leading dims should be the batch_size {list(batch_size)}"
            )
    return None
