"""safetensors interchange: round trips, upstream's files, bad files refused."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

import td_core
import td_memmap
from td_core import TensorDict
from td_memmap import MemmapFormatError


def _sample() -> TensorDict:
    return TensorDict(
        {
            "a": torch.randn(3, 4),
            "b": {"c": torch.arange(3), "x.y": torch.ones(3, 2, dtype=torch.bfloat16)},
            "flag": torch.tensor([True, False, True]),
            "note": "hello",
        },
        batch_size=[3],
    )


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.float64, torch.int8, torch.uint8, torch.bool]
)
def test_round_trip_dtypes(tmp_path, dtype):
    td = TensorDict({"v": torch.ones(2, 3).to(dtype)}, batch_size=[2, 3])
    path = tmp_path / "d.safetensors"
    td_memmap.to_safetensors(td, path)
    out = td_memmap.from_safetensors(path)
    assert out["v"].dtype == dtype and out.batch_size == torch.Size([2, 3])
    assert torch.equal(out["v"], td["v"])


def test_round_trip_nested_keys_and_batch_sizes(tmp_path):
    td = _sample()
    path = tmp_path / "t.safetensors"
    td.to_safetensors(path)
    out = TensorDict.from_safetensors(path)
    assert out.batch_size == torch.Size([3])
    assert out["b"].batch_size == torch.Size([3])
    assert set(out.keys(True, True)) == set(td.keys(True, True))
    assert torch.equal(out["b", "x.y"], td["b", "x.y"])
    assert out["note"] == "hello"


def test_top_level_functions(tmp_path):
    path = tmp_path / "t.safetensors"
    td = _sample()
    td_core.to_safetensors(td, path)
    assert torch.equal(td_core.from_safetensors(path)["a"], td["a"])


def test_lazy_stack_stored_densely(tmp_path):
    td = td_core.lazy_stack([_sample(), _sample()], 1)
    path = tmp_path / "s.safetensors"
    td.to_safetensors(path)
    out = td_memmap.from_safetensors(path)
    assert out.batch_size == torch.Size([3, 2])
    assert torch.equal(out["a"], td["a"])


def test_upstream_file_loads(tmp_path):
    tensordict = pytest.importorskip("tensordict")
    up = tensordict.TensorDict({"a": torch.zeros(2, 3), "b": {"c": torch.ones(2)}}, [2])
    path = tmp_path / "up.safetensors"
    tensordict.to_safetensors(up, path)
    out = td_memmap.from_safetensors(path)
    assert out.batch_size == torch.Size([2]) and torch.equal(out["b", "c"], torch.ones(2))
    td_memmap.to_safetensors(out, path)
    back = tensordict.from_safetensors(path)
    assert back.batch_size == torch.Size([2]) and torch.equal(back["b", "c"], torch.ones(2))


def test_foreign_checkpoint_splits_names(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"0.weight": torch.ones(4, 3), "0.bias": torch.zeros(4)}, str(path))
    out = td_memmap.from_safetensors(path)
    assert out.batch_size == torch.Size([]) and out["0", "weight"].shape == (4, 3)


def test_device_argument(tmp_path):
    path = tmp_path / "t.safetensors"
    _sample().to_safetensors(path)
    out = td_memmap.from_safetensors(path, device="cpu")
    assert out.device == torch.device("cpu")


def test_non_json_value_refused(tmp_path):
    td = TensorDict({"a": torch.zeros(2), "obj": object()}, batch_size=[2])
    path = tmp_path / "t.safetensors"
    with pytest.raises(TypeError, match="obj"):
        td.to_safetensors(path)
    assert not path.exists()


@pytest.mark.parametrize("value", [(1, 2), float("nan"), {1: "a"}, b"raw"])
def test_value_json_does_not_give_back_exactly_is_refused(tmp_path, value):
    td = TensorDict({"a": torch.zeros(2)}, batch_size=[2])
    td.set_non_tensor("v", value)
    path = tmp_path / "t.safetensors"
    with pytest.raises(TypeError, match="'v'"):
        td.to_safetensors(path)
    assert not path.exists()


def test_missing_file_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.safetensors"):
        td_memmap.from_safetensors(tmp_path / "nope.safetensors")


def test_garbage_file_named(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"\x00" * 3 + b"not a safetensors file")
    with pytest.raises(MemmapFormatError, match=r"junk\.safetensors"):
        td_memmap.from_safetensors(path)


@pytest.mark.parametrize(
    "meta",
    [
        "{not json",
        json.dumps({"version": 99, "root": {}}),
        json.dumps({"version": 1, "root": {"batch_size": [-1], "keys": {}}}),
        json.dumps({"version": 1, "root": {"batch_size": [], "keys": {"a": {"tensor": "zz"}}}}),
        json.dumps({"version": 1, "root": {"batch_size": [], "keys": {"a": {"pickle": "x"}}}}),
    ],
)
def test_bad_metadata_named(tmp_path, meta):
    path = tmp_path / "bad.safetensors"
    save_file({"a": torch.zeros(2)}, str(path), metadata={"tensordict": meta})
    with pytest.raises(MemmapFormatError, match=r"bad\.safetensors"):
        td_memmap.from_safetensors(path)


def test_missing_safetensors_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(ImportError, match=r"td-memmap\[safetensors\]"):
        _sample().to_safetensors(tmp_path / "t.safetensors")
