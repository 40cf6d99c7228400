"""`to_module` as a context manager on modules with shared layers, `with td.to(...)`, and
`TensorDictParams.clone`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import TensorDict, TensorDictParams, from_module


def _shared() -> nn.Module:
    first, second = nn.Linear(4, 5), nn.Linear(5, 4)
    return nn.Sequential(first, second, nn.Sequential(first))  # `first` is reachable twice


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("preserve", [True, False])
def test_a_shared_layer_gets_its_own_parameters_back(inplace: bool, preserve: bool) -> None:
    torch.manual_seed(0)
    module = _shared()
    x = torch.randn(3, 4)
    expected = module(x)
    names = sorted(name for name, _ in module.named_parameters())
    zeros = from_module(module, as_module=True).clone().zero_()
    with zeros.to_module(module, inplace=inplace, preserve_module_state=preserve):
        assert (module(x) == 0).all()
    torch.testing.assert_close(module(x), expected)
    assert sorted(name for name, _ in module.named_parameters()) == names
    assert not dict(module.named_buffers())


def test_a_parameter_written_into_a_buffer_slot_stays_a_buffer() -> None:
    module = nn.Module()
    module.register_buffer("buffer", torch.ones(3))
    TensorDict({"buffer": nn.Parameter(torch.zeros(3))}, []).to_module(module)
    assert "buffer" in dict(module.named_buffers())
    assert not isinstance(module.buffer, nn.Parameter)
    assert (module.buffer == 0).all()


def test_params_clone_keeps_parameters_buffers_and_ties() -> None:
    module = _shared()
    module.register_buffer("steps", torch.zeros(()))
    module[1].weight.requires_grad_(False)
    params = from_module(module, as_module=True)
    copy = params.clone()
    assert isinstance(copy, TensorDictParams)
    for key, value in params.items(include_nested=True, leaves_only=True):
        new = copy.get(key)
        assert type(new) is type(value), key
        assert new.requires_grad == value.requires_grad, key
        assert new.data_ptr() != value.data_ptr(), key
        assert new.grad_fn is None, key
    assert copy.get(("0", "weight")) is copy.get(("2", "0", "weight"))  # still tied
    shallow = params.clone(recurse=False)
    assert isinstance(shallow, TensorDictParams)
    assert shallow.get(("1", "weight")) is params.get(("1", "weight"))
    named = TensorDictParams(TensorDict({"w": torch.zeros(2, 3)}, [2]))
    named.names = ["n"]
    assert named.clone().names == ["n"]


def test_a_to_block_writes_new_and_changed_entries_back() -> None:
    td = TensorDict(x=torch.zeros(3), batch_size=[3])
    with td.to("cpu") as moved:
        moved["y"] = moved["x"] + 1
    assert (td["y"] == 1).all()
    with td.to(torch.float64) as cast:
        cast["x"] = cast["x"] + 2
    assert td["x"].dtype == torch.float32
    assert (td["x"] == 2).all()


def test_an_indexed_write_into_cloned_params_goes_in_place() -> None:
    params = TensorDictParams(TensorDict({"w": torch.ones(3, 2)}, [3])).clone()
    w = params["w"]
    params[1] = TensorDict({"w": torch.zeros(2)}, [])
    assert params["w"] is w
    assert (w[1] == 0).all() and (w[0] == 1).all()
    assert w.requires_grad
