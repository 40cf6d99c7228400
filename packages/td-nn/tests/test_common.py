"""TensorDictModule and TensorDictModuleBase."""

import copy
from typing import ClassVar

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential


def _td(**entries):
    return TensorDict(entries, batch_size=[2])


# ------------------------------------------------------------------ construction
@pytest.mark.parametrize(
    ("in_keys", "expected"),
    [
        ("x", ["x"]),
        (("a", "b"), [("a", "b")]),
        (["x", ("a", ("b",))], ["x", ("a", "b")]),
        ([("x",)], ["x"]),
    ],
)
def test_keys_are_normalised(in_keys, expected):
    module = TensorDictModule(lambda *a: a[0], in_keys=in_keys, out_keys="y")
    assert module.in_keys == expected
    assert module.out_keys == ["y"]


@pytest.mark.parametrize("bad", [[1], 3, [None], [("a", 2)]])
def test_bad_keys_raise_type_and_value_error(bad):
    with pytest.raises(TypeError, match="in_keys"):
        TensorDictModule(lambda x: x, in_keys=bad, out_keys=["y"])
    with pytest.raises(ValueError, match="out_keys"):
        TensorDictModule(lambda x: x, in_keys=["x"], out_keys=bad)


def test_not_callable_raises():
    with pytest.raises(TypeError, match="callable"):
        TensorDictModule(3, in_keys=["x"], out_keys=["y"])


def test_bad_inplace_and_method_raise():
    with pytest.raises(ValueError, match="inplace"):
        TensorDictModule(nn.Linear(2, 2), in_keys=["x"], out_keys=["y"], inplace="yes")
    with pytest.raises(AttributeError, match="nope"):
        TensorDictModule(nn.Linear(2, 2), in_keys=["x"], out_keys=["y"], method="nope")


def test_out_to_in_map_with_list_warns():
    with pytest.warns(UserWarning, match="out_to_in_map"):
        TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["y"], out_to_in_map=True)


# ------------------------------------------------------------------ calls
def test_nn_module_forward_and_nested_out_keys():
    linear = nn.Linear(3, 4)
    module = TensorDictModule(linear, in_keys=[("in", "x")], out_keys=[("out", "y")])
    td = TensorDict({("in", "x"): torch.randn(2, 3)}, [2])
    result = module(td)
    assert result is td
    torch.testing.assert_close(td["out", "y"], linear(td["in", "x"]))
    assert td["out"].batch_size == torch.Size([2])


def test_multiple_outputs_tuple_list_and_drop():
    td = _td(x=torch.zeros(2))
    module = TensorDictModule(lambda x: (x - 1, x + 1), in_keys=["x"], out_keys=["lo", "hi"])
    module(td)
    assert (td["lo"] == -1).all() and (td["hi"] == 1).all()
    module = TensorDictModule(lambda x: [x, x + 1], in_keys=["x"], out_keys=["_", "z"])
    module(td)
    assert "_" not in td.keys() and (td["z"] == 1).all()
    assert module.out_keys == ["z"]


def test_mapping_and_tensordict_outputs_are_read_by_key():
    td = _td(x=torch.zeros(2))
    TensorDictModule(lambda x: {"z": x + 2, "y": x + 1}, in_keys=["x"], out_keys=["y", "z"])(td)
    assert (td["y"] == 1).all() and (td["z"] == 2).all()
    TensorDictModule(lambda x: TensorDict(a=x + 3, b=x), in_keys=["x"], out_keys=["a"])(td)
    assert (td["a"] == 3).all()
    # a TensorDict without the out key is one output, written whole
    TensorDictModule(lambda x: TensorDict(q=x, batch_size=[2]), in_keys=["x"], out_keys=["sub"])(td)
    assert (td["sub", "q"] == 0).all()


def test_output_count_mismatch_raises_value_and_runtime_error():
    td = _td(x=torch.zeros(2))
    with pytest.raises(ValueError, match=r"returned 2 output\(s\) but has 1"):
        TensorDictModule(lambda x: (x, x), in_keys=["x"], out_keys=["y"])(td)
    with pytest.raises(RuntimeError, match=r"returned 1 output\(s\) but has 2"):
        TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["y", "z"])(td)
    with pytest.raises(KeyError, match="without the out keys"):
        TensorDictModule(lambda x: {"y": x}, in_keys=["x"], out_keys=["y", "z"])(td)


def test_none_outputs_are_not_written():
    td = _td(x=torch.zeros(2))
    TensorDictModule(lambda x: (x, None), in_keys=["x"], out_keys=["y", "z"])(td)
    assert "y" in td.keys() and "z" not in td.keys()


def test_dict_in_keys_both_directions():
    td = TensorDict({"1": torch.ones(()), "2": torch.ones(()) * 2}, [])
    module = TensorDictModule(
        lambda x, *, y, z: x + y + z, in_keys={"x": "1", "y": "2", "z": "2"}, out_keys=["t"]
    )
    assert module.in_keys == ["1", "2"]
    assert module(td)["t"] == 5
    module = TensorDictModule(
        lambda x, *, y: x + y, in_keys={"1": "x", "2": "y"}, out_keys=["z"], out_to_in_map=False
    )
    assert module(td)["z"] == 3


def test_empty_in_keys():
    module = TensorDictModule(lambda: torch.zeros(3), in_keys=[], out_keys=["x"])
    assert (module(TensorDict())["x"] == 0).all()


def test_method_and_method_kwargs():
    class Net(nn.Module):
        def shift(self, tensor, *, by):
            return tensor + by

    module = TensorDictModule(
        Net(), in_keys=["a"], out_keys=["b"], method="shift", method_kwargs={"by": 2}
    )
    assert module(TensorDict(a=torch.zeros(())))["b"] == 2
    assert "method='shift'" in repr(module)


def test_inplace_modes():
    td = _td(x=torch.ones(2, 3))
    out = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"], inplace=False)(td)
    assert out is not td and "y" not in td.keys()
    assert sorted(out.keys()) == ["y"] and out.batch_size == torch.Size([])
    out = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"], inplace="empty")(td)
    assert out is not td and sorted(out.keys()) == ["y"] and out.batch_size == td.batch_size
    dest = TensorDict(batch_size=[2])
    out = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])(td, tensordict_out=dest)
    assert out is dest and "y" not in td.keys() and dest["y"].shape == (2, 4)
    dest2 = TensorDict(batch_size=[2])
    assert TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])(td, dest2) is dest2


# ------------------------------------------------------------------ missing keys
def test_missing_key_names_key_and_module():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    with pytest.raises(KeyError, match=r"TensorDictModule\(Linear.*\['x'\].*\['z'\]"):
        module(_td(z=torch.ones(2, 3)))
    strict = TensorDictModule(nn.Linear(3, 4), in_keys=[("a", "x")], out_keys=["y"], strict=True)
    with pytest.raises(KeyError, match=r"\('a', 'x'\)"):
        strict(_td(z=torch.ones(2, 3)))


def test_non_strict_passes_none_for_optional_inputs():
    module = TensorDictModule(
        lambda x, hidden: x if hidden is None else x + hidden, in_keys=["x", "h"], out_keys=["y"]
    )
    td = module(_td(x=torch.ones(2)))
    assert (td["y"] == 1).all()


def test_error_in_module_propagates_unchanged():
    def boom(x):
        raise ValueError("inner failure")

    with pytest.raises(ValueError, match="inner failure"):
        TensorDictModule(boom, in_keys=["x"], out_keys=["y"])(_td(x=torch.ones(2)))


# ------------------------------------------------------------------ tensors in, tensors out
def test_keyword_call_returns_the_output_tensors():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=[("obs", "x")], out_keys=["y"])
    out = module(obs_x=torch.ones(5, 3))
    assert isinstance(out, torch.Tensor) and out.shape == (5, 4)
    split = TensorDictModule(lambda x: (x + 1, x - 1), in_keys=["x"], out_keys=["lo", "hi"])
    lo, hi = split(x=torch.zeros(2))
    assert (lo == 1).all() and (hi == -1).all()
    assert (split.select_out_keys("hi")(x=torch.zeros(2)) == -1).all()  # only the selected one


def test_keyword_call_passes_other_keywords_to_the_module():
    class Scaled(nn.Module):
        def forward(self, x, scale):
            return x * scale

    module = TensorDictModule(Scaled(), in_keys=["x"], out_keys=["y"])
    assert (module(x=torch.ones(2), scale=3) == 3).all()


def test_positional_call_returns_tensors():
    module = TensorDictModule(lambda a, b: (a + b, a - b), in_keys=["a", "b"], out_keys=["s", "d"])
    s, d = module(torch.ones(2), torch.ones(2))
    assert (s == 2).all() and (d == 0).all()
    s, d = module(torch.ones(2), b=torch.zeros(2))
    assert (d == 1).all()
    with pytest.raises(RuntimeError, match="Duplicated argument: input 'a'") as info:
        module(torch.ones(2), a=torch.ones(2))
    assert isinstance(info.value, TypeError)
    with pytest.raises(TypeError, match="extra positional"):
        module(torch.ones(2), torch.ones(2), torch.ones(2))


def test_tensordict_keyword_argument():
    module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
    td = _td(x=torch.zeros(2))
    assert module(tensordict=td) is td and (td["y"] == 1).all()


# ------------------------------------------------------------------ nn.Module behaviour
def test_state_dict_to_parameters_and_attribute_forwarding():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    assert list(module.state_dict()) == ["module.weight", "module.bias"]
    assert module.weight is module.module.weight
    assert module.in_features == 3
    assert len(list(module.parameters())) == 2
    module.to(torch.float64)
    assert module.weight.dtype == torch.float64
    with pytest.raises(AttributeError, match="nope"):
        _ = module.nope
    clone = copy.deepcopy(module)
    assert clone.weight is not module.weight and torch.equal(clone.weight, module.weight)
    fresh = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    fresh.load_state_dict(module.to(torch.float32).state_dict())
    assert torch.equal(fresh.weight, module.weight)


def test_hooks_run():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    seen = []
    module.register_forward_pre_hook(lambda mod, args: seen.append(("pre", type(args[0]))))

    def post(mod, args, out):
        seen.append(("post", sorted(out.keys())))
        out.set("z", out["y"] * 0)

    module.register_forward_hook(post)
    td = module(_td(x=torch.ones(2, 3)))
    assert seen == [("pre", TensorDict), ("post", ["x", "y"])]
    assert (td["z"] == 0).all()


def test_repr_shows_module_and_keys():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=[("a", "y")])
    text = repr(module)
    assert text.startswith("TensorDictModule(\n    module=Linear(in_features=3")
    assert "in_keys=['x']" in text and "out_keys=[('a', 'y')]" in text


def test_select_and_reset_out_keys():
    module = TensorDictModule(lambda x: (x + 1, x + 2), in_keys=["x"], out_keys=["a", "b"])
    assert module.select_out_keys("b") is module
    assert module.out_keys == ["b"]
    td = module(_td(x=torch.zeros(2)))
    assert "a" not in td.keys() and (td["b"] == 2).all()
    module.reset_out_keys()
    assert module.out_keys == ["a", "b"]
    assert "a" in module(_td(x=torch.zeros(2))).keys()
    with pytest.raises(KeyError, match="'c'"):
        module.select_out_keys("c")


def test_autograd_through_module():
    module = TensorDictModule(nn.Linear(3, 1), in_keys=["x"], out_keys=["y"])
    module(_td(x=torch.ones(2, 3)))["y"].sum().backward()
    assert module.weight.grad is not None and (module.weight.grad == 2).all()


# ------------------------------------------------------------------ the base class
class AddOne(TensorDictModuleBase):
    def __init__(self):
        super().__init__()
        self.in_keys = ["a"]
        self.out_keys = ["b", "c"]
        self.calls = 0

    def forward(self, tensordict):
        self.calls += 1
        b = tensordict["a"] + 1
        return tensordict.set("b", b).set("c", b + 1)


def test_base_subclass_accepts_tensors():
    module = AddOne()
    b, c = module(a=torch.zeros(3))
    assert (b == 1).all() and (c == 2).all()
    b, c = module(torch.zeros(3))
    assert (b == 1).all() and (c == 2).all()


def test_base_select_out_keys_uses_a_hook():
    module = AddOne().select_out_keys("c")
    td = module(TensorDict(a=torch.zeros(2), batch_size=[2]))
    assert sorted(td.keys()) == ["a", "c"]
    module.reset_out_keys()
    assert sorted(module(TensorDict(a=torch.zeros(2), batch_size=[2])).keys()) == ["a", "b", "c"]


def test_plain_module_with_keys_composes():
    class Plain(nn.Module):
        in_keys: ClassVar[list] = ["b"]
        out_keys: ClassVar[list] = ["d"]

        def forward(self, tensordict):
            return tensordict.set("d", tensordict["b"] * 10)

    seq = TensorDictSequential(AddOne(), Plain())
    assert seq.in_keys == ["a"] and seq.out_keys == ["b", "c", "d"]
    assert (seq(TensorDict(a=torch.zeros(2), batch_size=[2]))["d"] == 10).all()


def test_reset_parameters_recursive():
    module = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])
    with torch.no_grad():
        module.weight.zero_()
    module.reset_parameters_recursive()
    assert (module.weight != 0).any()


def test_a_non_tensor_input_is_passed_as_its_value():
    from td_core import NonTensorStack

    module = TensorDictModule(lambda s: s + " is a string!", in_keys=["s"], out_keys=["out"])
    assert module(TensorDict(s="a string"))["out"] == "a string is a string!"
    assert module(TensorDict(s="x"))["out"] == "x is a string!"  # the fast path's second call
    both = TensorDictModule(lambda a, b: f"{a}+{b}", in_keys=["a", "b"], out_keys=["out"])
    assert both(TensorDict(a="x", b="y"))["out"] == "x+y"
    column = TensorDictModule(lambda s: torch.tensor([len(s)] * 2), in_keys=["s"], out_keys=["n"])
    assert column(TensorDict(s=NonTensorStack("p", "q"), batch_size=[2]))["n"].tolist() == [2, 2]
