"""to_zarr / from_zarr: round trips through zarr stores (zarr>=3.1)."""

from __future__ import annotations

import pytest
import torch

import td_core
import td_memmap
from td_core import LazyStackedTensorDict, NonTensorData, TensorDict

# zarr>=3.1 needs Python>=3.11: the dev group installs it there only
zarr = pytest.importorskip("zarr", minversion="3.1")


def _td() -> TensorDict:
    td = TensorDict(
        {
            "a": torch.arange(12.0).view(4, 3),
            "b": {"c": torch.arange(8).view(4, 2), "d": torch.ones(4, dtype=torch.bfloat16)},
            "flag": torch.tensor([True, False, True, False]),
            "note": "hello",
        },
        batch_size=[4],
    )
    td.names = ["time"]
    return td


def test_nested_round_trip_keeps_values_batch_sizes_and_names(tmp_path):
    td = _td()
    out = td.to_zarr(tmp_path / "s.zarr")
    back = TensorDict.from_zarr(tmp_path / "s.zarr")
    for result in (out, back):
        assert result.batch_size == torch.Size([4])
        assert result["b"].batch_size == torch.Size([4])
        assert result.names == ["time"]
        assert (result == td).all()
        assert result["b", "d"].dtype == torch.bfloat16
        assert result["flag"].dtype == torch.bool
        assert isinstance(result.get("note"), NonTensorData)
        assert result["note"] == "hello"


def test_layout_is_groups_arrays_and_json_attributes(tmp_path):
    _td().to_zarr(tmp_path / "s.zarr")
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert isinstance(root["b"], zarr.Group)
    assert isinstance(root["a"], zarr.Array)
    assert root["a"].shape == (4, 3)
    meta = root.attrs["__tensordict__"]
    assert meta["batch_size"] == [4]
    assert root["note"].attrs["__tensordict_non_tensor__"] == {"encoding": "json"}
    assert root["note"][...].tobytes() == b'"hello"'
    assert root["b"].attrs["__tensordict__"]["batch_size"] == [4]


def test_lazy_stack_round_trip_keeps_heterogeneous_shapes(tmp_path):
    stack = LazyStackedTensorDict(
        TensorDict(a=torch.zeros(2), s="x"),
        TensorDict(a=torch.ones(3), s="y"),
        stack_dim=0,
    )
    out = stack.to_zarr(tmp_path / "l.zarr")
    assert isinstance(out, LazyStackedTensorDict)
    assert out.batch_size == torch.Size([2])
    assert out.tensordicts[0]["a"].shape == (2,)
    assert torch.equal(out.tensordicts[1]["a"], torch.ones(3))
    assert [t["s"] for t in out.tensordicts] == ["x", "y"]


def test_module_function_and_batch_size_options(tmp_path):
    _td().to_zarr(tmp_path / "s.zarr")
    assert td_core.from_zarr(tmp_path / "s.zarr").batch_size == torch.Size([4])
    assert td_core.from_zarr(tmp_path / "s.zarr", batch_size=[]).batch_size == torch.Size([])
    with pytest.raises(TypeError, match="batch_size"):
        td_core.from_zarr(tmp_path / "s.zarr", batch_size=[4], auto_batch_size=True)


def test_store_written_by_zarr_itself_gets_the_shared_leading_dims(tmp_path):
    root = zarr.open_group(str(tmp_path / "x.zarr"), mode="w")
    root.create_array("obs", data=torch.arange(6.0).view(3, 2).numpy())
    root.create_group("sub").create_array("r", data=torch.zeros(3, 2, 4).numpy())
    td = TensorDict.from_zarr(tmp_path / "x.zarr")
    assert td.batch_size == torch.Size([3, 2])
    assert td["sub"].batch_size == torch.Size([3, 2, 4])
    assert TensorDict.from_zarr(
        tmp_path / "x.zarr", auto_batch_size=True, batch_dims=1
    ).batch_size == (3,)
    assert torch.equal(td["obs"], torch.arange(6.0).view(3, 2))


def test_store_object_and_chunks(tmp_path):
    store = zarr.storage.LocalStore(str(tmp_path / "c.zarr"))
    td = TensorDict(a=torch.arange(40.0).view(20, 2), batch_size=[20])
    out = td_memmap.to_zarr(td, store, chunks=(8,))
    assert torch.equal(out["a"], td["a"])
    assert zarr.open_group(str(tmp_path / "c.zarr"), mode="r")["a"].chunks == (8, 2)


def test_unstorable_non_tensor_refused_before_writing(tmp_path):
    td = TensorDict(a=torch.zeros(2), obj=object(), batch_size=[2])
    with pytest.raises(TypeError, match=r"'obj'.*JSON"):
        td.to_zarr(tmp_path / "bad.zarr")
    assert not (tmp_path / "bad.zarr").exists()


def test_bad_key_refused(tmp_path):
    td = TensorDict({"__x": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(ValueError, match="'__x'"):
        td.to_zarr(tmp_path / "bad.zarr")


def test_pickled_non_tensor_is_refused(tmp_path):
    TensorDict(a=torch.zeros(2), batch_size=[2]).to_zarr(tmp_path / "p.zarr")
    root = zarr.open_group(str(tmp_path / "p.zarr"), mode="r+")
    node = root.create_array("obj", shape=(3,), dtype="uint8")
    node.attrs["__tensordict_non_tensor__"] = {"encoding": "pickle"}
    with pytest.raises(td_memmap.MemmapFormatError, match=r"'obj'.*pickle"):
        TensorDict.from_zarr(tmp_path / "p.zarr")
