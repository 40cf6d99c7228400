"""Tables (pandas, CSV, Parquet, Arrow) on every kind, against upstream.

A DataFrame is compared as (columns, dtypes, values per column); a file or
Arrow round trip as (batch_size, {nested key: leaf}), so that only the data
matters, not the container class a reader returns. Cases take the kind's
one-dim leaves (`reward`, `done`, `("nested", "y")`) over a flattened batch,
and the error cases the whole container (leaves of more than one dim).
"""

from __future__ import annotations

import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
import torch

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

COLUMNS = ("reward", "done", ("nested", "y"))


def _ns(td: Any) -> types.ModuleType:
    """td_core or upstream tensordict, whichever built `td`."""
    import td_core

    if td_core.is_tensor_collection(td):
        return td_core
    import tensordict

    return tensordict


def _table(frame: Any) -> tuple[list[str], list[str], dict[str, list[Any]]]:
    return (
        [str(c) for c in frame.columns],
        [str(d) for d in frame.dtypes],
        {str(c): frame[c].tolist() for c in frame.columns},
    )


def _flat(out: Any) -> tuple[Any, dict[str, Any]]:
    return tuple(out.batch_size), {str(k): out.get(k) for k in out.keys(True, True)}


def _rows(td: Any) -> Any:
    """The kind's one-dim leaves over one flattened batch dim."""
    return td.reshape(-1).select(*COLUMNS, strict=False)


def _file_round_trip(suffix: str, **read: Any) -> Any:
    def case(td: Any) -> Any:
        ns = _ns(td)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"t.{suffix}"
            getattr(_rows(td), f"to_{suffix}")(path, separator=".")
            return _flat(getattr(ns, f"from_{suffix}")(path, separator=".", **read))

    return case


def _classmethod_round_trip(suffix: str) -> Any:
    def case(td: Any) -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"t.{suffix}"
            getattr(_rows(td), f"to_{suffix}")(path, separator=".")
            return _flat(getattr(type(td), f"from_{suffix}")(path, separator="."))

    return case


def _classmethod_from_pandas(td: Any, **kwargs: Any) -> Any:
    frame = _rows(td).to_pandas(separator=".")
    return _flat(type(td).from_pandas(frame, separator=".", **kwargs))


def _top_level_from_pandas(td: Any, **kwargs: Any) -> Any:
    frame = _rows(td).to_pandas(separator=".")
    return _flat(_ns(td).from_pandas(frame, separator=".", **kwargs))


def _arrow_round_trip(td: Any) -> Any:
    ns = _ns(td)
    return _flat(ns.from_arrow(ns.to_arrow(td.reshape(-1))))


CASES = {
    # to_pandas
    "to_pandas": lambda td: _table(_rows(td).to_pandas(separator=".")),
    "to_pandas_row_view": lambda td: _table(
        td[0].select(*COLUMNS, strict=False).to_pandas(separator="/")
    ),
    "to_pandas_no_separator": lambda td: _table(td[0].to_pandas()),
    "to_pandas_wide_leaf": lambda td: _table(td.reshape(-1).to_pandas(separator=".")),
    # from_pandas, as a classmethod of every kind's class and at the top level
    "from_pandas_classmethod": _classmethod_from_pandas,
    "from_pandas_dtype": lambda td: _classmethod_from_pandas(td, dtype=torch.float64),
    "from_pandas_batch_size": lambda td: _classmethod_from_pandas(td, batch_size=[]),
    "from_pandas_auto_batch_size": lambda td: _classmethod_from_pandas(
        td, auto_batch_size=True, batch_dims=1
    ),
    # upstream's lazy stacks fail before checking the arguments: ask the top-level function
    "from_pandas_conflicting_sizes": lambda td: _top_level_from_pandas(
        td, auto_batch_size=True, batch_size=[12]
    ),
    "from_pandas_top_level": _top_level_from_pandas,
    "from_pandas_flat_names": lambda td: _flat(
        _ns(td).from_pandas(_rows(td).to_pandas(separator="."))
    ),
    # files
    "csv_round_trip": _file_round_trip("csv"),
    "csv_round_trip_dtype": _file_round_trip("csv", dtype=torch.float32),
    "parquet_round_trip": _file_round_trip("parquet"),
    "parquet_columns": _file_round_trip("parquet", columns=["nested.y"]),
    "csv_classmethod": _classmethod_round_trip("csv"),
    "parquet_classmethod": _classmethod_round_trip("parquet"),
    # Arrow
    "arrow_round_trip": _arrow_round_trip,
    "to_arrow_two_batch_dims": lambda td: _ns(td).to_arrow(td),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tabular(case: str, kind: str, check) -> None:
    check(CASES[case], kind, inputs=False)
