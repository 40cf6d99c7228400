"""Named batch dims: errors, in-place behaviour and propagation."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, TensorDictParams, stack
from td_core.errors import TDError


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.zeros(3, 4, 2), "b": {"c": torch.ones(3, 4)}}, [3, 4], names=["x", "y"]
    )


def test_wrong_count_names_the_counts_and_leaves_names():
    td = _td()
    with pytest.raises(ValueError, match="2 batch dims"):
        td.rename_("p")
    assert td.names == ["x", "y"]


def test_duplicates_refused():
    with pytest.raises(ValueError, match="unique"):
        TensorDict({}, [3, 3], names=["a", "a"])


def test_refine_conflict_is_runtime_error_and_unchanged():
    td = _td()
    with pytest.raises(RuntimeError, match="'x'") as info:
        td.refine_names("z", None)
    assert isinstance(info.value, TDError)
    assert td.names == ["x", "y"]


def test_rename_unknown_mapping_key_named():
    with pytest.raises(ValueError, match="'w'"):
        _td().rename(w="z")


def test_rename_is_out_of_place_rename_in_place_and_nested():
    td = _td()
    out = td.rename("p", "q")
    assert td.names == ["x", "y"] and out.names == ["p", "q"]
    assert out["a"] is td["a"]
    td.rename_(x="z")
    assert td["b"].names == ["z", "y"]


def test_nested_extra_dims_stay_unnamed():
    td = TensorDict({"b": TensorDict({"c": torch.ones(3, 4, 5)}, [3, 4, 5])}, [3, 4])
    td.names = ["x", "y"]
    assert td["b"].names == ["x", "y", None]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (lambda td: td[0], ["y"]),
        (lambda td: td[:, 0], ["x"]),
        (lambda td: td[None], [None, "x", "y"]),
        (lambda td: td.unsqueeze(1), ["x", None, "y"]),
        (lambda td: td[:1].squeeze(0), ["y"]),
        (lambda td: td.permute(1, 0), ["y", "x"]),
        (lambda td: td.transpose(0, 1), ["y", "x"]),
        (lambda td: td.unbind(1)[0], ["x"]),
        (lambda td: td.expand(2, 3, 4), [None, "x", "y"]),
        (lambda td: td.clone(), ["x", "y"]),
        (lambda td: td.view(-1), [None]),
        (lambda td: stack([td, td], 0), [None, "x", "y"]),
    ],
)
def test_names_follow_shape_ops(op, expected):
    assert op(_td()).names == expected


def test_lazy_stack_names():
    lazy = LazyStackedTensorDict(_td(), _td(), stack_dim=1)
    assert lazy.names == ["x", None, "y"]
    lazy.rename_("p", "s", "q")
    assert lazy.tensordicts[0].names == ["p", "q"]
    assert lazy.names == ["p", "s", "q"]


def test_batch_size_change_resets_names():
    td = TensorDict({"a": torch.zeros(3, 4)}, [3, 4], names=["a", "b"])
    td.batch_size = [3]
    assert td.names == ["a"]


def test_stack_of_differently_named_inputs_is_unnamed():
    td = TensorDict({"a": torch.zeros(3, 4)}, batch_size=[3, 4], names=["first", "second"])
    assert torch.stack([td, td], dim=1).names == ["first", None, "second"]
    other = td.clone()
    other.names = ["first", "third"]
    assert torch.stack([td, other], dim=0).names == [None, None, None]


def test_repeat_and_repeat_interleave_keep_the_names():
    td = TensorDict({"obs": torch.zeros(1, 2, 3, 5)}, batch_size=[1, 2, 3], names=[None, "t", "o"])
    assert td.repeat_interleave(2, dim=-1).names == [None, "t", "o"]
    assert td.repeat(1, 1, 2).names == [None, "t", "o"]
    stack = LazyStackedTensorDict.lazy_stack([td, td], 0)
    stack.names = ["s", None, "t", "o"]
    assert stack.repeat(2, 1, 1, 1).names == ["s", None, "t", "o"]
    assert stack.repeat_interleave(2, dim=2).names == ["s", None, "t", "o"]
    parent = TensorDict({"agents": td}, batch_size=[1, 2], names=[None, "t"])
    parent["agents"] = parent["agents"].repeat_interleave(2, dim=-1)
    assert parent["agents"].names == [None, "t", "o"]


def _td4() -> TensorDict:
    return TensorDict(
        {"x": torch.rand(3, 4, 1, 6), "n": {"y": torch.rand(3, 4, 1, 6, 2)}},
        [3, 4, 1, 6],
        names=["a", "b", "c", "d"],
    )


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (lambda td: td.flatten(1, 3), ["a", None]),
        (lambda td: td.flatten(1, 2), ["a", None, "d"]),
        (lambda td: td.flatten(0, 2), [None, "d"]),
        (lambda td: td.flatten(1, 1), ["a", "b", "c", "d"]),
        (lambda td: td.flatten(1, 2).unflatten(1, (4, 1)), ["a", None, None, "d"]),
        (lambda td: td.flatten(1, 3).unflatten(1, (4, 1, 6)), ["a", None, None, None]),
        (lambda td: td.sum(2), ["a", "b", "d"]),
        (lambda td: td.sum((1, 3)), ["a", "c"]),
        (lambda td: td.sum(2, keepdim=True), ["a", "b", "c", "d"]),
        (lambda td: td.mean(1), ["a", "c", "d"]),
        (lambda td: td.mean(1)["n"], ["a", "c", "d"]),
        (lambda td: td.max(1).values, ["a", "c", "d"]),
        (lambda td: td.max(1).indices, ["a", "c", "d"]),
        (lambda td: td.all(2), ["a", "b", "d"]),
        (lambda td: td.any(-1), ["a", "b", "c"]),
        (lambda td: td.quantile(torch.tensor([0.1, 0.5]), dim=1), [None, "a", "c", "d"]),
        (lambda td: td.gather(-1, torch.randint(6, (3, 4, 1, 18))), ["a", "b", "c", "d"]),
        (lambda td: td.gather(-1, torch.randint(6, (3, 4, 1, 18)))["n"], ["a", "b", "c", "d"]),
    ],
)
def test_names_follow_flatten_reductions_and_gather(op, expected):
    td = _td4()
    assert op(td).names == expected
    assert td.names == ["a", "b", "c", "d"]


def test_memmap_copies_keep_the_names(tmp_path):
    pytest.importorskip("td_memmap", reason="memmap needs td-memmap")
    td = _td4()
    assert td.memmap_like(tmp_path / "like").names == ["a", "b", "c", "d"]
    saved = td.memmap(tmp_path / "saved")
    assert saved.names == ["a", "b", "c", "d"] and saved["n"].names == ["a", "b", "c", "d"]


def test_a_set_sub_tensordict_takes_the_parent_names_on_a_copy():
    td = TensorDict(batch_size=[3, 4], names=["a", "b"])
    sub = TensorDict(batch_size=[3, 4, 2])
    td["s"] = sub
    assert td["s"].names == ["a", "b", None]
    assert sub.names == [None, None, None]  # the caller's object is not renamed
    td["e"] = TensorDict()  # widened to the batch size, then named
    assert td["e"].names == ["a", "b"]
    td.set("p", TensorDict(batch_size=[3, 4, 2], names=[None, "b", "z"]))
    assert td["p"].names == ["a", "b", "z"]


def test_a_set_sub_tensordict_with_clashing_names_is_refused_and_nothing_set():
    td = TensorDict(batch_size=[3, 4], names=["a", "b"])
    with pytest.raises(RuntimeError, match=r"'s'.*cannot coerce") as info:
        td["s"] = TensorDict(batch_size=[3, 4], names=["e", None])
    assert isinstance(info.value, TDError)
    assert "s" not in td.keys()


def test_indexing_keeps_the_names_of_a_sub_tensordict_extra_dims():
    td = TensorDict({"s": TensorDict({}, [3, 4], names=["c", "d"])}, [3], names=["c"])
    assert td[0]["s"].names == td["s"][0].names == ["d"]
    assert td[None]["s"].names == [None, "c", "d"]
    deep = TensorDict({"s": {"t": TensorDict({}, [3, 4, 5], names=["c", None, "e"])}}, [3])
    deep.names = ["c"]
    assert deep[1:]["s", "t"].names == ["c", None, "e"]
    assert deep[0]["s", "t"].names == [None, "e"]


def test_an_unnamed_container_takes_the_names_of_a_sub_tensordict_set_in_it():
    td = TensorDict({"other": {}}, [3])
    td["s"] = TensorDict({}, [3, 4], names=["a", "b"])
    assert td.names == ["a"]
    assert td["s"].names == ["a", "b"] and td["other"].names == ["a"]
    plain = TensorDict({}, [3])
    plain["s"] = TensorDict({}, [3, 4], names=[None, "b"])  # no name for its dims: none taken
    assert plain.names == [None]


def test_a_failed_update_leaves_an_unnamed_container_unnamed():
    # the names a sub-TensorDict would give come with its write: none if the update fails
    td = TensorDict(batch_size=[3])
    with pytest.raises(TDError, match="'bad'"):
        td.update({"s": TensorDict({}, [3, 4], names=["a", "b"]), "bad": torch.zeros(5)})
    assert td.names == [None] and list(td.keys()) == []
    td.update({"s": TensorDict({}, [3, 4], names=["a", "b"])})
    assert td.names == ["a"]


def test_refine_names_keeps_the_dims_of_the_ellipsis_and_refuses_a_clash_first():
    td = TensorDict(batch_size=[3, 4, 5, 6])
    assert td.refine_names(None, None, "c", "d") is td
    with pytest.raises(RuntimeError, match="cannot coerce TensorDict names"):
        td.refine_names(None, None, "d", "d")  # a clash, before the duplicate
    assert td.names == [None, None, "c", "d"]
    assert td.refine_names("a", ..., "d").names == ["a", None, "c", "d"]
    with pytest.raises(RuntimeError, match="'a' cannot be given None"):
        td.refine_names(None, None, None, None)
    with pytest.raises(ValueError, match="unique"):
        td.refine_names("a", "c", ...)


def test_names_of_the_wrong_length_say_so():
    td = TensorDict(batch_size=[3, 4])
    with pytest.raises(ValueError, match="must equate the tensordict batch_dims"):
        td.names = ["a"]


def test_names_clashing_with_a_sub_tensordict_extra_dim_are_refused_and_unchanged():
    td = TensorDict({"s": TensorDict({}, [3, 4], names=[None, "d"])}, [3])
    with pytest.raises(ValueError, match="'d'"):
        td.names = ["d"]
    assert td.names == [None] and td["s"].names == [None, "d"]
    lazy = LazyStackedTensorDict.lazy_stack([td, td], -1)
    with pytest.raises(ValueError, match="'d'"):
        lazy.names = ["c", "d"]  # the stack dim would share the name of the sub's dim
    assert lazy.names == [None, None]
    lazy.names = ["c", "e"]
    assert lazy["s"].names == ["c", "e", "d"]
    assert lazy[0]["s"].names == lazy["s"][0].names == ["e", "d"]


def test_a_view_refuses_names_before_counting_them():
    td = TensorDict(batch_size=[3, 4], names=["a", "b"])
    view = td._get_sub_tensordict(torch.ones(3, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="Names of a subtensordict cannot be modified"):
        view.names = "a sentence is not a list of names"


def test_a_lazy_stack_made_dense_keeps_every_name():
    lazy = LazyStackedTensorDict.lazy_stack([_td(), _td()], 1)
    lazy.names = ["x", "s", "y"]
    dense = lazy.contiguous()
    assert dense.names == ["x", "s", "y"] and dense["b"].names == ["x", "s", "y"]


def test_to_h5_keeps_the_names(tmp_path):
    pytest.importorskip("h5py", reason="to_h5 needs h5py")
    pytest.importorskip("td_memmap", reason="to_h5 needs td-memmap")
    out = _td().to_h5(tmp_path / "f.h5")
    try:
        assert out.names == ["x", "y"]
    finally:
        out.close()


def test_an_nd_index_tensor_leaves_its_dims_unnamed_names_stay_unique():
    td = TensorDict(batch_size=[3, 4, 5], names=["a", "b", "c"])
    index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert td[:, index].names == ["a", None, None, "c"]  # as 0.15 (0.14: ["a", "b", "b", "c"])
    assert td[:, torch.tensor([0, 2])].names == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (lambda td: td.reshape(12, 2, inplace=True), [None, None]),
        (lambda td: td.flatten(1, 2, inplace=True), ["a", None]),
        (lambda td: td.unflatten(0, (3, 1), inplace=True), [None, None, "b", "c"]),
    ],
)
def test_in_place_shape_ops_name_dims_as_their_out_of_place_forms(op, expected):
    td = TensorDict(
        {"x": torch.zeros(3, 4, 2), "n": {"y": torch.zeros(3, 4, 2, 5)}},
        [3, 4, 2],
        names=["a", "b", "c"],
    )
    assert op(td) is td
    assert td.names == expected and td["n"].names == expected


def test_to_tensordict_pad_and_a_one_dim_mask_keep_the_names():
    td = _td()
    assert td.to_tensordict().names == ["x", "y"]
    assert td.to_tensordict()["b"].names == ["x", "y"]
    assert td.pad([0, 1]).names == ["x", "y"]
    assert td[torch.tensor([True, False, True])].names == ["x", "y"]  # the dim stays (0.15)
    assert td[:, torch.tensor([True, False, True, True])].names == ["x", "y"]
    assert td[torch.ones(3, 4, dtype=torch.bool)].names == [None]  # two dims merged: unnamed
    lazy = LazyStackedTensorDict.lazy_stack([_td(), _td()], 1)
    lazy.names = ["x", "s", "y"]
    assert lazy.to_tensordict().names == ["x", "s", "y"]
    assert lazy.pad([0, 1]).names == ["x", "s", "y"]


def test_tensordict_params_keep_the_names_of_their_source():
    params = TensorDictParams(_td())
    assert params.names == ["x", "y"] and params["b"].names == ["x", "y"]
    assert params.clone().names == ["x", "y"]


def test_a_lazy_stack_flattened_elsewhere_keeps_its_stack_dim_name():
    lazy = LazyStackedTensorDict.lazy_stack([_td(), _td()], 0)
    lazy.names = ["s", "x", "y"]
    assert lazy.flatten(1, 2).names == ["s", None]  # upstream: [None, None]


def test_the_constructor_names_sub_tensordicts_on_copies_and_refuses_clashes():
    sub = TensorDict({}, [3, 4])
    td = TensorDict({"s": sub}, [3], names=["a"])
    assert td["s"].names == ["a", None] and sub.names == [None, None]
    with pytest.raises(RuntimeError, match=r"'s'.*cannot coerce"):
        TensorDict({"s": TensorDict({}, [3, 4], names=["b", "c"])}, [3], names=["a"])
    with pytest.raises(ValueError, match=r"'s'.*unique"):
        TensorDict({"s": TensorDict({}, [3, 4], names=[None, "a"])}, [3], names=["a"])


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.rename_("e"),
        lambda td: td.rename(x="e"),
        lambda td: td.rename_(x="e"),
    ],
)
def test_renames_clashing_with_a_sub_tensordict_extra_dim_are_refused(op):
    td = TensorDict({"s": TensorDict({}, [3, 4], names=[None, "e"])}, [3], names=["x"])
    with pytest.raises(ValueError, match="'e'"):
        op(td)
    assert td.names == ["x"] and td["s"].names == ["x", "e"]
    unnamed = TensorDict({"s": TensorDict({}, [3, 4], names=[None, "e"])}, [3])
    with pytest.raises(ValueError, match="'e'"):
        unnamed.refine_names("e")
    assert unnamed["s"].names == [None, "e"]
