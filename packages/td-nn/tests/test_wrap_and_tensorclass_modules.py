"""WrapModule, as_tensordict_module, TensorClassModuleBase/Wrapper and add_custom_mapping,
each against upstream tensordict.nn on the same data."""

import warnings

import pytest
import torch

import td_core
import td_nn

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up
    import tensordict.nn as up_nn

SIDES = [(td_core, td_nn), (up, up_nn)]


@pytest.mark.parametrize("inplace", [False, True])
def test_wrap_module_matches_upstream(inplace):
    results = []
    for core, nn_ in SIDES:
        seq = nn_.TensorDictSequential(
            nn_.TensorDictModule(lambda x: x * 2, in_keys=["x"], out_keys=["y"]),
            nn_.WrapModule(lambda td: td.reshape(-1), inplace=False),
        )
        out = seq(core.TensorDict(x=torch.ones(3, 4, 5), batch_size=[3, 4]))
        results.append((tuple(out.batch_size), out["y"].shape))
        data = core.TensorDict(x=torch.ones(2), batch_size=[2])
        wrap = nn_.WrapModule(lambda td: td.empty().set("z", td["x"] + 1), inplace=inplace)
        out = wrap(data)
        results.append((out is data, sorted(out.keys()), wrap.in_keys, wrap.out_keys))
    assert results[:2] == results[2:]


def test_wrap_module_keys_and_errors():
    wrap = td_nn.WrapModule(lambda td: td, in_keys=["a"], out_keys=["b"])
    assert wrap.in_keys == ["a"] and wrap.out_keys == ["b"]
    with pytest.raises(TypeError):
        td_nn.WrapModule(3)


def test_as_tensordict_module_function_and_method():
    for core, nn_ in SIDES:

        @nn_.as_tensordict_module(in_keys="c", out_keys="d")
        def plus_one(c):
            return c + 1

        assert plus_one(core.TensorDict(c=torch.zeros(()))).get("d") == 1

        class Model:
            def __init__(self, k):
                self.k = k

            @nn_.as_tensordict_module(in_keys=["c"], out_keys=["d"])
            def method(self, c):
                return c + self.k

        assert Model(2).method(core.TensorDict(c=torch.zeros(()))).get("d") == 2
        assert Model(5).method(core.TensorDict(c=torch.zeros(()))).get("d") == 5
    assert torch.equal(plus_one(torch.zeros(2)), torch.ones(2))


def test_as_tensordict_module_in_a_sequence():
    @td_nn.as_tensordict_module(in_keys=["a", "b"], out_keys=["s"])
    def add(a, b):
        return a + b

    seq = td_nn.TensorDictSequential(add)
    assert seq.in_keys == ["a", "b"] and seq.out_keys == ["s"]
    out = seq(td_core.TensorDict(a=torch.ones(2), b=torch.ones(2), batch_size=[2]))
    assert out["s"].tolist() == [2.0, 2.0]


def _classes(core, nn_):
    class In(core.TensorClass):
        x: torch.Tensor

    class Out(core.TensorClass):
        y: torch.Tensor

    class Double(nn_.TensorClassModuleBase[In, Out]):
        def forward(self, data):
            return Out(y=data.x * 2, batch_size=data.batch_size)

    return In, Out, Double


def test_tensorclass_module_matches_upstream():
    results = []
    for core, nn_ in SIDES:
        In, Out, Double = _classes(core, nn_)
        module = Double()
        assert module.input_type is In and module.output_type is Out
        out = module(In(x=torch.ones(2), batch_size=[2]))
        assert type(out) is Out
        wrapper = module.as_td_module()
        assert isinstance(wrapper, nn_.TensorClassModuleWrapper)
        assert isinstance(wrapper, nn_.TensorDictModuleBase)
        data = core.TensorDict(x=torch.ones(2), z=torch.zeros(2), batch_size=[2])
        result = wrapper(data)
        results.append(
            (
                wrapper.in_keys,
                wrapper.out_keys,
                sorted(result.keys()),
                result["y"].tolist(),
                "y" in data.keys(),
            )
        )
    assert results[0] == results[1]


def test_tensorclass_module_keys_of_nested_tensorclass_fields():
    # the out keys come from the output class's fields, nested through tensorclass fields
    keys = []
    for core, nn_ in SIDES:
        In, Out, _ = _classes(core, nn_)

        class Both(core.TensorClass):
            inp: In
            out: Out

        class Wrap(nn_.TensorClassModuleBase[In, Both]):
            def forward(self, data, out_cls=Out, both_cls=Both):
                return both_cls(inp=data, out=out_cls(y=data.x, batch_size=[]), batch_size=[])

        wrapper = Wrap().as_td_module()
        keys.append((sorted(wrapper.in_keys), sorted(wrapper.out_keys)))
    assert keys[0] == keys[1] == (["x"], [("inp", "x"), ("out", "y")])


def test_tensorclass_module_errors():
    class Untyped(td_nn.TensorClassModuleBase[torch.Tensor, torch.Tensor]):
        def forward(self, x):
            return x + 1

    assert torch.equal(Untyped()(torch.zeros(1)), torch.ones(1))
    with pytest.raises(ValueError, match="TensorClass"):
        Untyped().as_td_module()


def test_add_custom_mapping():
    td_nn.add_custom_mapping("toplevel_zero", lambda x: torch.zeros_like(x))
    assert td_core.mappings("toplevel_zero")(torch.ones(3)).sum() == 0
    assert td_nn.mappings("toplevel_zero") is td_core.mappings("toplevel_zero")
    with pytest.raises(TypeError):
        td_nn.add_custom_mapping("bad", 3)
    with pytest.raises(KeyError, match="toplevel_zero"):
        td_core.mappings("missing_mapping")
