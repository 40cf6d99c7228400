"""Reading and writing entries: get/set/set_/setdefault/pop/del/in, nested keys, key views."""

import pytest
import torch

from td_core import TensorDict, TensorDictParams, lazy_stack


def make_td():
    return TensorDict(
        {
            "a": torch.arange(6.0).reshape(3, 2),
            "b": {"c": torch.ones(3), "d": {"e": torch.zeros(3, 4, dtype=torch.int64)}},
        },
        batch_size=[3],
    )


LEAVES = {"a", ("b", "c"), ("b", "d", "e")}
NODES = {"b", ("b", "d")}


def test_getitem_and_get_agree():
    td = make_td()
    assert td["a"] is td.get("a")
    assert td["b", "c"] is td.get(("b", "c"))
    assert td[("b", "d", "e")] is td.get(("b", "d", "e"))
    assert td["b", "d", "e"] is td["b"]["d"]["e"]


@pytest.mark.parametrize("default", [None, 0, "x", torch.zeros(1)])
def test_get_default_for_missing_key(default):
    td = make_td()
    assert td.get("missing", default) is default
    assert td.get(("b", "missing"), default) is default
    assert td.get(("missing", "deeper"), default) is default


def test_get_default_keyword():
    td = make_td()
    assert td.get("missing", default=7) == 7


@pytest.mark.parametrize(
    "key",
    [
        ("b", "d", "e"),
        ("b", ("d", "e")),
        ("b", ("d", ("e",))),
        (("b",), "d", (("e",),)),
        ((("b", "d"), "e"),),
    ],
)
def test_nested_tuples_are_unravelled(key):
    td = make_td()
    assert td[key] is td["b", "d", "e"]
    assert td.get(key) is td["b", "d", "e"]
    assert key in td.keys(include_nested=True)
    td[key] = torch.ones(3, 4, dtype=torch.int64)
    assert torch.equal(td["b", "d", "e"], torch.ones(3, 4, dtype=torch.int64))


def test_single_element_tuple_is_plain_key():
    td = make_td()
    assert td[("a",)] is td["a"]
    td[("f",)] = torch.zeros(3)
    assert "f" in td.keys()


def test_set_new_and_overwrite():
    td = make_td()
    old = td["a"]
    out = td.set("a", torch.full((3, 2), 5.0))
    assert out is td
    assert torch.equal(td["a"], torch.full((3, 2), 5.0))
    # plain set replaces the entry: the old tensor is untouched
    assert torch.equal(old, torch.arange(6.0).reshape(3, 2))
    td.set("new", torch.zeros(3, 7))
    assert td["new"].shape == torch.Size([3, 7])


def test_setitem_string_key():
    td = make_td()
    td["x"] = torch.ones(3, 1)
    assert torch.equal(td["x"], torch.ones(3, 1))


def test_set_nested_creates_intermediate_tensordicts():
    td = TensorDict({}, [2, 3])
    td["x", "y", "z"] = torch.zeros(2, 3, 4)
    assert isinstance(td["x"], TensorDict)
    assert isinstance(td["x", "y"], TensorDict)
    assert td["x"].batch_size == torch.Size([2, 3])
    assert td["x", "y"].batch_size == torch.Size([2, 3])
    assert td["x", "y", "z"].shape == torch.Size([2, 3, 4])


def test_set_nested_in_existing_subtree():
    td = make_td()
    td.set(("b", "new"), torch.full((3,), 2.0))
    assert torch.equal(td["b"]["new"], torch.full((3,), 2.0))
    assert "new" in td["b"].keys()


def test_set_tensordict_value():
    td = make_td()
    sub = TensorDict({"q": torch.zeros(3, 2)}, [3])
    td["sub"] = sub
    assert isinstance(td["sub"], TensorDict)
    assert torch.equal(td["sub", "q"], torch.zeros(3, 2))


def test_set_plain_dict_value_becomes_tensordict():
    td = make_td()
    td["sub"] = {"q": torch.zeros(3, 2)}
    assert isinstance(td["sub"], TensorDict)
    assert td["sub"].batch_size == torch.Size([3])


def test_set_underscore_writes_in_place():
    td = make_td()
    old = td["a"]
    out = td.set_("a", torch.full((3, 2), 9.0))
    assert out is td
    assert td["a"] is old
    assert torch.equal(old, torch.full((3, 2), 9.0))


def test_set_underscore_nested_in_place():
    td = make_td()
    old = td["b", "d", "e"]
    td.set_(("b", "d", "e"), torch.full((3, 4), 3, dtype=torch.int64))
    assert td["b", "d", "e"] is old
    assert (old == 3).all()


def test_set_underscore_missing_key_raises_and_names_it():
    td = make_td()
    with pytest.raises(KeyError, match="missing"):
        td.set_("missing", torch.zeros(3))
    assert "missing" not in td.keys()


def test_set_inplace_true_is_fault_tolerant():
    td = make_td()
    old = td["a"]
    td.set("a", torch.full((3, 2), 4.0), inplace=True)
    assert td["a"] is old
    assert torch.equal(old, torch.full((3, 2), 4.0))
    # missing key: written as a new entry instead of raising
    td.set("fresh", torch.ones(3), inplace=True)
    assert torch.equal(td["fresh"], torch.ones(3))


def test_set_inplace_casts_to_existing_dtype():
    td = make_td()
    old = td["b", "d", "e"]
    td.set_(("b", "d", "e"), torch.full((3, 4), 2.0))
    assert old.dtype == torch.int64
    assert (td["b", "d", "e"] == 2).all()


def test_setdefault():
    td = make_td()
    value = torch.full((3,), 8.0)
    got = td.setdefault("s", value)
    assert torch.equal(got, value)
    assert torch.equal(td["s"], value)
    again = td.setdefault("s", torch.zeros(3))
    assert torch.equal(again, value)
    assert torch.equal(td["s"], value)
    existing = td.setdefault("a", torch.zeros(3, 2))
    assert existing is td["a"]
    assert torch.equal(td["a"], torch.arange(6.0).reshape(3, 2))


def test_pop():
    td = make_td()
    a = td["a"]
    popped = td.pop("a")
    assert popped is a
    assert "a" not in td.keys()
    assert td.pop("a", "default") == "default"
    with pytest.raises(KeyError, match="a"):
        td.pop("a")


def test_pop_nested():
    td = make_td()
    c = td["b", "c"]
    assert td.pop(("b", "c")) is c
    assert ("b", "c") not in td.keys(include_nested=True)
    assert "d" in td["b"].keys()


def test_delitem():
    td = make_td()
    del td["a"]
    assert "a" not in td.keys()
    del td["b", "d", "e"]
    assert ("b", "d", "e") not in td.keys(include_nested=True)
    assert ("b", "d") in td.keys(include_nested=True)
    del td["b"]
    assert list(td.keys()) == []


def test_del_method():
    td = make_td()
    out = td.del_("a")
    assert out is td
    assert "a" not in td.keys()


def test_contains():
    td = make_td()
    assert "a" in td
    assert "b" in td
    assert ("b", "c") in td
    assert "missing" not in td
    assert ("b", "missing") not in td


def test_len_is_first_batch_dim():
    assert len(make_td()) == 3
    assert len(TensorDict({}, [5, 2])) == 5


def test_keys_top_level_in_insertion_order():
    td = TensorDict({"z": torch.zeros(2), "a": torch.zeros(2), "m": {"x": torch.zeros(2)}}, [2])
    assert list(td.keys()) == ["z", "a", "m"]
    assert len(td.keys()) == 3


@pytest.mark.parametrize("include_nested", [False, True])
@pytest.mark.parametrize("leaves_only", [False, True])
@pytest.mark.parametrize("is_leaf", [None, lambda cls: True], ids=["default", "custom"])
def test_len_of_keys_counts_what_iteration_gives(include_nested, leaves_only, is_leaf):
    td = TensorDict(
        {"a": torch.zeros(2), "n": {"b": torch.zeros(2), "m": {"c": torch.zeros(2)}, "e": {}}},
        [2],
    )
    td["s"] = "text"
    td["n", "t"] = "more"
    view = td.keys(include_nested=include_nested, leaves_only=leaves_only, is_leaf=is_leaf)
    assert len(view) == sum(1 for _ in view)


def test_keys_include_nested():
    td = make_td()
    keys = list(td.keys(include_nested=True))
    assert len(keys) == len(LEAVES | NODES)
    assert set(keys) == LEAVES | NODES


def test_keys_leaves_only():
    td = make_td()
    assert set(td.keys(include_nested=True, leaves_only=True)) == LEAVES
    assert set(td.keys(leaves_only=True)) == {"a"}
    assert set(td.keys(True, True)) == LEAVES


def test_keys_is_leaf_filters_leaves_only():
    td = make_td()
    # is_leaf decides what counts as a leaf for leaves_only; the walk still goes into subtrees
    everything = set(td.keys(include_nested=True, leaves_only=True, is_leaf=lambda _: True))
    assert everything == LEAVES | NODES
    nothing = list(td.keys(include_nested=True, leaves_only=True, is_leaf=lambda _: False))
    assert nothing == []


def test_keys_membership():
    td = make_td()
    nested = td.keys(include_nested=True)
    assert ("b", "c") in nested
    assert ("b", "d", "e") in nested
    assert ("b",) in nested
    assert "b" in nested
    assert ("b", "missing") not in nested
    with pytest.raises(TypeError, match="include_nested=True"):  # as upstream
        ("b", "c") in td.keys()  # noqa: B015
    assert ("b", "d", "e") in td.keys(include_nested=True, leaves_only=True)


def test_values_and_items():
    td = make_td()
    values = list(td.values())
    assert len(values) == 2
    assert values[0] is td["a"]
    assert isinstance(values[1], TensorDict)
    items = dict(td.items(include_nested=True, leaves_only=True))
    assert set(items) == LEAVES
    for key, value in items.items():
        assert value is td[key]
    leaf_values = list(td.values(include_nested=True, leaves_only=True))
    assert all(isinstance(v, torch.Tensor) for v in leaf_values)
    assert len(leaf_values) == 3


def test_items_top_level():
    td = make_td()
    items = dict(td.items())
    assert set(items) == {"a", "b"}
    assert items["a"] is td["a"]


def test_non_tensor_value_round_trip():
    td = TensorDict({"a-tensor": torch.randn(1, 2)}, batch_size=[1, 2])
    td["non-tensor"] = "a string!"
    assert td["non-tensor"] == "a string!"
    assert "non-tensor" in td.keys()


def test_non_tensor_value_survives_index_and_clone():
    td = TensorDict({"x": torch.zeros(4)}, [4])
    td["meta"] = "payload"
    assert td[1:3]["meta"] == "payload"
    assert td[0]["meta"] == "payload"
    assert td.clone()["meta"] == "payload"


def test_nested_non_tensor_value():
    td = TensorDict({}, [2])
    td["n", "s"] = "deep"
    assert td["n", "s"] == "deep"


def test_get_through_leaf_raises():
    td = make_td()
    with pytest.raises((KeyError, ValueError), match="zz"):
        td["a", "zz"]


@pytest.mark.parametrize("kind", ["dense", "lazy", "params"])
def test_set_sub_tensordict_with_a_shorter_batch_size_takes_the_parents(kind):
    td = TensorDict({"a": torch.zeros(4, 3)}, [4, 3])
    if kind == "lazy":
        td = lazy_stack(list(td.unbind(0)), 0)
    elif kind == "params":
        td = TensorDictParams(td, no_convert=True)
    inner = TensorDict({"x": torch.randn(4, 3, 2)}, [])
    td["inner"] = inner
    assert td["inner"].batch_size == (4, 3) and inner.batch_size == ()  # a copy, widened
    assert torch.equal(td["inner", "x"], inner["x"])
    with pytest.raises(RuntimeError, match=r"batch_size \[\] must start with"):
        td["bad"] = TensorDict({"x": torch.randn(5, 2)}, [])
    assert "bad" not in td.keys()
