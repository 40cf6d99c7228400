"""Masked and indexed writes: error messages, all-or-nothing, writes through views and lazy stacks."""

from __future__ import annotations

import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    TensorDict,
    TensorDictParams,
    lazy_stack,
    set_get_defaults_to_none,
)
from td_core.errors import BatchSizeError, MissingEntryError


def make() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12.0).reshape(4, 3),
            "b": torch.arange(24).reshape(4, 3, 2),
            "nested": {"c": torch.ones(4, 3, 5, dtype=torch.float64)},
        },
        batch_size=[4, 3],
    )


def snapshot(td: TensorDict) -> dict:
    return {k: v.clone() for k, v in td.items(include_nested=True, leaves_only=True)}


def assert_unchanged(td: TensorDict, before: dict) -> None:
    after = dict(td.items(include_nested=True, leaves_only=True))
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert torch.equal(after[key], value), key


def lazy() -> LazyStackedTensorDict:
    return LazyStackedTensorDict(*make().unbind(0), stack_dim=0)


# ---------------------------------------------------------------- errors name the problem
@pytest.mark.parametrize("op", ["where", "masked_fill", "masked_fill_"])
def test_mask_of_wrong_shape_names_shapes_and_writes_nothing(op: str) -> None:
    td = make()
    before = snapshot(td)
    with pytest.raises(RuntimeError, match=r"mask of shape \[3\].*batch_size \[4, 3\]"):
        getattr(td, op)(torch.ones(3, dtype=torch.bool), 0)
    assert_unchanged(td, before)


def test_mask_must_be_boolean() -> None:
    with pytest.raises(RuntimeError, match="boolean"):
        make().masked_fill(torch.ones(4, 3, dtype=torch.long), 0)


def test_masked_select_wrong_shape_is_an_index_error() -> None:
    with pytest.raises(IndexError, match=r"\[3\]"):
        make().masked_select(torch.ones(3, dtype=torch.bool))


def test_set_at_missing_key_names_it() -> None:
    td = make()
    with pytest.raises(KeyError, match="'missing'"):
        td.set_at_("missing", 1.0, 0)
    with pytest.raises(KeyError, match="missing"):
        td.set_at_(("nested", "missing"), 1.0, 0)


def test_set_at_wrong_shape_names_key_and_shapes_and_writes_nothing() -> None:
    td = make()
    before = snapshot(td)
    with pytest.raises(RuntimeError, match=r"shape \[7\].*'a'.*\[4, 3\]") as info:
        td.set_at_("a", torch.ones(7), 0)
    assert isinstance(info.value, BatchSizeError)
    assert_unchanged(td, before)


def test_gather_dim_out_of_range() -> None:
    with pytest.raises(RuntimeError, match="dim 2 is not a batch dim"):
        make().gather(2, torch.zeros(4, 3, dtype=torch.long))


def test_where_missing_key_names_it_and_pad_fills_it() -> None:
    other = TensorDict({"a": torch.zeros(4, 3)}, [4, 3])
    mask = torch.zeros(4, 3, dtype=torch.bool)
    with pytest.raises(KeyError, match=r"'b'.*pad="):
        make().where(mask, other)
    out = make().where(mask, other, pad=-1)
    assert (out["b"] == -1).all() and (out["a"] == 0).all()


def test_where_refuses_keys_only_other_has_without_pad() -> None:
    mask = torch.zeros(4, 3, dtype=torch.bool)
    empty = TensorDict(batch_size=[4, 3])
    with pytest.raises(KeyError, match=r"not found and no pad value provided.*'a'.*pad="):
        empty.where(mask, make())
    with pytest.raises(KeyError, match="not found and no pad value provided"):
        lazy_stack(list(empty.unbind(0))).where(mask, make())
    out = empty.where(~mask, make(), pad=2)
    assert (out["a"] == 2).all()  # the mask picks self (empty) everywhere: the pad


# ---------------------------------------------------------------- all or nothing
def test_update_at_validates_every_leaf_before_writing() -> None:
    td = make()
    before = snapshot(td)
    with pytest.raises(RuntimeError, match=r"'b'.*slot has shape \[3, 2\]"):
        td.update_at_({"a": torch.zeros(3), "b": torch.zeros(4)}, 1)
    assert_unchanged(td, before)
    with pytest.raises(KeyError, match="'zz'"):
        td.update_at_({"a": torch.zeros(3), "zz": torch.zeros(3)}, 1)
    assert_unchanged(td, before)


def test_copy_validates_every_leaf_before_writing() -> None:
    td = make()
    before = snapshot(td)
    source = TensorDict({"a": torch.zeros(4, 3), "b": torch.zeros(4, 2, 2, dtype=torch.long)}, [4])
    with pytest.raises(RuntimeError, match="'b'"):
        td.copy_(source)
    assert_unchanged(td, before)


def test_copy_at_missing_key_is_key_and_runtime_error() -> None:
    td = make()
    source = TensorDict({"a": torch.zeros(3), "zz": torch.zeros(3)}, [3])
    with pytest.raises(MissingEntryError) as info:
        td.copy_at_(source, 1)
    assert isinstance(info.value, KeyError) and isinstance(info.value, RuntimeError)
    with pytest.raises(KeyError):
        td.copy_at_(source, 1, fast=False)


# ---------------------------------------------------------------- dtype rules
def test_indexed_writes_keep_the_leaf_dtype() -> None:
    td = make()
    td.set_at_(("nested", "c"), torch.zeros(3, 5, dtype=torch.float32), 1)
    assert td["nested", "c"].dtype == torch.float64 and td["nested", "c"][1].sum() == 0
    td.set_at_("b", torch.full((3, 2), 1.7), 0)
    assert td["b"].dtype == torch.long and (td["b"][0] == 1).all()


# ---------------------------------------------------------------- writes reach the storage
def test_zero_writes_through_a_lazy_stack_to_nested_members() -> None:
    members = make().unbind(1)
    stack = LazyStackedTensorDict(*members, stack_dim=1)
    stack.zero_()
    for member in members:
        assert (member["nested", "c"] == 0).all() and (member["a"] == 0).all()


@pytest.mark.parametrize(
    "write",
    [
        lambda td: td.masked_fill_(torch.tensor([True, False, True, False]), 0),
        lambda td: td.set_at_("a", 0.0, slice(0, 3, 2)),
        lambda td: td.set_at_(("nested", "c"), 0.0, torch.tensor([0, 2])),
        lambda td: td.update_at_({"a": torch.zeros(3)}, 2),
        lambda td: td.fill_(("nested", "c"), 0.0),
    ],
)
def test_writes_through_a_lazy_stack_reach_the_members(write) -> None:
    stack = lazy()
    members = list(stack.tensordicts)
    write(stack)
    assert any((m["a"] == 0).all() or (m["nested", "c"] == 0).all() for m in members)
    assert all(m.batch_size == torch.Size([3]) for m in members)


def test_write_through_a_sub_view_reaches_the_parent() -> None:
    td = make()
    td[1].set_at_("a", -1.0, 0)
    assert td["a"][1, 0] == -1
    td["nested"].masked_fill_(torch.ones(4, 3, dtype=torch.bool), 0)
    assert (td["nested", "c"] == 0).all()


def test_params_zero_fill_and_set_at_run_under_no_grad() -> None:
    params = TensorDictParams(TensorDict({"w": torch.ones(3), "b": torch.ones(3)}, [3]))
    params.zero_()
    params.fill_("b", 2.0)
    params.set_at_("w", 5.0, 0)
    assert params["w"].requires_grad and isinstance(params["w"], torch.nn.Parameter)
    assert params["w"].tolist() == [5.0, 0.0, 0.0] and params["b"].tolist() == [2.0] * 3


# ---------------------------------------------------------------- results
def test_get_at_reads_ragged_lazy_leaves_by_member() -> None:
    members = [TensorDict({"r": torch.ones(2, i + 1)}, [2]) for i in range(3)]
    stack = LazyStackedTensorDict(*members, stack_dim=0)
    assert stack.get_at("r", 2).shape == torch.Size([2, 3])
    assert stack.get_at("missing", 0) is None  # as get, and upstream
    with set_get_defaults_to_none(False), pytest.raises(KeyError, match="'missing'"):
        stack.get_at("missing", 0)
    assert stack.get_at("missing", 0, default=1) == 1


def test_torch_where_with_the_td_second_picks_it_where_false() -> None:
    td = TensorDict({"a": torch.ones(2)}, [2])
    out = torch.where(torch.tensor([True, False]), 0.0, td)
    assert out["a"].tolist() == [0.0, 1.0]


def test_gather_and_masked_select_inplace_rebind_self() -> None:
    td = make()
    index = torch.tensor([[2, 1, 0]] * 4)
    assert td.gather(1, index, inplace=True) is td
    assert td["a"][0].tolist() == [2.0, 1.0, 0.0]
    assert td.masked_select(torch.tensor([True, False, True, False]), inplace=True) is td
    assert td.batch_size == torch.Size([2, 3]) and td["nested", "c"].shape == (2, 3, 5)


@pytest.mark.parametrize("lazy", [False, True])
def test_masked_fill_with_a_mask_past_the_batch_dims(lazy):
    td = TensorDict({"a": torch.zeros(16, 8, 3), "b": {"c": torch.zeros(16, 8)}}, [16, 8])
    if lazy:
        td = lazy_stack(list(td.unbind(1)), 1)
    mask = torch.zeros(16, 8, 1, dtype=torch.bool)
    mask[0] = True
    filled = td.masked_fill(mask, 1.0)  # the trailing 1 broadcasts over "a", is dropped for "c"
    assert filled["a"].sum() == 8 * 3 and filled["b", "c"].sum() == 8
    td.masked_fill_(mask, 2.0)
    assert td["a"][0].eq(2).all() and td["a"][1:].eq(0).all() and td["b", "c"][0].eq(2).all()
    wide = torch.ones(16, 8, 3, dtype=torch.bool)  # fits "a", not "c": refused before any write
    with pytest.raises(RuntimeError, match=r"does not fit entry \('b', 'c'\) of shape \[16, 8\]"):
        td.masked_fill_(wide, 5.0)
    assert not td["a"].eq(5).any()
