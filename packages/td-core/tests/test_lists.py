"""Lists assigned as entries are read as upstream reads them (`_lists.py`)."""

from __future__ import annotations

import pytest
import torch

from td_core import NonTensorData, NonTensorStack, TensorDict, set_list_to_stack


def test_list_of_tensors_is_stacked() -> None:
    td = TensorDict({"x": [torch.zeros(3), torch.ones(3)]}, batch_size=[2])
    assert isinstance(td["x"], torch.Tensor) and td["x"].shape == (2, 3)
    assert td[1]["x"].tolist() == [1.0, 1.0, 1.0]


def test_list_of_ragged_tensors_is_one_value() -> None:
    td = TensorDict(batch_size=[2])
    td["x"] = [torch.zeros(3), torch.zeros(4)]
    assert isinstance(td.get("x"), NonTensorData)
    assert [t.shape for t in td["x"]] == [(3,), (4,)]


def test_list_of_tensordicts_is_stacked() -> None:
    td = TensorDict(batch_size=[2])
    td["n"] = [TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(3))]
    assert td["n"].batch_size == (2,) and td["n", "a"].shape == (2, 3)


def test_list_of_tensors_with_wrong_batch_raises_naming_the_key() -> None:
    td = TensorDict(batch_size=[3])
    with pytest.raises(RuntimeError, match="'x'"):
        td["x"] = [torch.zeros(2), torch.zeros(2)]
    assert "x" not in td


def test_strings_along_the_batch_give_one_value_per_element() -> None:
    td = TensorDict(batch_size=[2, 3])
    td["s"] = [["a"] * 3, ["b"] * 3]
    assert isinstance(td.get("s"), NonTensorStack)
    assert td[1, 2]["s"] == "b" and td[0]["s"] == ["a", "a", "a"]


def test_strings_not_along_the_batch_are_one_value() -> None:
    td = TensorDict(batch_size=[3])
    td["s"] = ["a", "b"]
    assert isinstance(td.get("s"), NonTensorData) and td[0]["s"] == ["a", "b"]


def test_numbers_become_a_tensor() -> None:
    td = TensorDict(batch_size=[2])
    td["m"] = [[1, 2], [3, 4]]
    assert td["m"].dtype == torch.int64 and td["m"].shape == (2, 2)


def test_list_to_stack_off_keeps_the_list_whole() -> None:
    with set_list_to_stack(False):
        td = TensorDict({"x": [torch.zeros(3), torch.ones(3)]}, batch_size=[2])
    assert isinstance(td.get("x"), NonTensorData) and len(td["x"]) == 2
