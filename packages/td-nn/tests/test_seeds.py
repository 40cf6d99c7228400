"""Every td-nn example of the seeds (the tensordict.nn page and the overview), with its checks.

The GRUCell + NormalParamWrapper example needs td-distributions and lives in
tests-integration/test_nn_distributions.py.
"""

import pytest
import torch
from torch import nn, vmap

from td_core import TensorDict
from td_nn import (
    EnsembleModule,
    TensorDictModule,
    TensorDictSequential,
    get_functional,
    make_functional,
)


def _leaves(td):
    return {
        key: (tuple(value.shape), value.dtype)
        for key, value in td.items(include_nested=True, leaves_only=True)
    }


class Net(nn.Module):
    def __init__(self, input_size=100, hidden_size=50, output_size=10):
        super().__init__()
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        return self.fc2(x)


class Masker(nn.Module):
    def forward(self, x, mask):
        return torch.softmax(x * mask, dim=1)


def _input_td():
    return TensorDict(
        {
            "input": TensorDict(
                {"x": torch.rand(32, 100), "mask": torch.randint(2, size=(32, 10))},
                batch_size=[32],
            )
        },
        batch_size=[32],
    )


def _net_masker():
    net = TensorDictModule(Net(), in_keys=[("input", "x")], out_keys=[("intermediate", "x")])
    masker = TensorDictModule(
        Masker(),
        in_keys=[("intermediate", "x"), ("input", "mask")],
        out_keys=[("output", "probabilities")],
    )
    return TensorDictSequential(net, masker)


# --------------------------------------------------------------- tensordict.nn page (000)
@pytest.mark.filterwarnings(
    # nn.Transformer() (the seed's default, batch_first=False) warns that it cannot use nested tensors
    "ignore:enable_nested_tensor is True:UserWarning"
)
def test_transformer_module():
    module = TensorDictModule(
        nn.Transformer(), in_keys=["feature", "target"], out_keys=["prediction"]
    )
    data = TensorDict(
        {"feature": torch.randn(10, 11, 512), "target": torch.randn(10, 11, 512)}, [10, 11]
    )
    data = module(data)
    assert _leaves(data) == {
        "feature": ((10, 11, 512), torch.float32),
        "prediction": ((10, 11, 512), torch.float32),
        "target": ((10, 11, 512), torch.float32),
    }
    assert data.batch_size == torch.Size([10, 11])
    assert data.device is None


def test_sequential_net_masker():
    module = _net_masker()
    td = module(_input_td())
    assert _leaves(td) == {
        ("input", "mask"): ((32, 10), torch.int64),
        ("input", "x"): ((32, 100), torch.float32),
        ("intermediate", "x"): ((32, 10), torch.float32),
        ("output", "probabilities"): ((32, 10), torch.float32),
    }
    for key in ("input", "intermediate", "output"):
        assert td[key].batch_size == torch.Size([32])
    torch.testing.assert_close(td["output", "probabilities"].sum(1), torch.ones(32))


def test_select_subsequence_leaves_output_uncomputed():
    module = _net_masker()
    sub_module = module.select_subsequence(out_keys=[("intermediate", "x")])
    td = _input_td()
    sub_module(td)
    assert "output" not in td.keys()
    assert _leaves(td) == {
        ("input", "mask"): ((32, 10), torch.int64),
        ("input", "x"): ((32, 100), torch.float32),
        ("intermediate", "x"): ((32, 10), torch.float32),
    }
    assert len(sub_module) == 1 and sub_module[0] is module[0]


def test_make_functional_page_example():
    layer1 = nn.Linear(3, 4)
    layer2 = nn.Linear(4, 4)
    model = nn.Sequential(layer1, layer2)
    params = make_functional(model)
    x = torch.randn(10, 3)
    out = model(x, params=params)  # params is the last arg (or kwarg)
    intermediate = model[0](x, params["0"])
    out2 = model[1](intermediate, params["1"])
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(model(x, params), out)


def test_params_from_named_parameters_and_state_dict():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4))
    expected = TensorDict.from_module(model)
    params = TensorDict(
        {name: param for name, param in model.named_parameters()}, []
    ).unflatten_keys(".")
    assert (params == expected).all()
    params = TensorDict(model.state_dict(), [])
    assert (params.unflatten_keys(".") == expected).all()


def test_functional_module_with_input_td():
    model = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    input_td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    params = make_functional(model)
    expected = input_td["x"] @ params["module", "weight"].T + params["module", "bias"]
    torch.testing.assert_close(model(input_td.copy(), params)["y"], expected)
    torch.testing.assert_close(model(input_td.copy(), params=params)["y"], expected)


def test_get_functional_takes_params_by_keyword():
    model = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    input_td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    params = TensorDict.from_module(model).apply(torch.zeros_like)
    get_functional(model)
    assert (model(input_td.copy(), params=params)["y"] == 0).all()
    # the module keeps its own parameters
    assert (model(input_td.copy())["y"] != 0).any()


def test_ensemble_page_example():
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    mod = TensorDictModule(net, in_keys=["a"], out_keys=["b"])
    ensemble = EnsembleModule(mod, num_copies=3)
    data = TensorDict({"a": torch.randn(10, 4)}, batch_size=[10])
    out = ensemble(data)
    assert _leaves(out) == {"a": ((3, 10, 4), torch.float32), "b": ((3, 10, 2), torch.float32)}
    assert out.batch_size == torch.Size([3, 10])
    assert out.device is None
    # independent copies: different outputs for the same input
    assert not torch.allclose(out["b"][0], out["b"][1])


# --------------------------------------------------------------- overview (002)
class LogitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.LazyLinear(1)

    def forward(self, x):
        logits = self.linear(x)
        return logits, torch.sigmoid(logits)


def test_overview_module_two_nested_outputs_and_kwargs():
    module = TensorDictModule(
        LogitsNet(),
        in_keys=["input"],
        out_keys=[("outputs", "logits"), ("outputs", "probabilities")],
    )
    tensordict = TensorDict({"input": torch.randn(32, 100)}, [32])
    tensordict = module(tensordict)
    logits = tensordict["outputs", "logits"]
    probabilities = tensordict.get(("outputs", "probabilities"))
    torch.testing.assert_close(probabilities, torch.sigmoid(logits))
    assert logits.shape == (32, 1)

    logits, probabilities = module(input=torch.randn(32, 100))  # keyword tensors: the outputs
    assert logits.shape == (32, 1)
    torch.testing.assert_close(probabilities, torch.sigmoid(logits))


def test_overview_sequential():
    module = _net_masker()
    tensordict = module(_input_td())
    intermediate_x = tensordict["intermediate", "x"]
    probabilities = tensordict["output", "probabilities"]
    assert intermediate_x.shape == probabilities.shape == (32, 10)
    assert module.in_keys == [("input", "x"), ("input", "mask")]
    assert module.out_keys == [("intermediate", "x"), ("output", "probabilities")]


def test_overview_functional_vmap_ensemble():
    layer1 = nn.Linear(3, 4)
    layer2 = nn.Linear(4, 4)
    model = nn.Sequential(layer1, layer2)
    # we represent the weights hierarchically
    weights1 = TensorDict(layer1.state_dict(), []).unflatten_keys(separator=".")
    weights2 = TensorDict(layer2.state_dict(), []).unflatten_keys(separator=".")
    params = make_functional(model)
    # params provided by make_functional match state_dict:
    assert (params == TensorDict({"0": weights1, "1": weights2}, [])).all()
    x = torch.randn(10, 3)
    out = model(x, params=params)
    params_stack = torch.stack([params, params], 0)
    y = vmap(model, (None, 0))(x, params_stack)
    assert y.shape == torch.Size([2, 10, 4])
    torch.testing.assert_close(y[0], out)
    torch.testing.assert_close(y[1], out)
