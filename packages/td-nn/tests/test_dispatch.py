"""dispatch: TensorDict functions called with tensors."""

from typing import ClassVar

import pytest
import torch
from torch import nn

from td_nn import dispatch


class Add(nn.Module):
    in_keys: ClassVar[list] = [("a", "c"), "d"]
    out_keys: ClassVar[list] = ["b"]

    @dispatch(separator="__")
    def forward(self, tensordict, scale=1.0):
        tensordict["b"] = (tensordict["a", "c"] + tensordict["d"]) * scale
        return tensordict


def test_method_keyword_positional_and_extra_kwargs():
    module = Add()
    assert (module(a__c=torch.zeros(2), d=torch.ones(2)) == 1).all()
    assert (module(torch.zeros(2), torch.ones(2)) == 1).all()
    assert (module(torch.zeros(2), d=torch.ones(2), scale=3.0) == 3).all()
    with pytest.raises(RuntimeError, match="Duplicated argument"):
        module(torch.zeros(2), a__c=torch.ones(2))


def test_tensordict_passes_through():
    from td_core import TensorDict

    td = TensorDict({("a", "c"): torch.zeros(2), "d": torch.ones(2)}, [2])
    assert Add()(td) is td
    assert Add()(tensordict=td) is td


def test_function_with_key_lists_and_tuple_output():
    @dispatch(source=["x"], dest=["y", "_", "z"])
    def f(tensordict):
        return tensordict.set("y", tensordict["x"] + 1).set("z", tensordict["x"] - 1)

    assert f(torch.zeros(())) == (torch.tensor(1.0), torch.tensor(-1.0))


def test_bare_decorator_and_auto_batch_size():
    sizes = []

    class M(nn.Module):
        in_keys: ClassVar[list] = ["x"]
        out_keys: ClassVar[list] = ["x"]

        @dispatch
        def forward(self, tensordict):
            sizes.append(tensordict.batch_size)
            return tensordict

    M()(torch.zeros(3, 4))

    class N(M):
        @dispatch(auto_batch_size=False)
        def forward(self, tensordict):
            sizes.append(tensordict.batch_size)
            return tensordict

    N()(torch.zeros(3, 4))
    assert sizes == [torch.Size([3, 4]), torch.Size([])]


def test_decoration_errors():
    with pytest.raises(TypeError, match="tensordict"):

        @dispatch
        def g(data):
            return data

    @dispatch
    def h(tensordict):
        return tensordict

    with pytest.raises(TypeError, match="attribute"):
        h(torch.zeros(()))
