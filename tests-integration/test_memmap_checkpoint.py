"""Checkpoints of td-nn modules with td-memmap: from_module -> memmap -> load_memmap -> to_module."""

import pytest
import torch
from torch import nn

from td_core import TensorDict, TensorDictParams, from_module
from td_memmap import MemoryMappedTensor
from td_nn import EnsembleModule, TensorDictModule, TensorDictSequential, make_functional


def build() -> TensorDictSequential:
    """Parameters, buffers (batch norm) and stacked ensemble parameters (a TensorDictParams)."""
    return TensorDictSequential(
        TensorDictModule(
            nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh()),
            in_keys=["x"],
            out_keys=["h"],
        ),
        EnsembleModule(TensorDictModule(nn.Linear(8, 2), in_keys=["h"], out_keys=["y"]), 3),
    )


def inputs() -> TensorDict:
    return TensorDict(
        x=torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), batch_size=[16]
    )


def run(model: nn.Module) -> torch.Tensor:
    return model(inputs())["y"]


@pytest.fixture
def trained() -> TensorDictSequential:
    torch.manual_seed(0)
    model = build()
    model(inputs())  # a training-mode call updates the batch-norm statistics
    model.eval()
    assert not torch.equal(model[0].module[1].running_mean, torch.zeros(8))
    return model


def fresh() -> TensorDictSequential:
    return build().eval()


def test_checkpoint_round_trip_into_a_fresh_model(tmp_path, trained):
    expected = run(trained)
    params = TensorDict.from_module(trained)
    saved = params.memmap(tmp_path / "ckpt", num_threads=2)
    leaves = list(saved.values(include_nested=True, leaves_only=True))
    assert len(leaves) == len(list(trained.parameters())) + len(list(trained.buffers()))
    assert all(isinstance(leaf, MemoryMappedTensor) for leaf in leaves)
    assert (tmp_path / "ckpt" / "meta.json").exists()

    loaded = TensorDict.load_memmap(tmp_path / "ckpt", num_threads=2)
    assert (loaded == params).all()
    model = fresh()
    assert not torch.equal(run(model), expected)
    loaded.to_module(model, inplace=True)
    torch.testing.assert_close(run(model), expected, rtol=0, atol=0)
    # the model keeps its own parameters (filled with the checkpoint's values)
    assert all(type(p) is nn.Parameter for p in model.parameters())
    assert model[1].params_td["module", "weight"].shape == (3, 2, 8)


def test_checkpoint_swapped_in_and_out(tmp_path, trained):
    expected = run(trained)
    TensorDict.from_module(trained).memmap(tmp_path / "ckpt")
    loaded = TensorDict.load_memmap(tmp_path / "ckpt")
    model = fresh()
    own = run(model)
    with loaded.to_module(model):
        torch.testing.assert_close(run(model), expected, rtol=0, atol=0)
    torch.testing.assert_close(run(model), own, rtol=0, atol=0)


def test_checkpoint_through_the_state_dict(tmp_path, trained):
    expected = run(trained)
    TensorDict.from_module(trained, use_state_dict=True).memmap(tmp_path / "ckpt")
    model = fresh()
    TensorDict.load_memmap(tmp_path / "ckpt").to_module(model, use_state_dict=True)
    torch.testing.assert_close(run(model), expected, rtol=0, atol=0)
    assert int(model[0].module[1].num_batches_tracked) == 1


def test_functional_parameters_from_a_checkpoint(tmp_path, trained):
    expected = run(trained)
    make_functional(trained).memmap(tmp_path / "ckpt")
    model = fresh()
    make_functional(model)  # the module no longer holds parameters
    out = model(inputs(), TensorDict.load_memmap(tmp_path / "ckpt"))
    torch.testing.assert_close(out["y"], expected, rtol=0, atol=0)


def test_saving_again_overwrites_the_checkpoint(tmp_path, trained):
    params = TensorDict.from_module(trained)
    params.memmap(tmp_path / "ckpt")
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(1.0)
    expected = run(trained)
    params.memmap(tmp_path / "ckpt")  # same prefix: the new values replace the old ones
    model = fresh()
    TensorDict.load_memmap(tmp_path / "ckpt").to_module(model, inplace=True)
    torch.testing.assert_close(run(model), expected, rtol=0, atol=0)


def test_read_only_checkpoint_refuses_writes(tmp_path, trained):
    TensorDict.from_module(trained).memmap(tmp_path / "ckpt")
    loaded = TensorDict.load_memmap(tmp_path / "ckpt", mode="r")
    model = fresh()
    with loaded.to_module(model):
        with torch.no_grad(), pytest.raises(RuntimeError, match="read-only"):
            model[0].module[0].weight.zero_()  # never silently dropped
    reloaded = TensorDict.load_memmap(tmp_path / "ckpt")
    assert torch.equal(
        reloaded["module", "0", "module", "0", "weight"], trained[0].module[0].weight
    )


@pytest.mark.parametrize("source", ["from_module", "ensemble"])
def test_tensordict_params_memmap(tmp_path, trained, source):
    # upstream: TensorDict.from_module(m, as_module=True).memmap(prefix) saves a TensorDict
    params = (
        from_module(trained, as_module=True) if source == "from_module" else trained[1].params_td
    )
    assert isinstance(params, TensorDictParams)
    saved = params.memmap(tmp_path / "ckpt")
    loaded = TensorDict.load_memmap(tmp_path / "ckpt")
    assert (loaded == saved).all()
    assert (loaded == params.detach()).all()
