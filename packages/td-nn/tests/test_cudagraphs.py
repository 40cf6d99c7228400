"""CudaGraphModule: a pass-through without CUDA (as upstream), a recorded graph with CUDA."""

import warnings

import pytest
import torch

import td_core
import td_nn

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up
    import tensordict.nn as up_nn

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU pass-through")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@no_cuda
def test_pass_through_matches_upstream():
    results = []
    for core, nn_ in ((td_core, td_nn), (up, up_nn)):
        module = nn_.TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
        with pytest.warns(UserWarning):
            graph = nn_.CudaGraphModule(module)
        with pytest.warns(UserWarning):
            plus_one = nn_.CudaGraphModule(lambda x: x + 1)
        outs = [
            graph(core.TensorDict(x=torch.full((2,), float(i)), batch_size=[2])) for i in range(4)
        ]
        results.append(([o["y"].tolist() for o in outs], plus_one(torch.zeros(2)).tolist()))
        assert graph.in_keys == ["x"] and graph.out_keys == ["y"]
    assert results[0] == results[1]


def test_warmup_is_checked():
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="warmup"):
            td_nn.CudaGraphModule(lambda x: x, warmup=bad)


@cuda
def test_graph_replays_with_new_inputs():
    module = td_nn.TensorDictModule(lambda x: x * 2, in_keys=["x"], out_keys=["y"])
    graph = td_nn.CudaGraphModule(module, warmup=2)
    for i in range(5):
        data = td_core.TensorDict(x=torch.full((3,), float(i), device="cuda"), batch_size=[3])
        out = graph(data)
        assert out is data
        assert out["y"].tolist() == [2.0 * i] * 3
    fn = td_nn.CudaGraphModule(lambda x, y: x + y, warmup=1)
    for i in range(3):
        x = torch.full((2,), float(i), device="cuda")
        assert fn(x, x).tolist() == [2.0 * i] * 2
    with pytest.raises(ValueError, match="shape"):
        fn(torch.zeros(3, device="cuda"), torch.zeros(3, device="cuda"))
