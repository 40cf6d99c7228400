"""Write-through views: reads from the source, and in-place ops whose reads may be copies.

A view kind (`SubTensorDict`, `LazyViewTensorDict`) reads its entries from a
source TensorDict (`_source`), each through the view's own `_view`. Where the leaves read are views of the source's memory
(`_direct`), in-place ops on them reach the source as they are. Where they are
copies (an advanced index, a lazy stack or a file as the source), an in-place op
runs on a dense copy of the view and every entry is written back through the
view's own write primitive (`_set_str`), so no write is lost.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from td_core._core.contract import provided
from td_core._core.utils import NO_DEFAULT
from td_core._kinds.base import TensorDictBase
from td_core._kinds.inplace_route import InPlaceRouteMixin

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["CopyBackMixin"]

Tensor = torch.Tensor


class CopyBackMixin(InPlaceRouteMixin):
    """What the write-through view kinds share: `source`, the batch size, device and dim
    names that follow it, reads through `_view`, copies and pickles of the view, and
    the in-place ops of `InPlaceRouteMixin`, which reach the source when the view's
    reads are copies."""

    __slots__ = ()
    _source: TensorDictBase
    _batch_size: torch.Size

    if TYPE_CHECKING:

        @property
        def _batch_rule(self) -> str:
            """Why the view's batch size cannot be set (in the setter's message)."""

        def _view(self, value: Any) -> Any:
            """The entry of the view for the source's entry `value` (each kind's own)."""

        @property
        def _view_arg(self) -> Any:
            """What the view is built with besides its source (its index, its op)."""

    _view_name: str  # in messages: "a sub-TensorDict view", "a lazy view"
    _view_arg_key: ClassVar[str]  # `_view_arg`'s key in the pickled state: "idx", "op"
    _names_refusal: ClassVar[str]  # the message of the error for a write of dim names

    # ---------------------------------------------------------------- metadata
    @property
    def source(self) -> TensorDictBase:
        """The TensorDict this view reads from and writes into."""
        return self._source

    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        raise RuntimeError(
            "Modifying the batch size of a lazy representation of a tensordict is not permitted. "
            "Consider instantiating the tensordict first by calling `td = td.to_tensordict()` "
            f"before resetting the batch size. ({self._batch_rule[0].upper()}{self._batch_rule[1:]}.)"
        )

    @property
    def device(self) -> torch.device | None:
        return self._source.device

    def _set_device(self, device: Any) -> None:
        raise RuntimeError(
            f"cannot change the device of {self._view_name}; move its source instead"
        )

    def auto_batch_size_(
        self, batch_dims: int | None = None, keep_compliant_size: bool = False
    ) -> Self:
        """Refused: a view's batch size follows its source (see `batch_size`)."""
        self.batch_size = None  # raises
        return self

    def _names_error(self) -> RuntimeError:
        return RuntimeError(self._names_refusal)

    def _set_names(self, names: Any) -> None:
        """Refused for other names before they are checked: the names are the source's."""
        if names is not None and tuple(names) != tuple(self.names):
            if any(name is not None for name in names):
                raise self._names_error()
        super()._set_names(names)

    def refine_names(self, *names: Any) -> Self:
        """Refused: a view's dim names are its source's (a wrong count raises as on a TensorDict)."""
        given = len(names) - (Ellipsis in names)
        if given > self.batch_dims or (Ellipsis not in names and given != self.batch_dims):
            self.to_tensordict().refine_names(*names)  # raises the count error
        raise self._names_error()

    def rename_(self, *names: Any, **rename_map: str) -> Self:
        """Refused: a view's dim names are its source's."""
        raise self._names_error()

    def is_shared(self) -> bool:
        """Whether the source lives in shared memory."""
        return bool(self._source.is_shared())

    # ------------------------------------------------------- copies and pickles
    def clone(self, recurse: bool = True) -> Any:
        """A TensorDict copy; with `recurse=False`, a view of a structure-only copy of the source."""
        if recurse:
            return self.to_tensordict()
        return type(self)(self._source.clone(recurse=False), self._view_arg)  # type: ignore[call-arg]

    @classmethod
    def _from_pytree(cls, source: dict[str, Any], batch_size: torch.Size, device: Any) -> Any:
        """What pytree rebuilds (under `vmap`, `torch.compile`, `tree_map`): a dense
        TensorDict of the view's entries."""
        return provided("TensorDict")._from_pytree(source, batch_size, device)

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self._source, self._view_arg_key: self._view_arg}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["source"], state[self._view_arg_key])  # type: ignore[misc]

    # ---------------------------------------------------------------- reading
    def _get_str(self, key: str, default: Any = NO_DEFAULT) -> Any:
        value = self._source._get_str(key, NO_DEFAULT)
        return default if value is NO_DEFAULT else self._view(value)

    def _keys_str(self) -> Collection[str]:
        return self._source._keys_str()

    def _items_str(self) -> Collection[tuple[str, Any]]:
        view = self._view
        return [(key, view(value)) for key, value in self._source._items_str()]

    def _values_str(self) -> Collection[Any]:
        view = self._view
        return [view(value) for value in self._source._values_str()]

    def _subtrees(self) -> list[TensorDictBase]:
        return []  # nothing is held here: locks and names live on the source

    # ------------------------------------------------------------- in place
    @property
    def _direct(self) -> bool:
        """Whether the leaves read are views of the source's memory."""
        return not self._reads_are_copies
