"""TensorDictModuleWrapper."""

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_nn import TensorDictModule, TensorDictModuleWrapper, TensorDictSequential, set_skip_existing


class TimesTen(TensorDictModuleWrapper):
    def forward(self, tensordict):
        tensordict = self.td_module(tensordict)
        return tensordict.set("y", tensordict["y"] * 10)


def test_wrapper_delegates_keys_parameters_and_attributes():
    inner = TensorDictModule(nn.Linear(2, 2), in_keys=["x"], out_keys=["y"])
    wrapped = TimesTen(inner)
    assert wrapped.in_keys == ["x"] and wrapped.out_keys == ["y"]
    assert wrapped.weight is inner.weight
    assert list(wrapped.parameters()) == list(inner.parameters())
    td = wrapped(TensorDict(x=torch.ones(3, 2), batch_size=[3]))
    torch.testing.assert_close(td["y"], inner.module(torch.ones(3, 2)) * 10)
    assert "td_module=TensorDictModule(" in repr(wrapped)


def test_plain_wrapper_calls_inner_and_composes():
    inner = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
    wrapped = TensorDictModuleWrapper(inner)
    seq = TensorDictSequential(
        wrapped, TensorDictModule(lambda y: -y, in_keys=["y"], out_keys=["z"])
    )
    assert seq.in_keys == ["x"]
    assert seq(TensorDict(x=torch.zeros(()))).get("z") == -1
    assert (wrapped(x=torch.zeros(2)) == 1).all()


def test_subclass_forward_gets_tensor_calls_and_skip():
    wrapped = TimesTen(TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"]))
    assert (wrapped(torch.zeros(2)) == 10).all()
    td = TensorDict(x=torch.zeros(()), y=torch.zeros(()))
    with set_skip_existing():
        assert wrapped(td)["y"] == 0


def test_wrapper_keys_setters_and_errors():
    inner = TensorDictModule(lambda x: (x, x), in_keys=["x"], out_keys=["a", "b"])
    wrapped = TensorDictModuleWrapper(inner)
    wrapped.select_out_keys("b")
    assert inner.out_keys == ["b"]
    wrapped.reset_out_keys()
    wrapped.in_keys = ["x"]
    assert inner.in_keys == ["x"]
    with pytest.raises(
        AttributeError,
        match=r"TensorDictModuleWrapper nor its td_module \(TensorDictModule\).*'nope'",
    ):
        _ = wrapped.nope
    with pytest.raises(TypeError, match="in_keys and out_keys"):
        TensorDictModuleWrapper(nn.Linear(2, 2))
