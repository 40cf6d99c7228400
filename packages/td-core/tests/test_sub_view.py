"""`td._get_sub_tensordict(idx)`: a view whose reads and writes go to the source."""

from __future__ import annotations

import pickle

import pytest
import torch

from td_core import TensorDict, lazy_stack
from td_core.errors import BatchSizeError, LockedError

BASIC = [1, (slice(None), 2), slice(1, 3)]
ADVANCED = [
    torch.tensor([0, 2]),
    (slice(None), torch.tensor([1, 3])),
    torch.tensor([True, False, True]),
]


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(24.0).reshape(3, 4, 2), "nested": {"x": torch.zeros(3, 4)}}, [3, 4]
    )


@pytest.mark.parametrize("idx", BASIC + ADVANCED, ids=str)
def test_new_key_lands_in_the_source(idx: object) -> None:
    td = _td()
    sub = td._get_sub_tensordict(idx)
    value = torch.ones(*sub.batch_size, 5)
    sub.set("c", value)
    assert td["c"].shape == (3, 4, 5)
    assert (td["c"][idx] == 1).all()
    assert td["c"].sum() == value.numel()  # the rest of the source stays zero
    assert (sub["c"] == value).all()


@pytest.mark.parametrize("idx", BASIC + ADVANCED, ids=str)
@pytest.mark.parametrize(
    "op",
    [
        lambda s: s.add_(1),
        lambda s: s.apply_(lambda t: t + 1),
        lambda s: s.update_(s.apply(lambda t: t + 1)),
        lambda s: s.copy_(s.apply(lambda t: t + 1)),
        lambda s: s.__setitem__(slice(None), s.apply(lambda t: t + 1)),
        lambda s: s.apply(lambda t: t + 1, inplace=True),
        lambda s: s.named_apply(lambda k, t: t + 1, inplace=True),
        lambda s: s._fast_apply(lambda t: t + 1, inplace=True),
        lambda s: [s.set_at_(k, s.get(k) + 1, slice(None)) for k in ("a", ("nested", "x"))],
        lambda s: s.update_at_(s.apply(lambda t: t + 1), slice(None)),
        lambda s: s.copy_at_(s.apply(lambda t: t + 1), slice(None)),
    ],
    ids=["add_", "apply_", "update_", "copy_", "setitem", "apply", "named_apply", "_fast_apply"]
    + ["set_at_", "update_at_", "copy_at_"],
)
def test_in_place_ops_write_through(idx: object, op: object) -> None:
    td = _td()
    before = td.clone()
    sub = td._get_sub_tensordict(idx)
    op(sub)  # type: ignore[operator]
    expected = before["a"].clone()
    expected[idx] += 1
    assert (td["a"] == expected).all()
    assert (td["nested", "x"][idx] == 1).all()


@pytest.mark.parametrize("idx", ADVANCED, ids=str)
def test_zero_and_fill_at_an_advanced_index(idx: object) -> None:
    td = _td()
    sub = td._get_sub_tensordict(idx)
    sub.fill_("a", -1.0)
    assert (td["a"][idx] == -1).all() and (td["a"] != -1).sum() > 0
    sub.zero_()
    assert (td["a"][idx] == 0).all()


def test_reads_follow_the_source() -> None:
    td = _td()
    sub = td._get_sub_tensordict(1)
    td["a"] = torch.full((3, 4, 2), 7.0)
    assert (sub["a"] == 7).all()
    td["late"] = torch.ones(3, 4)
    assert "late" in sub.keys()


def test_delete_through_the_view() -> None:
    td = _td()
    del td._get_sub_tensordict(0)["a"]
    assert "a" not in td.keys()


def test_bad_writes_change_nothing() -> None:
    td = _td()
    before = td.clone()
    sub = td._get_sub_tensordict(1)
    with pytest.raises(BatchSizeError, match="prohibited for existing tensors"):
        sub.set("a", torch.ones(4, 3))
    with pytest.raises(ValueError, match="Tried to replace a tensordict"):
        sub.set("nested", torch.ones(4))
    assert (td == before).all()
    td.lock_()
    with pytest.raises(LockedError):
        sub.set("new", torch.ones(4))
    assert "new" not in td.keys()


def test_batch_size_lock_and_names_are_the_sources() -> None:
    td = _td()
    sub = td._get_sub_tensordict((slice(None), 1))
    assert sub.batch_size == (3,)
    with pytest.raises(RuntimeError, match="lazy representation"):
        sub.batch_size = [1]
    with pytest.raises(RuntimeError, match="parent tensordict"):
        sub.lock_()
    td.names = ["b", "t"]
    assert sub.names == ["b"]
    with pytest.raises(RuntimeError, match="subtensordict cannot be modified"):
        sub.names = ["z"]


def test_views_compose() -> None:
    td = _td()
    chained = td._get_sub_tensordict(2)._get_sub_tensordict(3)
    direct = td._get_sub_tensordict((2, 3))
    assert (chained["a"] == direct["a"]).all()
    chained["a"] = torch.tensor([-5.0, -5.0])
    assert (td["a"][2, 3] == -5).all()


def test_memmap_in_place_is_refused_and_copies_are_plain() -> None:
    td = _td()
    sub = td._get_sub_tensordict(1)
    with pytest.raises(RuntimeError, match="sub-tensordict values to memmap"):
        sub.memmap_()
    copy = sub.clone()
    assert type(copy) is TensorDict
    copy["a"] += 1
    assert (td["a"][1] == sub["a"]).all()
    back = pickle.loads(pickle.dumps(sub))
    assert (back["a"] == sub["a"]).all()


def test_a_sub_view_of_a_lazy_stack_writes_into_the_members() -> None:
    members = [TensorDict({"a": torch.zeros(3)}, [3]) for _ in range(2)]
    stack = lazy_stack(members, 0)
    sub = stack._get_sub_tensordict(0)
    sub["a"] = torch.ones(3)  # the stack's reads are copies: the write must not land in one
    sub.apply_(lambda t: t.add_(1))
    assert bool((members[0]["a"] == 2).all()) and bool((members[1]["a"] == 0).all())


def test_an_existing_tensor_is_written_in_place_on_a_locked_source() -> None:
    td = _td().lock_()
    sub = td._get_sub_tensordict(1)
    sub["a"] = torch.full_like(sub["a"], 7.0)
    assert bool((td["a"][1] == 7).all())
    with pytest.raises(RuntimeError, match="locked"):
        sub["new"] = torch.zeros(sub.batch_size)
    assert "new" not in td.keys()


def test_set_of_an_existing_key_writes_into_the_source_rows() -> None:
    # td: `set` is a write like `sub[key] = v` (upstream refuses it without inplace=True)
    td = _td()
    a = td["a"]
    td._get_sub_tensordict((1, 2)).set("a", torch.full((2,), 5.0))
    assert td["a"] is a and td["a"][1, 2].tolist() == [5.0, 5.0]
    assert td["a"][0, 0].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("nested", [False, True])
def test_vmap_over_a_sub_tensordict_sees_its_current_values(nested: bool) -> None:
    td = _td()
    sub = td._get_sub_tensordict((slice(None), 1))
    arg = TensorDict({"parent": sub}, sub.batch_size) if nested else sub
    fun = torch.vmap(lambda x: x)
    out = fun(arg)
    view = out["parent"] if nested else out
    assert type(view) is TensorDict and view.batch_size == (3,)
    assert torch.equal(view["a"], td["a"][:, 1])
    sub.zero_()
    again = fun(arg)
    assert ((again["parent"] if nested else again)["a"] == 0).all()


def test_popitem_deletes_the_key_from_the_source() -> None:
    td = _td()
    sub = td._get_sub_tensordict(1)
    key, value = sub.popitem()
    assert key == "nested" and value.batch_size == (4,)
    assert list(td.keys()) == ["a"] and list(sub.keys()) == ["a"]


@pytest.mark.parametrize("idx", BASIC + ADVANCED, ids=str)
def test_lazy_stack_out_a_sub_writes_the_source_rows(idx: object) -> None:
    td = _td()
    sub = td._get_sub_tensordict(idx)
    n, rest = sub.batch_size[0], sub.batch_size[1:]
    members = [
        TensorDict({"a": torch.full((*rest, 2), i + 1.0), "nested": {"x": torch.ones(rest)}}, rest)
        for i in range(n)
    ]
    assert lazy_stack(members, 0, out=sub) is sub
    expected = _td()["a"].clone()
    expected[idx] = torch.stack([m["a"] for m in members])
    assert (td["a"] == expected).all()
    assert (td["nested", "x"][idx] == 1).all()


@pytest.mark.parametrize("idx", BASIC + ADVANCED, ids=str)
def test_inplace_apply_keeping_no_leaf_returns_none(idx: object) -> None:
    td = _td()
    sub = td._get_sub_tensordict(idx)
    assert sub.apply(lambda t: None, inplace=True, filter_empty=True) is None
    assert sub._fast_apply(lambda t: None, inplace=True, filter_empty=True) is None
    assert (td["a"] == _td()["a"]).all()
