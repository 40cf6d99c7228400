"""TensorDictSequential: keys, calls, sub-sequences, indexing."""

from collections import OrderedDict

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_nn import TensorDictModule, TensorDictSequential, WrapModule


def _chain():
    a = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
    b = TensorDictModule(lambda y, z: y + z, in_keys=["y", "z"], out_keys=["x"])
    c = TensorDictModule(lambda x: x * 2, in_keys=["x"], out_keys=["w"])
    return a, b, c


def _td():
    return TensorDict(x=torch.ones(2), z=torch.ones(2), u=torch.zeros(2), batch_size=[2])


def test_keys_only_from_outside():
    seq = TensorDictSequential(*_chain())
    assert seq.in_keys == ["x", "z"]
    assert seq.out_keys == ["y", "x", "w"]


def test_forward_values():
    seq = TensorDictSequential(*_chain())
    td = _td()
    assert seq(td) is td
    assert (td["y"] == 2).all() and (td["x"] == 3).all() and (td["w"] == 6).all()


def test_selected_out_keys_drops_intermediates():
    seq = TensorDictSequential(*_chain(), selected_out_keys=["w"])
    assert seq.out_keys == ["w"]
    td = seq(_td())
    assert sorted(td.keys()) == ["u", "w", "x", "z"]
    seq.reset_out_keys()
    assert seq.out_keys == ["y", "x", "w"]
    assert "y" in seq(_td()).keys()


def test_partial_tolerant_skips_modules_without_inputs():
    td = TensorDict(x=torch.ones(2), batch_size=[2])
    out = TensorDictSequential(*_chain(), partial_tolerant=True)(td)
    assert sorted(out.keys()) == ["w", "x", "y"]
    with pytest.raises(KeyError, match="'z'"):
        TensorDictSequential(*_chain())(TensorDict(x=torch.ones(2), batch_size=[2]))


def test_inplace_false_and_empty_and_tensordict_out():
    td = _td()
    out = TensorDictSequential(*_chain(), inplace=False)(td)
    assert sorted(out.keys()) == ["w", "x", "y"] and out.batch_size == torch.Size([])
    assert "y" not in td.keys() and (td["x"] == 1).all()
    out = TensorDictSequential(*_chain(), inplace="empty")(td)
    assert sorted(out.keys()) == ["w", "x", "y"] and out.batch_size == td.batch_size
    dest = TensorDict(batch_size=[2])
    assert TensorDictSequential(*_chain())(td, tensordict_out=dest) is dest
    assert sorted(dest.keys()) == ["w", "x", "y"] and "w" not in td.keys()
    with pytest.raises(ValueError, match="inplace"):
        TensorDictSequential(*_chain(), inplace="x")


def test_tensors_in():
    seq = TensorDictSequential(*_chain())
    y, x, w = seq(x=torch.ones(2), z=torch.ones(2))
    assert (y == 2).all() and (x == 3).all() and (w == 6).all()
    y, x, w = seq(torch.ones(2), torch.ones(2))
    assert (y == 2).all() and (x == 3).all() and (w == 6).all()


def test_select_subsequence_by_out_keys_and_in_keys():
    a, b, c = _chain()
    seq = TensorDictSequential(a, b, c)
    sub = seq.select_subsequence(out_keys=["y"])
    assert list(sub) == [a] and sub.out_keys == ["y"]
    sub = seq.select_subsequence(in_keys=["z"])
    assert list(sub) == [b, c] and sub.in_keys == ["y", "z"]
    sub = seq.select_subsequence(in_keys=["z"], out_keys=["x"])
    assert list(sub) == [b]
    sub = seq.select_subsequence(out_keys=["w"])
    assert list(sub) == [a, b, c]
    with pytest.raises(KeyError, match="nope"):
        seq.select_subsequence(out_keys=["nope"])
    with pytest.raises(ValueError, match="leaves no module"):
        seq.select_subsequence(in_keys=["nope"])


def test_select_subsequence_drops_unneeded_branch():
    a = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["a"])
    b = TensorDictModule(lambda x: x - 1, in_keys=["x"], out_keys=["b"])
    c = TensorDictModule(lambda a: a * 2, in_keys=["a"], out_keys=["c"])
    sub = TensorDictSequential(a, b, c).select_subsequence(out_keys=["c"])
    assert list(sub) == [a, c]
    td = sub(TensorDict(x=torch.zeros(())))
    assert "b" not in td.keys() and td["c"] == 2


def test_indexing_slicing_len_iter():
    a, b, c = _chain()
    seq = TensorDictSequential(a, b, c)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c
    tail = seq[1:]
    assert isinstance(tail, TensorDictSequential) and list(tail) == [b, c]
    assert tail.in_keys == ["y", "z"]
    assert list(iter(seq)) == [a, b, c]


def test_ordered_dict_of_modules():
    a, b, c = _chain()
    seq = TensorDictSequential(OrderedDict(first=a, second=b, third=c))
    assert seq["second"] is b and seq[2] is c
    assert (seq(_td())["w"] == 6).all()


def test_nested_sequences_and_parameters():
    inner = TensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["h"]),
        TensorDictModule(nn.ReLU(), in_keys=["h"], out_keys=["h"]),
    )
    outer = TensorDictSequential(
        inner, TensorDictModule(nn.Linear(4, 1), in_keys=["h"], out_keys=["y"])
    )
    assert outer.in_keys == ["x"] and outer.out_keys == ["h", "y"]
    assert len(list(outer.parameters())) == 4
    assert sorted(outer.state_dict()) == [
        "module.0.module.0.module.bias",
        "module.0.module.0.module.weight",
        "module.1.module.bias",
        "module.1.module.weight",
    ]
    out = outer(TensorDict(x=torch.randn(5, 3), batch_size=[5]))
    assert out["y"].shape == (5, 1) and (out["h"] >= 0).all()


def test_plain_callables_run_on_the_whole_tensordict():
    seq = TensorDictSequential({"add": lambda td: td + 1, "twice": lambda td: td * 2})
    assert isinstance(seq.module, nn.ModuleDict) and isinstance(seq["add"], WrapModule)
    assert seq(TensorDict(a=torch.zeros(()))).get("a") == 2
    with pytest.raises(TypeError, match=r"module 1.*not callable"):
        TensorDictSequential(_chain()[0], 3)


def test_select_subsequence_selects_inside_nested_sequences_and_keeps_names():
    def step(src, dst):
        return TensorDictModule(lambda x: x + 1, in_keys=[src], out_keys=[dst])

    nested = TensorDictSequential(
        TensorDictSequential(step("a", "b"), step("b", "c")),
        TensorDictSequential(step("b", "d"), step("d", "e")),
    )
    sub = nested.select_subsequence(in_keys=["d"])
    assert sub.in_keys == ["d"] and sub.out_keys == ["e"]
    sub = nested.select_subsequence(out_keys=["c"])
    assert sub.out_keys == ["b", "c"] and len(sub) == 1 and len(sub[0]) == 2
    named = TensorDictSequential(
        OrderedDict(first=step("x", "y"), second=step("y", "z"), third=step("x", "w"))
    )
    picked = named.select_subsequence(out_keys=["w"])
    assert list(picked.module) == ["third"]
    assert list(named[1:].module) == ["second", "third"]


def test_set_and_delete_members_recompute_the_keys():
    seq = TensorDictSequential(*_chain())
    seq[1] = TensorDictModule(lambda y: y * 3, in_keys=["y"], out_keys=["q"])
    assert seq.out_keys == ["y", "q", "w"]
    del seq[2]
    assert len(seq) == 2 and seq.out_keys == ["y", "q"] and seq.in_keys == ["x"]


def test_repr():
    text = repr(TensorDictSequential(*_chain()))
    assert text.startswith("TensorDictSequential(\n    module=ModuleList(")
    assert text.endswith("in_keys=['x', 'z'],\n    out_keys=['y', 'x', 'w'])")


def test_unexpected_kwargs_rejected():
    with pytest.raises(TypeError, match="unexpected keyword"):
        TensorDictSequential(*_chain())(_td(), foo=1)


def test_inplace_sequence_writes_into_the_input_even_when_members_do_not():
    seq = TensorDictSequential(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"], inplace=False),
        TensorDictModule(lambda y: y * 2, in_keys=["y"], out_keys=["z"], inplace=False),
        inplace=True,
    )
    td = _td()
    out = seq(td)
    assert out is td and sorted(td.keys()) == ["u", "x", "z"]  # the last member's outputs
    assert (td["z"] == 4).all()
