"""Lazy stacks write through, run per member when ragged; non-tensor stacking; safe writes (issue 14)."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, NonTensorStack, TensorDict
from td_core.errors import LockedError


def _pair() -> tuple[TensorDict, TensorDict, LazyStackedTensorDict]:
    a = TensorDict(
        {"a": torch.zeros(3), "n": {"b": torch.zeros(3), "m": {"c": torch.zeros(3)}}}, [3]
    )
    b = a.clone()
    return a, b, LazyStackedTensorDict.lazy_stack([a, b], 0)


def _ragged() -> LazyStackedTensorDict:
    members = [
        TensorDict({"r": torch.full((3, i + 1), float(i)), "x": torch.zeros(3)}, [3])
        for i in range(3)
    ]
    return LazyStackedTensorDict.lazy_stack(members, 0)


@pytest.mark.parametrize("key", ["a", ("n", "b"), ("n", "m", "c")], ids=["top", "nested", "deeper"])
def test_set__writes_through_at_any_depth(key: object) -> None:
    a, b, s = _pair()
    s.set_(key, torch.stack([torch.ones(3), torch.full((3,), 2.0)]))
    assert (a[key] == 1).all() and (b[key] == 2).all()


def test_set__of_a_missing_key_says_so_in_upstreams_words() -> None:
    a, b, s = _pair()
    with pytest.raises(
        KeyError, match=r"setting a value in-place on a stack of TensorDict.*'nope'.*set\(\)"
    ):
        s.set_("nope", torch.zeros(2, 3))
    assert "nope" not in a.keys() and "nope" not in b.keys()


def test_inplace_writes_reach_the_members() -> None:
    a, b, s = _pair()
    s.update_({"n": {"b": torch.full((2, 3), 2.0)}})
    assert (a["n", "b"] == 2).all() and (b["n", "b"] == 2).all()
    s.set(("n", "m", "c"), torch.full((2, 3), 3.0), inplace=True)
    assert (b["n", "m", "c"] == 3).all()
    s["n"].set_("b", torch.full((2, 3), 4.0))
    assert (a["n", "b"] == 4).all()


def test_apply__writes_through() -> None:
    a, b, s = _pair()
    s.apply_(lambda t: t + 5)
    assert (a["n", "m", "c"] == 5).all() and (b["a"] == 5).all()


def test_zero__writes_through_nested_members() -> None:
    a, _b, s = _pair()
    a.apply_(lambda t: t + 1)
    s.zero_()
    assert (a["n", "m", "c"] == 0).all()


def test_apply__is_all_or_nothing() -> None:
    td = TensorDict(
        {"a": torch.zeros(3), "b": torch.zeros(3, dtype=torch.long), "c": torch.zeros(3)}, [3]
    )

    def fn(t: torch.Tensor) -> torch.Tensor:
        if t.dtype == torch.long:
            raise RuntimeError("boom")
        return t + 1

    with pytest.raises(RuntimeError, match="boom"):
        td.apply_(fn)
    assert (td["a"] == 0).all() and (td["c"] == 0).all()


def test_apply__refuses_a_result_that_does_not_fit_before_writing() -> None:
    td = TensorDict({"a": torch.zeros(3), "b": torch.zeros(3, 2)}, [3])
    with pytest.raises(RuntimeError, match="'b'"):
        td.apply_(lambda t: t[..., :1].expand(3, 4) if t.ndim == 2 else t + 1)
    assert (td["a"] == 0).all()


def test_repr_of_a_td_holding_a_ragged_lazy_stack() -> None:
    outer = TensorDict({"h": _ragged()}, [3])
    text = repr(outer)
    assert "LazyStackedTensorDict" in text
    assert "torch.Size([3, 3, -1])" in text


def test_stack_of_a_string_leaf_round_trips() -> None:
    td = TensorDict({"s": "hello", "x": torch.zeros(())}, [])
    stacked = torch.stack([td])
    (back,) = stacked.unbind(0)
    assert back["s"] == "hello"
    assert stacked[0]["s"] == "hello"


@pytest.mark.parametrize(
    "index",
    [torch.tensor([0, 2]), torch.tensor([True, False, True, False])],
    ids=["index", "mask"],
)
def test_index_write_of_another_dtype_raises_before_writing(index: torch.Tensor) -> None:
    td = TensorDict({"a": torch.zeros(4), "x": torch.zeros(4, dtype=torch.float64)}, [4])
    value = TensorDict({"a": torch.ones(2), "x": torch.ones(2, dtype=torch.float32)}, [2])
    with pytest.raises(RuntimeError, match=r"'x'.*float32.*float64") as info:
        td[index] = value
    from td_core.errors import DTypeError

    assert isinstance(info.value, DTypeError)
    assert (td["a"] == 0).all()  # nothing written


def test_int_and_slice_writes_still_cast() -> None:
    td = TensorDict({"x": torch.zeros(4, dtype=torch.float64)}, [4])
    td[0] = TensorDict({"x": torch.ones((), dtype=torch.float32)}, [])
    td[1:3] = TensorDict({"x": torch.ones(2, dtype=torch.float32)}, [2])
    assert td["x"].tolist() == [1.0, 1.0, 1.0, 0.0]


# ------------------------------------------------------------- ragged lazy stacks
def test_ragged_ops_run_per_member_and_stay_lazy() -> None:
    s = _ragged()
    out = (s + 1).clone()
    assert isinstance(out, LazyStackedTensorDict)
    assert [t["r"].shape[-1] for t in out.tensordicts] == [1, 2, 3]
    assert (out.tensordicts[2]["r"] == 3).all()
    assert isinstance(s == s, LazyStackedTensorDict)
    assert list(s.select("r").tensordicts[1].keys()) == ["r"]
    assert list(s.exclude("r").keys()) == ["x"]
    assert s.to(torch.float64).tensordicts[0]["r"].dtype == torch.float64


def test_ragged_batch_ops_keep_views_of_the_members() -> None:
    s = _ragged()
    u = s.unsqueeze(0)
    assert u.batch_size == torch.Size([1, 3, 3])
    assert u.get_item_shape("r") == torch.Size([1, 3, 3, -1])
    t = s.unsqueeze(-1)
    assert t.batch_size == torch.Size([3, 3, 1])
    t.tensordicts[1]["r"].zero_()  # a view of member 1's leaf
    assert (s.tensordicts[1]["r"] == 0).all()
    p = s.transpose(0, 1)
    assert p.batch_size == torch.Size([3, 3]) and p.stack_dim == 1
    assert p[0, 2]["r"].shape == torch.Size([3])


def test_ragged_reshape_keeps_each_row_with_its_member() -> None:
    s = _ragged()
    s.tensordicts[2]["x"] += torch.arange(3.0)
    flat = s.reshape(-1)
    assert flat.batch_size == torch.Size([9])
    assert [flat[j]["r"].shape[-1] for j in range(9)] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert flat[7]["x"].item() == 1.0


def test_reductions_over_a_ragged_stack_dim_raise_instead_of_picking_a_member() -> None:
    s = _ragged()
    with pytest.raises(ValueError, match="different shapes"):
        s.all(dim=0)
    assert s.all() is False or s.all() is True  # over every element: no stacking needed


def test_an_index_write_of_new_keys_fills_the_members_left_out_as_dense_does():
    mask = torch.tensor([False, False, True])
    value = TensorDict(
        s=NonTensorStack("new"), x=torch.ones(1, 2), n={"y": torch.ones(1)}, batch_size=[1]
    )
    stack = LazyStackedTensorDict(*[TensorDict() for _ in range(3)])
    stack[mask] = value
    dense = TensorDict(batch_size=[3])
    dense[mask] = value
    assert stack["s"] == dense["s"] == [None, None, "new"]
    assert torch.equal(stack["x"], dense["x"]) and torch.equal(stack["n", "y"], dense["n", "y"])
    locked = LazyStackedTensorDict(*[TensorDict() for _ in range(3)])
    locked.tensordicts[0].lock_()
    with pytest.raises(LockedError, match="new key"):
        locked[mask] = value
    assert [list(m.keys()) for m in locked.tensordicts] == [[], [], []]  # nothing written


@pytest.mark.parametrize("lazy", [True, False])
def test_mask_write_of_non_tensor_stack_with_dims_past_the_batch(lazy: bool) -> None:
    # a new non-tensor key whose values carry a dim past the batch: the rows written get
    # their values, the row left out gets None with the same trailing dim
    src = TensorDict(
        a=TensorDict(b=NonTensorStack("a", "b", "c").unsqueeze(-1), batch_size=(3,)),
        batch_size=(3,),
    )
    if lazy:
        src = src.to_lazystack()
        dest = src.new_zeros((4,), empty_lazy=True)
    else:
        dest = TensorDict(a=TensorDict(batch_size=4), batch_size=4)
    dest[torch.tensor([True, True, False, True])] = src
    assert dest.get(("a", "b")).tolist() == [["a"], ["b"], [None], ["c"]]
