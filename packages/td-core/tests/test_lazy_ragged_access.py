"""Reading and writing ragged entries of lazy stacks: through a TensorDict, stacks of
stacks, lists given per member, membership, scalar boolean indices."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, lazy_stack, set_get_defaults_to_none


def _ragged() -> LazyStackedTensorDict:
    return lazy_stack([TensorDict(x=torch.ones(1)), TensorDict(x=torch.ones(2) * 2)])


def test_get_keywords_reach_a_lazy_stack_inside_a_tensordict() -> None:
    td = TensorDict(inner=_ragged(), batch_size=[2])
    with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
        td.get(("inner", "x"))
    assert td.get(("inner", "x"), as_nested_tensor=True).is_nested
    assert [t.tolist() for t in td.get(("inner", "x"), as_list=True)] == [[1.0], [2.0, 2.0]]
    padded = td.get(("inner", "x"), as_padded_tensor=True, padding_side="left", padding_value=9)
    assert padded.tolist() == [[9.0, 1.0], [2.0, 2.0]]
    # a leaf no lazy stack holds is returned as it is; a missing key gives None, as get
    assert td.get("inner", as_list=True) is not None
    assert td.get(("inner", "nope"), as_list=True) is None
    assert td.get(("inner", "nope"), "fallback", as_list=True) == "fallback"
    with set_get_defaults_to_none(False), pytest.raises(KeyError, match="nope"):
        td.get(("inner", "nope"), as_list=True)


def test_get_keywords_through_stacks_of_stacks() -> None:
    inner = lazy_stack([TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(4))])
    outer = lazy_stack([inner, inner.copy()])
    as_list = outer.get("a", as_list=True)
    assert [[t.shape[0] for t in row] for row in as_list] == [[3, 4], [3, 4]]
    padded = outer.get("a", as_padded_tensor=True)
    assert padded.shape == (2, 2, 4) and padded[0, 0, 3] == 0 and padded[1, 1, 3] == 1


def test_a_tensordict_is_in_a_lazy_stack_only_as_a_member() -> None:
    td = TensorDict({"a": TensorDict({"b": torch.rand(1, 2)}, [1, 2]), "c": torch.rand(1)}, [1])
    stack = LazyStackedTensorDict.lazy_stack([td, td])
    assert td in stack
    assert td.clone() not in stack
    assert "a" in stack and ("a", "b") in stack and "nope" not in stack


def test_a_list_of_ragged_tensors_goes_one_item_per_member() -> None:
    stack = LazyStackedTensorDict(TensorDict(), TensorDict())
    stack["b"] = [torch.ones(2) * 2, torch.ones(1)]
    assert stack.tensordicts[1]["b"].tolist() == [1.0]
    assert stack.get("b", as_padded_tensor=True).tolist() == [[2.0, 2.0], [1.0, 0.0]]
    # nested lists run along the batch dims: the stack dim's level picks the member
    grid = lazy_stack([lazy_stack([TensorDict() for _ in range(2)]) for _ in range(3)], 1)
    grid["a"] = [[torch.ones(1 + 3 * i + j) for j in range(3)] for i in range(2)]
    assert [[grid[i, j]["a"].shape[0] for j in range(3)] for i in range(2)] == [
        [1, 2, 3],
        [4, 5, 6],
    ]
    # a list that is one tensor is stacked as before
    stack["c"] = [torch.zeros(3), torch.ones(3)]
    assert stack["c"].tolist() == [[0.0] * 3, [1.0] * 3]


def test_scalar_boolean_indices_add_a_dim() -> None:
    stack = LazyStackedTensorDict(
        *[TensorDict(a=torch.full((), float(i))) for i in range(2)], stack_dim=0
    )
    for true in (True, torch.tensor(True), (torch.tensor(True),)):
        out = stack[true]
        assert out.batch_size == (1, 2) and out["a"].tolist() == [[0.0, 1.0]]
    for false in (False, torch.tensor(False), (torch.tensor(False),)):
        assert stack[false].batch_size == (0, 2)
    stack[torch.tensor(False)] = TensorDict(a=torch.full((1, 2), 5.0), batch_size=[1, 2])
    assert stack["a"].tolist() == [0.0, 1.0]
    stack[True] = TensorDict(a=torch.full((1, 2), 5.0), batch_size=[1, 2])
    assert stack["a"].tolist() == [5.0, 5.0]


def test_all_and_any_read_a_ragged_stack_of_stacks_member_by_member() -> None:
    def member(n: int, fill: float) -> TensorDict:
        return TensorDict({"a": torch.full((2, n, 3), fill), ("b", "c"): torch.zeros(2)}, [2])

    inner = LazyStackedTensorDict(*[member(i + 2, 1.0) for i in range(3)], stack_dim=1)
    outer = LazyStackedTensorDict(inner, stack_dim=0)
    assert (outer + 1 == outer.apply(lambda x: x + 1)).all()
    assert outer.any() and not outer.all()
    inner.tensordicts[2]["b", "c"] += 1
    inner.tensordicts[0]["b", "c"] += 1
    inner.tensordicts[1]["b", "c"] += 1
    assert outer.all()
    inner.tensordicts[1]["a"][0, 0, 0] = 0
    assert not outer.all()
