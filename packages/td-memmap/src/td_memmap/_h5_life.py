"""Copies, pickling, locking contexts, `with td:` closing, and in-place restructuring of
`PersistentTensorDict`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from td_core.errors import LockedError
from td_memmap._backends import backend_named
from td_memmap._persist_backend import StoreBackend

__all__ = ["FileLifecycleMixin"]


class FileLifecycleMixin:
    """`clone(newfile=)`, pickles (by store, not data), `lock_`/`unlock_` contexts, `with td:` (closes the
    store), `select`/`exclude` in place."""

    if TYPE_CHECKING:
        filename: str
        backend: str
        kwargs: dict[str, Any]
        _group: Any
        _backend: StoreBackend
        _batch_size: torch.Size
        _device: torch.device | None
        _names: tuple[str | None, ...] | None
        _is_locked: bool
        _lock_called: bool
        _lock_ctx: list[bool]

        def close(self) -> None: ...
        def keys(self, *args: Any, **kwargs: Any) -> Any: ...
        def del_(self, key: Any) -> Any: ...
        def _keys_str(self) -> Any: ...
        def _get_str(self, key: str, default: Any = ...) -> Any: ...
        def _del_str(self, key: str) -> None: ...
        def to_tensordict(self, *, retain_none: bool | None = None) -> Any: ...
        def _init(
            self, group: Any, backend: StoreBackend, mode: str, device: Any, kwargs: dict[str, Any]
        ) -> None: ...

    # ------------------------------------------------------------ copies
    def clone(  # upstream's extra keyword
        self, recurse: bool = True, *, newfile: str | os.PathLike | None = None
    ) -> Any:
        """A copy.

        Args:
            recurse: with False, a new `PersistentTensorDict` on the same file.
            newfile: copy the file there and open the copy (`"r+"`). Without
                it, the copy is an in-memory `TensorDict`.
        """
        if not recurse:
            out = type(self)._wrap(  # type: ignore[attr-defined]
                self._group, self._backend, self._batch_size, self._device, self.kwargs
            )
            out._names = self._names
            return out
        if newfile is None:
            return self.to_tensordict()
        sizes: dict[str, Any] = {"": self._batch_size}
        _nested_sizes(self, "", sizes)
        self._backend.copy_to(self._group, newfile, sizes)
        out = type(self)(  # type: ignore[call-arg]
            filename=newfile,
            mode="r+",
            batch_size=self._batch_size,
            device=self._device,
            backend=self.backend,
            **self.kwargs,
        )
        out._names = self._names
        return out

    # ------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "store": self._backend.getstate(self._group),
            "batch_size": tuple(self._batch_size),
            "device": None if self._device is None else str(self._device),
            "locked": self._is_locked,
            "names": self._names,
            "kwargs": self.kwargs,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        store = backend_named(state["backend"])
        group = store.setstate(state["store"])
        mode = "r" if store.readonly(group) else "r+"
        self._init(group, store, mode, state["device"], state["kwargs"])
        self._batch_size = torch.Size(state["batch_size"])
        self._names = state["names"]
        if state["locked"]:
            self.lock_()

    # ------------------------------------------------------------ context
    def lock_(self) -> Any:
        self._lock_called = True
        return super().lock_()  # type: ignore[misc]

    def unlock_(self) -> Any:
        self._lock_called = True
        return super().unlock_()  # type: ignore[misc]

    def __enter__(self) -> Any:
        """`with td.lock_():`/`with td.unlock_():` restore the lock on exit; `with td:` closes."""
        is_lock = self._lock_called
        self._lock_called = False
        self._lock_ctx.append(is_lock)
        return super().__enter__() if is_lock else self  # type: ignore[misc]

    def __exit__(self, *exc: object) -> None:
        if self._lock_ctx and self._lock_ctx.pop():
            super().__exit__(*exc)  # type: ignore[misc]
            return
        self.close()

    # ------------------------------------------------------------ structure
    def select(
        self, *keys: Any, inplace: bool = False, strict: bool = True, as_tensordict: bool = False
    ) -> Any:
        """Only the given keys: a `TensorDict` of them (sub-TensorDicts stay on file);
        with `inplace=True` the other entries are deleted from the file. `as_tensordict`
        is accepted for tensorclasses' sake: the result is a TensorDict already."""
        result = super().select(*keys, strict=strict)  # type: ignore[misc]
        if not inplace:
            return result
        self._check_restructure()
        _prune(self, result)
        return self

    def exclude(self, *keys: Any, inplace: bool = False) -> Any:
        """All but the given keys: a `TensorDict`; with `inplace=True` they are deleted
        from the file."""
        if not inplace:
            return super().exclude(*keys)  # type: ignore[misc]
        self._check_restructure()
        present = self.keys(include_nested=True)
        for key in keys:
            if key in present:
                self.del_(key)
        return self

    def _check_restructure(self) -> None:
        if self._is_locked:
            raise LockedError(
                f"cannot restructure a locked PersistentTensorDict ({self.filename!r}) in "
                "place: unlock_() it first"
            )


def _prune(td: Any, keep: Any) -> None:
    """Delete from `td` every entry that `keep` (a selection of it) does not hold."""
    kept = set(keep._keys_str())
    for key in td._keys_str():
        if key not in kept:
            td._del_str(key)
            continue
        sub, wanted = td._get_str(key), keep._get_str(key)
        if isinstance(sub, FileLifecycleMixin) and wanted is not sub:
            _prune(sub, wanted)


def _nested_sizes(td: Any, prefix: str, out: dict[str, Any]) -> None:
    for key, (_, sub) in td._nested.items():
        if isinstance(sub, FileLifecycleMixin):
            out[prefix + key] = sub._batch_size
            _nested_sizes(sub, prefix + key + "/", out)
