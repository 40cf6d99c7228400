"""Building lazy stacks: empty stacks filled later, `out=`, `strict_shape`, `stack_dim_name`."""

from __future__ import annotations

import pickle

import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    TensorDict,
    TensorDictParams,
    lazy_stack,
    set_lazy_stack,
)
from td_core.errors import BatchSizeError, DimError


def _row(value: float) -> TensorDict:
    return TensorDict(a=torch.full((3, 2), value), batch_size=[3])


def test_empty_lazy_stack_is_filled_by_append() -> None:
    stack = LazyStackedTensorDict(stack_dim=0)
    assert stack.batch_size == torch.Size([0])
    assert list(stack.keys()) == []
    assert not stack.is_shared()
    stack.append(TensorDict(a=torch.zeros(())))
    stack.append(TensorDict(a=torch.ones(())))
    assert stack.batch_size == torch.Size([2])
    assert stack["a"].tolist() == [0.0, 1.0]


def test_empty_lazy_stack_takes_the_members_batch_size() -> None:
    stack = LazyStackedTensorDict(stack_dim=1, batch_size=[3])
    assert stack.batch_size == torch.Size([3, 0])
    with pytest.raises(BatchSizeError, match=r"batch_size \[2\]"):
        stack.append(TensorDict(a=torch.zeros(2), batch_size=[2]))
    stack.extend([_row(0.0), _row(1.0)])
    assert stack.batch_size == torch.Size([3, 2])
    assert stack["a"].shape == torch.Size([3, 2, 2])
    restored = pickle.loads(pickle.dumps(LazyStackedTensorDict(stack_dim=0, batch_size=[4])))
    assert restored.batch_size == torch.Size([0, 4])


def test_empty_lazy_stack_refuses_writes_it_cannot_keep() -> None:
    stack = LazyStackedTensorDict(stack_dim=0, batch_size=[3])
    with pytest.raises(BatchSizeError, match="no member"):
        stack.set("a", torch.zeros(0, 3))
    with pytest.raises(BatchSizeError, match="members' batch size"):
        LazyStackedTensorDict(_row(0.0), stack_dim=0, batch_size=[4])


def test_lazy_stack_out_writes_in_place_and_returns_out() -> None:
    out = TensorDict(a=torch.zeros(2, 3, 2), batch_size=[2, 3])
    ptr = out["a"].data_ptr()
    for stacker in (LazyStackedTensorDict.lazy_stack, lazy_stack, TensorDict.lazy_stack):
        result = stacker([_row(1.0), _row(2.0)], 0, out=out)
        assert result is out
        assert out["a"].data_ptr() == ptr
        assert out["a"][1].eq(2.0).all() and out["a"][0].eq(1.0).all()
        out.zero_()


def test_lazy_stack_out_into_lazy_members() -> None:
    members = [_row(0.0), _row(0.0)]
    out = lazy_stack(members, 0)
    assert lazy_stack([_row(5.0), _row(6.0)], 0, out=out) is out
    assert members[0]["a"].eq(5.0).all() and members[1]["a"].eq(6.0).all()


def test_stack_out_ignores_the_lazy_stack_mode() -> None:
    out = TensorDict(a=torch.zeros(2, 3, 2), batch_size=[2, 3])
    with set_lazy_stack(True):
        result = torch.stack([_row(1.0), _row(2.0)], 0, out=out)
    assert result is out and out["a"].sum() == 18.0


def test_stack_out_refuses_a_batch_size_mismatch_unchanged() -> None:
    out = TensorDict(a=torch.zeros(3, 2, 2), batch_size=[3, 2])
    with pytest.raises(RuntimeError, match=r"out.batch_size \[3, 2\] and stacked batch size"):
        lazy_stack([_row(1.0), _row(2.0)], 0, out=out)
    assert out["a"].eq(0).all()


def test_stack_out_into_grad_leaves_is_refused() -> None:
    out = TensorDict(a=torch.zeros(2, 3, 2, requires_grad=True), batch_size=[2, 3])
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        lazy_stack([_row(1.0), _row(2.0)], 0, out=out)
    assert out["a"].eq(0).all()
    with torch.no_grad():
        lazy_stack([_row(1.0), _row(2.0)], 0, out=out)
    assert out["a"].sum() == 18.0


def test_stack_out_into_params_writes_their_data() -> None:
    # as upstream (and as `TensorDictParams.update_`): the values go into the parameters' data
    out = TensorDictParams(TensorDict(a=torch.zeros(2, 3, 2), batch_size=[2, 3]))
    param = out["a"]
    assert lazy_stack([_row(1.0), _row(2.0)], 0, out=out) is out
    assert out["a"] is param and param.requires_grad and param.sum() == 18.0
    grad_row = _row(5.0).apply(lambda t: t.requires_grad_())
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        lazy_stack([grad_row, _row(2.0)], 0, out=out)
    assert param.sum() == 18.0


def test_lazy_stack_strict_shape_and_dim_name() -> None:
    ragged = TensorDict(a=torch.zeros(3, 5), batch_size=[3])
    assert lazy_stack([_row(0.0), ragged]).batch_size == torch.Size([2, 3])
    with pytest.raises(BatchSizeError, match="strict_shape"):
        lazy_stack([_row(0.0), ragged], strict_shape=True)
    named = LazyStackedTensorDict.lazy_stack([_row(0.0), _row(1.0)], 0, stack_dim_name="time")
    assert named.names == ["time", None]
    with pytest.raises(ValueError, match="at least one"):
        lazy_stack([])


def test_non_tensor_data_survives_stack_and_unbind() -> None:
    td = TensorDict(a=NonTensorData("hello", batch_size=[1]), batch_size=[1])
    stacked = torch.stack([td])
    assert stacked.unbind(0)[0]["a"] == "hello"
    assert stacked[0]["a"] == "hello"
    assert stacked.clone().unbind(0)[0]["a"] == "hello"
    assert stacked["a"] == [["hello"]]
    other = TensorDict(a=NonTensorData("bye", batch_size=[1]), batch_size=[1])
    pair = torch.stack([td, other], 1)
    assert pair.unbind(1)[1]["a"] == "bye"
    assert pair[0]["a"] == ["hello", "bye"]


def _ragged() -> LazyStackedTensorDict:
    return lazy_stack(
        [
            TensorDict(a=torch.zeros(3, 4), batch_size=[3]),
            TensorDict(a=torch.ones(3, 5), batch_size=[3]),
        ]
    )


def test_update_between_ragged_lazy_stacks_goes_member_by_member() -> None:
    target, source = _ragged(), _ragged().apply(lambda x: x + 10)
    assert target.update(source) is target
    assert target.tensordicts[1]["a"].eq(11).all()
    target.update_(source.apply(lambda x: x * 2))
    assert target.tensordicts[0]["a"].eq(20).all()
    with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
        target.update(source.to_tensordict())


def test_cat_of_ragged_lazy_stacks_into_out() -> None:
    target, source = _ragged(), _ragged().apply(lambda x: x + 1)
    ptrs = [td["a"].data_ptr() for td in target.tensordicts]
    assert torch.cat([source], 0, out=target) is target
    assert [td["a"].data_ptr() for td in target.tensordicts] == ptrs
    assert target.tensordicts[1]["a"].eq(2).all()
    with pytest.raises(RuntimeError, match=r"out\.batch_size"):
        torch.cat([source, source], 0, out=target)


def test_get_ragged_leaf_as_list_or_padded() -> None:
    stack = lazy_stack([TensorDict(x=torch.ones(1)), TensorDict(x=torch.full((2,), 2.0))])
    assert [t.tolist() for t in stack.get("x", as_list=True)] == [[1.0], [2.0, 2.0]]
    assert stack.get("x", as_padded_tensor=True).tolist() == [[1.0, 0.0], [2.0, 2.0]]
    padded = stack.get("x", as_padded_tensor=True, padding_side="left", padding_value=-1)
    assert padded.tolist() == [[-1.0, 1.0], [2.0, 2.0]]
    with pytest.raises(TypeError, match="exclusive"):
        stack.get("x", as_list=True, as_padded_tensor=True)


def _holder(value: float) -> TensorDict:
    """A dense TensorDict holding a ragged lazy stack under "lazy"."""
    stack = _ragged().apply(lambda x: x + value)
    return TensorDict({"lazy": stack, "dense": torch.full((2, 3), value)}, batch_size=[2, 3])


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_stack_of_tensordicts_holding_ragged_lazy_stacks(dim: int) -> None:
    stacked = torch.stack([_holder(0.0), _holder(1.0)], dim)
    assert type(stacked) is TensorDict and stacked.batch_size[dim] == 2
    inner = stacked.get("lazy")
    assert isinstance(inner, LazyStackedTensorDict)
    for i in range(2):
        picked = stacked[(slice(None),) * dim + (i,)]
        assert picked["lazy"].tensordicts[1]["a"].eq(1.0 + i).all()
        assert picked["dense"].eq(i).all()


def test_stack_out_and_row_write_into_ragged_nested_lazy_stacks() -> None:
    out = _holder(0.0).unsqueeze(0).expand(2, 2, 3).clone()
    ptrs = [td["a"].data_ptr() for td in out["lazy"].tensordicts]
    assert lazy_stack([_holder(5.0), _holder(6.0)], 0, out=out) is out
    assert [td["a"].data_ptr() for td in out["lazy"].tensordicts] == ptrs
    assert out[1]["lazy"].tensordicts[0]["a"].eq(6.0).all()
    out[0] = _holder(7.0)
    assert out[0]["lazy"].tensordicts[1]["a"].eq(8.0).all()
    assert out[1]["lazy"].tensordicts[1]["a"].eq(7.0).all()
    bad = _holder(1.0)
    bad["dense"] = torch.zeros(2, 3, dtype=torch.long)
    bad.get("lazy").tensordicts[0].set("a", torch.zeros(3, 9))
    with pytest.raises(RuntimeError):
        out[0] = bad
    assert out[0]["dense"].eq(7.0).all()  # nothing written


@pytest.mark.parametrize("stack_dim", [0, 1, 2])
@pytest.mark.parametrize("mask_dims", [(0, 1), (1, 2), (0, 1, 2)])
def test_mask_write_across_the_stack_dim(stack_dim: int, mask_dims: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(stack_dim)
    base = TensorDict(a=torch.zeros(3, 4, 2), batch_size=[3, 4])
    stack = lazy_stack([base.apply(lambda x, i=i: x + i) for i in range(5)], stack_dim)
    dense = stack.contiguous()
    first = mask_dims[0]
    mask = torch.rand(stack.shape[first : mask_dims[-1] + 1], generator=gen) > 0.5
    index = (slice(None),) * first + (mask,)
    value = dense[index].apply(lambda x: -torch.ones_like(x) * 7)
    stack[index] = value
    dense[index] = value
    assert (stack["a"] == dense["a"]).all()
    stack[index] = 3.0
    assert (stack["a"][index] == 3.0).all()


def test_mask_write_across_the_stack_dim_is_all_or_nothing() -> None:
    stack = lazy_stack([TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)], 1)
    mask = torch.tensor([[True, False], [False, True], [True, True]])
    bad = TensorDict(a=torch.ones(4, 5), batch_size=[4])
    with pytest.raises(RuntimeError):
        stack[mask] = bad
    assert (stack["a"] == 0).all()


def test_member_checks_name_the_rule() -> None:
    stack = lazy_stack([_row(0.0), _row(1.0)])
    with pytest.raises(TypeError, match="Expected new value to be TensorDictBase instance"):
        stack.append(torch.zeros(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Batch sizes in tensordicts differs.*\[17\]"):
        stack.insert(0, TensorDict(a=torch.zeros(17), batch_size=[17]))
    assert stack.batch_size == torch.Size([2, 3])
    short, long = TensorDict(batch_size=[3, 4]), TensorDict(batch_size=[3, 5])
    with pytest.raises(RuntimeError, match="stacking tensordicts requires"):
        TensorDict.lazy_stack([short, long], strict_shape=True)
    with pytest.raises(RuntimeError, match="batch sizes in tensordicts differs"):
        LazyStackedTensorDict(short, long, strict_shape=True)


def test_update_dense_entry_with_a_ragged_lazy_stack_makes_it_lazy() -> None:
    first = TensorDict({("a", "c"): torch.ones(3, 4), ("a", "d"): torch.ones(3, 4)}, [3])
    second = TensorDict({("a", "c"): torch.full((3, 5), 2.0)}, [3])
    source = TensorDict({"parent": lazy_stack([first, second])}, [2])
    target = TensorDict(
        {("parent", "a", "c"): torch.zeros(2, 3, 4), ("parent", "a", "e"): torch.zeros(2, 3, 4)},
        [2],
    )
    target.update(source)
    parent = target.get(("parent", "a"))
    assert isinstance(target.get("parent"), LazyStackedTensorDict)
    assert parent[0]["c"].eq(1).all() and parent[1]["c"].eq(2).all()
    assert parent[0]["d"].eq(1).all() and "d" not in parent[1].keys()
    assert parent["e"].eq(0).all()  # kept


def test_empty_selection_of_a_ragged_lazy_stack_is_an_empty_lazy_stack() -> None:
    stack = lazy_stack([TensorDict(a=torch.zeros(2, n), batch_size=[2]) for n in (3, 4, 5)], 1)
    pieces = stack.split([2, 0, 1], 1)
    assert pieces[1].batch_size == torch.Size([2, 0])
    assert isinstance(pieces[1], LazyStackedTensorDict)
    assert (torch.cat(pieces, 1) == stack).all()
    none = stack[:, torch.zeros(3, dtype=torch.bool)]
    assert none.batch_size == torch.Size([2, 0])


def test_cat_with_a_lazy_stack_is_a_lazy_stack() -> None:
    stack = lazy_stack(
        [TensorDict(a=torch.full((2, 3), float(i)), batch_size=[2, 3]) for i in range(2)]
    )
    dense = TensorDict(a=torch.arange(12.0).reshape(2, 2, 3), batch_size=[2, 2, 3])
    along = torch.cat([stack, dense], 0)
    assert isinstance(along, LazyStackedTensorDict) and along.stack_dim == 0
    assert len(along.tensordicts) == 4 and along.tensordicts[0] is stack.tensordicts[0]
    assert (along["a"][2:] == dense["a"]).all()
    wide = TensorDict(a=torch.arange(18.0).reshape(2, 3, 3), batch_size=[2, 3, 3])
    across = torch.cat([stack, wide], 1)
    assert isinstance(across, LazyStackedTensorDict) and across.batch_size == torch.Size([2, 5, 3])
    assert (across["a"] == torch.cat([stack["a"], wide["a"]], 1)).all()
    three = lazy_stack([TensorDict(a=torch.zeros(3, 3), batch_size=[3, 3]) for _ in range(3)])
    with pytest.raises(RuntimeError, match="same number of stacked tensordicts"):
        torch.cat([stack, three], 1)


def test_ragged_reads_name_the_failure_in_upstream_words() -> None:
    stack = lazy_stack([_row(0.0), TensorDict(a=torch.zeros(3, 5), batch_size=[3])], 1)
    for read in (lambda: stack["a"], stack.contiguous, stack.to_tensordict):
        with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
            read()
    with pytest.raises(RuntimeError, match="can only be called when the stack_dim is 0"):
        stack.get_nestedtensor("a")


def test_members_of_different_sizes_give_minus_one_in_the_batch_size() -> None:
    short = TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4])
    long = TensorDict(a=torch.ones(3, 5), batch_size=[3, 5])
    stack = LazyStackedTensorDict(short, long, stack_dim=1)
    assert stack.batch_size == (3, 2, -1)
    assert lazy_stack([short, long], -1).batch_size == (3, -1, 2)
    assert stack[0].batch_size == (2, -1)
    assert stack[:, 1] is long
    assert stack[:, :, 0].batch_size == (3, 2)
    assert stack[:, :, -2:].batch_size == (3, 2, 2)
    assert [m.batch_size for m in stack.unbind(1)] == [(3, 4), (3, 5)]
    with pytest.raises(BatchSizeError, match="different shapes"):  # no one tensor holds it
        stack.get("a")
    assert [t.shape for t in stack.get("a", as_list=True)] == [(3, 4), (3, 5)]
    assert (stack + 1 == stack.apply(lambda t: t + 1)).all()


def test_members_of_another_rank_or_a_bad_stack_dim_are_refused() -> None:
    td0, td1 = TensorDict(batch_size=(3, 5)), TensorDict(batch_size=(4, 5))
    with pytest.raises(BatchSizeError, match="as many batch dims"):
        lazy_stack([td0, td1, TensorDict()])
    with pytest.raises(DimError, match="stack_dim -4 is out of range"):
        lazy_stack([td0, td1], -4)
    with pytest.raises(RuntimeError, match="batch sizes in tensordicts differs"):
        LazyStackedTensorDict(td0, td1, strict_shape=True)


def test_comparing_tensordicts_holding_ragged_lazy_stacks_goes_member_by_member() -> None:
    ragged = lazy_stack([TensorDict(r=torch.ones(n), batch_size=[n]) for n in (3, 4)], -1)
    td = TensorDict(x=ragged)
    other = td.clone()
    assert (td == other).all()
    other["x"].tensordicts[1]["r"][0] = 0
    assert not (td == other).all()
