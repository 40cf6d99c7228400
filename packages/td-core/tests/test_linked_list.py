"""`LinkedList`: what td does beyond the contract cases (refusals, copies, rows, pytree)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.utils._pytree as pytree

from td_core import LinkedList, NonTensorData, NonTensorStack, TensorDict, tensorclass


def _names() -> TensorDict:
    td = TensorDict({"x": torch.arange(3)}, [3])
    td["names"] = ["a", "b", "c"]
    return td


def test_a_wrong_length_slice_raises_and_changes_nothing() -> None:
    td = _names()
    values = td["names"]
    with pytest.raises(ValueError, match=r"2 elements of the values of entry 'names'"):
        values[0:2] = ["only one"]
    assert values == ["a", "b", "c"] and td["names"] == ["a", "b", "c"]


def test_a_refused_write_leaves_the_list_as_it_was() -> None:
    td = _names()
    values = td["names"]
    del td["names"]
    with pytest.raises(KeyError, match="names"):
        values[0] = "z"
    assert values == ["a", "b", "c"]


def test_an_index_past_the_end_raises_index_error_before_writing() -> None:
    td = _names()
    with pytest.raises(IndexError):
        td["names"][3] = "z"
    assert td["names"] == ["a", "b", "c"]


def test_sort_and_reverse_write_the_new_order_back() -> None:
    td = TensorDict(batch_size=[3])
    td["names"] = ["b", "c", "a"]
    values = td["names"]
    values.sort()
    assert td["names"] == ["a", "b", "c"]
    values.reverse()
    assert td["names"] == ["c", "b", "a"] and values == ["c", "b", "a"]


@pytest.mark.parametrize(
    "unlink",
    [
        lambda v: v.append("d"),
        lambda v: v.extend(["d"]),
        lambda v: v.insert(0, "d"),
        lambda v: v.pop(),
        lambda v: v.remove("a"),
        lambda v: v.clear(),
        lambda v: v.__delitem__(0),
        lambda v: v.__iadd__(["d"]),
        lambda v: v.__imul__(2),
    ],
    ids=["append", "extend", "insert", "pop", "remove", "clear", "del", "iadd", "imul"],
)
def test_changing_the_length_unlinks(unlink) -> None:
    td = _names()
    values = td["names"]
    unlink(values)
    if values:
        values[0] = "unlinked"
        assert values[0] == "unlinked"
    assert td["names"] == ["a", "b", "c"]


def test_copies_and_pickles_are_unlinked_lists_of_the_items() -> None:
    td = _names()
    values = td["names"]
    for other in (copy.copy(values), copy.deepcopy(values), pickle.loads(pickle.dumps(values))):
        assert type(other) is LinkedList and other == ["a", "b", "c"]
        other[0] = "z"
        assert td["names"] == ["a", "b", "c"]


def test_repr_and_tolist() -> None:
    td = TensorDict(batch_size=[2, 2])
    td["names"] = [["a", "b"], ["c", "d"]]
    values = td["names"]
    assert repr(values) == "LinkedList([LinkedList(['a', 'b']), LinkedList(['c', 'd'])])"
    plain = values.tolist()
    assert plain == [["a", "b"], ["c", "d"]] and all(type(row) is list for row in plain)
    assert type(plain) is list


def test_an_outer_row_written_back_is_linked_too() -> None:
    td = TensorDict(batch_size=[2, 2])
    td["names"] = [["a", "b"], ["c", "d"]]
    values = td["names"]
    values[1] = ["x", "y"]
    assert isinstance(values[1], LinkedList)
    values[1][0] = "q"
    assert td["names"] == [["a", "b"], ["q", "y"]]
    with pytest.raises(ValueError, match=r"cannot assign 3 items to 2 elements"):
        values[0] = ["1", "2", "3"]
    assert td["names"] == [["a", "b"], ["q", "y"]]


def test_a_list_value_is_one_element() -> None:
    td = _names()
    td["names"][1] = ["a", "list"]
    assert td.get("names").tolist() == ["a", ["a", "list"], "c"]


def test_a_bare_leaf_list_refuses_assignment() -> None:
    stack = NonTensorStack("a", "b")
    values = stack.tolist(as_linked_list=True)
    assert type(values) is LinkedList and values == ["a", "b"]
    with pytest.raises(TypeError, match="bare NonTensorStack"):
        values[0] = "z"
    assert values == ["a", "b"] and stack.tolist() == ["a", "b"]
    assert LinkedList(["a"]) == ["a"]  # built from items: a plain, unlinked list
    free = LinkedList(["a"])
    free[0] = "b"
    assert free == ["b"]


def test_tensorclass_fields_write_back() -> None:
    @tensorclass
    class Batch:
        x: torch.Tensor
        labels: list

    batch = Batch(x=torch.zeros(2), labels=["a", "b"], batch_size=[2])
    batch.labels[1] = "z"
    assert batch.labels == ["a", "z"] and batch.get("labels") == ["a", "z"]


def test_rows_of_tolist_write_back() -> None:
    td = TensorDict({"a": torch.zeros(2, 2)}, [2])
    rows = td.tolist(as_linked_list=True)
    rows[0] = {"a": torch.ones(2)}
    assert td["a"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
    rows[:] = [{"a": torch.full((2,), 2.0)}, {"a": torch.full((2,), 3.0)}]
    assert td["a"].tolist() == [[2.0, 2.0], [3.0, 3.0]]
    with pytest.raises(RuntimeError):
        rows[1] = {"a": torch.ones(3)}
    assert td["a"].tolist() == [[2.0, 2.0], [3.0, 3.0]]
    assert type(td.tolist()) is list  # plain unless asked


def test_a_sub_view_adds_a_stack_with_none_elsewhere() -> None:
    source = TensorDict({"x": torch.zeros(3, 2)}, [3, 2])
    view = source._get_sub_tensordict(1)
    view.set("names", ["a", "b"])
    view["names"][0] = "z"
    assert source.get("names").tolist() == [[None, None], ["z", "b"], [None, None]]


def test_pytree_flattens_it_as_a_list() -> None:
    values = _names()["names"]
    leaves, spec = pytree.tree_flatten(values)
    assert leaves == ["a", "b", "c"]
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert type(rebuilt) is LinkedList and rebuilt == values


def test_maybe_to_stack() -> None:
    stack = NonTensorData("a", batch_size=[2]).maybe_to_stack()
    assert type(stack) is NonTensorStack and stack.tolist() == ["a", "a"]
    one = NonTensorData("a")
    assert one.maybe_to_stack() is one and stack.maybe_to_stack() is stack
