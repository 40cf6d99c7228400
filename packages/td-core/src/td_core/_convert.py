"""Conversion to and from other containers (numpy, lists, namedtuples, dataclasses, pytrees, ``from_any``).

The ``from_*`` constructors always build a dense :class:`td_core.TensorDict`
(a tensorclass with ``from_dataclass(..., as_tensorclass=True)``). They share
one tail, :func:`_finish`: an explicit ``batch_size`` wins, else
``auto_batch_size``/``batch_dims`` infer one, else it stays empty.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from td_core._map import is_nt, is_td
from td_core._nontensor import NonTensorData, NonTensorStack
from td_core._utils import as_size
from td_core.errors import TDError

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = [
    "ConvertMixin",
    "from_any",
    "from_dataclass",
    "from_json",
    "from_list",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "fromkeys",
]

Tensor = torch.Tensor
_PYTREE_TYPE = "_pytree_type"


class ConversionError(TDError, TypeError, AttributeError):
    """The input is not the kind of container the converter reads."""


def _dense(source: Mapping[str, Any] | None = None, batch_size: Any = ()) -> Any:
    from td_core._td import TensorDict

    return TensorDict(source, batch_size=batch_size)


def _finish(
    td: Any,
    *,
    batch_size: Any = None,
    auto_batch_size: bool | None = False,
    batch_dims: int | None = None,
    device: Any = None,
    names: Sequence[str | None] | None = None,
) -> Any:
    if batch_size is not None:
        td.batch_size = as_size(batch_size)
    elif auto_batch_size or batch_dims is not None:
        td.auto_batch_size_(batch_dims)
    if device is not None:
        td = td.to(device)
    if names is not None:
        td.names = names
    return td


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


# ---------------------------------------------------------------- towards python
def _node_to_dict(td: TensorDictBase, convert: bool | str, tolist_first: bool) -> dict[str, Any]:
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


def _tolist(td: TensorDictBase, convert_nodes: bool, convert: bool | str) -> Any:
    if not td.batch_size:
        return _node_to_dict(td, convert, False) if convert_nodes else td
    return [_tolist(item, convert_nodes, convert) for item in td.unbind(0)]


def _to_namedtuple(td: TensorDictBase, dest_cls: Any) -> Any:
    values = {}
    for key, value in td._items_str():
        if is_td(value):
            values[key] = _to_namedtuple(value, None)
        else:
            values[key] = value.data if is_nt(value) else value
    cls = dest_cls or collections.namedtuple("GenericDict", list(values))
    return cls(**values)


def _to_pytree(td: TensorDictBase) -> Any:
    kind = td._get_str(_PYTREE_TYPE, None)
    if kind is None:
        return td
    kind = kind.data
    children = {
        key: _to_pytree(value) if is_td(value) else (value.data if is_nt(value) else value)
        for key, value in td._items_str()
        if key != _PYTREE_TYPE
    }
    if kind is dict:
        return children
    if kind in (tuple, list):
        return kind(children[str(i)] for i in range(len(children)))
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return kind(**children)
    raise TypeError(f"to_pytree: cannot rebuild a node of type {kind!r}")


def _struct_dtype(td: TensorDictBase, n: int) -> list[tuple[Any, ...]]:
    fields: list[tuple[Any, ...]] = []
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            np_dtype = torch.empty((), dtype=value.dtype).numpy().dtype
            fields.append((key, np_dtype, tuple(value.shape[n:])))
        elif is_nt(value):
            strings = [str(v) for v in np.asarray(value.tolist(), dtype=object).reshape(-1)]
            width = max([len(s) for s in strings] + [1])
            fields.append((key, f"<U{width}"))
        else:
            fields.append((key, _struct_dtype(value, n), tuple(value.batch_size[n:])))
    return fields


def _fill_struct(arr: np.ndarray, td: TensorDictBase) -> None:
    for key, value in td._items_str():
        if isinstance(value, Tensor):
            arr[key] = value.detach().cpu().numpy()
        elif is_nt(value):
            arr[key] = np.asarray(value.tolist(), dtype=object).astype(str)
        else:
            _fill_struct(arr[key], value)


# ---------------------------------------------------------------- from python
def _from_struct(arr: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    assert arr.dtype.names is not None
    for name in arr.dtype.names:
        field = arr[name]
        if field.dtype.names is not None:
            out[name] = _dense(_from_struct(field), field.shape)
        elif field.dtype.kind in "US":
            out[name] = NonTensorStack(field.astype(object)) if field.shape else str(field)
        else:
            try:
                out[name] = torch.from_numpy(field)
            except (ValueError, RuntimeError, TypeError):  # unaligned field: copy it
                out[name] = torch.from_numpy(np.ascontiguousarray(field))
    return out


def _tuple_entries(obj: Sequence[Any]) -> dict[str, Any]:
    return {str(i): _value(v) for i, v in enumerate(obj)}


def _value(value: Any) -> Any:
    """An entry for ``from_any``-style builders: containers become TensorDicts."""
    if is_td(value) or isinstance(value, Tensor):
        return value
    if isinstance(value, Mapping):
        return _dense({k: _value(v) for k, v in value.items()})
    if _is_namedtuple(value):
        return _dense({k: _value(v) for k, v in value._asdict().items()})
    if isinstance(value, tuple):
        return _dense(_tuple_entries(value))
    if _is_dataclass_instance(value):
        return _dense({f.name: _value(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, np.ndarray) and value.dtype.names is not None:
        return _dense(_from_struct(value), value.shape)
    return value


def _pytree_node(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj
    if isinstance(obj, (bool, int, float)):
        return torch.as_tensor(obj)
    if isinstance(obj, Mapping):
        items = {str(k): _pytree_node(v) for k, v in obj.items()}
    elif _is_namedtuple(obj):
        items = {k: _pytree_node(v) for k, v in obj._asdict().items()}
    elif isinstance(obj, (tuple, list)):
        items = {str(i): _pytree_node(v) for i, v in enumerate(obj)}
    else:
        raise NotImplementedError(
            f"from_pytree: unsupported leaf type {type(obj).__name__!r}; leaves must be "
            "tensors or numbers, nodes dicts, lists, tuples or namedtuples"
        )
    td = _dense(items)
    td.set_non_tensor(_PYTREE_TYPE, type(obj))
    return td


def from_pytree(
    pytree: Any,
    *,
    batch_size: Any = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
) -> Any:
    """A TensorDict from a tree of dicts, lists, tuples and namedtuples (see ``to_pytree``).

    Each node records its type under ``"_pytree_type"`` so ``to_pytree`` can
    rebuild the tree. A tensor passed alone is returned as it is.

    Raises:
        NotImplementedError: (a ``RuntimeError``) for a leaf that is not a tensor or a number.
    """
    if isinstance(pytree, Tensor):
        return pytree
    return _finish(
        _pytree_node(pytree),
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
    )


def from_namedtuple(
    named_tuple: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict whose keys are the fields of ``named_tuple`` (nested namedtuples nest)."""
    if not _is_namedtuple(named_tuple):
        raise ConversionError(
            f"from_namedtuple expects a namedtuple instance, got {type(named_tuple).__name__}"
        )
    td = _dense({k: _value(v) for k, v in named_tuple._asdict().items()})
    return _finish(
        td,
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
    )


def from_tuple(
    obj: Sequence[Any],
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict with keys ``"0"``, ``"1"``, ... for the items of ``obj`` (nested tuples nest)."""
    if not isinstance(obj, (tuple, list)):
        raise TypeError(f"from_tuple expects a tuple, got {type(obj).__name__}")
    return _finish(
        _dense(_tuple_entries(obj)),
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
    )


def from_dataclass(
    dataclass: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    as_tensorclass: bool = False,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict (or an instance of ``dest_cls``) holding the fields of a dataclass instance.

    With ``as_tensorclass=True`` and a dataclass *type*, returns a tensorclass
    type with the same fields; with an instance, an instance of that tensorclass.
    """
    from td_core._tensorclass import tensorclass

    if as_tensorclass and isinstance(dataclass, type):
        if not dataclasses.is_dataclass(dataclass):
            raise TypeError(f"from_dataclass expects a dataclass, got {dataclass!r}")
        return tensorclass(type(f"{dataclass.__name__}_tc", (dataclass,), {}))
    if not _is_dataclass_instance(dataclass):
        if isinstance(dataclass, type) and dataclasses.is_dataclass(dataclass):
            raise TypeError(
                f"from_dataclass got the dataclass type {dataclass.__name__}, not an instance; "
                "pass an instance, or as_tensorclass=True to convert the type"
            )
        raise TypeError(f"from_dataclass expects a dataclass instance, got {type(dataclass)!r}")
    fields = {f.name: _value(getattr(dataclass, f.name)) for f in dataclasses.fields(dataclass)}
    td = _finish(
        _dense(fields),
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
    )
    if as_tensorclass:
        dest_cls = from_dataclass(type(dataclass), as_tensorclass=True)
    if dest_cls is not None:
        if hasattr(dest_cls, "from_tensordict"):
            return dest_cls.from_tensordict(td)
        return dest_cls(**dict(td.items()))
    return td


def from_struct_array(
    struct_array: np.ndarray,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """A TensorDict over a numpy structured array: one entry per field (nested dtypes nest).

    The batch size is the array's shape unless ``batch_size`` or
    ``auto_batch_size`` say otherwise. Numeric fields share memory with the
    array where their layout allows it.
    """
    if not isinstance(struct_array, np.ndarray) or struct_array.dtype.names is None:
        raise TypeError(
            f"from_struct_array expects a numpy structured array, got {type(struct_array).__name__}"
        )
    td = _dense(_from_struct(struct_array), struct_array.shape)
    if batch_size is None and (auto_batch_size or batch_dims is not None):
        td.batch_size = torch.Size()
    return _finish(
        td,
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
    )


def from_list(
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

    Members with different keys give a lazy stack (also with ``lazy=True``).
    """
    from td_core._lazy import LazyStackedTensorDict
    from td_core._stack import stack

    if not isinstance(input, (list, tuple)):
        raise TypeError(f"from_list expects a list, got {type(input).__name__}")
    if not input:
        raise ValueError("from_list needs at least one element")
    items = []
    for i, item in enumerate(input):
        if is_td(item):
            items.append(item)
        elif isinstance(item, Mapping):
            items.append(_dense({k: _value(v) for k, v in item.items()}))
        else:
            raise TypeError(f"from_list: item {i} is a {type(item).__name__}, not a mapping")
    same = all(set(t.keys(True, True)) == set(items[0].keys(True, True)) for t in items)
    out = LazyStackedTensorDict(*items, stack_dim=0) if lazy or not same else stack(items, 0)
    return _finish(
        out,
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
        names=names,
    )


def from_json(
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
    """Read what :meth:`~td_core.TensorDictBase.to_json` wrote (a list of records, one per row).

    Keys joined with ``separator`` (default ``"."``) become nested keys. Numbers
    become tensors (``dtype`` if given), other values non-tensor leaves.
    """
    with open(path, encoding="utf-8") as f:
        if lines:
            records = [json.loads(line, **kwargs) for line in f if line.strip()]
        else:
            records = json.load(f, **kwargs)
    if isinstance(records, dict):
        records = [records]
        squeeze = True
    else:
        squeeze = False
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"from_json: {path!r} does not hold a list of JSON objects")
    columns: dict[str, list[Any]] = {}
    for record in records:
        for key, value in record.items():
            columns.setdefault(key, []).append(value)
    entries: dict[str, Any] = {}
    for key, values in columns.items():
        if len(values) != len(records):
            raise ValueError(f"from_json: key {key!r} is missing from some records")
        arr = np.asarray(values)
        if arr.dtype.kind in "biuf":
            entries[key] = torch.as_tensor(arr, dtype=dtype)
        else:
            entries[key] = NonTensorStack.from_list(values)
    td = _dense(entries, [len(records)]).unflatten_keys(separator or ".")
    if squeeze:
        td = td[0]
    return _finish(
        td,
        batch_size=batch_size,
        auto_batch_size=auto_batch_size,
        batch_dims=batch_dims,
        device=device,
    )


def fromkeys(keys: list[Any], value: Any = 0) -> Any:
    """A TensorDict with empty batch size holding ``value`` at every key (see ``TensorDict.fromkeys``)."""
    td = _dense()
    for key in keys:
        td.set(key, value)
    return td


def from_any(
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """Convert ``obj`` with the matching ``from_*``: mappings, namedtuples, tuples,
    dataclasses, structured arrays; TensorDicts are returned as they are, as are
    tensors and other values. A list becomes a non-tensor stack of its items.
    """
    kwargs = {
        "auto_batch_size": auto_batch_size,
        "batch_dims": batch_dims,
        "device": device,
        "batch_size": batch_size,
    }
    if is_td(obj) or isinstance(obj, Tensor):
        return obj
    if isinstance(obj, Mapping):
        return _finish(_dense({k: _value(v) for k, v in obj.items()}), **kwargs)
    if _is_namedtuple(obj):
        return from_namedtuple(obj, **kwargs)
    if isinstance(obj, tuple):
        return from_tuple(obj, **kwargs)
    if _is_dataclass_instance(obj):
        return from_dataclass(obj, **kwargs)
    if isinstance(obj, np.ndarray) and obj.dtype.names is not None:
        return from_struct_array(obj, **kwargs)
    if isinstance(obj, list):
        return NonTensorStack.from_list(obj)
    return obj


class ConvertMixin:
    """Conversion methods of :class:`td_core.TensorDictBase`."""

    __slots__ = ()

    def to_dict(
        self: TensorDictBase,
        *,
        retain_none: bool = True,
        convert_tensors: bool | str = False,
        tolist_first: bool = False,
    ) -> dict[str, Any]:
        """A nested ``dict`` of the entries.

        Args:
            retain_none: kept for upstream compatibility (``None`` values are kept).
            convert_tensors: ``True`` turns tensors into (nested) lists, ``"numpy"`` into arrays.
            tolist_first: sub-TensorDicts and non-tensor leaves become lists over the batch.
        """
        return _node_to_dict(self, convert_tensors, tolist_first)

    def numpy(self: TensorDictBase) -> dict[str, Any]:
        """A nested ``dict`` of numpy arrays (non-tensor leaves give their values)."""
        return _node_to_dict(self, "numpy", False)

    def tolist(
        self: TensorDictBase,
        *,
        convert_nodes: bool = True,
        convert_tensors: bool | str = False,
        tolist_first: bool = False,
        as_linked_list: bool = False,
    ) -> Any:
        """Nested lists over the batch dims, of dicts (or TensorDicts with ``convert_nodes=False``).

        Args:
            convert_tensors: ``True`` turns tensors into lists, ``"numpy"`` into arrays.
            tolist_first: accepted for upstream compatibility (the result is the same).
            as_linked_list: accepted for upstream compatibility; a plain list is returned.

        Examples:
            >>> import torch
            >>> from td_core import TensorDict
            >>> TensorDict({"a": torch.arange(2)}, [2]).tolist(convert_tensors=True)
            [{'a': 0}, {'a': 1}]
        """
        return _tolist(self, convert_nodes, convert_tensors)

    def to_namedtuple(self: TensorDictBase, dest_cls: type | None = None) -> Any:
        """A namedtuple (``GenericDict``, or ``dest_cls``) of the entries; sub-TensorDicts nest."""
        return _to_namedtuple(self, dest_cls)

    def to_pytree(self: TensorDictBase) -> Any:
        """The tree ``from_pytree`` read (dicts, lists, tuples, namedtuples), or self for other TensorDicts."""
        return _to_pytree(self)

    def to_struct_array(self: TensorDictBase) -> np.ndarray:
        """A numpy structured array shaped like the batch, one field per entry (nested dtypes nest)."""
        arr = np.empty(tuple(self.batch_size), dtype=_struct_dtype(self, self.batch_dims))
        _fill_struct(arr, self)
        return arr

    def to_json(
        self: TensorDictBase,
        path: Any,
        *,
        separator: str | None = None,
        lines: bool = False,
        **kwargs: Any,
    ) -> None:
        """Write the rows along dim 0 as JSON records (nested keys joined by ``separator``, default ``"."``).

        A TensorDict with empty batch size is one record. ``lines=True``
        writes one record per line. ``from_json`` reads it back.
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
        """A dense TensorDict from a (nested) mapping; see :func:`td_core.from_dict`."""
        from td_core._td import from_dict

        return from_dict(
            input_dict,
            auto_batch_size=auto_batch_size,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            names=names,
        )

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
        """:meth:`from_dict` as an instance method (the result is a new dense TensorDict)."""
        return type(self).from_dict(
            input_dict,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            auto_batch_size=auto_batch_size,
            names=names,
        )

    @classmethod
    def from_any(
        cls,
        obj: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """See :func:`td_core.from_any`."""
        return from_any(
            obj,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_tuple(
        cls,
        obj: Sequence[Any],
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """See :func:`td_core.from_tuple`."""
        return from_tuple(
            obj,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_namedtuple(
        cls,
        named_tuple: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """See :func:`td_core.from_namedtuple`."""
        return from_namedtuple(
            named_tuple,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_dataclass(
        cls,
        dataclass: Any,
        *,
        dest_cls: type | None = None,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        as_tensorclass: bool = False,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """See :func:`td_core.from_dataclass`."""
        return from_dataclass(
            dataclass,
            dest_cls=dest_cls,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            as_tensorclass=as_tensorclass,
            device=device,
            batch_size=batch_size,
        )

    @classmethod
    def from_pytree(
        cls,
        pytree: Any,
        *,
        batch_size: Any = None,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
    ) -> Any:
        """See :func:`td_core.from_pytree`."""
        return from_pytree(
            pytree, batch_size=batch_size, auto_batch_size=auto_batch_size, batch_dims=batch_dims
        )

    @classmethod
    def from_struct_array(
        cls,
        struct_array: np.ndarray,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
    ) -> Any:
        """See :func:`td_core.from_struct_array`."""
        return from_struct_array(
            struct_array,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
        )

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
        """See :func:`td_core.from_list`."""
        return from_list(
            input,
            auto_batch_size=auto_batch_size,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            names=names,
            lazy=lazy,
        )

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
        """See :func:`td_core.from_json`."""
        return from_json(
            path,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
            device=device,
            batch_size=batch_size,
            separator=separator,
            dtype=dtype,
            lines=lines,
            **kwargs,
        )

    def auto_batch_size_(
        self: TensorDictBase, batch_dims: int | None = None, keep_compliant_size: bool = False
    ) -> TensorDictBase:
        """Set the batch size to the longest leading shape common to every leaf, in place.

        Sub-TensorDicts are sized first (bottom up), unless ``keep_compliant_size``
        and their batch size already fits. ``batch_dims`` caps the number of dims.

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
                shapes.append(value.shape)
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

    def auto_device_(self: TensorDictBase) -> TensorDictBase:
        """Set the device to the one every leaf shares (``None`` if they differ or there is none).

        Sub-TensorDicts are set first (bottom up).
        """
        devices = set()
        for value in self._values_str():
            if isinstance(value, Tensor):
                devices.add(value.device)
            elif is_td(value):
                devices.add(value.auto_device_().device)
        self._set_device(devices.pop() if len(devices) == 1 else None)
        return self
