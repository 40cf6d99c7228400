"""Arrow tables <-> TensorDicts (`from_arrow`, `to_arrow`), viewing Arrow's buffers where it can.

An Arrow table is a TensorDict with one batch dim: numeric columns become
tensors (through DLPack, no copy), `fixed_size_list` and fixed-shape tensor
columns tensors with trailing dims, lists of numbers jagged nested tensors,
structs nested TensorDicts, and every other column (strings, dates, maps...)
a `NonTensorStack` of its Python values. `to_arrow` goes back.

pyarrow (15 or later) is optional: `pip install 'td-core[arrow]'`; it is
imported on the first call, never at `import td_core`.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from td_core._core.contract import dense
from td_core._core.keys import NestedKey, unravel_key
from td_core._core.traverse import is_nt, is_td
from td_core._io.columns import TabularFormatError, require
from td_core._leaves.lists import stack_of_values
from td_core.errors import ExtensionMissingError

__all__ = ["from_arrow", "to_arrow"]

_NULLS = ("raise", "fill", "mask")
# masked_fill refuses the unsigned dtypes above uint8: fill a signed view (0 has the same bits)
_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def _pyarrow(feature: str) -> Any:
    pa = require("pyarrow", feature)
    if int(pa.__version__.split(".")[0]) < 15:
        raise ExtensionMissingError(
            f"{feature} needs pyarrow 15 or later, got {pa.__version__}: "
            "pip install 'pyarrow>=15' (or 'td-core[arrow]')"
        )
    return pa


def _is_list(pa: Any, typ: Any) -> bool:
    return bool(pa.types.is_list(typ) or pa.types.is_large_list(typ))


def _is_dense(pa: Any, typ: Any) -> bool:
    """Whether a column of this type is a dense tensor (numbers, maybe in fixed-size lists)."""
    if isinstance(typ, pa.FixedShapeTensorType):
        return _is_dense(pa, typ.storage_type)
    if pa.types.is_fixed_size_list(typ):
        return _is_dense(pa, typ.value_type)
    t = pa.types
    return bool(t.is_integer(typ) or t.is_floating(typ) or t.is_boolean(typ))


def _no_nulls(arr: Any, nulls: str, key: tuple[str, ...]) -> None:
    if nulls == "raise" and arr.null_count:
        raise ValueError(
            f"Arrow column {key} has {arr.null_count} null value(s): pass nulls='fill' to "
            "fill them, or nulls='mask' to fill them and get a mask entry"
        )


def _no_inner_nulls(pa: Any, arr: Any, key: tuple[str, ...]) -> None:
    """Raise for a null inside the rows of a list or a struct column, at any depth."""
    typ = arr.type
    if pa.types.is_struct(typ):
        children = arr.flatten()
    elif _is_list(pa, typ) or pa.types.is_fixed_size_list(typ):
        children = [arr.flatten()]
    else:
        return
    for child in children:
        _no_nulls(child, "raise", key)
        _no_inner_nulls(pa, child, key)


def _valid(arr: Any) -> torch.Tensor:
    return torch.from_numpy(arr.is_valid().to_numpy(zero_copy_only=False))


def _flat_tensor(pa: Any, arr: Any, copy: bool | None) -> torch.Tensor:
    """A primitive array without nulls as a 1-d tensor (a view unless copying)."""
    if pa.types.is_boolean(arr.type):  # Arrow packs booleans in bits: this copies
        return torch.from_numpy(arr.to_numpy(zero_copy_only=False))
    tensor = torch.from_dlpack(arr)
    buffer = arr.buffers()[1]
    # torch has no read-only tensors: writing into a view of an immutable
    # (e.g. memory-mapped) buffer would crash, so those are copied by default
    if copy or (copy is None and buffer is not None and not buffer.is_mutable):
        tensor = tensor.clone()
    return tensor


def _tensor(pa: Any, arr: Any, copy: bool | None, nulls: str, key: tuple[str, ...]) -> torch.Tensor:
    """A dense column (see `_is_dense`) as a tensor of shape `[len(arr), ...]`, nulls filled."""
    typ = arr.type
    _no_nulls(arr, nulls, key)
    n = len(arr)
    if isinstance(typ, pa.FixedShapeTensorType):
        tensor = _tensor(pa, arr.storage, copy, nulls, key).view(n, *typ.shape)
        if typ.permutation is not None:
            tensor = tensor.permute(0, *[1 + d for d in typ.permutation])
        return tensor
    if pa.types.is_fixed_size_list(typ):
        size = typ.list_size
        # `values` ignores the array's offset and nulls (flatten would drop null rows)
        inner = _tensor(pa, arr.values.slice(arr.offset * size, n * size), copy, nulls, key)
        tensor = inner.view(n, size, *inner.shape[1:])
    elif arr.null_count:
        # view the values without the validity bitmap, then fill the nulls below
        values = pa.Array.from_buffers(
            typ, n, [None, arr.buffers()[1]], null_count=0, offset=arr.offset
        )
        tensor = _flat_tensor(pa, values, copy)
    else:
        return _flat_tensor(pa, arr, copy)
    if not arr.null_count:
        return tensor
    dtype = tensor.dtype
    fill = float("nan") if tensor.is_floating_point() else 0
    holes = ~_valid(arr).view(n, *[1] * (tensor.ndim - 1))
    return tensor.view(_SIGNED.get(dtype, dtype)).masked_fill(holes, fill).view(dtype)


def _jagged(pa: Any, arr: Any, copy: bool | None, nulls: str, key: tuple[str, ...]) -> torch.Tensor:
    """A list column of numbers as a jagged nested tensor (null rows become empty)."""
    if arr.null_count:
        arr = arr.fill_null(pa.scalar([], type=arr.type))
    offsets = _flat_tensor(pa, arr.offsets, copy)
    start, stop = int(offsets[0]), int(offsets[-1])
    values = _tensor(pa, arr.values.slice(start, stop - start), copy, nulls, key)
    return torch.nested.nested_tensor_from_jagged(values, (offsets - start).to(torch.int64))


def _entry(
    pa: Any,
    arr: Any,
    key: tuple[str, ...],
    copy: bool | None,
    nulls: str,
    masks: dict[tuple[str, ...], torch.Tensor],
) -> Any:
    """One column (or one field of a struct column) as an entry."""
    typ = arr.type
    if pa.types.is_struct(typ):  # flatten gives each field the struct's offset and nulls
        fields = {
            field.name: _entry(pa, child, (*key, field.name), copy, nulls, masks)
            for field, child in zip(typ, arr.flatten())
        }
        return dense(fields, [len(arr)])
    _no_nulls(arr, nulls, key)
    if nulls == "mask" and arr.null_count:
        masks[key] = _valid(arr)
    if _is_dense(pa, typ):
        return _tensor(pa, arr, copy, nulls, key)
    if _is_list(pa, typ) and _is_dense(pa, typ.value_type):
        return _jagged(pa, arr, copy, nulls, key)
    if nulls == "raise":
        _no_inner_nulls(pa, arr, key)
    return stack_of_values(arr.to_pylist())


def _mask_key(mask_key: NestedKey | None, nulls: str) -> tuple[str, ...]:
    if mask_key is None:
        return ("_mask",)
    if nulls != "mask":
        raise ValueError(f"from_arrow got mask_key={mask_key!r} but nulls={nulls!r}, not 'mask'")
    try:
        key = unravel_key(mask_key)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"mask_key must be a string or a tuple of strings, got {mask_key!r}"
        ) from exc
    key = (key,) if isinstance(key, str) else tuple(key)
    if not key:
        raise ValueError("mask_key must be a string or a non-empty tuple of strings, got ()")
    return key


def from_arrow(
    table: Any,
    *,
    copy: bool | None = None,
    nulls: Literal["raise", "fill", "mask"] = "raise",
    mask_key: NestedKey | None = None,
    device: torch.device | str | int | None = None,
) -> Any:
    """A TensorDict with one entry per column of an Arrow table, batch size `[num_rows]`.

    Integer and float columns view Arrow's buffers through DLPack (booleans
    are copied: Arrow packs them in bits); `fixed_size_list` and fixed-shape
    tensor columns become tensors with trailing dims; `list`/`large_list`
    columns of numbers jagged nested tensors; `struct` columns nested
    TensorDicts; any other column a `NonTensorStack` of its Python values.
    A column of several chunks is concatenated first (a copy). Needs
    pyarrow 15 or later (`pip install 'td-core[arrow]'`).

    Args:
        table: a `pyarrow.Table` or `RecordBatch`, or anything `pyarrow.table`
            accepts (a dict of lists, an object with `__arrow_c_stream__`).
        copy: `None` views mutable buffers and copies immutable (e.g.
            memory-mapped) ones; `True` copies every column; `False` views
            every column it can (writing into a view of an immutable buffer
            then crashes: torch has no read-only tensors).
        nulls: `"raise"` raises `ValueError` naming the column for a null
            row, or a null inside a list or struct row; `"fill"` fills nulls
            with `NaN` (floats), `0`/`False` (other tensors), an empty row
            (jagged) or `None` (non-tensor); `"mask"` fills them and adds a
            boolean entry `(*mask_key, *column)`, `True` where the row is valid.
        mask_key: the key under which `nulls="mask"` writes the masks
            (default `"_mask"`); only with `nulls="mask"`.
        device: move the result to this device (default: CPU, no device).

    Returns:
        A `TensorDict`.

    Raises:
        ValueError: for a null with `nulls="raise"`, a bad `nulls`, or a
            `mask_key` that is also a column.
        ExtensionMissingError: (an `ImportError`) without pyarrow 15 or later.

    Example:
        ```python
        import pyarrow as pa
        from td_core import from_arrow

        td = from_arrow(pa.table({"x": [1.0, 2.0], "ids": [[1, 2], [3]], "text": ["a", "b"]}))
        td["x"], td["text"]  # tensor([1., 2.], dtype=torch.float64), ['a', 'b']
        ```
    """
    pa = _pyarrow("from_arrow")
    if nulls not in _NULLS:
        raise ValueError(f"nulls must be one of {_NULLS}, got {nulls!r}")
    masks_at = _mask_key(mask_key, nulls)
    if not isinstance(table, (pa.Table, pa.RecordBatch)):
        table = pa.table(table)
    if nulls == "mask" and masks_at[0] in table.column_names:
        raise ValueError(
            f"nulls='mask' writes the masks under {masks_at[0]!r}, which is a column of the "
            "table: pass another mask_key"
        )
    masks: dict[tuple[str, ...], torch.Tensor] = {}
    entries = {}
    for name, column in zip(table.column_names, table.columns):
        if isinstance(column, pa.ChunkedArray):
            column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        entries[name] = _entry(pa, column, (name,), copy, nulls, masks)
    result: Any = dense(entries, [table.num_rows])
    for key, mask in masks.items():
        result.set((*masks_at, *key), mask)
    return result if device is None else result.to(device)


def _array(pa: Any, value: Any, key: Any) -> Any:
    """The entry `key` as an Arrow array (a struct array for a nested TensorDict)."""
    if is_nt(value):
        return pa.array(value.tolist())
    if is_td(value):
        items = list(value.items())
        if not items:
            return pa.array([{}] * value.batch_size[0], type=pa.struct([]))
        return pa.StructArray.from_arrays(
            [_array(pa, v, (*_tuple(key), k)) for k, v in items], names=[k for k, _ in items]
        )
    tensor = value.detach().cpu().contiguous()
    if tensor.is_nested:
        if tensor.layout is not torch.jagged:
            raise TabularFormatError(
                f"to_arrow converts nested tensors of layout torch.jagged, got {tensor.layout} "
                f"at {key!r}"
            )
        ragged = tensor._ragged_idx
        if ragged != 1:
            raise TabularFormatError(
                f"to_arrow needs the ragged dim of the jagged tensor {key!r} at position 1, got "
                f"{ragged}: move it there first (.transpose(1, {ragged}))"
            )
        return pa.LargeListArray.from_arrays(
            pa.array(tensor.offsets().numpy()), _array(pa, tensor.values(), key)
        )
    try:
        array = tensor.numpy()
    except TypeError as exc:
        raise TypeError(f"to_arrow: entry {key!r}: {exc}; cast it first (e.g. .float())") from exc
    if tensor.ndim == 1:
        return pa.array(array)
    if not len(tensor):  # from_numpy_ndarray refuses an empty array
        typ = pa.fixed_shape_tensor(pa.from_numpy_dtype(array.dtype), tensor.shape[1:])
        return pa.ExtensionArray.from_storage(typ, pa.array([], typ.storage_type))
    return pa.FixedShapeTensorArray.from_numpy_ndarray(array)


def _tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def to_arrow(td: Any) -> Any:
    """An Arrow table with one column per entry of a TensorDict with one batch dim.

    The reverse of `from_arrow`: 1-d tensors become primitive columns
    (numeric CPU tensors are not copied), tensors with more dims
    `arrow.fixed_shape_tensor` columns, jagged nested tensors (ragged dim 1)
    `large_list` columns, nested TensorDicts `struct` columns and non-tensor
    entries columns of the type `pyarrow.array` infers from their values.
    Needs pyarrow 15 or later (`pip install 'td-core[arrow]'`).

    Args:
        td: a TensorDict with one batch dim (`td.reshape(-1)` flattens more).

    Returns:
        A `pyarrow.Table` with `td.batch_size[0]` rows (none if `td` has no entries).

    Raises:
        ValueError: for a batch size of more or fewer than one dim, or a
            jagged tensor whose ragged dim is not 1.
        ExtensionMissingError: (an `ImportError`) without pyarrow 15 or later.

    Example:
        ```python
        import torch
        from td_core import TensorDict, to_arrow

        td = TensorDict(x=torch.zeros(2), obs=TensorDict(y=torch.ones(2, 3), batch_size=[2]), batch_size=[2])
        to_arrow(td).column_names  # ['x', 'obs']
        ```
    """
    pa = _pyarrow("to_arrow")
    if td.batch_dims != 1:
        raise TabularFormatError(
            f"to_arrow needs a TensorDict with one batch dim, got batch_size "
            f"{list(td.batch_size)}: call td.reshape(-1) first"
        )
    return pa.table({key: _array(pa, value, key) for key, value in td.items()})
