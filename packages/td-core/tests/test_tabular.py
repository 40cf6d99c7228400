"""Tables: pandas, CSV, Parquet and Arrow round trips, errors and the optional libraries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import td_core
from td_core import LazyStackedTensorDict, TensorDict

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")


def _sample() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(3),
            "b": torch.tensor([0.5, 1.5, 2.5]),
            "done": torch.tensor([True, False, True]),
            "obs": {"x": torch.tensor([1.0, 2.0, 3.0]), "deep": {"y": torch.tensor([4, 5, 6])}},
        },
        batch_size=[3],
    )


@pytest.fixture
def no_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`no_module("pandas")`: make `import pandas` (and its submodules) fail."""

    def hide(name: str) -> None:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, mod)
        monkeypatch.setitem(sys.modules, name, None)

    return hide


# ---------------------------------------------------------------- pandas
def test_to_pandas_joins_nested_keys_with_the_separator() -> None:
    frame = _sample().to_pandas(separator=".")
    assert list(frame.columns) == ["a", "b", "done", "obs.x", "obs.deep.y"]
    assert [str(d) for d in frame.dtypes] == ["int64", "float32", "bool", "float32", "int64"]
    assert frame["obs.deep.y"].tolist() == [4, 5, 6]


def test_pandas_round_trip_keeps_keys_dtypes_and_values() -> None:
    td = _sample()
    back = TensorDict.from_pandas(td.to_pandas(separator="/"), separator="/")
    assert back.batch_size == td.batch_size
    assert set(back.keys(True, True)) == set(td.keys(True, True))
    for key in td.keys(True, True):
        assert back[key].dtype == td[key].dtype
        assert torch.equal(back[key], td[key])


def test_from_pandas_column_types() -> None:
    frame = pd.DataFrame(
        {
            "i": [1, 2],
            "f": np.array([1.0, 2.0], dtype=np.float32),
            "cat": pd.Categorical(["u", "v"]),
            "when": pd.to_datetime(["1970-01-01", "1970-01-02"]),
            "name": ["x", "y"],
        }
    )
    td = td_core.from_pandas(frame)
    assert td.batch_size == torch.Size([2])
    assert td["f"].dtype == torch.float32
    assert td["cat"].tolist() == [0, 1]
    assert td["when"].tolist() == [0, 86_400 * 10**9]
    # a string column is one non-tensor value holding the column, as upstream
    assert list(td["name"]) == ["x", "y"]
    assert list(td[1]["name"]) == ["x", "y"]


def test_from_pandas_options() -> None:
    frame = pd.DataFrame({"a": [1, 2], "b": [3, 4]})
    assert td_core.from_pandas(frame, dtype=torch.float16)["a"].dtype == torch.float16
    assert td_core.from_pandas(frame, batch_size=[]).batch_size == torch.Size([])
    auto = td_core.from_pandas(frame, auto_batch_size=True, batch_dims=0)
    assert auto.batch_size == torch.Size([])
    with pytest.raises(TypeError, match=r"Conflicting batch sizes: batch_size=\[2\].*not both"):
        td_core.from_pandas(frame, auto_batch_size=True, batch_size=[2])
    assert td_core.from_pandas(frame, device="cpu").device == torch.device("cpu")
    assert set(td_core.from_pandas(pd.DataFrame({0: [1], 1: [2]})).keys()) == {"0", "1"}
    with pytest.warns(FutureWarning, match="batch_dims=0"):
        assert td_core.from_pandas(frame, batch_dims=0).batch_size == torch.Size([2])


def test_from_pandas_errors_name_the_column() -> None:
    with pytest.raises(ValueError, match=r"'a\.b'.*'a'"):
        td_core.from_pandas(pd.DataFrame({"a": [1], "a.b": [2]}), separator=".")
    with pytest.raises(ValueError, match=r"'a'"):
        td_core.from_pandas(pd.DataFrame({"a.b": [1], "a": [2]}), separator=".")
    with pytest.raises(TypeError, match="DataFrame, got dict"):
        td_core.from_pandas({"a": [1]})
    with pytest.raises(RuntimeError, match="'a'"):
        td_core.from_pandas(pd.DataFrame({"a": [1, 2]}), batch_size=[3])


def test_to_pandas_errors_name_the_entry() -> None:
    with pytest.raises(ValueError, match="'obs' is a nested TensorDict"):
        _sample().to_pandas()
    wide = TensorDict(a=torch.arange(3), img=torch.zeros(3, 2), batch_size=[3])
    with pytest.raises(ValueError, match=r"Cannot convert tensor 'img'.* has shape \[3, 2\]"):
        wide.to_pandas()
    half = TensorDict(h=torch.zeros(3, dtype=torch.bfloat16), batch_size=[3])
    with pytest.raises(TypeError, match="'h'"):
        half.to_pandas()


def test_from_any_reads_a_dataframe_as_from_pandas() -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]})
    for convert in (td_core.from_any, TensorDict.from_any):
        td = convert(frame)
        assert type(td) is TensorDict
        assert td.batch_size == torch.Size([3])
        assert td["a"].tolist() == [1, 2, 3]
        assert td["b"].dtype == torch.float64
    assert td_core.from_any(frame, device="cpu").device == torch.device("cpu")
    assert td_core.from_any(frame, batch_size=[]).batch_size == torch.Size([])
    with pytest.raises(TypeError, match="Conflicting batch sizes"):
        td_core.from_any(frame, auto_batch_size=True, batch_size=[3])


def test_to_pandas_non_tensor_columns() -> None:
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    td["tag"] = "hi"
    td["names"] = td_core.NonTensorStack.from_list(["p", "q", "r"])
    frame = td.to_pandas()
    assert frame["tag"].tolist() == ["hi"] * 3
    assert frame["names"].tolist() == ["p", "q", "r"]


@td_core.tensorclass
class Point:
    x: torch.Tensor
    y: torch.Tensor


def test_nested_tensorclass_is_one_object_column_without_separator() -> None:
    td = TensorDict(p=Point(x=torch.zeros(3), y=torch.ones(3), batch_size=[3]), batch_size=[3])
    frame = td.to_pandas()
    assert isinstance(frame["p"][0], Point)
    assert list(td.to_pandas(separator=".").columns) == ["p.x", "p.y"]


def test_from_pandas_on_a_tensorclass_builds_it() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0]})
    point = Point.from_pandas(frame)
    assert isinstance(point, Point)
    assert point.y.tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match=r"\['z'\] are not fields of Point"):
        Point.from_pandas(frame.assign(z=[0, 0]))


def test_lazy_stacks_read_and_write_tables(tmp_path: Path) -> None:
    members = [
        TensorDict(r=torch.rand(2), ragged=torch.zeros(2, i + 1), batch_size=[2]) for i in range(3)
    ]
    stack = LazyStackedTensorDict.lazy_stack(members, 0)
    frame = stack.select("r").reshape(-1).to_pandas()
    assert frame["r"].tolist() == torch.stack([m["r"] for m in members]).reshape(-1).tolist()
    back = LazyStackedTensorDict.from_pandas(frame)
    assert type(back) is TensorDict and back.batch_size == torch.Size([6])
    stack.select("r").reshape(-1).to_csv(tmp_path / "t.csv")
    stack.select("r").reshape(-1).to_parquet(tmp_path / "t.parquet")
    for back in (
        LazyStackedTensorDict.from_csv(tmp_path / "t.csv", dtype=torch.float32),
        LazyStackedTensorDict.from_parquet(tmp_path / "t.parquet"),
    ):
        assert type(back) is TensorDict
        torch.testing.assert_close(back["r"], stack["r"].reshape(-1))


# ---------------------------------------------------------------- files
def test_csv_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    _sample().to_csv(path, separator=".")
    assert path.read_text().splitlines()[0] == "a,b,done,obs.x,obs.deep.y"
    back = TensorDict.from_csv(path, separator=".", dtype=torch.float32)
    assert back["obs", "deep", "y"].tolist() == [4.0, 5.0, 6.0]
    assert back["obs", "deep", "y"].dtype == torch.float32
    assert td_core.from_csv(path)["done"].dtype == torch.bool


def test_parquet_round_trip_keeps_strings_per_row(tmp_path: Path) -> None:
    td = _sample()
    td["names"] = td_core.NonTensorStack.from_list(["p", "q", "r"])
    path = tmp_path / "t.parquet"
    td.to_parquet(path, separator=".")
    back = td_core.from_parquet(path, separator=".")
    assert back["obs", "x"].dtype == torch.float32
    assert back[2]["names"] == "r"
    only = TensorDict.from_parquet(path, columns=["a", "obs.x"], separator=".")
    assert set(only.keys(True, True)) == {"a", ("obs", "x")}


def test_from_csv_falls_back_to_pyarrow(tmp_path: Path, no_module: Any) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,name\n1,x\n2,y\n")
    no_module("pandas")
    td = td_core.from_csv(path)
    assert td["a"].tolist() == [1, 2]
    assert td[1]["name"] == "y"


# ---------------------------------------------------------------- arrow
def test_arrow_round_trip_of_every_entry_type() -> None:
    jagged = torch.nested.nested_tensor_from_jagged(
        torch.arange(5.0), torch.tensor([0, 2, 3, 5]), jagged_dim=1
    )
    td = TensorDict(
        x=torch.arange(3.0),
        img=torch.arange(12).view(3, 2, 2),
        ids=jagged,
        obs=TensorDict(y=torch.tensor([True, False, True]), batch_size=[3]),
        batch_size=[3],
    )
    td["text"] = td_core.NonTensorStack.from_list(["a", "b", "c"])
    table = td_core.to_arrow(td)
    assert table.num_rows == 3
    back = td_core.from_arrow(table)
    assert torch.equal(back["img"], td["img"])
    assert [t.tolist() for t in back["ids"].unbind(0)] == [[0.0, 1.0], [2.0], [3.0, 4.0]]
    assert back["obs", "y"].tolist() == [True, False, True]
    assert back["text"] == ["a", "b", "c"]


def test_from_arrow_views_mutable_buffers_and_copies_on_request() -> None:
    table = pa.table({"x": pa.array([1.0, 2.0])})
    view = td_core.from_arrow(table)["x"]
    copy = td_core.from_arrow(table, copy=True)["x"]
    assert td_core.from_arrow(table, device="cpu").device == torch.device("cpu")
    view.add_(1)
    assert table.column("x").to_pylist() == [2.0, 3.0]
    assert copy.tolist() == [1.0, 2.0]


def test_from_arrow_nulls() -> None:
    table = pa.table({"y": pa.array([1.0, None]), "n": pa.array([1, None], pa.uint16())})
    with pytest.raises(ValueError, match=r"\('y',\) has 1 null"):
        td_core.from_arrow(table)
    filled = td_core.from_arrow(table, nulls="fill")
    assert filled["n"].tolist() == [1, 0]
    assert filled["y"][1].isnan()
    masked = td_core.from_arrow(table, nulls="mask", mask_key=("m", "k"))
    assert masked["m", "k", "y"].tolist() == [True, False]
    with pytest.raises(ValueError, match="not 'mask'"):
        td_core.from_arrow(table, mask_key="m")
    with pytest.raises(ValueError, match="nulls must be one of"):
        td_core.from_arrow(table, nulls="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="which is a column"):
        td_core.from_arrow(pa.table({"_mask": [1]}), nulls="mask")


def test_to_arrow_errors() -> None:
    with pytest.raises(ValueError, match=r"batch_size \[2, 2\]"):
        td_core.to_arrow(TensorDict(x=torch.zeros(2, 2), batch_size=[2, 2]))
    with pytest.raises(TypeError, match="'h'"):
        td_core.to_arrow(TensorDict(h=torch.zeros(2, dtype=torch.bfloat16), batch_size=[2]))


# ---------------------------------------------------------------- optional libraries
def test_import_td_core_imports_neither_library() -> None:
    code = "import sys, td_core; print('pandas' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_missing_pandas_names_the_extra(tmp_path: Path, no_module: Any) -> None:
    no_module("pandas")
    with pytest.raises(td_core.errors.ExtensionMissingError, match=r"td-core\[pandas\]"):
        _sample().to_pandas(separator=".")
    with pytest.raises(ImportError, match=r"td-core\[pandas\]"):
        td_core.from_pandas(object())
    with pytest.raises(ImportError, match=r"td-core\[pandas\]"):
        _sample().to_csv(tmp_path / "t.csv", separator=".")


def test_missing_pyarrow_names_the_extra(no_module: Any) -> None:
    no_module("pyarrow")
    with pytest.raises(ImportError, match=r"td-core\[arrow\]"):
        td_core.from_arrow({"a": [1]})
    with pytest.raises(ImportError, match=r"td-core\[arrow\]"):
        td_core.to_arrow(_sample())


def test_missing_both_libraries(tmp_path: Path, no_module: Any) -> None:
    no_module("pandas")
    no_module("pyarrow")
    with pytest.raises(ImportError, match="neither is installed"):
        td_core.from_csv(tmp_path / "t.csv")
    with pytest.raises(ImportError, match="neither is installed"):
        td_core.from_parquet(tmp_path / "t.parquet")
    with pytest.raises(ImportError, match="neither is installed"):
        _sample().to_parquet(tmp_path / "t.parquet", separator=".")
