"""Key structure: select/exclude/split, flatten/unflatten keys, rename, update, empty, lock,
dict and state-dict round trips."""

import re
from collections.abc import Mapping, MutableMapping

import numpy as np
import pytest
import torch

from td_core import TensorDict, TensorDictParams, lazy_stack


def make_td():
    return TensorDict(
        {
            "a": torch.arange(3.0),
            "n": {"b": torch.ones(3), "c": torch.ones(3, 2), "deep": {"d": torch.zeros(3, 4)}},
            "z": torch.zeros(3, dtype=torch.int64),
        },
        batch_size=[3],
    )


ALL_LEAVES = {"a", ("n", "b"), ("n", "c"), ("n", "deep", "d"), "z"}


def leaves(td):
    return set(td.keys(include_nested=True, leaves_only=True))


# ---------------------------------------------------------------- select / exclude / split


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["a"], {"a"}),
        (["a", "z"], {"a", "z"}),
        ([("n", "b")], {("n", "b")}),
        ([("n", "deep", "d"), "a"], {("n", "deep", "d"), "a"}),
        (["n"], {("n", "b"), ("n", "c"), ("n", "deep", "d")}),
        ([], set()),
    ],
)
def test_select(keys, expected):
    td = make_td()
    out = td.select(*keys)
    assert leaves(out) == expected
    assert out.batch_size == td.batch_size
    for key in expected:
        assert out[key] is td[key]
    assert leaves(td) == ALL_LEAVES


def test_select_non_strict_skips_missing():
    out = make_td().select("a", "missing", strict=False)
    assert leaves(out) == {"a"}


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["a"], ALL_LEAVES - {"a"}),
        ([("n", "b"), "z"], ALL_LEAVES - {("n", "b"), "z"}),
        (["n"], {"a", "z"}),
        ([("n", "deep")], ALL_LEAVES - {("n", "deep", "d")}),
        (["missing"], ALL_LEAVES),
    ],
)
def test_exclude(keys, expected):
    td = make_td()
    out = td.exclude(*keys)
    assert leaves(out) == expected
    assert leaves(td) == ALL_LEAVES


def test_split_keys():
    td = make_td()
    first, rest = td.split_keys(["a", ("n", "b")])
    assert leaves(first) == {"a", ("n", "b")}
    assert leaves(rest) == ALL_LEAVES - {"a", ("n", "b")}
    assert first.batch_size == rest.batch_size == td.batch_size
    assert first["a"] is td["a"]


def test_split_keys_several_groups():
    td = make_td()
    g1, g2, rest = td.split_keys(["a"], ["z"])
    assert leaves(g1) == {"a"}
    assert leaves(g2) == {"z"}
    assert leaves(rest) == ALL_LEAVES - {"a", "z"}


# ---------------------------------------------------------------- flatten / unflatten keys


@pytest.mark.parametrize("separator", [".", "/", "__"])
def test_flatten_unflatten_keys(separator):
    td = make_td()
    flat = td.flatten_keys(separator)
    expected = {
        "a",
        f"n{separator}b",
        f"n{separator}c",
        f"n{separator}deep{separator}d",
        "z",
    }
    assert set(flat.keys()) == expected
    assert set(flat.keys(include_nested=True)) == expected
    assert flat[f"n{separator}deep{separator}d"] is td["n", "deep", "d"]
    back = flat.unflatten_keys(separator)
    assert leaves(back) == ALL_LEAVES
    assert isinstance(back["n", "deep"], TensorDict)
    assert back["n"].batch_size == td.batch_size
    for key in ALL_LEAVES:
        assert torch.equal(back[key], td[key])


def test_flatten_keys_default_separator_is_dot():
    assert set(make_td().flatten_keys().keys()) == {"a", "n.b", "n.c", "n.deep.d", "z"}


def test_flatten_keys_keyword_separator():
    assert "n-b" in make_td().flatten_keys(separator="-").keys()


def test_unflatten_keys_from_state_dict_like_source():
    td = TensorDict(
        {"0.weight": torch.zeros(4, 3), "0.bias": torch.zeros(4), "1.bias": torch.zeros(2)}, []
    )
    out = td.unflatten_keys(".")
    assert leaves(out) == {("0", "weight"), ("0", "bias"), ("1", "bias")}


# ---------------------------------------------------------------- rename


def test_rename_key_():
    td = make_td()
    a = td["a"]
    out = td.rename_key_("a", "A")
    assert out is td
    assert "a" not in td.keys()
    assert td["A"] is a


def test_rename_nested_key():
    td = make_td()
    b = td["n", "b"]
    td.rename_key_(("n", "b"), ("n", "B"))
    assert td["n", "B"] is b
    assert ("n", "b") not in td.keys(include_nested=True)
    td.rename_key_(("n", "B"), "top")
    assert td["top"] is b
    assert "B" not in td["n"].keys()


# ---------------------------------------------------------------- update


def test_update_from_dict_merges_nested():
    td = make_td()
    c = td["n", "c"]
    out = td.update({"a": torch.ones(3), "n": {"q": torch.full((3,), 2.0)}, "new": torch.zeros(3)})
    assert out is td
    assert torch.equal(td["a"], torch.ones(3))
    assert torch.equal(td["n", "q"], torch.full((3,), 2.0))
    # the nested tensordict is merged into, not replaced
    assert td["n", "c"] is c
    assert leaves(td) == ALL_LEAVES | {("n", "q"), "new"}


def test_update_from_tensordict_is_not_in_place():
    td = make_td()
    a = td["a"]
    td.update(TensorDict({"a": torch.full((3,), 7.0)}, [3]))
    assert torch.equal(td["a"], torch.full((3,), 7.0))
    assert torch.equal(a, torch.arange(3.0))


def test_update_in_place():
    td = make_td()
    a = td["a"]
    d = td["n", "deep", "d"]
    out = td.update_({"a": torch.full((3,), 5.0), "n": {"deep": {"d": torch.ones(3, 4)}}})
    assert out is td
    assert td["a"] is a
    assert torch.equal(a, torch.full((3,), 5.0))
    assert td["n", "deep", "d"] is d
    assert (d == 1).all()


def test_update_in_place_from_tensordict():
    td = make_td()
    z = td["z"]
    td.update_(TensorDict({"z": torch.full((3,), 4, dtype=torch.int64)}, [3]))
    assert td["z"] is z
    assert (z == 4).all()


def test_update_in_place_missing_key_names_it():
    td = make_td()
    with pytest.raises(KeyError, match="missing"):
        td.update_({"missing": torch.ones(3)})


# ---------------------------------------------------------------- empty


def test_empty_keeps_batch_and_device():
    td = TensorDict({"a": torch.zeros(3, 2), "n": {"b": torch.zeros(3)}}, [3], device="meta")
    out = td.empty()
    assert out.batch_size == torch.Size([3])
    assert out.device == torch.device("meta")
    assert list(out.keys()) == []
    assert out.is_empty()
    assert not td.is_empty()
    assert leaves(td) == {"a", ("n", "b")}


def test_empty_recurse_keeps_nested_structure():
    td = make_td()
    out = td.empty(recurse=True)
    assert leaves(out) == set()
    assert isinstance(out["n"], TensorDict)
    assert isinstance(out["n", "deep"], TensorDict)
    assert out["n"].batch_size == torch.Size([3])
    assert out.is_empty()


# ---------------------------------------------------------------- lock


def test_lock_and_unlock():
    td = make_td()
    assert not td.is_locked
    assert td.lock_() is td
    assert td.is_locked
    assert td["n"].is_locked
    assert td["n", "deep"].is_locked
    assert td.unlock_() is td
    assert not td.is_locked
    assert not td["n"].is_locked
    td["new"] = torch.zeros(3)
    assert "new" in td.keys()


def write_new(td):
    td["new"] = torch.zeros(3)


def overwrite(td):
    td["a"] = torch.ones(3)


def set_method(td):
    td.set("a", torch.ones(3))


def write_nested(td):
    td["n", "new"] = torch.zeros(3)


def delete(td):
    del td["a"]


def pop(td):
    td.pop("a")


def rename(td):
    td.rename_key_("a", "A")


def update(td):
    td.update({"a": torch.ones(3), "new": torch.zeros(3)})


def write_in_subtree(td):
    td["n"]["new"] = torch.zeros(3)


LOCKED_WRITES = [
    write_new,
    overwrite,
    set_method,
    write_nested,
    delete,
    pop,
    rename,
    update,
    write_in_subtree,
]


@pytest.mark.parametrize("write", LOCKED_WRITES, ids=[f.__name__ for f in LOCKED_WRITES])
def test_locked_writes_raise_and_change_nothing(write):
    td = make_td().lock_()
    before = td.clone()
    with pytest.raises(RuntimeError):
        write(td)
    assert leaves(td) == ALL_LEAVES
    for key in ALL_LEAVES:
        assert torch.equal(td[key], before[key]), key
    assert td.is_locked


def test_locked_allows_in_place_writes():
    td = make_td().lock_()
    a = td["a"]
    td.set_("a", torch.full((3,), 9.0))
    td[0] = td[0].clone().zero_()
    assert td["a"] is a
    assert torch.equal(a, torch.tensor([0.0, 9.0, 9.0]))


def test_lock_is_not_inherited_by_results():
    td = make_td().lock_()
    assert not td.clone().is_locked
    assert not td.apply(lambda x: x + 1).is_locked


# ---------------------------------------------------------------- dict round trips


def test_to_dict():
    td = make_td()
    d = td.to_dict()
    assert type(d) is dict
    assert set(d) == {"a", "n", "z"}
    assert type(d["n"]) is dict
    assert type(d["n"]["deep"]) is dict
    assert torch.equal(d["n"]["deep"]["d"], td["n", "deep", "d"])


def test_to_dict_from_dict_round_trip():
    td = make_td()
    back = TensorDict.from_dict(td.to_dict(), batch_size=td.batch_size)
    assert back.batch_size == td.batch_size
    assert leaves(back) == ALL_LEAVES
    for key in ALL_LEAVES:
        assert torch.equal(back[key], td[key])


def test_state_dict_round_trip():
    td = make_td()
    sd = td.state_dict()
    assert set(sd) >= {"a", "n.b", "n.c", "n.deep.d", "z"}
    target = td.clone().zero_()
    out = target.load_state_dict(sd)
    assert out is target
    for key in ALL_LEAVES:
        assert torch.equal(target[key], td[key])


def test_load_state_dict_rejects_mismatched_keys():
    td = make_td()
    sd = td.state_dict()
    sd["extra"] = torch.zeros(3)
    with pytest.raises((KeyError, RuntimeError), match="extra"):
        td.clone().load_state_dict(sd)


def test_numpy_values_set_and_update():
    td = make_td()
    td["np"] = np.ones((3, 2), dtype=np.float32)
    assert isinstance(td["np"], torch.Tensor)
    assert td["np"].dtype == torch.float32
    td.update({"np2": np.zeros(3, dtype=np.int64)})
    assert td["np2"].dtype == torch.int64


def test_update_inplace_copies_non_tensor_values():
    td = TensorDict({"a": torch.zeros(2), "s": "old"}, [2])
    td.update_(TensorDict({"a": torch.ones(2), "s": "new"}, [2]))
    assert td["s"] == "new" and torch.equal(td["a"], torch.ones(2))
    td.set_("s", "newer")
    assert td["s"] == "newer"


def test_update_takes_keyword_entries_which_win():
    td = TensorDict({"a": torch.zeros(3)}, [3])
    td.update({"a": torch.ones(3) * 2, "b": torch.ones(3) * 3}, a=torch.ones(3) * 7)
    assert (td["a"] == 7).all() and (td["b"] == 3).all()
    td.update(outer={"inner": torch.ones(3)})
    assert (td["outer", "inner"] == 1).all()


def test_update_of_a_different_batch_size_needs_update_batch_size():
    td0 = TensorDict(
        a=torch.zeros(3), n=TensorDict(b=torch.zeros(3, 2), batch_size=(3, 2)), batch_size=(3,)
    )
    td1 = TensorDict(
        a=torch.ones(4), n=TensorDict(b=torch.ones(4, 5), batch_size=(4, 5)), batch_size=(4,)
    )
    with pytest.raises(RuntimeError, match="update_batch_size"):
        td0.update(td1)
    for kwargs, words in [
        ({"inplace": True}, "inplace"),
        ({"keys_to_update": ["a"]}, "keys_to_update"),
    ]:
        with pytest.raises(RuntimeError, match=words):
            td0.update(td1, update_batch_size=True, **kwargs)
    assert td0.batch_size == (3,) and td0["n"].batch_size == (3, 2)  # nothing changed
    sub = td0["n"]
    td0.update(td1, update_batch_size=True)
    assert td0.batch_size == (4,) and td0["n"].batch_size == (4, 5)
    # the sub-TensorDict is resized in place, so references to it stay valid (as upstream)
    assert (td0["n", "b"] == 1).all() and td0["n"] is sub and sub.batch_size == (4, 5)
    with pytest.raises(RuntimeError, match="lock"):
        TensorDict(batch_size=(3,), lock=True).update(td1, update_batch_size=True)


def test_update_batch_size_with_is_leaf_replaces_sub_tensordicts_whole():
    t = torch.arange(24).view(2, 3, 4)
    td0 = TensorDict(a=t, b=TensorDict(c=t, batch_size=(2, 3)), batch_size=(2,))
    new_b = TensorDict(c=torch.arange(16).view(2, 2, 4), batch_size=(2, 2))
    td0.update(
        TensorDict(b=new_b, batch_size=(2,)), update_batch_size=True, is_leaf=lambda cls: True
    )
    assert td0["b"] is new_b and td0.batch_size == (2,)
    # an entry the source lacks must still fit the new batch size: nothing is written otherwise
    with pytest.raises(RuntimeError):
        td0.update(TensorDict(b=new_b[:1], batch_size=(1,)), update_batch_size=True)
    assert td0.batch_size == (2,) and td0["b"] is new_b


def test_update_batch_size_resizes_lazy_stacks_and_sub_tensordicts_in_place():
    members = [TensorDict(r=torch.ones(n), batch_size=[n]) for n in (3, 4)]
    ragged = lazy_stack(members, -1)
    td = TensorDict(stack=ragged, n=TensorDict(x=torch.zeros(2), batch_size=[2]), keep=1.0)
    new = lazy_stack([TensorDict(r=torch.zeros(n), batch_size=[n]) for n in (5, 6, 7)], -1)
    source = TensorDict(stack=new, n=TensorDict(x=torch.ones(3), batch_size=[3]))
    sub = td["n"]
    td.update(source, update_batch_size=True)
    assert td["stack"] is ragged and td["n"] is sub  # kept, resized in place
    assert ragged.batch_size == (-1, 3)
    assert all(a is b for a, b in zip(ragged.tensordicts, members))
    assert [m["r"].shape[0] for m in ragged.tensordicts] == [5, 6, 7]
    assert ragged.tensordicts[2] is not new.tensordicts[2]  # a new member is a shallow copy
    assert (sub["x"] == 1).all() and td["keep"] == 1.0
    dense = TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4]).to_lazystack(0)
    dense.update(TensorDict(a=torch.ones(2, 4), batch_size=[2, 4]), update_batch_size=True)
    assert dense.batch_size == (2, 4) and (dense["a"] == 1).all()
    # an entry the source lacks must fit the new batch size: nothing is written otherwise
    with pytest.raises(RuntimeError):
        dense.update(TensorDict(b=torch.ones(5, 3), batch_size=[5, 3]), update_batch_size=True)
    assert dense.batch_size == (2, 4) and len(dense.tensordicts) == 2


@pytest.mark.parametrize("lazy", [False, True])
def test_update_in_place_takes_keyword_entries(lazy):
    from td_core import lazy_stack

    td = TensorDict({"a": torch.zeros(3), "b": torch.zeros(3)}, [3])
    if lazy:
        td = lazy_stack(list(td.unbind(0)))
    td.update_({"a": torch.ones(3)}, b=torch.ones(3) * 2)
    assert (td["a"] == 1).all() and (td["b"] == 2).all()
    assert td.update_() is td and td.update() is td
    with pytest.raises(KeyError, match="'c',\\) was not found"):
        td.update_(c=torch.ones(3))
    assert "c" not in td.keys()


def test_update_in_place_of_a_missing_key_raises_even_when_get_defaults_to_none():
    from td_core import set_get_defaults_to_none

    td = TensorDict({"a": torch.zeros(3)}, [3])
    with set_get_defaults_to_none(True), pytest.raises(KeyError, match="was not found"):
        td.update_({"b": torch.ones(3)})


def test_a_batch_mismatch_on_set_says_both_shapes():
    td = TensorDict({"a": torch.zeros(3, 4, 5, 6)}, [3, 4, 5])
    message = (
        "batch dimension mismatch, got self.batch_size=torch.Size([3, 4, 5]) and "
        "value.shape=torch.Size([3, 4, 2])"
    )
    with pytest.raises(RuntimeError, match=re.escape(message)):
        td.set("c", torch.zeros(3, 4, 2))


@pytest.mark.parametrize("kind", ["dense", "lazy", "params"])
def test_nested_keys_list_a_sub_tensordict_after_its_keys_items_before(kind):
    td = TensorDict(
        {"a": torch.zeros(2), "n": {"x": torch.zeros(2), "m": {"y": torch.zeros(2)}}}, [2]
    )
    if kind == "lazy":
        td = lazy_stack([td[0], td[1]], 0)
    elif kind == "params":
        td = TensorDictParams(td)
    assert list(td.keys(True)) == ["a", ("n", "x"), ("n", "m", "y"), ("n", "m"), "n"]  # upstream
    assert [k for k, _ in td.items(True)] == ["a", "n", ("n", "x"), ("n", "m"), ("n", "m", "y")]


def test_flatten_keys_leaves_out_empty_sub_tensordicts_so_modules_load_them():
    td = TensorDict(
        a=TensorDict(), b=TensorDict(c=TensorDict(), d=torch.zeros(())), e=torch.ones(())
    )
    assert sorted(td.flatten_keys(".").keys()) == ["b.d", "e"]
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    params = TensorDict.from_module(net, filter_empty=False)
    assert params["1"].is_empty()
    net.load_state_dict(params.apply(torch.zeros_like).flatten_keys("."))  # a Mapping, as upstream
    assert (net[0].weight == 0).all()
    assert isinstance(td, MutableMapping) and isinstance(td, Mapping)


@pytest.mark.parametrize(
    "source",
    [
        {"a.b.c": torch.zeros(3), "a": {"b": {"c": torch.zeros(3)}}},
        {"a": {"b": {"c": torch.zeros(3)}}, "a.b.c": torch.zeros(3)},
        {"a.b": torch.zeros(3), "a": {"b": torch.zeros(3)}},
        {"a.b.c.d": torch.zeros(3), "a": {"b": {"c": torch.zeros(3)}}},
        {"a.b": torch.zeros(3), "a": {"b": {"c": torch.zeros(3)}}},
    ],
)
def test_unflatten_keys_refuses_to_override_an_entry(source):
    td = TensorDict(source, [])
    with pytest.raises(KeyError, match=r"will override an existing .*\('a', 'b'"):
        td.unflatten_keys(".")
    merged = TensorDict({"a.x": torch.zeros(3), "a": {"b": {"c": torch.zeros(3)}}}, [])
    assert sorted(merged.unflatten_keys(".").keys(True, True)) == [("a", "b", "c"), ("a", "x")]


def test_flatten_keys_collision_names_the_key():
    td = TensorDict({"a.b": torch.zeros(3), "a": {"b": torch.zeros(3)}}, [])
    with pytest.raises(
        KeyError, match=r"Flattening keys in tensordict causes keys to collide.*'a\.b'"
    ):
        td.flatten_keys(".")


def test_split_keys_drops_the_sub_tensordicts_it_empties():
    td = TensorDict({"a": 0, "b": {"c": 1}, "d": {"e": "s", "f": 2}, "g": {"h": 3, "i": 4}})
    rest = td.split_keys([("g", "h")])[-1]
    assert ("g", "i") in rest and ("g", "h") not in rest  # 'g' still holds a leaf
    b, d, rest = td.split_keys([("b", "c")], [("d", "e"), ("d", "f")], inplace=True)
    assert rest is td and sorted(td.keys()) == ["a", "g"]
    assert ("b", "c") in b and ("d", "e") in d and ("d", "f") in d
    kept = TensorDict({"d": {"e": 1}}).split_keys([("d", "e")], reproduce_struct=True)[-1]
    assert "d" in kept  # reproduce_struct keeps the structure


def test_rename_key_to_its_parent():
    td = TensorDict(a={"b": {"c": 0}})
    td.rename_key_(("a", "b", "c"), ("a", "b"))
    assert td["a", "b"] == 0 and set(td.keys(include_nested=True)) == {"a", ("a", "b")}


def test_to_inplace_keeps_the_container_and_its_sub_tensordicts():
    td = TensorDict({"a": torch.zeros(2), "b": {"c": torch.zeros(2)}}, [2])
    sub, old = td["b"], td["a"]
    assert td.to("cpu", inplace=True) is td and td.device == torch.device("cpu")
    assert td["b"] is sub and td["b"].device == torch.device("cpu")
    assert td.to(torch.float64, inplace=True) is td
    assert td["a"].dtype == torch.float64 and td["b", "c"].dtype == torch.float64
    assert old.dtype == torch.float32  # the old leaf is replaced, not cast in place
    with pytest.raises(RuntimeError, match="locked"):
        td.lock_().to(torch.float32, inplace=True)
    assert td["a"].dtype == torch.float64
