"""Conversions: errors, round trips and the constructor keywords."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

import td_core
from td_core import NonTensorData, NonTensorStack, TensorDict


def test_constructor_device_and_names():
    td = TensorDict({"a": torch.zeros(3, 4)}, batch_size=[3, 4], device="cpu", names=["x", None])
    assert td.device == torch.device("cpu")
    assert td.names == ["x", None]
    assert "names" not in td.keys()


def test_constructor_non_blocking_is_not_an_entry():
    td = TensorDict({"a": torch.zeros(3)}, [3], non_blocking=True)
    assert list(td.keys()) == ["a"]


def test_from_dict_bad_batch_size_names_key_and_shape():
    with pytest.raises(RuntimeError, match=r"'a'.*\[3, 4\]"):
        TensorDict.from_dict({"a": torch.zeros(3, 4)}, batch_size=[5])


def test_from_dict_infers_only_when_asked():
    source = {"a": torch.zeros(3, 4), "b": {"c": torch.zeros(3, 4, 2)}}
    assert TensorDict.from_dict(source).batch_size == torch.Size([])
    assert TensorDict.from_dict(source, auto_batch_size=True).batch_size == torch.Size([3, 4])
    assert TensorDict.from_dict(source, batch_dims=1).batch_size == torch.Size([3])
    assert td_core.from_dict(source, auto_batch_size=True)["b"].batch_size == torch.Size([3, 4, 2])


def test_from_namedtuple_rejects_plain_tuple():
    with pytest.raises(TypeError, match="namedtuple"):
        TensorDict.from_namedtuple((1, 2))


def test_namedtuple_round_trip():
    NT = collections.namedtuple("NT", ["x", "y"])
    td = TensorDict.from_namedtuple(NT(torch.zeros(3), NT(torch.ones(3), torch.ones(3))))
    nt = td.to_namedtuple()
    assert torch.equal(nt.y.x, torch.ones(3))


def test_from_dataclass():
    @dataclasses.dataclass
    class DC:
        x: torch.Tensor
        y: int

    td = TensorDict.from_dataclass(DC(torch.zeros(3), 2), auto_batch_size=True)
    assert td["y"].item() == 2
    with pytest.raises(TypeError, match="instance"):
        TensorDict.from_dataclass(DC)
    with pytest.raises(TypeError, match="dataclass"):
        td_core.from_dataclass({"x": 1})
    tc = TensorDict.from_dataclass(DC(torch.zeros(3), 2), as_tensorclass=True)
    assert td_core.is_tensorclass(tc)


def test_pytree_round_trip():
    tree = {"a": torch.zeros(3), "b": (torch.ones(3), [torch.ones(3, 1)])}
    td = td_core.from_pytree(tree, auto_batch_size=True)
    assert td.batch_size == torch.Size([3])
    back = td.to_pytree()
    assert isinstance(back["b"], tuple) and isinstance(back["b"][1], list)
    assert torch.equal(back["b"][1][0], torch.ones(3, 1))


def test_pytree_unsupported_leaf_named():
    with pytest.raises(NotImplementedError, match="str"):
        TensorDict.from_pytree({"a": "x"})


def test_struct_array_round_trip_shares_memory():
    arr = np.zeros(3, dtype=[("x", "f4", (2,)), ("y", "i8")])
    td = td_core.from_struct_array(arr)
    assert td.batch_size == torch.Size([3])
    td["x"][0] = 5
    assert arr["x"][0, 0] == 5
    back = td.to_struct_array()
    assert back.dtype == arr.dtype


def test_struct_array_of_a_list_value_gives_one_string_per_element():
    # a list shared by the batch is one value: each element holds it whole, as its str
    td = TensorDict({"tags": NonTensorData(["x", "yz"], batch_size=[3])}, [3])
    arr = td.to_struct_array()
    assert arr.shape == (3,)
    assert arr["tags"].tolist() == ["['x', 'yz']"] * 3
    stack = TensorDict({"s": NonTensorStack(["a"], "bc")}, [2]).to_struct_array()
    assert stack["s"].tolist() == ["['a']", "bc"]


def test_struct_array_rejects_plain_array():
    with pytest.raises(TypeError, match="structured"):
        TensorDict.from_struct_array(np.zeros(3))


def test_json_round_trip(tmp_path):
    td = TensorDict({"a": torch.arange(3.0), "b": {"c": torch.ones(3, 2, dtype=torch.int64)}}, [3])
    td.to_json(tmp_path / "x.json")
    back = td_core.from_json(tmp_path / "x.json")
    assert back.batch_size == torch.Size([3])
    assert torch.equal(back["b", "c"], td["b", "c"])
    td.to_json(tmp_path / "x.jsonl", lines=True)
    assert TensorDict.from_json(tmp_path / "x.jsonl", lines=True).batch_size == torch.Size([3])


@td_core.tensorclass
class _Row:
    x: torch.Tensor
    y: torch.Tensor


def test_from_json_on_a_tensorclass_reads_it_back(tmp_path):
    row = _Row(x=torch.tensor([1, 2, 3]), y=torch.tensor([4.0, 5.0, 6.0]), batch_size=[3])
    row.to_json(tmp_path / "r.json")
    back = _Row.from_json(tmp_path / "r.json")
    assert type(back) is _Row
    assert back.batch_size == torch.Size([3])
    assert torch.equal(back.x, row.x)
    assert torch.equal(back.y.float(), row.y)
    # on a TensorDict (class or instance) it stays a dense TensorDict
    assert type(TensorDict.from_json(tmp_path / "r.json")) is TensorDict
    assert type(TensorDict().from_json(tmp_path / "r.json")) is TensorDict
    TensorDict(z=torch.zeros(3), batch_size=[3]).to_json(tmp_path / "z.json")
    with pytest.raises(KeyError, match=r"\['z'\]"):
        _Row.from_json(tmp_path / "z.json")


def test_from_list_stacks_or_lazy_stacks():
    td = TensorDict.from_list([{"a": torch.zeros(2)}, {"a": torch.ones(2)}])
    assert td.batch_size == torch.Size([2])
    lazy = TensorDict.from_list([{"a": torch.zeros(2)}, {"b": torch.ones(2)}])
    assert isinstance(lazy, td_core.LazyStackedTensorDict)
    with pytest.raises(ValueError, match="at least one"):
        TensorDict.from_list([])
    with pytest.raises(TypeError, match="item 1"):
        TensorDict.from_list([{"a": 1}, 2])


def test_from_any_dispatch():
    NT = collections.namedtuple("NT", ["x"])
    assert td_core.from_any(NT(torch.zeros(3)))["x"].shape == (3,)
    assert td_core.from_any((torch.zeros(3),))["0"].shape == (3,)
    t = torch.zeros(3)
    assert td_core.from_any(t) is t
    td = TensorDict()
    assert td_core.from_any(td) is td


def test_from_any_of_a_list_is_a_tensor_for_a_grid_of_numbers():
    grid = torch.arange(24.0).reshape(2, 3, 4).tolist()
    out = td_core.from_any(grid)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 4)
    assert td_core.from_any([True, False]).dtype == torch.bool
    grid[0][1].append(0.0)  # ragged: the lists below that level are values
    ragged = td_core.from_any(grid)
    assert isinstance(ragged, td_core.NonTensorStack) and ragged.batch_size == (2, 3)
    assert ragged[0, 1].data == [4.0, 5.0, 6.0, 7.0, 0.0]
    for other in ([1, 2.0], ["a", "b"], [1, [2]]):  # mixed types or non-numbers
        assert isinstance(td_core.from_any(other), td_core.NonTensorStack)


def test_fromkeys_top_level():
    assert td_core.fromkeys(["a"], 1)["a"].item() == 1


def test_numpy_and_tolist():
    td = TensorDict({"a": torch.arange(2), "s": "x"}, [2])
    assert isinstance(td.numpy()["a"], np.ndarray)
    assert td.tolist(convert_tensors=True) == [{"a": 0, "s": "x"}, {"a": 1, "s": "x"}]


def test_auto_device_():
    td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.zeros(3)}}, [3])
    assert td.auto_device_().device == torch.device("cpu")
    assert td["b"].device == torch.device("cpu")


def test_to_module_preserve_module_state():
    module = nn.Linear(2, 3)
    params = TensorDict.from_module(module).apply(lambda t: torch.zeros_like(t).detach())
    with params.to_module(module):
        assert isinstance(module.weight, nn.Parameter)
        assert module.weight.requires_grad
    with params.to_module(module, preserve_module_state=False):
        assert not isinstance(module.weight, nn.Parameter)
        assert "weight" not in dict(module.named_parameters())
    assert isinstance(module.weight, nn.Parameter)
    assert "weight" in dict(module.named_parameters())


def test_apply_is_leaf_passes_sub_tensordicts_whole():
    td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3)}}, [3])
    seen = []
    td.apply(
        lambda x: seen.append(type(x).__name__) or x,
        is_leaf=lambda cls: issubclass(cls, (torch.Tensor, td_core.TensorDictBase)),
    )
    assert sorted(seen) == ["Tensor", "TensorDict"]


def test_tolist_first_and_the_convert_tensors_rule():
    td = TensorDict(
        a=torch.arange(24).view(2, 3, 4),
        b=TensorDict(c=torch.arange(12).reshape(2, 3, 2), batch_size=(2, 3, 2)),
        batch_size=(2, 3),
    )
    first = td.tolist(tolist_first=True)[0][0]
    assert isinstance(first["b"], list) and len(first["b"]) == 2
    assert first["b"][1]["c"].equal(torch.tensor(1))
    assert isinstance(td.tolist()[0][0]["b"], dict)
    with pytest.raises(TypeError, match="convert_tensors"):
        td.tolist(convert_nodes=False, convert_tensors=True)


def test_pytree_round_trip_keeps_tensordicts_and_non_string_keys():
    key = object()
    inner = TensorDict({"one": 1})
    tree = {"td": inner, key: torch.zeros(2), 3: torch.ones(1), "od": collections.OrderedDict(a=1)}
    back = TensorDict.from_pytree(tree).to_pytree()
    assert back["td"] is inner
    assert set(back) == {"td", key, 3, "od"}
    assert torch.equal(back[key], torch.zeros(2)) and torch.equal(back[3], torch.ones(1))
    assert type(back["od"]) is collections.OrderedDict
    with pytest.raises(ValueError, match="distinct"):
        TensorDict.from_pytree({1: torch.zeros(1), "1": torch.zeros(1)})


def test_from_dict_instance_rebuilds_the_tensorclasses_of_the_template():
    @td_core.tensorclass(autocast=True)
    class Leafy:
        x: torch.Tensor = None  # type: ignore[assignment]
        y: int = None  # type: ignore[assignment]
        z: Leafy = None  # type: ignore[assignment]

    td = TensorDict(a=torch.zeros(()), b=Leafy(x=torch.zeros(()), y=1, z=Leafy(y=2)))
    back = td.from_dict_instance(td.to_dict(), auto_batch_size=True)
    assert type(back) is TensorDict and type(back["b"]) is Leafy and type(back["b"].z) is Leafy
    assert back["b"].y == 1 and type(back["b"].y) is int
    assert type(back["b"].x) is torch.Tensor
    plain = TensorDict(n={"m": torch.zeros(())}).from_dict_instance({"n": {"m": torch.ones(())}})
    assert type(plain["n"]) is TensorDict and plain["n", "m"] == 1
