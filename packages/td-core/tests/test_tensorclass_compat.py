"""Tensorclass behaviour that code written against upstream relies on: write rules for
fields, `shadow=True`, `tensor_only`, the private `_from_tensordict`/`_non_tensordict`
shims, state dicts, `select(as_tensordict=)`, `is_non_tensor` and `print_directory_tree`."""

from __future__ import annotations

import collections
import logging
from collections import UserDict
from typing import Any

import numpy as np
import pytest
import torch

import td_core
from td_core import (
    NonTensorData,
    TensorClass,
    TensorDict,
    TensorDictBase,
    tensorclass,
)


@tensorclass
class Leaf:
    x: torch.Tensor
    z: str
    y: Leaf = None


@tensorclass
class Holder:
    meta: Any = None
    inner: TensorDictBase = None
    either: TensorDict | None = None


def make_leaf() -> Leaf:
    inner = Leaf(x=torch.ones(3), z="inner", batch_size=[3])
    return Leaf(x=torch.zeros(3), z="outer", y=inner, batch_size=[3])


# ------------------------------------------------------------------- write rules
def test_set_of_a_key_that_is_not_a_field_is_refused_and_writes_nothing():
    obj = make_leaf()
    with pytest.raises(AttributeError, match=r"Cannot set the attribute 'other'.*fields"):
        obj.set("other", torch.zeros(3))
    assert "other" not in obj._tensordict.keys()


@pytest.mark.parametrize(
    "write",
    [
        lambda o: o.set(("other", "x"), torch.zeros(3)),
        lambda o: o.setdefault("other", torch.zeros(3)),
        lambda o: o.rename_key_("x", "other"),
        lambda o: o.set_non_tensor("other", 1),
        lambda o: o.update({"x": torch.ones(3), "other": torch.zeros(3)}),
        lambda o: o.update({"x": torch.ones(3), "y": {"x": torch.ones(3), "other": 1}}),
        lambda o: o.update({("y", "other"): torch.zeros(3)}),
    ],
    ids=[
        "nested_set",
        "setdefault",
        "rename",
        "set_non_tensor",
        "update",
        "update_nested",
        "nested_key",
    ],
)
def test_every_write_of_a_key_that_is_not_a_field_is_refused_before_writing(write):
    obj = make_leaf()
    with pytest.raises(AttributeError, match="'other'"):
        write(obj)
    assert set(obj._tensordict.keys(True)) == {"x", "z", "y", ("y", "x"), ("y", "z")}
    assert (obj.x == 0).all() and (obj.y.x == 1).all()


def test_a_mapping_is_kept_as_one_value_unless_the_field_is_annotated_as_a_tensordict():
    value = UserDict({"k": "v"})
    obj = Holder(meta=value, inner={"a": torch.zeros(2)}, either={"b": torch.ones(2)})
    assert obj.meta is value
    assert isinstance(obj.inner, TensorDict) and isinstance(obj.either, TensorDict)
    shared = {}
    obj.meta = shared
    assert obj[()].meta is shared


def test_autocast_keeps_a_mapping_given_to_a_union_field_as_a_value():
    @tensorclass(autocast=True)
    class Cast:
        td: TensorDict
        opt: Cast | None = None

    obj = Cast(td={"a": 0.0}, opt={"td": {"b": 1.0}})
    assert isinstance(obj.td, TensorDict)
    assert obj.opt == {"td": {"b": 1.0}}


def test_autocast_resolves_a_quoted_annotation_under_future_annotations():
    @tensorclass(autocast=True)
    class Node:
        x: torch.Tensor
        child: "Node" = None  # noqa: UP037 - stored as "'Node'" under the future import

    obj = Node(x=torch.zeros(()), child={"x": torch.ones(())})
    assert type(obj.child) is Node


def test_in_place_writes_may_not_change_a_tensor_entry_into_a_value_or_back():
    obj = make_leaf()
    with pytest.raises(RuntimeError, match="Cannot update an existing entry of type Tensor"):
        obj.set("x", "a string", inplace=True)
    assert torch.equal(obj.x, torch.zeros(3))
    with pytest.raises(ValueError, match="Failed to update 'z'"):
        obj.set("z", torch.ones(3), inplace=True)
    assert obj.z == "outer"
    target = obj.x
    obj.set("x", torch.full((3,), 2.0), inplace=True)
    assert obj.x is target and (target == 2).all()


def test_get_reads_a_non_tensor_field_as_its_value_and_is_non_tensor_reads_storage():
    obj = make_leaf()
    assert obj.get("z") == "outer" and obj.get(("y", "z")) == "inner"
    assert obj.is_non_tensor("z") and obj.is_non_tensor(("y", "z"))
    assert not obj.is_non_tensor("x") and not obj.is_non_tensor(("y", "x"))


def test_items_and_entry_queries_read_the_stored_non_tensor_leaf():
    # `get` unwraps a non-tensor field; the sorted/filtered iterations and entry queries,
    # written over `get` for other kinds, still see the stored leaf
    obj = make_leaf()
    assert isinstance(dict(obj.items(sort=True))["z"], NonTensorData)
    assert isinstance(dict(obj.items(is_leaf=lambda c: True))["z"], NonTensorData)
    assert any(isinstance(v, NonTensorData) for v in obj.values(sort=True))
    assert obj.entry_class("z") is NonTensorData
    assert obj.get_item_shape("z") == torch.Size([3])


def test_cat_of_one_repeated_value_keeps_one_value():
    obj = make_leaf()
    joined = torch.cat([obj, obj], 0)
    assert joined.z == "outer" and joined.y.z == "inner"  # the field reads as the value
    assert type(joined.get("z")) is str
    td = TensorDict(s="x", batch_size=[2])
    assert type(torch.cat([td, td]).get("s")) is NonTensorData
    mixed = torch.cat([td, TensorDict(s="y", batch_size=[2])]).get("s")
    assert not isinstance(mixed, NonTensorData) and mixed.tolist() == ["x", "x", "y", "y"]


def test_setitem_refuses_a_value_with_keys_that_are_not_fields():
    @tensorclass
    class Other:
        x: torch.Tensor
        w: torch.Tensor

    obj = make_leaf()
    other = Other(x=torch.full((3,), 5.0), w=torch.ones(3), batch_size=[3])
    with pytest.raises(ValueError, match=r"keys \['w'\] that are not fields"):
        obj[:2] = other[:2]
    assert (obj.x == 0).all() and "w" not in obj._tensordict.keys()


# ------------------------------------------------------------------- shadow
def test_shadow_lets_fields_take_the_metadata_names():
    with pytest.raises(AttributeError, match="batch_size"):

        @tensorclass
        class Refused:
            batch_size: Any

    @tensorclass(shadow=True)
    class Shadowed:
        batch_size: Any
        names: Any
        device: Any

    obj = Shadowed(batch_size=0, names=1, device=2)
    assert (obj.batch_size, obj.names, obj.device) == (0, 1, 2)
    assert obj._tensordict.batch_size == torch.Size([])
    obj.batch_size = 5
    assert obj.batch_size == 5
    text = repr(obj)
    assert "shape=torch.Size([])" in text and "device=None" not in text


def test_shadow_through_the_class_form():
    class Shadowed(TensorClass["shadow"]):
        batch_size: Any

    assert Shadowed(batch_size=3).batch_size == 3


# ------------------------------------------------------------------- tensor_only
def test_tensor_only_refuses_casting_options_and_non_tensor_annotations():
    with pytest.raises(TypeError, match="tensor_only"):

        @tensorclass(tensor_only=True, autocast=True)
        class WithAutocast:
            a: torch.Tensor

    with pytest.raises(TypeError, match=r"field 'b'.*Tensor-subtrypes or None"):

        class WithAny(TensorClass["tensor_only"]):
            a: torch.Tensor
            b: Any

    class Accepted(TensorClass["tensor_only"]):
        a: torch.IntTensor
        b: torch.Tensor | None = None
        c: TensorDict[str, torch.Tensor] | None = None

    assert Accepted(a=torch.zeros((), dtype=torch.int32)).b is None


def test_tensor_only_reads_a_field_annotated_as_a_leaf_class_as_the_leaf():
    class Wrapped(TensorClass["tensor_only"]):
        data: NonTensorData

    value = UserDict({"k": "v"})
    obj = Wrapped(data=value)
    assert isinstance(obj.data, NonTensorData) and obj.data.data is value


def test_a_deleted_field_reads_as_missing_until_set_again():
    obj = make_leaf()
    del obj.x
    assert not hasattr(obj, "x")
    assert "x" not in obj._tensordict.keys()
    obj.x = torch.ones(3)
    assert (obj.x == 1).all()


def test_nocast_keeps_a_numpy_array():
    @tensorclass(nocast=True)
    class Raw:
        a: Any

    assert isinstance(Raw(np.array([1])).a, np.ndarray)


# ------------------------------------------------------------------- private shims
def test_from_tensordict_private_spelling_runs_post_init():
    @tensorclass
    class Checked:
        x: torch.Tensor

        def __post_init__(self):
            if (self.x < 0).any():
                raise ValueError("x must be >= 0")

    obj = Checked._from_tensordict(TensorDict(x=torch.ones(2), batch_size=[2]))
    assert type(obj) is Checked
    with pytest.raises(ValueError, match="x must be"):
        Checked._from_tensordict(TensorDict(x=-torch.ones(2), batch_size=[2]))


def test_non_tensordict_lists_the_unset_fields_read_only():
    obj = Leaf(x=torch.zeros(3), z="a", batch_size=[3])
    assert dict(obj._non_tensordict) == {"y": None}
    with pytest.raises(TypeError):
        obj._non_tensordict["y"] = 1  # type: ignore[index]
    assert not make_leaf()._non_tensordict


def test_from_dict_builds_the_class():
    obj = Holder.from_dict({"inner": {"a": torch.zeros(4, 2)}}, auto_batch_size=True, batch_dims=1)
    assert type(obj) is Holder and obj.batch_size == torch.Size([4])


def test_from_list_and_fromkeys_build_the_class():
    class Row(TensorClass):
        foo: Any
        bar: Any

    class Child(Row):
        pass

    rows = Row.from_list([{"foo": 1, "bar": 2}, {"foo": 3, "bar": 4}])
    assert type(rows) is Row and rows.foo.tolist() == [1, 3]
    assert type(Child.from_list([{"foo": 1, "bar": 2}])) is Child
    assert type(Row.fromkeys(["foo", "bar"], 0)) is Row
    with pytest.raises(KeyError, match="baz"):
        Row.fromkeys(["foo", "baz"], 0)


def test_select_as_tensordict():
    obj = make_leaf()
    out = obj.select("x", as_tensordict=True)
    assert type(out) is TensorDict and set(out.keys()) == {"x"}
    assert type(obj.select("x")) is Leaf
    plain = TensorDict(a=torch.zeros(1), b=torch.zeros(1))
    assert set(plain.select("a", as_tensordict=True).keys()) == {"a"}


# ------------------------------------------------------------------- state dicts
def test_state_dict_records_the_class_and_non_tensor_fields_and_loads_them():
    obj = make_leaf()
    sd = obj.state_dict()
    assert set(sd) == {"x", "y.x"}
    assert "Leaf" in sd._metadata[""]["_type"]
    assert sd._metadata["y"]["_non_tensor"] == {"z": "inner"}
    other = obj.clone()
    other.x, other.z, other.y.z = torch.ones(3), "changed", "changed"
    other.load_state_dict(sd)
    assert (other.x == 0).all() and other.z == "outer" and other.y.z == "inner"


def test_state_dict_with_an_unknown_non_tensor_name_changes_nothing():
    obj = make_leaf()
    sd = obj.state_dict()
    sd["x"] = torch.full((3,), 7.0)
    sd._metadata[""]["_non_tensor"]["nope"] = 1
    with pytest.raises(KeyError, match="Key 'nope' wasn't expected in the state-dict"):
        obj.load_state_dict(sd)
    assert (obj.x == 0).all()


def test_state_dict_loads_upstreams_older_tensorclass_format():
    obj = make_leaf()
    legacy = collections.OrderedDict(
        _tensordict=collections.OrderedDict(
            x=torch.full((3,), 4.0),
            y=collections.OrderedDict(x=torch.full((3,), 5.0)),
            __batch_size=torch.Size([3]),
            __device=None,
        ),
        _non_tensordict={"z": "legacy"},
    )
    obj.load_state_dict(legacy)
    assert (obj.x == 4).all() and (obj.y.x == 5).all() and obj.z == "legacy"


# ------------------------------------------------------------------- utilities
def test_tensordict_takes_type_parameters_in_annotations():
    alias = TensorDict[str, torch.Tensor]
    assert alias.__origin__ is TensorDict


def test_print_directory_tree_logs_and_returns_the_tree(tmp_path, caplog):
    (tmp_path / "saved" / "sub").mkdir(parents=True)
    (tmp_path / "saved" / "sub" / "leaf.bin").write_bytes(b"12345678")
    with caplog.at_level(logging.INFO, logger="td_core"):
        text = td_core.print_directory_tree(tmp_path / "saved")
    assert text.splitlines() == ["Directory size: 8.00 B", "saved/", "    sub/", "        leaf.bin"]
    assert [r.getMessage() for r in caplog.records] == text.splitlines()
    with pytest.raises(FileNotFoundError, match="missing"):
        td_core.print_directory_tree(tmp_path / "missing")


def test_logger_is_the_td_core_logger_without_a_handler_of_its_own(tmp_path, caplog):
    # upstream's `tensordict.utils.logger`; a library's logger leaves handlers to the application
    assert td_core.logger is logging.getLogger("td_core")
    assert td_core.logger.handlers == []
    (tmp_path / "saved").mkdir()
    with caplog.at_level(logging.INFO, logger="td_core"):
        td_core.logger.info("first call")
        td_core.print_directory_tree(tmp_path / "saved")
    assert [r.name for r in caplog.records] == ["td_core"] * 3
    assert caplog.records[0].getMessage() == "first call"


@tensorclass
class Pair:
    obs: torch.Tensor
    count: torch.Tensor


def _pair() -> Pair:
    return Pair(obs=torch.zeros(3), count=torch.ones(3), batch_size=[3])


@pytest.mark.parametrize(
    "write",
    [
        lambda tc: tc.set("other", torch.zeros(3)),
        lambda tc: setattr(tc, "other", torch.zeros(3)),
        lambda tc: tc.fromkeys(["other"], 0),
        lambda tc: tc.separates("obs", "other", default=torch.zeros(3)),
        lambda tc: tc.rename_keys({"obs": "other"}),
        lambda tc: tc.rename_keys({"missing": "other"}, strict=False),
        lambda tc: tc.rename_keys({"missing": "other"}),
        lambda tc: Pair.from_tensordict(TensorDict({"other": torch.zeros(3)}, [3])),
        lambda tc: tc.__setitem__(slice(None), TensorDict({"other": torch.zeros(3)}, [3])),
    ],
    ids=[
        "set",
        "setattr",
        "fromkeys",
        "separates",
        "rename",
        "rename_missing_not_strict",
        "rename_missing",
        "from_tensordict",
        "setitem",
    ],
)
def test_a_key_that_is_not_a_field_raises_one_error_of_every_upstream_class(write) -> None:
    # upstream raises AttributeError for some of these and ValueError for others
    tc = _pair()
    with pytest.raises(td_core.errors.FieldError, match="other") as info:
        write(tc)
    assert isinstance(info.value, (AttributeError)) and isinstance(info.value, ValueError)
    assert isinstance(info.value, KeyError) and "other" in str(info.value)
    assert sorted(tc.keys()) == ["count", "obs"]  # nothing was written


@pytest.mark.parametrize("key", ["missing", ("obs", "x")])
def test_a_string_index_naming_no_entry_raises_key_error_and_upstreams_value_error(key) -> None:
    # upstream refuses every string index of a tensorclass with ValueError; td reads the
    # entry, and a missing one must still reach an `except ValueError` written for upstream
    with pytest.raises(KeyError, match="not found") as info:
        _pair()[key]
    assert isinstance(info.value, ValueError)
