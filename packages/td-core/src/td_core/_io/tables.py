"""Tables: pandas DataFrames, CSV and Parquet files, one column per leaf.

A TensorDict with one batch dim is a table: each leaf of shape `[num_rows]`
is a column and each batch element a row. Nested keys become column names
joined with a `separator` (`("obs", "x")` <-> `"obs.x"`), and the reverse
splits them. Numeric and boolean columns become tensors, datetimes `int64`
nanoseconds, categoricals their codes; any other column (strings, objects)
is kept as non-tensor data, as upstream tensordict does.

pandas and pyarrow are optional (`pip install 'td-core[pandas]'`,
`'td-core[arrow]'`): they are imported when a function needs them, never at
`import td_core`, and a missing one raises `ExtensionMissingError` (an
`ImportError`) naming the extra. Reading never unpickles: CSV and Parquet
hold plain values, and object columns are kept as they are. The column
conversions themselves live in `_columns`.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from td_core._core.contract import TensorDictContract, provide
from td_core._io.columns import (
    ReadOptions,
    build,
    columns_of,
    frame_columns,
    frame_of,
    installed,
    neither,
    require,
    table_columns,
)

__all__ = ["TabularMixin"]

Path = str | os.PathLike[str]


# ---------------------------------------------------------------- files
def _read_csv(path: Path, kwargs: dict[str, Any]) -> tuple[dict[str, Any], int]:
    if installed("pandas"):
        return frame_columns(require("pandas", "from_csv").read_csv(path, **kwargs))
    if installed("pyarrow"):
        return table_columns(require("pyarrow.csv", "from_csv").read_csv(os.fspath(path), **kwargs))
    raise neither("from_csv")


def _read_parquet(
    path: Path, columns: list[str] | None, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    if installed("pyarrow"):
        pq = require("pyarrow.parquet", "from_parquet")
        return table_columns(pq.read_table(os.fspath(path), columns=columns, **kwargs))
    if installed("pandas"):
        pd = require("pandas", "from_parquet")
        return frame_columns(pd.read_parquet(path, columns=columns, **kwargs))
    raise neither("from_parquet")


def _write_parquet(td: Any, path: Path, separator: str | None, kwargs: dict[str, Any]) -> None:
    if installed("pyarrow"):
        pa = require("pyarrow", "to_parquet")
        if installed("pandas"):
            table = pa.Table.from_pandas(frame_of(td, separator, "to_parquet"))
        else:
            table = pa.table(columns_of(td, separator))
        require("pyarrow.parquet", "to_parquet").write_table(table, os.fspath(path), **kwargs)
    elif installed("pandas"):
        frame_of(td, separator, "to_parquet").to_parquet(path, **kwargs)
    else:
        raise neither("to_parquet")


# ---------------------------------------------------------------- the methods
class TabularMixin(TensorDictContract):
    """`to_pandas`, `to_csv`, `to_parquet` and the `from_pandas`/`from_csv`/`from_parquet` readers."""

    __slots__ = ()

    def to_pandas(self, *, separator: str | None = None) -> Any:
        """A pandas DataFrame with one column per leaf and one row per batch element.

        Tensors must have one dim (`[num_rows]`) and are copied to the CPU;
        non-tensor data gives a column of Python values. Needs pandas
        (`pip install 'td-core[pandas]'`).

        Args:
            separator: joins nested keys into column names (`("obs", "x")`
                becomes `"obs.x"` with `"."`); required when there are nested
                TensorDicts. A nested tensorclass without `separator` is one
                column holding each row's tensorclass.

        Returns:
            A `pandas.DataFrame`.

        Raises:
            TabularFormatError: (a `ValueError`) naming the entry that is a
                nested TensorDict without `separator`, or a tensor with more than one dim.
            ExtensionMissingError: (an `ImportError`) without pandas.

        Example:
            ```python
            import torch
            from td_core import TensorDict

            td = TensorDict(a=torch.arange(2), b=TensorDict(c=torch.zeros(2)), batch_size=[2])
            list(td.to_pandas(separator=".").columns)  # ['a', 'b.c']
            ```
        """
        return frame_of(self, separator, "to_pandas")

    def to_csv(self, path: Path, *, separator: str | None = None, **kwargs: Any) -> None:
        """Write a CSV file with one column per leaf (through `to_pandas`, without the index).

        Args:
            path: the file to write.
            separator: joins nested keys into column names (see `to_pandas`).
            **kwargs: passed to `pandas.DataFrame.to_csv`.

        Raises:
            TabularFormatError: (a `ValueError`) as `to_pandas`.
            ExtensionMissingError: (an `ImportError`) without pandas.

        Example:
            ```python
            td.to_csv("data.csv", separator=".")
            TensorDict.from_csv("data.csv", separator=".")
            ```
        """
        frame_of(self, separator, "to_csv").to_csv(path, index=False, **kwargs)

    def to_parquet(self, path: Path, *, separator: str | None = None, **kwargs: Any) -> None:
        """Write a Parquet file with one column per leaf (columns as in `to_pandas`).

        Written with pyarrow when it is installed (through a pandas DataFrame
        when pandas is too), else with `pandas.DataFrame.to_parquet`.

        Args:
            path: the file to write.
            separator: joins nested keys into column names (see `to_pandas`).
            **kwargs: passed to the Parquet writer (`pyarrow.parquet.write_table`).

        Raises:
            TabularFormatError: (a `ValueError`) as `to_pandas`.
            ExtensionMissingError: (an `ImportError`) with neither pyarrow nor pandas.

        Example:
            ```python
            td.to_parquet("data.parquet", separator=".")
            TensorDict.from_parquet("data.parquet", separator=".", columns=["a"])
            ```
        """
        _write_parquet(self, path, separator, kwargs)

    @classmethod
    def from_pandas(
        cls,
        dataframe: Any,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        separator: str | None = None,
        dtype: torch.dtype | None = None,
    ) -> Any:
        """A TensorDict with one entry per column of a pandas DataFrame, batch size `[num_rows]`.

        Numeric and boolean columns become tensors (cast to `dtype` if
        given), categoricals the tensor of their codes, datetimes `int64`
        nanoseconds. Any other column (strings, objects) becomes one
        non-tensor entry holding the column's array, as upstream: to get one
        value per row, set it again as a list. Called on a tensorclass, the
        result is that tensorclass; on any other class, a `TensorDict`.

        Args:
            dataframe: the DataFrame.
            auto_batch_size: use the longest leading shape every entry shares
                (with at most `batch_dims` dims); exclusive with `batch_size`.
            batch_dims: the most batch dims `auto_batch_size` keeps.
            device: the device of the result.
            batch_size: the batch size (default `[num_rows]`).
            separator: splits column names into nested keys (`"obs.x"`
                becomes `("obs", "x")` with `"."`).
            dtype: cast numeric and boolean columns to this dtype.

        Raises:
            TypeError: for both `batch_size` and `auto_batch_size`, or when
                `dataframe` is not a DataFrame.
            TabularFormatError: (a `ValueError`) naming a column that is both
                a leaf and a prefix of other columns under `separator`.
            ExtensionMissingError: (an `ImportError`) without pandas.

        Example:
            ```python
            import pandas as pd
            from td_core import TensorDict

            df = pd.DataFrame({"a": [1, 2, 3], "b": [4.0, 5.0, 6.0]})
            TensorDict.from_pandas(df).batch_size  # torch.Size([3])
            ```
        """
        options = ReadOptions(auto_batch_size, batch_dims, device, batch_size, separator, dtype)
        return build(cls, *frame_columns(dataframe), "from_pandas", options)

    @classmethod
    def from_csv(
        cls,
        path: Path,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        separator: str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> Any:
        """A TensorDict with one entry per column of a CSV file, batch size `[num_rows]`.

        Read with `pandas.read_csv` when pandas is installed (columns as in
        `from_pandas`), else with `pyarrow.csv.read_csv` (string columns then
        hold one value per row).

        Args:
            path: the CSV file.
            auto_batch_size: see `from_pandas`.
            batch_dims: see `from_pandas`.
            device: the device of the result.
            batch_size: the batch size (default `[num_rows]`).
            separator: splits column names into nested keys.
            dtype: cast numeric and boolean columns to this dtype.
            **kwargs: passed to the CSV reader.

        Raises:
            ExtensionMissingError: (an `ImportError`) with neither pandas nor pyarrow.

        Example:
            ```python
            td.to_csv("data.csv")
            TensorDict.from_csv("data.csv", dtype=torch.float32)
            ```
        """
        options = ReadOptions(auto_batch_size, batch_dims, device, batch_size, separator, dtype)
        return build(cls, *_read_csv(path, kwargs), "from_csv", options)

    @classmethod
    def from_parquet(
        cls,
        path: Path,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: Any = None,
        batch_size: Any = None,
        separator: str | None = None,
        dtype: torch.dtype | None = None,
        columns: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """A TensorDict with one entry per column of a Parquet file, batch size `[num_rows]`.

        Read with pyarrow when it is installed (string columns hold one value
        per row, fixed-shape tensor columns keep their shape), else with
        `pandas.read_parquet` (columns as in `from_pandas`).

        Args:
            path: the Parquet file.
            auto_batch_size: see `from_pandas`.
            batch_dims: see `from_pandas`.
            device: the device of the result.
            batch_size: the batch size (default `[num_rows]`).
            separator: splits column names into nested keys.
            dtype: cast numeric and boolean columns to this dtype.
            columns: read only these columns (default: all).
            **kwargs: passed to the Parquet reader.

        Raises:
            ExtensionMissingError: (an `ImportError`) with neither pyarrow nor pandas.

        Example:
            ```python
            td.to_parquet("data.parquet")
            TensorDict.from_parquet("data.parquet", columns=["obs"])
            ```
        """
        options = ReadOptions(auto_batch_size, batch_dims, device, batch_size, separator, dtype)
        return build(cls, *_read_parquet(path, columns, kwargs), "from_parquet", options)


# `from_any` (a lower module) reads a DataFrame through this; called on the mixin itself,
# `from_pandas` builds a dense TensorDict
provide("from_pandas", TabularMixin.from_pandas)
