"""Bad input: the error type is the builtin users catch, and the message names the culprit."""

import re

import pytest
import torch

from td_core import TensorDict
from td_core.errors import BatchSizeError, KeyNotFoundError, LockedError


def make_td():
    return TensorDict({"a": torch.zeros(3, 4), "n": {"b": torch.zeros(3)}}, batch_size=[3])


def leaves(td):
    return set(td.keys(include_nested=True, leaves_only=True))


def names(msg, *parts):
    """Every part appears in the message, literally."""
    return all(str(part) in msg for part in parts)


# ---------------------------------------------------------------- batch size


def set_bad(td):
    td.set("obs", torch.zeros(5, 2))


def setitem_bad(td):
    td["obs"] = torch.zeros(5, 2)


def set_nested_bad(td):
    td.set(("n", "obs"), torch.zeros(5, 2))


def update_bad(td):
    td.update({"obs": torch.zeros(5, 2)})


def construct_bad(td):
    TensorDict({"ok": torch.zeros(3), "obs": torch.zeros(5, 2)}, batch_size=td.batch_size)


BATCH_MISMATCH = [set_bad, setitem_bad, set_nested_bad, update_bad, construct_bad]


@pytest.mark.parametrize("write", BATCH_MISMATCH, ids=[f.__name__ for f in BATCH_MISMATCH])
def test_batch_mismatch_names_key_and_shapes(write):
    td = make_td()
    with pytest.raises(RuntimeError, match="obs") as info:
        write(td)
    assert names(str(info.value), "[3]", "[5, 2]")
    assert "obs" not in td.keys()
    assert ("n", "obs") not in td.keys(include_nested=True)


@pytest.mark.parametrize("write", BATCH_MISMATCH, ids=[f.__name__ for f in BATCH_MISMATCH])
def test_batch_mismatch_is_batch_size_error(write):
    with pytest.raises(BatchSizeError):
        write(make_td())
    with pytest.raises(ValueError):
        write(make_td())


def test_set_in_place_wrong_shape_names_key():
    td = make_td()
    before = td["a"].clone()
    with pytest.raises(RuntimeError, match="a"):
        td.set_("a", torch.zeros(5, 4))
    assert torch.equal(td["a"], before)


def test_batch_size_setter_incompatible_names_key():
    td = TensorDict({"leaf": torch.zeros(3, 4)}, [3])
    with pytest.raises(RuntimeError, match="leaf"):
        td.batch_size = [3, 5]
    assert td.batch_size == torch.Size([3])


def test_batch_size_setter_incompatible_nested_names_key():
    td = TensorDict({"n": {"deep": torch.zeros(3)}}, [3])
    with pytest.raises(RuntimeError, match="deep"):
        td.batch_size = [3, 2]


def test_setitem_index_value_with_wrong_batch():
    td = make_td()
    value = TensorDict({"a": torch.ones(3, 4), "n": {"b": torch.ones(3)}}, [3])
    before = td.clone()
    with pytest.raises((RuntimeError, ValueError, IndexError)) as info:
        td[0:2] = value
    assert names(str(info.value), "[2]", "[3]")
    assert (td == before).all()


@pytest.mark.parametrize(
    ("key", "bad_leaf", "index"),
    [
        ("a", torch.ones(3, 3), 1),  # one feature dim too many
        ("a", torch.ones(2), 1),  # one feature dim, of the wrong size
        ("m", torch.ones(3, 2), 1),  # two feature dims, the last one right
        ("a", torch.ones(2, 4), slice(0, 2)),  # a slice: the value has batch dims too
        ("m", torch.ones(2, 3, 2), slice(0, 2)),
    ],
    ids=["extra-dim", "1-dim", "2-dims", "slice-1-dim", "slice-2-dims"],
)
def test_setitem_index_wrong_feature_shape_writes_nothing(key, bad_leaf, index):
    td = TensorDict(
        {"first": torch.zeros(5), "a": torch.zeros(5, 3), "m": torch.zeros(5, 2, 2)}, [5]
    )
    sub = torch.zeros(5)[index].shape
    good = {"first": torch.ones(sub), "a": torch.ones(*sub, 3), "m": torch.ones(*sub, 2, 2)}
    value = TensorDict({**good, key: bad_leaf}, sub)
    before = td.clone()
    with pytest.raises((RuntimeError, ValueError)) as info:
        td[index] = value
    assert names(str(info.value), key)
    assert (td == before).all()  # "first" comes before the bad leaf and was not written
    td[index] = TensorDict(good, sub)  # the same write with the right shapes goes through
    assert (td[index] == 1).all()


@pytest.mark.parametrize("batch_size", ["abc", 2.5, [1.5]])
def test_bad_batch_size_type(batch_size):
    with pytest.raises((TypeError, ValueError)):
        TensorDict({}, batch_size=batch_size)


@pytest.mark.parametrize("source", [[1, 2, 3], 5, torch.zeros(3)], ids=["list", "int", "tensor"])
def test_bad_source_type(source):
    with pytest.raises((TypeError, ValueError)):
        TensorDict(source, batch_size=[])


def test_bad_device():
    with pytest.raises(RuntimeError, match="notadevice"):
        TensorDict({}, [], device="notadevice")


# ---------------------------------------------------------------- missing keys


MISSING = [
    ("getitem", lambda td: td["missing"], "missing"),
    ("getitem-nested", lambda td: td["n", "missing"], "missing"),
    ("getitem-nested-parent", lambda td: td["missing", "b"], "missing"),
    ("pop", lambda td: td.pop("missing"), "missing"),
    ("set_", lambda td: td.set_("missing", torch.zeros(3)), "missing"),
    ("select", lambda td: td.select("missing"), "missing"),
    ("select-nested", lambda td: td.select(("n", "missing")), "missing"),
    ("rename_key_", lambda td: td.rename_key_("missing", "other"), "missing"),
    ("fill_", lambda td: td.fill_("missing", 1.0), "missing"),
    ("update_", lambda td: td.update_({"missing": torch.zeros(3)}), "missing"),
]


@pytest.mark.parametrize(("fn", "key"), [c[1:] for c in MISSING], ids=[c[0] for c in MISSING])
def test_missing_key_raises_key_error_naming_it(fn, key):
    td = make_td()
    with pytest.raises(KeyError, match=key):
        fn(td)
    assert leaves(td) == {"a", ("n", "b")}


@pytest.mark.parametrize(
    ("fn", "key"), [c[1:] for c in MISSING[:3]], ids=[c[0] for c in MISSING[:3]]
)
def test_missing_key_is_key_not_found_error(fn, key):
    with pytest.raises(KeyNotFoundError) as info:
        fn(make_td())
    # printed as written, not quoted by KeyError's repr
    assert not str(info.value).startswith(("'", '"'))


def test_missing_key_message_lists_existing_keys():
    with pytest.raises(KeyError) as info:
        make_td()["missing"]
    assert names(str(info.value), "missing", "a", "n")


@pytest.mark.parametrize("key", [3, 1.5, ("a", 1), ()], ids=["int", "float", "tuple-int", "empty"])
def test_bad_key_type_in_get_set(key):
    td = make_td()
    with pytest.raises((KeyError, TypeError)):
        td.set(key, torch.zeros(3))
    assert leaves(td) == {"a", ("n", "b")}


def test_bad_key_type_names_it():
    with pytest.raises((KeyError, TypeError), match="3"):
        make_td().get(3)


# ---------------------------------------------------------------- indexing


@pytest.mark.parametrize(
    "idx", [3, -4, (0, 0)], ids=["past-end", "before-start", "past-batch-dims"]
)
def test_index_out_of_range(idx):
    with pytest.raises(IndexError):
        make_td()[idx]


def test_float_index():
    with pytest.raises((IndexError, TypeError)):
        make_td()[1.5]


# ---------------------------------------------------------------- shape ops


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.view(5),
        lambda td: td.reshape(2, 2),
        lambda td: td.expand(4),
        lambda td: td.unflatten(0, (2, 2)),
        lambda td: td.split([1, 1], 0),
    ],
    ids=["view", "reshape", "expand", "unflatten", "split"],
)
def test_shape_op_bad_size(op):
    with pytest.raises(RuntimeError):
        op(make_td())


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.unsqueeze(3),
        lambda td: td.squeeze(3),
        lambda td: td.unbind(1),
        lambda td: td.transpose(0, 2),
        lambda td: td.permute(0, 1),
        lambda td: td.permute(0, 0),
        lambda td: td.flatten(0, 2),
    ],
    ids=["unsqueeze", "squeeze", "unbind", "transpose", "permute-len", "permute-dup", "flatten"],
)
def test_shape_op_bad_dim(op):
    td = TensorDict({"a": torch.zeros(3, 4)}, [3])
    with pytest.raises((IndexError, ValueError, RuntimeError)):
        op(td)


def test_view_bad_size_names_shape():
    with pytest.raises(RuntimeError, match=re.escape("5")):
        make_td().view(5)


# ---------------------------------------------------------------- stack / cat / ops between tensordicts


def test_stack_mismatched_keys_names_key():
    tds = [TensorDict({"a": torch.zeros(3)}, [3]), TensorDict({"zz": torch.zeros(3)}, [3])]
    with pytest.raises((RuntimeError, KeyError, ValueError), match="zz"):
        torch.stack(tds)


def test_stack_mismatched_batch_sizes_names_shapes():
    tds = [TensorDict({"a": torch.zeros(3)}, [3]), TensorDict({"a": torch.zeros(4)}, [4])]
    with pytest.raises(RuntimeError) as info:
        torch.stack(tds)
    assert names(str(info.value), "[3]", "[4]")


def test_cat_mismatched_keys_names_key():
    tds = [TensorDict({"a": torch.zeros(3)}, [3]), TensorDict({"zz": torch.zeros(3)}, [3])]
    with pytest.raises((KeyError, RuntimeError), match="zz"):
        torch.cat(tds)


def test_stack_empty_list():
    with pytest.raises((RuntimeError, ValueError)):
        torch.stack([])


def test_binary_op_mismatched_keys_names_key():
    other = TensorDict({"a": torch.zeros(3, 4)}, [3])
    with pytest.raises(KeyError, match="b"):
        make_td() + other


def test_apply_mismatched_keys_names_key():
    other = TensorDict({"a": torch.zeros(3, 4)}, [3])
    with pytest.raises(KeyError, match="n"):
        make_td().apply(lambda x, y: x + y, other)


def test_flatten_keys_collision_names_key():
    td = TensorDict({"a.b": torch.zeros(3), "a": {"b": torch.zeros(3)}}, [3])
    with pytest.raises((KeyError, ValueError), match=r"a.*b"):
        td.flatten_keys(".")


# ---------------------------------------------------------------- locked tensordicts


def test_locked_write_is_locked_error():
    td = make_td().lock_()
    with pytest.raises(LockedError):
        td["new"] = torch.zeros(3)
    with pytest.raises(RuntimeError):
        td.set("a", torch.zeros(3, 4))


def test_locked_write_names_key():
    td = make_td().lock_()
    with pytest.raises(RuntimeError, match="new"):
        td["new"] = torch.zeros(3)
    # upstream's words (users grep for them), inside td's sentence naming the fix
    with pytest.raises(
        RuntimeError, match=r"Cannot modify locked TensorDict\. For in-place modification .*'new'"
    ):
        td.set("new", torch.zeros(3))
    assert "new" not in td.keys()


# ---------------------------------------------------------------- failed operations change nothing


def test_failed_update_is_not_half_applied():
    td = make_td()
    before = td.clone()
    with pytest.raises(RuntimeError, match="bad"):
        td.update({"good": torch.ones(3), "bad": torch.ones(4)})
    assert leaves(td) == leaves(before)
    assert "good" not in td.keys()
    assert (td == before).all()


@pytest.mark.parametrize(
    ("batch_size", "bad"),
    [
        ([3], torch.ones(4)),
        ([3], torch.tensor(1.0)),  # 0-d: no batch dim at all
        ([3, 2], torch.ones(3, 4)),
        ([3, 2], torch.ones(3)),
    ],
    ids=["1-dim", "1-dim-scalar", "2-dims", "2-dims-short"],
)
def test_failed_update_names_the_key_and_changes_nothing(batch_size, bad):
    td = TensorDict({"a": torch.zeros(*batch_size)}, batch_size)
    good = torch.ones(*batch_size)
    with pytest.raises(RuntimeError, match="bad"):
        td.update({"good": good, "bad": bad})
    assert set(td.keys()) == {"a"}
    td.update({"good": good})
    assert td["good"] is good


def test_failed_construction_leaves_source_dict_alone():
    source = {"ok": torch.zeros(3), "bad": torch.zeros(4)}
    with pytest.raises(RuntimeError, match="bad"):
        TensorDict(source, [3])
    assert set(source) == {"ok", "bad"}


def test_reading_through_a_leaf_is_a_key_and_a_value_error():
    td = TensorDict({"a": torch.zeros(()), "n": {"b": torch.zeros(())}}, [])
    for key in [("a", "b"), ("n", "b", "c")]:
        with pytest.raises(ValueError, match="Expected a TensorDictBase instance") as info:
            td[key]
        assert isinstance(info.value, KeyError)
        assert repr(key[:-1]) in str(info.value)


def test_set_in_place_wrong_shape_says_which_update_failed():
    td = TensorDict({"a": torch.rand(()), "n": {"b": torch.rand(())}}, [])
    with pytest.raises(ValueError, match="Failed to update 'a'"):
        td.set_("a", torch.randn(2))
    with pytest.raises(ValueError, match=re.escape("Failed to update ('n', 'b')")):
        td.set_(("n", "b"), torch.randn(2))


@pytest.mark.parametrize("lazy", [False, True])
def test_indexing_a_missing_key_raises_even_when_get_defaults_to_none(lazy):
    from td_core import lazy_stack, set_get_defaults_to_none

    td = TensorDict({"a": torch.zeros(2), "b": {"c": torch.ones(2)}}, [2])
    if lazy:
        td = lazy_stack([td[0], td[1]])
    with set_get_defaults_to_none(True):
        assert td.get(("b", "d")) is None and td.get("d") is None
        for key in ["d", ("b", "d")]:
            with pytest.raises(KeyError, match="'d'"):
                td[key]
        # a failed rename changes nothing (it used to write None under the new key)
        for old, new in [("d", "e"), (("b", "d"), "f")]:
            with pytest.raises(KeyError, match="'d'"):
                td.rename_key_(old, new)
        assert set(td.keys(True)) == {"a", "b", ("b", "c")}


@pytest.mark.parametrize("not_a_key", [0, 4.2, ("a", 42), None])
def test_membership_of_a_non_key_is_refused(not_a_key):
    td = TensorDict({"a": {"b": torch.zeros(())}}, [])
    with pytest.raises(RuntimeError, match="NestedKey"):
        not_a_key in td  # noqa: B015
    for view in (td.keys(), td.keys(include_nested=True)):
        with pytest.raises(TypeError, match="TensorDict keys are always strings"):
            not_a_key in view  # noqa: B015


def test_nested_key_in_a_flat_keys_view_is_refused():
    td = TensorDict({"a": {"b": torch.zeros(())}}, [])
    assert ("a",) in td.keys() and ("a", "b") in td.keys(include_nested=True)
    with pytest.raises(TypeError, match="include_nested=True"):
        ("a", "b") in td.keys()  # noqa: B015


def test_too_many_indices_in_upstream_words():
    td = TensorDict({"a": torch.zeros(3, 4)}, [3])
    with pytest.raises(IndexError, match=re.escape("too many indices for tensor of dimension 1")):
        td[:, 0]


def test_key_errors_carry_upstreams_words():
    td = TensorDict({"c": torch.zeros(2), "n": {"x": torch.zeros(2)}}, [2])
    with pytest.raises(KeyError, match=r"You are trying to pop key 'z'.*keys \['c', 'n'\]"):
        td.pop("z")
    with pytest.raises(KeyError, match=r"key 'smartypants' not found in TensorDict"):
        td.set_("smartypants", torch.zeros(2))
    with pytest.raises(KeyError, match=r"key 'c' already present in TensorDict"):
        td.rename_key_(("n", "x"), "c", safe=True)
    with pytest.raises(KeyError, match="key 'c' not found and no pad value provided"):
        td.where(torch.ones(2, dtype=torch.bool), TensorDict({}, [2]))
    with pytest.raises(
        RuntimeError, match="Converting a tensordict to boolean value is not permitted"
    ):
        bool(td)
    assert sorted(td.keys()) == ["c", "n"] and td.get(("n", "x")) is not None


def test_widening_failure_names_the_entry_in_upstreams_words():
    td = TensorDict({}, [3, 4])
    with pytest.raises(RuntimeError, match=r"the Tensor smth has shape torch.Size\(\[1\]\) which"):
        td["z"] = TensorDict({"smth": torch.zeros(1)}, [])
    assert "z" not in td.keys()


def test_integer_index_of_a_batchless_tensordict():
    td = TensorDict(a=torch.zeros(3))
    with pytest.raises(RuntimeError, match=r"td\.batch_dims==0 is not permitted"):
        td[0]
    with pytest.raises(IndexError, match=r"batch_size \[\] by 1"):
        td[1]
