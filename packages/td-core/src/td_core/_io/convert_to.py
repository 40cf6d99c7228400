"""Conversion of a TensorDict to other containers (numpy, lists, namedtuples, pytrees, struct arrays, JSON).

The `from_*` converters live in `convert_from`: the class holds them as static
methods (the same functions as the top-level names), and its other constructors
(`from_dict`, `from_module`, ...) hand their arguments on to theirs.
"""

from __future__ import annotations

import collections
import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._core.contract import TensorDictContract, provided
from td_core._core.extensions import delegate
from td_core._core.traverse import has_exclusive_keys, is_nt, is_td
from td_core._core.utils import leaf_shape
from td_core._io.convert_from import (
    PYTREE_KEYS,
    PYTREE_TYPE,
    finish,
    from_any,
    from_dataclass,
    from_json,
    from_list,
    from_namedtuple,
    from_pytree,
    from_schema,
    from_struct_array,
    from_tuple,
)
from td_core._leaves.linked_list import linked_rows
from td_core._leaves.nontensor import NonTensorData
from td_core._leaves.unbatched import is_unbatched
from td_core.errors import ExclusiveKeysError

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["ConvertMixin"]

Tensor = torch.Tensor


# ---------------------------------------------------------------- towards python
def _node_to_dict(
    td: TensorDictContract, convert: bool | str, tolist_first: bool
) -> dict[str, Any]:
    if has_exclusive_keys(td):  # a key some members lack has no value for the whole stack
        per_member = td.exclusive_keys()  # type: ignore[attr-defined]
        raise ExclusiveKeysError(
            "cannot convert a lazy stack whose members hold other keys (exclusive keys per "
            f"member: {per_member}) to a dict: the method to_dict cannot complete when there "
            "are exclusive keys; read the members (td.tensordicts) or select the common keys"
        )
    out: dict[str, Any] = {}
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            out[key] = _convert_tensor(value, convert)
        elif is_nt(value):
            out[key] = value.tolist() if tolist_first else value.data
        elif tolist_first:
            out[key] = value.tolist(convert_tensors=convert)
        else:
            out[key] = _node_to_dict(value, convert, tolist_first)
    return out


def _convert_tensor(value: Tensor, convert: bool | str) -> Any:
    if convert == "numpy":
        return value.cpu().numpy()
    if convert:
        return value.tolist()
    return value


def _tolist(td: TensorDictContract, convert_nodes: bool, convert: bool | str, first: bool) -> Any:
    if not td.batch_size:
        return _node_to_dict(td, convert, first) if convert_nodes else td
    return [_tolist(item, convert_nodes, convert, first) for item in td.unbind(0)]


def _to_namedtuple(td: TensorDictContract, dest_cls: Any) -> Any:
    values = {}
    for key, value in td._items_str():
        if is_td(value):
            values[key] = _to_namedtuple(value, None)
        else:
            values[key] = value.data if is_nt(value) else value
    cls = dest_cls or _generic_dict(tuple(values))
    return cls(**values)


@functools.lru_cache(maxsize=256)
def _generic_dict(fields: tuple[str, ...]) -> Any:
    """The `GenericDict` namedtuple class of `fields` (building one costs ~50 µs: kept)."""
    return collections.namedtuple("GenericDict", fields)


def _to_pytree(td: TensorDictContract) -> Any:
    kind = td._get_str(PYTREE_TYPE, None)
    if kind is None:
        return td
    kind = kind.data
    children = {
        key: _to_pytree(value) if is_td(value) else (value.data if is_nt(value) else value)
        for key, value in td._items_str()
        if key != PYTREE_TYPE and key != PYTREE_KEYS
    }
    if issubclass(kind, Mapping):
        keys = td._get_str(PYTREE_KEYS, None)
        if keys is not None:  # keys that were not strings
            children = {keys.data.get(k, k): v for k, v in children.items()}
        return children if kind is dict else kind(children)
    if kind in (tuple, list):
        return kind(children[str(i)] for i in range(len(children)))
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return kind(**children)
    raise TypeError(f"to_pytree: cannot rebuild a node of type {kind!r}")


def _struct_dtype(td: TensorDictContract, n: int) -> list[tuple[Any, ...]]:
    fields: list[tuple[Any, ...]] = []
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            np_dtype = torch.empty((), dtype=value.dtype).numpy().dtype
            fields.append((key, np_dtype, tuple(value.shape[n:])))
        elif is_nt(value):
            width = max([len(s) for s in _strings(value).reshape(-1)] + [1])
            fields.append((key, f"<U{width}"))
        else:
            fields.append((key, _struct_dtype(value, n), tuple(value.batch_size[n:])))
    return fields


def _strings(leaf: Any) -> np.ndarray:
    """The `str` of each batch element of a non-tensor leaf (a list value stays one element)."""
    values = leaf.as_array()
    return np.array([str(v) for v in values.reshape(-1)], dtype=object).reshape(values.shape)


def _fill_struct(arr: np.ndarray, td: TensorDictContract) -> None:
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            arr[key] = value.detach().cpu().numpy()
        elif is_nt(value):
            arr[key] = _strings(value)
        else:
            _fill_struct(arr[key], value)


class ConvertMixin(TensorDictContract):
    """Conversion methods of `td_core.TensorDictBase`."""

    __slots__ = ()
    # the default of `from_list(lazy=None)`: a lazy stack class builds a lazy stack
    _from_list_lazy: bool | None = None

    def to_dict(
        self,
        *,
        retain_none: bool = True,
        convert_tensors: bool | str = False,
        tolist_first: bool = False,
    ) -> dict[str, Any]:
        """A nested `dict` of the entries.

        Args:
            retain_none: kept for upstream compatibility (`None` values are kept).
            convert_tensors: `True` turns tensors into (nested) lists, `"numpy"` into arrays.
            tolist_first: sub-TensorDicts and non-tensor leaves become lists over the batch.
        """
        return _node_to_dict(self, convert_tensors, tolist_first)

    def numpy(self) -> dict[str, Any]:
        """A nested `dict` of numpy arrays (non-tensor leaves give their values)."""
        return _node_to_dict(self, "numpy", False)

    def tolist(
        self,
        *,
        convert_nodes: bool = True,
        convert_tensors: bool | str = False,
        tolist_first: bool = False,
        as_linked_list: bool = False,
    ) -> Any:
        """Nested lists over the batch dims, of dicts (or TensorDicts with `convert_nodes=False`).

        Args:
            convert_tensors: `True` turns tensors into lists, `"numpy"` into arrays.
            tolist_first: sub-TensorDicts with batch dims of their own become lists
                (over those dims) too, instead of dicts of their batched leaves.
            as_linked_list: return `LinkedList`s, whose item assignment
                (`rows[0] = {...}`) writes that row into this TensorDict.

        Raises:
            TypeError: `convert_tensors` without `convert_nodes` (the leaves of
                TensorDict nodes stay tensors).

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> TensorDict({"a": torch.arange(2)}, [2]).tolist(convert_tensors=True)
            [{'a': 0}, {'a': 1}]
        """
        if convert_tensors and not convert_nodes:
            raise TypeError(
                "tolist: convert_tensors needs convert_nodes=True (a TensorDict node holds "
                "tensors); pass convert_nodes=True or drop convert_tensors"
            )
        rows = _tolist(self, convert_nodes, convert_tensors, tolist_first)
        return linked_rows(rows, self) if as_linked_list and self.batch_size else rows

    def to_namedtuple(self, dest_cls: type | None = None) -> Any:
        """A namedtuple (`GenericDict`, or `dest_cls`) of the entries; sub-TensorDicts nest."""
        return _to_namedtuple(self, dest_cls)

    def to_pytree(self) -> Any:
        """The tree `from_pytree` read (dicts, lists, tuples, namedtuples), or self for other TensorDicts."""
        return _to_pytree(self)

    def to_struct_array(self) -> np.ndarray:
        """A numpy structured array shaped like the batch, one field per entry (nested dtypes nest)."""
        arr = np.empty(tuple(self.batch_size), dtype=_struct_dtype(self, self.batch_dims))
        _fill_struct(arr, self)
        return arr

    def to_json(
        self,
        path: Any,
        *,
        separator: str | None = None,
        lines: bool = False,
        **kwargs: Any,
    ) -> None:
        """Write the rows along dim 0 as JSON records (nested keys joined by `separator`, default `"."`).

        A TensorDict with empty batch size is one record. `lines=True`
        writes one record per line. `from_json` reads it back.
        """
        flat = self.flatten_keys(separator or ".")
        rows = [flat] if not flat.batch_size else list(flat.unbind(0))
        records = [row.to_dict(convert_tensors=True) for row in rows]
        text = (
            "\n".join(json.dumps(r, **kwargs) for r in records)
            if lines
            else json.dumps(records[0] if not flat.batch_size else records, **kwargs)
        )
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(text)

    # ------------------------------------------------------------ constructors
    @staticmethod
    def from_module(
        module: Any,
        as_module: bool = False,
        lock: bool = False,
        use_state_dict: bool = False,
        *,
        filter_empty: bool = True,
    ) -> Any:
        """The parameters and buffers of `module` (see `td_core.from_module`)."""
        return delegate(provided("from_module"), locals())

    @staticmethod
    def from_modules(*modules: Any, **kwargs: Any) -> Any:
        """The stacked parameters of several modules (see `td_core.from_modules`)."""
        return provided("from_modules")(*modules, **kwargs)

    @classmethod
    def from_dict(
        cls,
        input_dict: Mapping[Any, Any],
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        *,
        auto_batch_size: bool | None = None,
        names: Sequence[str | None] | None = None,
    ) -> Any:
        """A dense TensorDict from a (nested) mapping; see `td_core.from_dict`."""
        return delegate(provided("from_dict"), locals())

    def from_dict_instance(
        self,
        input_dict: Mapping[Any, Any],
        *,
        auto_batch_size: bool | None = None,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Sequence[str | None] | None = None,
    ) -> Any:
        """`from_dict` as an instance method, taking this one's structure as the template.

        An entry of `input_dict` that is a mapping where this TensorDict holds a
        tensor collection (a sub-TensorDict, a tensorclass) is rebuilt as that
        collection's type (through its own `from_dict_instance`), as upstream.
        """
        entries = {}
        for key, value in input_dict.items():
            current = self._get_str(key, None) if type(key) is str else None
            if isinstance(value, Mapping) and current is not None and is_td(current):
                value = current.from_dict_instance(
                    value, auto_batch_size=auto_batch_size, batch_size=batch_size, device=device
                )
            entries[key] = value
        out = type(self).from_dict(
            entries,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            auto_batch_size=auto_batch_size,
            names=names,
        )
        if getattr(type(self), "_fields", None) is not None:
            # a tensorclass: built by its constructor (which casts fields, with autocast),
            # where its `from_dict` would keep what `TensorDict.from_dict` made of them
            cls: Any = type(self)
            out = cls(**entries, batch_size=out.batch_size, device=out.device)
        return out

    # the converters of `convert_from`, as they are: whatever class calls them they build a
    # dense TensorDict (a tensorclass with `from_dataclass`), so the top-level function and
    # the method are one function
    from_any = staticmethod(from_any)
    from_tuple = staticmethod(from_tuple)
    from_namedtuple = staticmethod(from_namedtuple)
    from_dataclass = staticmethod(from_dataclass)
    from_pytree = staticmethod(from_pytree)
    from_struct_array = staticmethod(from_struct_array)

    @classmethod
    def from_json(
        cls,
        path: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        separator: str | None = None,
        dtype: torch.dtype | None = None,
        lines: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Read what `to_json` wrote (see `td_core.from_json`); a tensorclass reads itself back.

        Called on a tensorclass, the records' keys must be its fields and the
        result is an instance of it; on any other class, a dense TensorDict.
        """
        td = delegate(from_json, locals())
        if getattr(cls, "_fields", None) is not None:  # a tensorclass
            return cls.from_tensordict(td)  # type: ignore[attr-defined]
        return td

    @classmethod
    def from_list(
        cls,
        input: Sequence[Any],
        *,
        auto_batch_size: bool | None = None,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Sequence[str | None] | None = None,
        lazy: bool | None = None,
    ) -> Any:
        """Stack a list of mappings or TensorDicts along a new dim 0.

        Members with different keys give a lazy stack (also with `lazy=True`); so do
        members whose entries differ in shape, unless `lazy=False` (then the dense
        stack's error is raised). On a lazy stack class, `lazy` defaults to True.
        """
        out = from_list(input, cls._from_list_lazy if lazy is None else lazy)
        return finish(out, batch_size, auto_batch_size, batch_dims, device, names)

    @classmethod
    def from_schema(
        cls,
        schema: dict[Any, tuple[Any, torch.dtype]],
        *,
        batch_size: Any = None,
        storage: str | None = None,
        device: Any = None,
        **kwargs: Any,
    ) -> Any:
        """A zero-filled TensorDict allocated from a schema of element shapes and dtypes.

        Each entry gets the shape `[*batch_size, *element_shape]`. `storage`
        picks where the zeros live, so that a large buffer on disk is created
        without being built in memory first.

        Args:
            schema: `{key: (element_shape, dtype)}`; keys may be nested (tuples).
            batch_size: the batch size, prepended to every element shape (default `[]`).
            storage: `None` (ordinary tensors), `"memmap"` (memory-mapped files
                under `prefix=`; needs td-memmap; the device is ignored),
                `"h5"` (an HDF5 file `filename=`; needs td-memmap[h5]), `"zarr"`
                (a zarr store `filename=`; needs td-memmap[zarr]), `"shared"`
                (shared memory), `"redis"` or `"dragonfly"` (a `TensorDictStore`;
                needs td-memmap[redis]; `host=`, `port=`, ... say where the server is).
            device: the device of the result.
            **kwargs: passed to the backend (`prefix` and the options of
                `memmap_like`; `filename` and h5py options for `"h5"`, zarr
                `create_array` options for `"zarr"`).

        Raises:
            ValueError: for an unknown `storage`.

        Example:
            ```python
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict.from_schema(
            ...     {"obs": ([84, 84, 3], torch.uint8), "reward": ([], torch.float32)},
            ...     batch_size=[10],
            ... )
            >>> td["obs"].shape
            torch.Size([10, 84, 84, 3])

            ```
        """
        return from_schema(schema, batch_size=batch_size, storage=storage, device=device, **kwargs)

    def auto_batch_size_(
        self, batch_dims: int | None = None, keep_compliant_size: bool = False
    ) -> Self:
        """Set the batch size to the longest leading shape common to every leaf, in place.

        Sub-TensorDicts are sized first (bottom up), unless `keep_compliant_size`
        and their batch size already fits. `batch_dims` caps the number of dims.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> td = TensorDict({"a": torch.zeros(3, 4, 2), "b": torch.zeros(3, 4)})
            >>> td.auto_batch_size_().batch_size
            torch.Size([3, 4])
        """
        shapes = []
        for value in self._values_str():
            if isinstance(value, Tensor):
                if type(value) is Tensor or not is_unbatched(value):  # unbatched: no batch dims
                    shape = leaf_shape(value)  # a strided nested tensor has no .shape
                    if -1 in shape:  # batch dims end before a ragged dim
                        shape = shape[: shape.index(-1)]
                    shapes.append(shape)
                continue
            if isinstance(value, NonTensorData):  # one value fits any batch size
                continue
            if is_td(value) and not keep_compliant_size:
                value.auto_batch_size_(batch_dims)
            shapes.append(value.batch_size)
        common = list(shapes[0]) if shapes else list(self.batch_size)
        for shape in shapes[1:]:
            i = 0
            while i < len(common) and i < len(shape) and common[i] == shape[i]:
                i += 1
            del common[i:]
        if batch_dims is not None:
            del common[batch_dims:]
        if torch.Size(common) != self.batch_size:
            self.batch_size = torch.Size(common)
        return self

    def auto_device_(self) -> Self:
        """Set the device to the one every leaf shares (`None` if they differ or there is none).

        Sub-TensorDicts are set first (bottom up).
        """
        devices: set[torch.device | None] = set()
        for value in self._values_str():
            if isinstance(value, Tensor):
                devices.add(value.device)
            elif is_td(value):
                devices.add(value.auto_device_().device)
        self._set_device(devices.pop() if len(devices) == 1 else None)
        return self
