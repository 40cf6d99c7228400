"""Non-tensor leaves: building stacks, comparing them, their batch-shape ops."""

import math
import pickle
import warnings

import numpy as np
import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    MetaData,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
    UnbatchedTensor,
    is_non_tensor,
    is_tensor_collection,
)


def test_non_tensor_leaves_are_leaves_not_tensor_collections():
    # upstream's NonTensorStack is a LazyStackedTensorDict (migration page)
    stack = torch.stack([TensorDict(s="a"), TensorDict(s="b")]).get("s")
    assert isinstance(stack, NonTensorStack)
    assert not isinstance(stack, (LazyStackedTensorDict, TensorDictBase))
    assert not is_tensor_collection(stack) and not is_tensor_collection(NonTensorData(1))
    assert is_non_tensor(stack) and is_non_tensor(NonTensorData(1))


def test_stack_from_elements():
    assert NonTensorStack("a", "b", "c").tolist() == ["a", "b", "c"]
    assert NonTensorStack("a", "b").batch_size == (2,)
    column = NonTensorStack(
        NonTensorData("a", batch_size=[3]), NonTensorData("b", batch_size=[3]), stack_dim=1
    )
    assert column.batch_size == (3, 2)
    assert column.tolist() == [["a", "b"]] * 3
    nested = NonTensorStack(NonTensorStack("2", "3"), stack_dim=1)
    assert nested.batch_size == (2, 1) and nested.tolist() == [["2"], ["3"]]
    lists = NonTensorStack(NonTensorData(["x"]), NonTensorData(["y"]), batch_size=(2,))
    assert lists.tolist() == [["x"], ["y"]]
    assert NonTensorStack().batch_size == (0,)


def test_stack_from_elements_refuses_mismatches():
    with pytest.raises(ValueError, match=r"one batch size, got \[\[2\], \[\]\]"):
        NonTensorStack(NonTensorData("x", batch_size=[2]), "y")
    with pytest.raises(ValueError, match=r"batch_size \[3\] does not match"):
        NonTensorStack("a", "b", batch_size=(3,))
    with pytest.raises(IndexError, match="stack_dim 2"):
        NonTensorStack("a", "b", stack_dim=2)


def test_stack_in_a_tensordict():
    td = TensorDict(a=NonTensorStack("foo", "bar"), x=torch.zeros(2), batch_size=[2])
    assert td[1]["a"] == "bar"
    assert td["a"] == ["foo", "bar"]


def test_stack_shape_ops_move_the_values():
    stack = NonTensorStack(*[str(i) for i in range(60)])
    view = stack.view(3, 4, 5)
    assert view.batch_size == (3, 4, 5)
    assert isinstance(view[0], NonTensorStack) and view[0, 0].tolist() == list("01234")
    assert view[0, 0, 1].data == "1"
    assert view.flatten().tolist() == stack.tolist()
    assert view.reshape(60).tolist() == stack.tolist()
    assert view.transpose(0, 2)[4, 0, 2].data == view[2, 0, 4].data
    assert view.permute(2, 0, 1).batch_size == (5, 3, 4)
    assert view.unflatten(2, (5, 1)).squeeze(-1).tolist() == view.tolist()
    pair = NonTensorStack(
        NonTensorData("a", batch_size=[3]), NonTensorData("b", batch_size=[3]), stack_dim=1
    )
    assert pair.repeat(1, 2)[0].tolist() == ["a", "b", "a", "b"]
    assert pair.repeat_interleave(2, dim=1)[0].tolist() == ["a", "a", "b", "b"]
    assert pair.flip([1])[0].tolist() == ["b", "a"]
    assert [leaf.tolist() for leaf in pair.unbind(1)] == [["a"] * 3, ["b"] * 3]


def test_shared_value_shape_ops_keep_one_value():
    leaf = NonTensorData(0)
    flat = leaf.flatten()
    assert flat.batch_size == (1,) and flat.tolist() == [0]
    wide = NonTensorData(0, batch_size=[3]).expand(2, 3)
    assert isinstance(wide, NonTensorData) and wide.data == 0
    assert wide.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert wide.unsqueeze(0).batch_size == (1, 2, 3)
    assert wide[1].batch_size == (3,) and wide[1, 2].data == 0


def test_leaf_ops_agree_with_the_container_ops():
    td = TensorDict(
        name=NonTensorStack(*"abcdef").view(2, 3), x=torch.zeros(2, 3), batch_size=[2, 3]
    )
    leaf = td.get("name")
    for op in (
        lambda t: t.flatten(),
        lambda t: t.transpose(0, 1),
        lambda t: t.unsqueeze(1),
        lambda t: t.expand(4, 2, 3),
        lambda t: t[:, 1:],
    ):
        assert op(leaf).tolist() == op(td).get("name").tolist()


def test_shape_ops_of_one_value_keep_one_value():
    # upstream gives a NonTensorStack, so its td["foo"] reads [3] (migration page)
    td = TensorDict(foo=NonTensorData(3))
    wide = td.unsqueeze(0)
    assert isinstance(wide.get("foo"), NonTensorData)
    assert wide["foo"] == 3 and wide.get("foo").tolist() == [3]
    assert NonTensorData(0, batch_size=[3]).expand(2, 3).tolist() == [[0] * 3] * 2


def test_unbatched_tensor_prints_as_its_data():
    data = torch.tensor([1.0, 2.0])
    leaf = UnbatchedTensor(data)
    assert str(leaf) == str(data)
    assert repr(leaf) == f"UnbatchedTensor({data!r})"
    assert format(UnbatchedTensor(torch.tensor(1.25)), ".1f") == format(torch.tensor(1.25), ".1f")


def _outcome(fn, x):
    try:
        return fn(x)
    except (TypeError, ValueError) as err:
        return type(err), str(err)


@pytest.mark.parametrize("data", [torch.tensor(3), torch.tensor(1.25), torch.tensor([1, 2])])
def test_unbatched_tensor_round_and_trunc_behave_as_the_tensor(data):
    # whatever the plain tensor does (result or error, its words naming `Tensor`)
    for fn in (round, lambda x: round(x, 1), math.trunc, math.floor, int):
        assert _outcome(fn, UnbatchedTensor(data)) == _outcome(fn, data)


def test_stacking_unbatched_tensors_with_different_data_warns():
    td1 = TensorDict(a=torch.ones(3), ub=UnbatchedTensor(torch.zeros(5)), batch_size=[3])
    td2 = TensorDict(a=torch.ones(3), ub=UnbatchedTensor(torch.ones(5)), batch_size=[3])
    with pytest.warns(UserWarning, match="different data storage"):
        out = torch.stack([td1, td2])
    assert out["ub"].tolist() == [0.0] * 5  # the first one's data, as upstream
    with pytest.warns(UserWarning, match="different data storage"):
        torch.cat([td1, td2])
    with pytest.warns(UserWarning, match="different data storage"):
        LazyStackedTensorDict.lazy_stack([td1, td2]).get("ub")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.stack([td1, td1])["ub"].data_ptr() == td1["ub"].data_ptr()


def test_failed_stack_does_not_warn_about_unbatched_tensors():
    # the unbatched entry comes first; the ragged nested entry makes the stack fail
    td1 = TensorDict(
        ub=UnbatchedTensor(torch.zeros(5)), sub={"x": torch.ones(3, 2)}, batch_size=[3]
    )
    td2 = TensorDict(ub=UnbatchedTensor(torch.ones(5)), sub={"x": torch.ones(3, 4)}, batch_size=[3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
            torch.stack([td1, td2])
        with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
            LazyStackedTensorDict.lazy_stack([td1, td2]).contiguous()
        with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
            LazyStackedTensorDict.lazy_stack([td1, td2]).to_tensordict()
    dense = LazyStackedTensorDict.lazy_stack([td1, td1]).to_tensordict()
    assert list(dense.keys()) == ["ub", "sub"]
    assert type(dense["ub"]) is UnbatchedTensor and dense["ub"].data_ptr() != td1["ub"].data_ptr()


def test_from_list_stacks_nested_lists_along_new_dims():
    nd = NonTensorStack.from_list([[True, "b", torch.zeros(())], ["x", 0, NonTensorData("y")]])
    assert nd.batch_size == (2, 3)
    assert nd[0, 1].data == "b" and nd[1, 2].data == "y"  # NonTensorData items are unwrapped
    assert isinstance(nd[0, 2].data, torch.Tensor)
    assert NonTensorStack.from_list([NonTensorStack("a", "b"), ["c", "d"]]).tolist() == [
        ["a", "b"],
        ["c", "d"],
    ]
    ragged = NonTensorStack.from_list([[1, 2], [3]])  # lists of other lengths stay values
    assert ragged.batch_size == (2,) and ragged.tolist() == [[1, 2], [3]]


def test_a_stored_function_is_callable_in_apply():
    td0, td1 = TensorDict(a=0, b=0), TensorDict(a=1, b=1)
    funcs = TensorDict(a=lambda x, y: x - y, b=lambda x, y: x + y)
    out = td0.apply(lambda x, y, fn: fn(x, y), td1, funcs)
    assert out["a"] == -1 and out["b"] == 1
    assert NonTensorData(len)([1, 2]) == 2


def test_index_writes_of_non_tensor_values():
    data = TensorDict({}, [1, 4])
    data[0, 0] = TensorDict({"a": 0, "b": "x"}, [])
    # a new entry takes the written value everywhere (tensors: zeros elsewhere)
    assert data["b"] == "x" and data["a"].tolist() == [[0, 0, 0, 0]]
    data[0, 1] = TensorDict({"a": 0, "b": "y"}, [])
    assert data.get("b").tolist() == [["x", "y", "x", "x"]]  # values, not 0-d arrays
    data[0, 2:] = TensorDict({"a": torch.zeros(2, dtype=torch.long), "b": "z"}, [2])
    assert data.get("b").tolist() == [["x", "y", "z", "z"]]


def test_typed_metadata_names_the_expected_type():
    with pytest.raises(TypeError, match=r"Expected data of type int, got str \('a string'\)"):
        MetaData[int]("a string")
    assert MetaData[int](3).data == 3


def test_torch_stack_and_cat_of_leaves():
    t1, t2 = torch.arange(3), torch.arange(4)
    stack = torch.stack([NonTensorData(t1), NonTensorData(t2)])
    assert isinstance(stack, NonTensorStack) and stack.batch_size == (2,)
    assert all(isinstance(v, torch.Tensor) for v in stack.tolist())
    grid = torch.stack([torch.stack([NonTensorData(0), NonTensorData(1)])] * 3)
    assert grid.batch_size == (3, 2) and grid.tolist() == [[0, 1]] * 3
    assert torch.cat([grid, grid], 1).tolist() == [[0, 1, 0, 1]] * 3
    assert torch.stack([grid, grid], -1).batch_size == (3, 2, 2)
    assert [leaf.tolist() for leaf in torch.unbind(grid, 1)] == [[0, 0, 0], [1, 1, 1]]
    assert torch.unsqueeze(grid, 0).batch_size == (1, 3, 2)
    with pytest.raises(ValueError, match=r"one batch size, got \[\[2\], \[\]\]"):
        torch.stack([NonTensorData(0, batch_size=[2]), NonTensorData(1)])


def test_where_picks_non_tensor_values():
    cond = torch.tensor([True, False])
    mine = NonTensorStack(NonTensorData(["a"]), NonTensorData(["a"]))
    theirs = NonTensorStack(NonTensorData(["b"]), NonTensorData(["b"]))
    assert mine.where(cond, theirs).tolist() == [["a"], ["b"]]
    assert mine.where(cond, "z").tolist() == [["a"], "z"]
    td = TensorDict(x=torch.zeros(2), s=NonTensorStack("a", "b"), batch_size=[2])
    other = TensorDict(x=torch.ones(2), s=NonTensorStack("c", "d"), batch_size=[2])
    picked = td.where(cond, other)
    assert picked["s"] == ["a", "d"] and picked["x"].tolist() == [0.0, 1.0]
    assert td.where(cond, 5.0)["s"] == ["a", "b"]  # a number replaces tensors only
    with pytest.raises(RuntimeError, match="bool tensor"):
        mine.where(torch.ones(2), theirs)


def test_comparing_a_tensor_with_a_non_tensor_leaf_gives_a_tensordict():
    values = TensorDict({"n": {"flag": NonTensorData(True), "s": NonTensorData("x")}}, [])
    rebuilt = TensorDict.from_dict(values.to_dict())  # the flag comes back as a tensor
    assert isinstance(rebuilt["n", "flag"], torch.Tensor)
    for result in (rebuilt == values, values == rebuilt, rebuilt != values):
        assert all(not isinstance(v, bool) for v in result.values(True, True))
    assert (rebuilt == values).all() and (values == rebuilt).all()
    assert not (rebuilt != values).any()


def _count_position_tensors(monkeypatch) -> list:
    """Record every index tensor built over a batch's elements (the O(numel) path)."""
    import td_core._leaves.nontensor as nt
    import td_core._leaves.nontensor_arrays as arrays

    calls: list = []
    for module in (nt, arrays):
        monkeypatch.setattr(
            module, "positions", lambda shape: calls.append(shape) or torch.arange(0)
        )
    return calls


def test_shared_value_batch_ops_work_out_shapes_without_the_elements(monkeypatch):
    td = TensorDict({"a": torch.zeros(30, 40, 5), "s": "goodbye"}, [30, 40, 5])
    calls = _count_position_tensors(monkeypatch)
    parts = torch.split(td, [10, 20], 0)
    assert [p["s"] for p in parts] == ["goodbye", "goodbye"]
    assert [p.batch_size for p in parts] == [(10, 40, 5), (20, 40, 5)]
    rows = td.unbind(1)
    assert len(rows) == 40 and rows[3].batch_size == (30, 5) and rows[3]["s"] == "goodbye"
    assert calls == []  # no index tensor over the 6,000 elements


def test_stacking_equal_values_fills_once_and_keeps_the_leaves():
    a = TensorDict({"s": "x"}, [2, 3])
    stacked = torch.stack([a, a, a], 1)
    assert stacked.batch_size == (2, 3, 3)
    assert stacked.get("s").tolist() == [[["x"] * 3] * 3] * 2
    assert stacked.unbind(1)[2]["s"] == "x"
    joined = torch.cat([a, a], 0)
    assert joined.batch_size == (4, 3) and joined.get("s").tolist() == [["x"] * 3] * 4
    mixed = torch.stack([a, TensorDict({"s": "y"}, [2, 3])], 0)
    assert mixed.get("s").tolist() == [[["x"] * 3] * 2, [["y"] * 3] * 2]


def test_non_tensor_leaves_report_no_data_address():
    td = TensorDict({"a": torch.zeros(2), "s": "x", "v": NonTensorStack("p", "q")}, [2])
    out = TensorDict({"a": torch.ones(2), "s": "y", "v": NonTensorStack("r", "t")}, [2])
    before = {v.data_ptr() for v in out.values(True, True)}
    torch.stack([td[0], td[1]], 0, out=out)
    # storages of the tensors are kept; non-tensor leaves count as holding none
    assert {v.data_ptr() for v in out.values(True, True)} == before
    assert td.get("s").data_ptr() == td.get("v").data_ptr() == 0


def test_joining_equal_values_stores_the_value_once(monkeypatch):
    td = TensorDict({"a": torch.zeros(30, 40, 5), "s": "goodbye"}, [30, 40, 5])
    calls = _count_position_tensors(monkeypatch)
    full = np.empty
    monkeypatch.setattr(np, "empty", lambda *a, **k: calls.append("array") or full(*a, **k))
    stacked = torch.stack([td, td, td], 0)
    joined = torch.cat([td, td], 0)
    again = torch.stack([stacked.get("s"), stacked.get("s")], 1)  # a stack of stacks too
    assert isinstance(stacked.get("s"), NonTensorStack) and stacked.batch_size == (3, 30, 40, 5)
    assert joined.get("s").batch_size == (60, 40, 5) and again.batch_size == (3, 2, 30, 40, 5)
    # splitting, unbinding, reshaping and moving keep it one value
    assert [p.get("s").batch_size for p in torch.split(stacked, [1, 2], 0)] == [
        (1, 30, 40, 5),
        (2, 30, 40, 5),
    ]
    assert stacked.unbind(0)[1]["s"] == "goodbye"  # each stacked leaf comes back
    assert stacked[2].get("s") is td.get("s")
    assert stacked[:, 3].get("s").batch_size == (3, 40, 5)
    assert stacked.reshape(-1).get("s").batch_size == (3 * 30 * 40 * 5,)
    assert stacked.to("cpu").clone().get("s").batch_size == (3, 30, 40, 5)
    assert joined.unbind(2)[4].get("s").batch_size == (60, 40)
    assert calls == []  # neither an index tensor nor an object array over the elements


def test_a_stack_stored_as_one_value_reads_and_compares_as_every_value():
    a = NonTensorData("x", [2, 3])
    stacked = torch.stack([a, a], -1)  # a negative dim counts from the end of the result
    assert stacked.batch_size == (2, 3, 2) and stacked[..., 1] is a
    assert stacked.tolist() == [[["x", "x"]] * 3] * 2
    assert stacked == NonTensorStack(np.full((2, 3, 2), "x", dtype=object))
    assert stacked != torch.stack([NonTensorData("y", [2, 3])] * 2, -1)
    back = pickle.loads(pickle.dumps(stacked))
    assert back == stacked and back.tolist() == stacked.tolist()
    assert stacked.flip([0]).tolist() == stacked.tolist()
    changed = TensorDict({"s": stacked}, [2, 3, 2])
    changed[0, 1, 1] = TensorDict({"s": "y"}, [])
    assert changed.get("s").tolist()[0][1] == ["x", "y"]
    assert changed.get("s").tolist()[1][1] == ["x", "x"]


def test_writing_one_element_of_a_stack_stores_the_value_not_an_array():
    td = TensorDict({"a": torch.zeros(3, 4), "s": "hi"}, [3, 4])
    stacked = torch.stack([td, td.clone()], 0)
    stacked[0, 0, 0] = TensorDict({"a": torch.ones(()), "s": "changed"}, [])
    first = stacked.get("s").tolist()[0][0]
    assert first[:2] == ["changed", "hi"] and type(first[0]) is str  # not a 0-d object array
    assert type(stacked[0, 0, 0]["s"]) is str


def test_non_tensor_data_has_an_instance_dict_without_its_value():
    # code written for upstream (where the leaf is a dataclass) reads `leaf.__dict__`
    leaf = NonTensorData("value", batch_size=[2])
    assert "data" not in leaf.__dict__ and "data" not in vars(leaf)
    assert leaf.data == "value"
    leaf.data = "other"
    assert leaf.data == "other" and "data" not in vars(leaf)
    assert pickle.loads(pickle.dumps(leaf)) == leaf


def test_a_stack_may_have_dims_past_the_batch_size():
    td = TensorDict(a=NonTensorStack("a", "b").unsqueeze(-1), batch_size=[2])
    assert td.get("a").batch_size == (2, 1)
    assert td[1]["a"] == ["b"]
    assert td.unsqueeze(0).get("a").batch_size == (1, 2, 1)
    empty = TensorDict()
    empty["out"] = NonTensorStack(1, 2)
    assert empty["out"] == [1, 2] and empty.batch_size == ()
    with pytest.raises(RuntimeError, match="'c'"):
        td["c"] = NonTensorStack("x", "y", "z")  # must start with the batch size [2]
    assert "c" not in td


@pytest.mark.parametrize("name", ["new_zeros", "new_empty", "new_ones"])
def test_new_constructors_fill_a_stack_with_its_first_value(name):
    td = TensorDict(a=NonTensorStack("x", "y", "z").unsqueeze(-1), b=torch.ones(3), batch_size=[3])
    out = getattr(td, name)(5)
    assert out.get("a").batch_size == (5, 1)
    assert out["a"] == [["x"]] * 5
    none = TensorDict(a=NonTensorStack(batch_size=[0]), batch_size=[0])
    assert getattr(none, name)(2)["a"] == [None, None]


def test_from_dict_infers_the_batch_size_from_a_list_of_values():
    td = TensorDict.from_dict(
        {"q": ["s1", "s2", "s3"], "n": {"r": [["a"], ["b"], ["c"]]}}, auto_batch_size=True
    )
    assert td.batch_size == (3,) and td["q"] == ["s1", "s2", "s3"]
    assert td.get(("n", "r")).batch_size == (3, 1)
    assert TensorDict.from_dict({"q": ["s1", "s2"]}, batch_dims=1).batch_size == (2,)
    # with a batch size given, a list that does not run along it stays one value
    assert TensorDict.from_dict({"q": ["s1", "s2"]}, batch_size=[])["q"] == ["s1", "s2"]


def test_a_list_set_at_batch_size_empty_stays_one_value_when_nested_deeper():
    # upstream stacks it ([2, 2]) and then hands one string to each element (migration page)
    inner = TensorDict(k=[["a", "b"], ["c", "d"]])
    assert isinstance(inner.get("k"), NonTensorData)
    outer = TensorDict(x=inner, batch_size=[2, 2])
    assert outer[1, 0]["x", "k"] == [["a", "b"], ["c", "d"]]
    per_element = TensorDict(k=NonTensorStack.from_list([["a", "b"], ["c", "d"]]))
    assert TensorDict(x=per_element, batch_size=[2, 2])[1, 0]["x", "k"] == "c"


def test_where_writes_into_out():
    mine, theirs = NonTensorStack("a", "b"), NonTensorStack("x", "y")
    out = NonTensorStack("-", "-")
    result = mine.where(torch.tensor([True, False]), theirs, out=out, pad=0)
    assert result is out and out.tolist() == ["a", "y"]
    one = NonTensorData("-", batch_size=[2])
    same = NonTensorStack("a", "a")
    assert same.where(torch.tensor([True, True]), theirs, out=one) is one
    assert one.data == "a" and one.batch_size == (2,)


def test_where_out_that_cannot_hold_the_result_changes_nothing():
    mine, theirs = NonTensorStack("a", "b"), NonTensorStack("x", "y")
    one = NonTensorData("-", batch_size=[2])
    with pytest.raises(TypeError, match="several values"):
        mine.where(torch.tensor([True, False]), theirs, out=one)
    assert one.data == "-"
    short = NonTensorStack("-", "-", "-")
    with pytest.raises(ValueError, match=r"batch_size \[3\]"):
        mine.where(torch.tensor([True, False]), theirs, out=short)
    assert short.tolist() == ["-"] * 3
    with pytest.raises(TypeError, match="non-tensor leaf"):
        mine.where(torch.tensor([True, False]), theirs, out=torch.zeros(2))


def test_a_stack_of_one_repeated_value_equals_that_value_leaf():
    assert NonTensorStack(3, 3) == NonTensorData(3, batch_size=[2])
    assert NonTensorData(3, batch_size=[2]) == NonTensorStack(3, 3)
    assert NonTensorStack(3, 4) != NonTensorData(3, batch_size=[2])
    assert NonTensorStack(3, 3) != NonTensorData(3, batch_size=[1, 2])


def test_an_indexed_write_of_a_row_writes_an_unbatched_entry_whole() -> None:
    td = TensorDict(a=torch.zeros(4), batch_size=[4])
    td.set("table", UnbatchedTensor(torch.zeros(2, 3)))
    row = td[0].clone()
    row["a"], row["table"] = torch.tensor(5.0), UnbatchedTensor(torch.ones(2, 3))
    td[0] = row  # a row holds all of the entry, as upstream
    assert td["a"].tolist() == [5.0, 0.0, 0.0, 0.0] and td["table"].eq(1).all()
    assert isinstance(td.get("table"), UnbatchedTensor)
    bad = td[1].clone()
    bad["a"], bad["table"] = torch.tensor(7.0), UnbatchedTensor(torch.ones(3, 3))
    with pytest.raises(RuntimeError, match=r"'table'.*\[2, 3\]"):
        td[1] = bad
    assert td["a"][1].item() == 0.0  # refused before anything is written
