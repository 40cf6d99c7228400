"""symbolic_trace and torch.compile of TensorDict modules (CPU)."""

from typing import ClassVar

import pytest
import torch
from torch import distributions as D
from torch import fx, nn

from td_core import TensorDict
from td_nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
    set_interaction_type,
    symbolic_trace,
)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        return torch.relu(self.linear(x)), x


def _sequence():
    return TensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=[("in", "x")], out_keys=["y"]),
        TensorDictModule(
            lambda y, x: (y.sum(-1), x * 2), in_keys=["y", ("in", "x")], out_keys=["z", ("o", "w")]
        ),
        TensorDictModule(Block(), in_keys=[("o", "w")], out_keys=["a", "_"]),
    )


def _td():
    return TensorDict({("in", "x"): torch.randn(2, 3)}, [2])


def _assert_same(out, ref):
    keys = set(ref.keys(include_nested=True, leaves_only=True))
    assert set(out.keys(include_nested=True, leaves_only=True)) == keys
    for key in keys:
        torch.testing.assert_close(out[key], ref[key])
    assert out.batch_size == ref.batch_size


def test_trace_gives_an_equivalent_graph_module():
    seq = _sequence()
    gm = symbolic_trace(seq)
    assert isinstance(gm, fx.GraphModule)
    assert gm.in_keys == [("in", "x")] and gm.out_keys == ["y", "z", ("o", "w"), "a"]
    td = _td()
    _assert_same(gm(td.copy()), seq(td.copy()))
    ops = [node.op for node in gm.graph.nodes]
    # the TensorDict and the optional tensordict_out
    assert ops.count("placeholder") == 2 and "call_module" in ops
    reads = [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target.__name__ == "getitem"
    ]
    assert len(reads) == 1  # ("in", "x") is read once, intermediate values flow as tensors
    writes = [n for n in gm.graph.nodes if n.op == "call_method" and n.target == "set"]
    assert len(writes) == 4


def test_trace_single_module_and_shared_parameters():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    gm = symbolic_trace(module)
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    _assert_same(gm(td.copy()), module(td.copy()))
    with torch.no_grad():
        module.module.weight.zero_()
        module.module.bias.zero_()
    assert (gm(td.copy())["y"] == 0).all()  # the graph module uses the module's parameters


@pytest.mark.parametrize("inplace", [False, "empty"])
def test_trace_inplace_modes(inplace):
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"], inplace=inplace)
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    out = symbolic_trace(module)(td)
    _assert_same(out, module(td))
    assert "y" not in td.keys()


def test_trace_selected_out_keys():
    seq = TensorDictSequential(*_sequence(), selected_out_keys=["a"])
    td = _td()
    out = symbolic_trace(seq)(td.copy())
    _assert_same(out, seq(td.copy()))
    assert sorted(out.keys()) == ["a", "in"]


class Custom(TensorDictModuleBase):
    in_keys: ClassVar[list] = ["y"]
    out_keys: ClassVar[list] = ["c"]

    def forward(self, tensordict):
        return tensordict.set("c", tensordict["y"].cumsum(-1))


def test_trace_keeps_other_members_as_single_nodes():
    seq = TensorDictSequential(_sequence(), Custom())
    gm = symbolic_trace(seq)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    assert "module.module.1" in calls
    td = _td()
    _assert_same(gm(td.copy()), seq(td.copy()))


def test_trace_probabilistic_sequence():
    policy = ProbabilisticTensorDictSequential(
        TensorDictModule(lambda x: (x, x.exp()), in_keys=["x"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=D.Normal,
            return_log_prob=True,
        ),
    )
    td = TensorDict(x=torch.randn(4), batch_size=[4])
    _assert_same(symbolic_trace(policy)(td.copy()), policy(td.copy()))


@pytest.mark.parametrize("kind", ["module", "sequence", "nested"])
def test_trace_writes_into_tensordict_out(kind):
    if kind == "module":
        module = TensorDictModule(
            lambda x: (x + 1, x.sigmoid()), in_keys=["x"], out_keys=[("o", "a"), ("o", "b")]
        )
    else:
        first = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=[("mid", "h")])
        second = TensorDictModule(torch.relu, in_keys=[("mid", "h")], out_keys=["y"])
        module = TensorDictSequential(first, second)
        if kind == "nested":
            module = TensorDictSequential(module, TensorDictModule(torch.neg, ["y"], ["z"]))
    gm = symbolic_trace(module)
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    expected = module(td.copy(), tensordict_out=TensorDict())
    out = TensorDict()
    assert gm(td, tensordict_out=out) is out
    _assert_same(out, expected)
    assert list(td.keys()) == ["x"]  # the input is left as it was
    positional = TensorDict()
    assert gm(td, positional) is positional
    _assert_same(positional, expected)


def test_trace_tensordict_out_must_be_a_tensordict():
    gm = symbolic_trace(TensorDictModule(torch.neg, in_keys=["x"], out_keys=["y"]))
    td = TensorDict(x=torch.randn(2), batch_size=[2])
    with pytest.raises(TypeError, match="tensordict_out must be a TensorDict, got dict"):
        gm(td, tensordict_out={})


def test_trace_rejects_non_td_modules():
    with pytest.raises(TypeError, match="in_keys and out_keys"):
        symbolic_trace(nn.Linear(2, 2))


# ------------------------------------------------------------------ torch.compile
def test_compile_module_fullgraph():
    module = TensorDictModule(
        nn.Sequential(nn.Linear(3, 4), nn.ReLU()), in_keys=[("in", "x")], out_keys=[("out", "y")]
    )
    compiled = torch.compile(module, fullgraph=True, backend="eager")
    td = _td()
    _assert_same(compiled(td.copy()), module(td.copy()))


def test_compile_sequence_fullgraph():
    seq = _sequence()
    compiled = torch.compile(seq, fullgraph=True, backend="eager")
    for _ in range(2):
        td = _td()
        _assert_same(compiled(td.copy()), seq(td.copy()))


def test_compile_probabilistic_sequence_fullgraph():
    policy = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["loc"]),
        TensorDictModule(lambda loc: loc.abs() + 0.1, in_keys=["loc"], out_keys=["scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=D.Normal,
            # argument validation calls functions Dynamo refuses to trace
            distribution_kwargs={"validate_args": False},
            return_log_prob=True,
        ),
    )
    compiled = torch.compile(policy, fullgraph=True, backend="eager")
    td = TensorDict(x=torch.randn(4, 3), batch_size=[4])
    _assert_same(compiled(td.copy()), policy(td.copy()))
    with set_interaction_type("random"):
        assert compiled(td.copy())["action"].shape == (4, 4)


def test_compile_traced_graph_module_fullgraph():
    gm = symbolic_trace(_sequence())
    compiled = torch.compile(gm, fullgraph=True, backend="eager")
    td = _td()
    _assert_same(compiled(td.copy()), gm(td.copy()))


def test_compile_with_inductor_on_cpu():
    seq = _sequence()
    compiled = torch.compile(seq)
    td = _td()
    _assert_same(compiled(td.copy()), seq(td.copy()))
