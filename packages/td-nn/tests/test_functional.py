"""make_functional, get_functional, is_functional, repopulate_module."""

import copy

import pytest
import torch
from torch import nn

from td_core import TensorDict, TensorDictParams
from td_nn import (
    TensorDictModule,
    TensorDictSequential,
    get_functional,
    is_functional,
    make_functional,
    repopulate_module,
)


def _model():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.BatchNorm1d(2))


def test_params_mirror_the_module_tree_and_module_is_stateless():
    model = _model()
    weight = model[0].weight
    params = make_functional(model)
    assert params["0", "weight"] is weight
    assert set(params.keys()) == {"0", "2", "3"}
    assert sorted(params["3"].keys()) == [
        "bias",
        "num_batches_tracked",
        "running_mean",
        "running_var",
        "weight",
    ]
    assert model[0].weight.device.type == "meta" and model[0].weight.shape == (4, 3)
    assert is_functional(model) and is_functional(model[1])
    with pytest.raises((NotImplementedError, RuntimeError)):
        model(torch.randn(5, 3))


def test_params_held_in_a_tensordict_params_child_survive():
    # from_module keeps a TensorDictParams child as that object: emptying the module's
    # slots must not empty the returned parameters
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = TensorDictParams(TensorDict(w=torch.ones(2, 3)))

        def forward(self, x):
            return x * self.table["w"]

    model = Holder()
    weight = model.table["w"]
    params = make_functional(model)
    assert params["table", "w"] is weight and params["table", "w"].device.type == "cpu"
    assert model.table["w"].device.type == "meta"
    torch.testing.assert_close(model(torch.full((2, 3), 2.0), params), torch.full((2, 3), 2.0))


def test_call_restores_the_stateless_module_and_gradients_reach_params():
    model = _model().eval()
    params = make_functional(model)
    out = model(torch.randn(5, 3), params=params)
    out.sum().backward()
    assert params["0", "weight"].grad is not None
    assert model[0].weight.device.type == "meta"


def test_functional_equals_stateful():
    model = _model().eval()
    reference = copy.deepcopy(model)
    x = torch.randn(5, 3)
    params = make_functional(model)
    torch.testing.assert_close(model(x, params), reference(x))
    torch.testing.assert_close(model(x, params=params), reference(x))


def test_vmap_over_stacked_params():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    models = [copy.deepcopy(model) for _ in range(3)]
    for m in models:
        for layer in (m[0], m[2]):
            layer.reset_parameters()
    stack = torch.stack([TensorDict.from_module(m) for m in models], 0)
    make_functional(model)
    x = torch.randn(6, 3)
    out = torch.vmap(model, (None, 0))(x, stack)
    assert out.shape == (3, 6, 1)
    for i, m in enumerate(models):
        torch.testing.assert_close(out[i], m(x))


def test_functional_tensordict_modules():
    seq = TensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["h"]),
        TensorDictModule(nn.Linear(4, 1), in_keys=["h"], out_keys=["y"]),
    )
    reference = copy.deepcopy(seq)
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    params = make_functional(seq)
    assert ("module", "0", "module", "weight") in params.keys(include_nested=True)
    torch.testing.assert_close(seq(td.copy(), params)["y"], reference(td.copy())["y"])
    sub = seq[0]
    torch.testing.assert_close(
        sub(td.copy(), params=params["module", "0"])["h"], reference[0](td.copy())["h"]
    )


def test_get_functional_keeps_params_and_is_keyword_only():
    model = get_functional(nn.Linear(2, 2))
    assert is_functional(model) and model.weight.device.type == "cpu"
    zeros = TensorDict.from_module(model).apply(torch.zeros_like)
    x = torch.ones(1, 2)
    assert (model(x, params=zeros) == 0).all()
    assert (model(x) != 0).any()
    with pytest.raises(TypeError):
        model(x, zeros)  # nn.Linear.forward takes one input; params go by keyword only


def test_repopulate_module():
    model = _model()
    params = make_functional(model)
    assert repopulate_module(model, params) is model
    assert model[0].weight is params["0", "weight"]
    assert model(torch.randn(5, 3)).shape == (5, 2)


def test_funs_to_decorate_and_errors():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, x):
            return self.linear(x)

        def double(self, x):
            return 2 * self.linear(x)

    net = Net()
    params = make_functional(net, funs_to_decorate=["forward", "double"])
    x = torch.ones(1, 2)
    torch.testing.assert_close(net.double(x, params=params), 2 * net(x, params))
    with pytest.raises(AttributeError, match="nope"):
        make_functional(nn.Linear(2, 2), funs_to_decorate=["nope"])
    with pytest.raises(TypeError, match=r"nn\.Module"):
        make_functional(lambda x: x)
    assert make_functional(nn.Linear(2, 2), return_params=False) is None


def test_deepcopy_of_functional_module_is_independent():
    model = nn.Linear(2, 2)
    params = make_functional(model)
    twin = copy.deepcopy(model)
    other = params.apply(torch.zeros_like)
    assert (twin(torch.ones(1, 2), other) == 0).all()
    assert (model(torch.ones(1, 2), params) == model.forward(torch.ones(1, 2), params=params)).all()
