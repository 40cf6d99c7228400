"""A tensorclass over a lazy stack whose members' entries differ in shape (ragged)."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, assert_close, lazy_stack, tensorclass
from td_core.errors import BatchSizeError


@tensorclass
class Row:
    x: torch.Tensor
    y: torch.Tensor


def _ragged() -> LazyStackedTensorDict:
    return lazy_stack(
        [
            TensorDict(x=torch.ones(3), y=torch.zeros(())),
            TensorDict(x=torch.full((2,), 2.0), y=torch.ones(())),
        ]
    )


def test_from_tensordict_keeps_a_ragged_stack_and_walks_its_keys() -> None:
    obj = Row.from_tensordict(_ragged())
    outer = TensorDict(r=obj)
    assert set(outer.keys(include_nested=True)) == {"r", ("r", "x"), ("r", "y")}
    assert set(outer.keys(include_nested=True, leaves_only=True)) == {("r", "x"), ("r", "y")}
    assert obj.batch_size == torch.Size([2])
    assert obj.y.tolist() == [0.0, 1.0]  # the entries that do stack still read stacked


def test_ragged_reads_go_to_the_members() -> None:
    obj = Row.from_tensordict(_ragged())
    assert [t.shape for t in obj.get("x", as_list=True)] == [torch.Size([3]), torch.Size([2])]
    assert obj.get("x", as_nested_tensor=True).is_nested
    padded = obj.get("x", as_padded_tensor=True)
    assert padded.tolist() == [[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]
    with pytest.raises(BatchSizeError, match="'x'"):
        obj.get("x")  # no one shape to stack to: the error names the entry


def test_index_and_unbind_give_instances_and_assert_close_goes_member_by_member() -> None:
    obj = Row.from_tensordict(_ragged())
    first = obj[1]
    assert type(first) is Row and first.x.tolist() == [2.0, 2.0]
    rows = obj.unbind(0)
    assert [type(r) for r in rows] == [Row, Row]
    assert [r.x.shape[0] for r in rows] == [3, 2]
    assert_close(obj, Row.from_tensordict(_ragged()))  # the ragged entry never stacks
    other = _ragged()
    other.tensordicts[1]["x"] += 1
    with pytest.raises(AssertionError):
        assert_close(obj, Row.from_tensordict(other))


def test_from_tensordict_of_a_stack_that_stacks_is_dense_as_before() -> None:
    even = lazy_stack([TensorDict(x=torch.ones(2), y=torch.zeros(()))] * 2)
    assert Row.from_tensordict(even).x.shape == torch.Size([2, 2])
    assert type(Row.from_tensordict(even).to_tensordict()) is TensorDict


def test_from_list_of_ragged_rows_stacks_lazily_unless_told_dense() -> None:
    rows = [{"x": torch.ones(3), "y": torch.zeros(())}, {"x": torch.ones(2), "y": torch.ones(())}]
    obj = Row.from_list(rows)
    assert type(obj) is Row and obj.batch_size == torch.Size([2])
    assert [t.shape[0] for t in obj.get("x", as_list=True)] == [3, 2]
    same = [{"x": torch.ones(3), "y": torch.zeros(())}] * 2
    assert type(TensorDict.from_list(same)) is TensorDict  # rows that stack stay dense
    with pytest.raises(BatchSizeError, match="entry"):
        TensorDict.from_list(rows, lazy=False)


def test_repr_shows_a_ragged_dim_as_minus_one_without_stacking() -> None:
    text = repr(Row.from_tensordict(_ragged()))
    assert text.startswith("Row(") and "torch.Size([2, -1])" in text


def test_a_stacked_read_of_a_ragged_entry_names_it() -> None:
    with pytest.raises(BatchSizeError, match="entry 'x' has different shapes"):
        _ = Row.from_tensordict(_ragged()).x


def test_ops_over_a_ragged_entry_run_member_by_member() -> None:
    copy = Row.from_tensordict(_ragged()).clone()  # the stack's own clone, as upstream
    assert type(copy) is Row and isinstance(copy._tensordict, LazyStackedTensorDict)
    assert [t.tolist() for t in copy.get("x", as_list=True)] == [[1.0, 1.0, 1.0], [2.0, 2.0]]
