"""EnsembleModule."""

import pytest
import torch
from torch import nn

from td_core import TensorDict, TensorDictParams
from td_nn import EnsembleModule, TensorDictModule, TensorDictSequential


def _module():
    return TensorDictModule(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), in_keys=["a"], out_keys=["b"]
    )


def test_copies_are_independent_and_reinitialised():
    module = _module()
    ensemble = EnsembleModule(module, num_copies=3)
    assert isinstance(ensemble.params_td, TensorDictParams)
    assert ensemble.params_td.batch_size == torch.Size([3])
    weights = ensemble.params_td["module", "0", "weight"]
    assert weights.shape == (3, 8, 4)
    assert not torch.equal(weights[0], weights[1])
    assert not any(torch.equal(w, module.module[0].weight) for w in weights)
    assert ensemble.in_keys == ["a"] and ensemble.out_keys == ["b"]


def test_each_copy_matches_a_run_with_its_params():
    module = _module()
    ensemble = EnsembleModule(module, num_copies=3)
    data = TensorDict(a=torch.randn(5, 4), batch_size=[5])
    out = ensemble(data)
    assert out.batch_size == torch.Size([3, 5])
    plain = ensemble.params_td.copy()
    for i in range(3):
        with plain[i].to_module(module):
            expected = module(data.copy())["b"]
        torch.testing.assert_close(out["b"][i], expected)
    assert "b" not in data.keys()


def test_gradients_reach_the_stacked_params():
    ensemble = EnsembleModule(_module(), num_copies=2)
    ensemble(TensorDict(a=torch.randn(5, 4), batch_size=[5]))["b"].sum().backward()
    grads = [p.grad for p in ensemble.params_td.parameters()]
    assert grads and all(g is not None for g in grads)


def test_chained_ensembles_with_expand_input_false():
    first = TensorDictModule(nn.Linear(2, 3), in_keys=["x"], out_keys=["hidden"])
    second = TensorDictModule(nn.Linear(3, 1), in_keys=["hidden"], out_keys=["y"])
    seq = TensorDictSequential(
        EnsembleModule(first, num_copies=4),
        EnsembleModule(second, num_copies=4, expand_input=False),
    )
    out = seq(TensorDict(x=torch.randn(5, 2), batch_size=[5]))
    assert out.batch_size == torch.Size([4, 5]) and out["y"].shape == (4, 5, 1)


def test_errors():
    with pytest.raises(ValueError, match="num_copies"):
        EnsembleModule(_module(), num_copies=0)
    with pytest.raises(TypeError, match="in_keys and out_keys"):
        EnsembleModule(nn.Linear(2, 2), num_copies=2)
    ensemble = EnsembleModule(_module(), num_copies=2, expand_input=False)
    with pytest.raises(ValueError, match="leading batch dim of size 2"):
        ensemble(TensorDict(a=torch.randn(5, 4), batch_size=[5]))
    assert "num_copies=2" in repr(ensemble)
