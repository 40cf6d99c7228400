import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    TensorDict,
    lazy_stack,
    lazy_stack_enabled,
    set_lazy_stack,
)


def members(n=3, batch=(4,)):
    return [
        TensorDict(
            {"a": torch.full((*batch, 2), float(i)), "n": {"b": torch.full(batch, float(i))}},
            list(batch),
        )
        for i in range(n)
    ]


def test_overview_seed_lazy_evaluation():
    tensordicts = [
        TensorDict({"a": torch.rand(10), "b": torch.rand(10, 100, 100)}, [10]) for _ in range(3)
    ]
    with set_lazy_stack(True):
        stacked = torch.stack(tensordicts, 0)  # no stacking happens here
    assert isinstance(stacked, LazyStackedTensorDict)
    stacked_a = stacked["a"]
    assert stacked_a.shape == torch.Size([3, 10])
    stacked["a"] = torch.zeros_like(stacked["a"])
    assert (tensordicts[0]["a"] == 0).all()


def test_torch_stack_is_dense_outside_the_context():
    assert not lazy_stack_enabled()
    out = torch.stack(members(), 0)
    assert type(out) is TensorDict

    @set_lazy_stack(True)
    def build():
        return torch.stack(members(), 0)

    assert isinstance(build(), LazyStackedTensorDict)
    assert not lazy_stack_enabled()


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_reads_match_dense_stack(dim):
    tds = members()
    lazy, dense = lazy_stack(tds, dim), torch.stack(tds, dim)
    assert lazy.batch_size == dense.batch_size
    assert torch.equal(lazy["a"], dense["a"])
    assert torch.equal(lazy["n", "b"], dense["n", "b"])
    assert lazy.get_item_shape("a") == dense["a"].shape
    assert (lazy.contiguous() == dense).all()


def test_nested_entries_are_lazy_and_write_through():
    tds = members()
    lazy = lazy_stack(tds)
    assert isinstance(lazy["n"], LazyStackedTensorDict)
    lazy["n", "b"] = torch.ones(3, 4)
    lazy["n", "new"] = torch.arange(12.0).view(3, 4)
    for i, td in enumerate(tds):
        assert torch.equal(td["n", "b"], torch.ones(4))
        assert torch.equal(td["n", "new"], torch.arange(4.0) + 4 * i)


def test_index_along_stack_dim_returns_members():
    tds = members()
    lazy = lazy_stack(tds)
    assert lazy[1] is tds[1]
    part = lazy[0:2]
    assert isinstance(part, LazyStackedTensorDict) and part.tensordicts == tds[:2]
    picked = lazy[[2, 0]]
    assert picked.tensordicts == [tds[2], tds[0]]
    masked = lazy[torch.tensor([True, False, True])]
    assert masked.tensordicts == [tds[0], tds[2]]


def test_index_across_stack_dim():
    tds = members()
    lazy, dense = lazy_stack(tds), torch.stack(tds)
    for index in [
        (slice(None), 1),
        (1, slice(1, 3)),
        (slice(0, 2), torch.tensor([0, 3])),
        (None, 0),
    ]:
        got = lazy[index]
        assert got.batch_size == dense[index].batch_size, index
        assert torch.equal(got["a"], dense[index]["a"]), index


def test_indexed_writes_reach_the_members():
    tds = members()
    lazy = lazy_stack(tds)
    lazy[1] = TensorDict({"a": torch.full((4, 2), 9.0), "n": {"b": torch.full((4,), 9.0)}}, [4])
    assert (tds[1]["a"] == 9).all() and (tds[1]["n", "b"] == 9).all()
    lazy[0:2, 3] = 5.0
    assert tds[0]["a"][3].eq(5).all() and tds[1]["n", "b"][3] == 5
    assert tds[2]["a"][3].eq(2).all()
    rows = TensorDict({"a": torch.zeros(2, 2), "n": {"b": torch.zeros(2)}}, [2])
    lazy[[0, 2], 1] = rows
    assert tds[0]["a"][1].eq(0).all() and tds[2]["a"][1].eq(0).all()


def test_failed_write_changes_no_member():
    tds = members()
    lazy = lazy_stack(tds)
    bad = TensorDict({"a": torch.zeros(2, 4, 7), "n": {"b": torch.zeros(2, 4)}}, [2, 4])
    before = [td.clone() for td in tds]
    with pytest.raises(RuntimeError, match="'a'"):
        lazy[0:2] = bad
    for td, old in zip(tds, before):
        assert (td == old).all()


@pytest.mark.parametrize("stack_dim", [0, 1])
def test_entries_of_different_ranks_print_with_an_unknown_shape(stack_dim):
    # members whose entry does not even share its number of dims: the shape is unknown
    # ([-1], as upstream), the repr prints it instead of raising, a read still refuses
    x = TensorDict({"a": torch.zeros(2, 3), "b": torch.zeros(2, 2, 3)}, [2])
    y = TensorDict({"a": torch.zeros(2, 2), "b": torch.zeros(2)}, [2])
    lazy = lazy_stack([x, y], stack_dim)
    assert lazy.get_item_shape("b") == torch.Size([-1])
    assert lazy.get_item_shape("a") == torch.Size([2, 2, -1])
    text = repr(lazy)
    assert "b: Tensor(shape=torch.Size([-1])" in text
    assert "a: Tensor(shape=torch.Size([2, 2, -1])" in text
    with pytest.raises(RuntimeError, match="'b'"):
        lazy["b"]
    assert [t.shape for t in lazy.get("b", as_list=True)] == [x["b"].shape, y["b"].shape]


def test_exclusive_keys_and_ragged_leaves():
    x = TensorDict({"a": torch.zeros(2, 3), "only_x": torch.zeros(2)}, [2])
    y = TensorDict({"a": torch.zeros(2, 5)}, [2])
    lazy = lazy_stack([x, y])
    assert list(lazy.keys()) == ["a"]
    assert lazy.exclusive_keys() == [["only_x"], []]
    assert lazy.get_item_shape("a") == torch.Size([2, 2, -1])
    with pytest.raises(RuntimeError, match=r"'a'.*different shapes"):
        lazy["a"]
    nested = lazy.get("a", as_nested_tensor=True)
    assert nested.is_nested
    assert (
        "exclusive_fields" in repr(lazy) and "only_x" in repr(lazy) and "stack_dim=0" in repr(lazy)
    )


def test_members_must_share_their_number_of_batch_dims():
    with pytest.raises(RuntimeError, match=r"\[3, 1\].*\[4\]"):
        lazy_stack([TensorDict({}, [4]), TensorDict({}, [3, 1])])
    # one rank, other sizes: the dim reads -1, as upstream
    assert lazy_stack([TensorDict({}, [4]), TensorDict({}, [3])]).batch_size == (2, -1)


def test_stack_of_lazy_stacks_and_unbind():
    tds = members()
    lazy = lazy_stack(tds)
    assert lazy.unbind(0) == tuple(tds)
    outer = torch.stack([lazy, lazy], 0)
    assert outer.batch_size == torch.Size([2, 3, 4])
    assert torch.equal(outer["a"][1], lazy["a"])
    with set_lazy_stack(True):
        nested_lazy = torch.stack([lazy, lazy], 1)
    assert nested_lazy.batch_size == torch.Size([3, 2, 4])
    assert torch.equal(nested_lazy["a"][:, 0], lazy["a"])


def test_generic_ops_work_through_the_base():
    lazy = lazy_stack(members())
    dense = lazy.contiguous()
    assert torch.equal((lazy + 1)["a"], dense["a"] + 1)
    assert lazy.reshape(-1).batch_size == torch.Size([12])
    assert torch.equal(lazy.apply(lambda x: x * 2)["n", "b"], dense["n", "b"] * 2)
    assert set(lazy.keys(include_nested=True, leaves_only=True)) == {"a", ("n", "b")}


def test_vmap_over_a_lazy_stack():
    lazy = lazy_stack(members())
    out = torch.vmap(lambda td: td["a"].sum(-1) + td["n", "b"])(lazy)
    assert torch.equal(out, lazy["a"].sum(-1) + lazy["n", "b"])


def test_clear_device_walks_members_without_stacking():
    ragged = lazy_stack(
        [TensorDict({"a": torch.zeros(2, 2)}, [2]), TensorDict({"a": torch.zeros(2, 3)}, [2])]
    )
    assert ragged.clear_device_() is ragged


def _ragged_pair() -> LazyStackedTensorDict:
    return lazy_stack(
        [
            TensorDict({"a": torch.zeros(2, 1), "n": {"b": torch.ones(2)}}, [2]),
            TensorDict({"a": torch.ones(2, 2), "n": {"b": torch.ones(2)}}, [2]),
        ],
        1,
    )


def test_a_short_index_keeps_the_dims_before_the_stack_dim():
    # td[0] on a stack along dim 2: the result's stack dim is 1, not 0
    stacked = lazy_stack([_ragged_pair(), _ragged_pair()], 2)
    assert stacked.batch_size == torch.Size([2, 2, 2])
    row = stacked[0]
    assert row.batch_size == torch.Size([2, 2])
    assert row.stack_dim == 1


def test_none_in_an_index_of_a_ragged_stack_adds_dims_without_stacking():
    ragged = _ragged_pair()
    for index, shape in [((None,), [1, 2, 2]), ((0, None), [1, 2]), ((..., None), [2, 2, 1])]:
        assert list(ragged[index].batch_size) == shape


def test_keys_of_a_stack_of_ragged_stacks_do_not_stack_leaves():
    outer = lazy_stack([_ragged_pair(), _ragged_pair()], 0)
    assert set(outer.keys(True, True)) == {"a", ("n", "b")}


def test_the_stack_dim_name_survives_per_member_ops():
    ragged = _ragged_pair().refine_names("row", "member")
    assert ragged.clone().names == ["row", "member"]
    assert ragged.apply(lambda t: t + 1).names == ["row", "member"]
    assert ragged.unsqueeze(0).names == [None, "row", "member"]
    assert ragged.get("n").names == ["row", "member"]


def test_a_constant_batch_op_on_a_ragged_stack_raises():
    # new_ones has no member to take the ragged leaf's shape from
    with pytest.raises(RuntimeError, match="mixes the members"):
        _ragged_pair().new_ones(3)


def test_lazy_from_list_stacks_ragged_rows_lazily():
    out = LazyStackedTensorDict.from_list([{"c": torch.zeros(2)}, {"c": torch.ones(3)}])
    assert isinstance(out, LazyStackedTensorDict)
    assert out.batch_size == torch.Size([2])
    assert out.tensordicts[1]["c"].shape == (3,)


def test_lazy_from_list_is_lazy_by_default_and_obeys_lazy_false():
    rows = [{"c": torch.zeros(2)}, {"c": torch.ones(2)}]
    assert type(LazyStackedTensorDict.from_list(rows)) is LazyStackedTensorDict
    assert type(LazyStackedTensorDict.from_list(rows, lazy=False)) is TensorDict
    assert type(TensorDict.from_list(rows)) is TensorDict


def test_setting_a_lazy_stacks_batch_size_names_the_fix():
    stack = lazy_stack([TensorDict({"a": torch.zeros(3)}, [3]) for _ in range(2)])
    with pytest.raises(RuntimeError, match=r"not permitted\. Consider .*to_tensordict\(\)"):
        stack.batch_size = [2]
    assert stack.batch_size == (2, 3)


def test_new_empty_with_empty_lazy_gives_lazy_stacks_without_leaves():
    members = [
        TensorDict(x=torch.ones(1), n={"y": torch.ones(1, 2)}, batch_size=[1]) for _ in range(4)
    ]
    td = TensorDict(
        dense=torch.randn(1, 4),
        sparse=LazyStackedTensorDict(*members, stack_dim=1),
        batch_size=[1, 4],
    )
    out = td.new_empty((2, 7, 3), empty_lazy=True)
    sparse = out["sparse"]
    assert isinstance(sparse, LazyStackedTensorDict) and sparse.stack_dim == 1
    assert sparse.batch_size == (2, 7, 3) and len(sparse.tensordicts) == 7
    assert sparse.is_empty() and ("n",) in [(k,) for k in sparse.keys()]  # structure kept
    assert out["dense"].shape == (2, 7, 3)
    assert type(td.new_empty((2, 7, 3))["sparse"]) is TensorDict  # without it: dense
    assert (members[0]["x"] == 1).all()  # the source is untouched


def test_data_ptr_of_a_nested_lazy_stack_gives_each_members_pointers() -> None:
    members = [TensorDict(x=torch.zeros(2, i + 1), batch_size=[2]) for i in range(2)]
    outer = TensorDict(seq=lazy_stack(members), batch_size=[2])
    ptrs = outer.data_ptr()
    assert set(ptrs.keys(True, True)) == {("seq", "0", "x"), ("seq", "1", "x")}
    assert [ptrs["seq", str(i), "x"].item() for i in range(2)] == [
        m["x"].data_ptr() for m in members
    ]
