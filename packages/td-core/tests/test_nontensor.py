"""Non-tensor leaves: building stacks, comparing them, their batch-shape ops."""

import pytest
import torch

from td_core import NonTensorData, NonTensorStack, TensorDict


def test_stack_from_elements():
    assert NonTensorStack("a", "b", "c").tolist() == ["a", "b", "c"]
    assert NonTensorStack("a", "b").batch_size == (2,)
    column = NonTensorStack(
        NonTensorData("a", batch_size=[3]), NonTensorData("b", batch_size=[3]), stack_dim=1
    )
    assert column.batch_size == (3, 2)
    assert column.tolist() == [["a", "b"]] * 3
    nested = NonTensorStack(NonTensorStack("2", "3"), stack_dim=1)
    assert nested.batch_size == (2, 1) and nested.tolist() == [["2"], ["3"]]
    lists = NonTensorStack(NonTensorData(["x"]), NonTensorData(["y"]), batch_size=(2,))
    assert lists.tolist() == [["x"], ["y"]]
    assert NonTensorStack().batch_size == (0,)


def test_stack_from_elements_refuses_mismatches():
    with pytest.raises(ValueError, match=r"one batch size, got \[\[2\], \[\]\]"):
        NonTensorStack(NonTensorData("x", batch_size=[2]), "y")
    with pytest.raises(ValueError, match=r"batch_size \[3\] does not match"):
        NonTensorStack("a", "b", batch_size=(3,))
    with pytest.raises(IndexError, match="stack_dim 2"):
        NonTensorStack("a", "b", stack_dim=2)


def test_stack_in_a_tensordict():
    td = TensorDict(a=NonTensorStack("foo", "bar"), x=torch.zeros(2), batch_size=[2])
    assert td[1]["a"] == "bar"
    assert td["a"] == ["foo", "bar"]
