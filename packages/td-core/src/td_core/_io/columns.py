"""Columns <-> entries: the conversions that every table format shares.

A TensorDict with one batch dim is a table: each leaf of shape `[num_rows]`
is a column and each batch element a row. Nested keys become column names
joined with a `separator` (`("obs", "x")` <-> `"obs.x"`), and the reverse
splits them. Numeric and boolean columns become tensors, datetimes `int64`
nanoseconds, categoricals their codes; any other column (strings, objects)
is kept as non-tensor data, as upstream tensordict does. Nothing here
unpickles: object columns are kept as they are.

pandas and pyarrow are optional: `require` imports them when a function
needs them, never at `import td_core`, and names the pip extra otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import torch

from td_core._core.contract import dense
from td_core._core.predicates import is_tensorclass
from td_core._core.traverse import is_nt, is_td
from td_core._core.utils import as_size
from td_core._io.convert_from import ConversionError
from td_core._leaves.lists import stack_of_values
from td_core.errors import ExtensionMissingError, TDError

__all__ = [
    "ReadOptions",
    "TabularFormatError",
    "build",
    "columns_of",
    "frame_columns",
    "frame_of",
    "installed",
    "neither",
    "require",
    "table_columns",
]

# the pip extra of td-core that installs each optional library
_EXTRA = {"pandas": "pandas", "pyarrow": "arrow"}


class TabularFormatError(TDError, ValueError):
    """A table cannot hold this TensorDict, or a table's columns do not make a TensorDict."""


def require(module: str, feature: str) -> ModuleType:
    """Import `module` (e.g. `"pyarrow.parquet"`) for `feature`, or say which extra installs it.

    Raises:
        ExtensionMissingError: (an `ImportError`) naming `pip install 'td-core[<extra>]'`.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        raise ExtensionMissingError(
            f"{feature} needs {top}, which is not installed: pip install 'td-core[{_EXTRA[top]}]'"
        ) from exc


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def neither(feature: str) -> ExtensionMissingError:
    return ExtensionMissingError(
        f"{feature} needs pandas or pyarrow, and neither is installed: "
        "pip install 'td-core[pandas]' (or 'td-core[arrow]')"
    )


# ---------------------------------------------------------------- table -> TensorDict
def frame_columns(frame: Any) -> tuple[dict[str, Any], int]:
    """The columns of a DataFrame as arrays (categoricals as their codes), and its row count."""
    pd = require("pandas", "from_pandas")
    if not isinstance(frame, pd.DataFrame):
        raise ConversionError(f"from_pandas reads a pandas DataFrame, got {type(frame).__name__}")
    columns: dict[str, Any] = {}
    for name in frame.columns:
        series = frame[name]
        if isinstance(series, pd.DataFrame):
            raise TabularFormatError(
                f"the DataFrame has several columns named {name!r}: rename them first"
            )
        if isinstance(series.dtype, pd.CategoricalDtype):
            columns[str(name)] = series.cat.codes.to_numpy()
        else:
            columns[str(name)] = series.to_numpy()
    return columns, len(frame)


def table_columns(table: Any) -> tuple[dict[str, Any], int]:
    """The columns of a pyarrow Table (numbers as arrays, other types as lists), and its row count."""
    pa = require("pyarrow", "reading Arrow tables")
    types = pa.types
    columns: dict[str, Any] = {}
    for name, column in zip(table.column_names, table.columns):
        typ = column.type
        if types.is_integer(typ) or types.is_floating(typ) or types.is_boolean(typ):
            columns[name] = column.to_numpy()
        elif types.is_timestamp(typ):
            columns[name] = column.to_numpy()
        elif (
            isinstance(typ, pa.FixedShapeTensorType)
            and (types.is_integer(typ.value_type) or types.is_floating(typ.value_type))
            and column.null_count == 0
            and not any(chunk.storage.flatten().null_count for chunk in column.chunks)
        ):
            # keeps each row's shape (to_pylist would flatten it)
            columns[name] = column.combine_chunks().to_numpy_ndarray()
        else:
            columns[name] = column.to_pylist()
    return columns, table.num_rows


def _entry(values: Any, dtype: torch.dtype | None) -> Any:
    """One column as an entry: a tensor for numbers, else the values as non-tensor data."""
    if isinstance(values, list):
        return stack_of_values(values)
    kind = values.dtype.kind
    if kind in "iufb":
        tensor = torch.from_numpy(np.array(values, copy=True))
        return tensor if dtype is None else tensor.to(dtype)
    if kind == "M":  # datetimes: int64 nanoseconds since the epoch
        return torch.from_numpy(values.astype("datetime64[ns]").astype(np.int64))
    return values  # strings, objects, complex...: as the constructor stores an array


def _nest(entries: dict[str, Any], separator: str) -> dict[str, Any]:
    """`{"obs.x": v}` -> `{"obs": {"x": v}}`; a name that is both a leaf and a prefix raises."""
    nested: dict[str, Any] = {}
    for name, value in entries.items():
        *head, last = name.split(separator)
        node = nested
        for i, part in enumerate(head):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                prefix = separator.join(head[: i + 1])
                raise TabularFormatError(
                    f"column {name!r} nests under {prefix!r}, which is also a column: "
                    f"rename one of them or pass another separator than {separator!r}"
                )
        if last in node:
            raise TabularFormatError(
                f"column {name!r} is also the prefix of other columns (split on "
                f"{separator!r}): rename one of them or pass another separator"
            )
        node[last] = value
    return nested


class ReadOptions(NamedTuple):
    """The keyword arguments every `from_<table>` reader takes, in their order."""

    auto_batch_size: bool
    batch_dims: int | None
    device: Any
    batch_size: Any
    separator: str | None
    dtype: torch.dtype | None


def build(
    cls: type, columns: dict[str, Any], num_rows: int, what: str, options: ReadOptions
) -> Any:
    """The `cls` of `columns` (the tail every reader shares), called from the reader itself.

    The reader must call this directly: the `batch_dims` warning points at its caller.
    """
    auto_batch_size, batch_dims, device, batch_size, separator, dtype = options
    entries = {name: _entry(values, dtype) for name, values in columns.items()}
    source: Mapping[str, Any] = entries if separator is None else _nest(entries, separator)
    size = torch.Size([num_rows]) if batch_size is None else as_size(batch_size)
    result: Any = dense(source, size, device)  # a batch_size that does not fit raises first
    if auto_batch_size and batch_size is not None:
        raise TypeError(
            f"{what}: Conflicting batch sizes: batch_size={list(size)} and auto_batch_size=True "
            "were both given; pass batch_size or auto_batch_size=True, not both"
        )
    if auto_batch_size:
        result.auto_batch_size_(batch_dims=batch_dims)
    elif batch_dims is not None:
        _warn_batch_dims(what, result, batch_dims, batch_size)
    if is_tensorclass(cls):
        unknown = sorted(set(result.keys()) - set(cls._fields))  # type: ignore[attr-defined]
        if unknown:
            raise TabularFormatError(
                f"{what}: the columns {unknown} are not fields of {cls.__name__} "
                f"(fields: {list(cls._fields)}); read into a TensorDict instead"  # type: ignore[attr-defined]
            )
        return cls.from_tensordict(result)  # type: ignore[attr-defined]
    return result


def _warn_batch_dims(what: str, result: Any, batch_dims: int, batch_size: Any) -> None:
    """Upstream's warning: `batch_dims` without `auto_batch_size` is ignored, for now."""
    if batch_size is None:
        try:
            expected = result.copy().auto_batch_size_(batch_dims=batch_dims)
        except (ValueError, RuntimeError):
            expected = None
        if expected is not None and expected.batch_size == result.batch_size:
            return
        advice = "pass auto_batch_size=True to get that result now, or drop batch_dims"
    else:
        advice = "drop batch_dims to keep this result"
    warnings.warn(
        f"{what} ignores batch_dims={batch_dims} without auto_batch_size=True; upstream "
        f"tensordict 0.17 will turn auto_batch_size on when batch_dims is given: {advice}",
        FutureWarning,
        stacklevel=4,
    )


# ---------------------------------------------------------------- TensorDict -> table
def _flat(td: Any, separator: str | None) -> dict[str, Any]:
    """Column name -> leaf; a nested tensorclass that fits no columns stays one object column."""
    out: dict[str, Any] = {}
    for key, value in td.items():
        if not is_td(value):
            out[key] = value
        elif separator is None:
            if not is_tensorclass(value):
                raise TabularFormatError(
                    f"entry {key!r} is a nested TensorDict: pass separator (e.g. '.') to "
                    "join nested keys into column names"
                )
            out[key] = value
        else:
            sub = _flat(value, separator)
            if is_tensorclass(value) and (
                not sub or any(_wide(v) or is_tensorclass(v) for v in sub.values())
            ):
                out[key] = value
                continue
            for name, leaf in sub.items():
                out[f"{key}{separator}{name}"] = leaf
    return out


def _wide(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim > 1


def _column(name: str, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if _wide(value):
            raise TabularFormatError(
                f"Cannot convert tensor {name!r} to a column: entry {name!r} has shape "
                f"{list(value.shape)}, and a column holds one value per row, so a leaf must "
                "have one dim; reshape it or leave it out (exclude)"
            )
        try:
            return value.detach().cpu().numpy()
        except TypeError as exc:
            raise TypeError(f"entry {name!r}: {exc}; cast it first (e.g. .float())") from exc
    if is_nt(value):
        return value.tolist()
    if is_td(value):  # a tensorclass kept whole: one object per row
        return list(value.unbind(0)) if value.batch_dims else value
    return value


def columns_of(td: Any, separator: str | None) -> dict[str, Any]:
    return {name: _column(name, value) for name, value in _flat(td, separator).items()}


def frame_of(td: Any, separator: str | None, feature: str) -> Any:
    pd = require("pandas", feature)
    return pd.DataFrame(columns_of(td, separator))
