"""The private compatibility shims ported code calls, on every kind, against upstream."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import td_core


def _named(td: Any) -> Any:
    td.names = [f"d{i}" for i in range(td.batch_dims)]
    return td


def _with_text(td: Any) -> Any:
    td.set_non_tensor(("nested", "text"), "hello")
    return td


CASES = {
    "has_names": lambda td: td._has_names(),
    "has_names_named": lambda td: _named(td)._has_names(),
    "check_batch_size": lambda td: td._check_batch_size(),
    "check_batch_size_quiet": lambda td: td._check_batch_size(raise_exception=False),
    "check_device": lambda td: td._check_device(),
    "check_device_quiet": lambda td: td._check_device(raise_exception=False),
    "has_non_tensor": lambda td: td._has_non_tensor,
    "has_non_tensor_set": lambda td: _with_text(td)._has_non_tensor,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compat(case: str, kind: str, check) -> None:
    check(CASES[case], kind)


def test_check_batch_size_finds_a_leaf_resized_in_place() -> None:
    td = td_core.TensorDict({"a": torch.zeros(3, 2), "b": {"c": torch.zeros(3)}}, [3])
    td["b"].get("c").resize_(2)  # changed behind the container's back
    assert td._check_batch_size(raise_exception=False) is False
    with pytest.raises(RuntimeError, match=r"batch_size are incongruent.*\('b', 'c'\).*\[2\]"):
        td._check_batch_size()


def test_check_device_finds_a_leaf_moved_behind_the_container() -> None:
    td = td_core.TensorDict({"a": torch.zeros(3), "b": {"c": torch.zeros(3)}}, [3], device="cpu")
    assert td._check_device() is True
    td["b"]._tensordict["c"] = torch.zeros(3, device="meta")  # behind the container's back
    assert td._check_device(raise_exception=False) is False
    with pytest.raises(RuntimeError, match=r"devices are incongruent.*\('b', 'c'\).*meta"):
        td._check_device()


def test_non_tensor_data_takes_names_per_batch_dim() -> None:
    leaf = td_core.NonTensorData("x", batch_size=[2, 3], names=["a", None])
    assert leaf.batch_size == (2, 3) and leaf.data == "x"
    with pytest.raises(ValueError, match=r"2 dim names \['a', 'b'\] for batch_size \[2\]"):
        td_core.NonTensorData("x", batch_size=[2], names=["a", "b"])


def test_non_tensor_data_unwraps_a_leaf_given_as_its_value() -> None:
    td = td_core.TensorDict({}, [2])
    td.set_non_tensor("k", td_core.NonTensorData("text", batch_size=[2]))
    assert td["k"] == "text"
    with pytest.raises(TypeError, match="NonTensorStack"):
        td_core.NonTensorData(td_core.NonTensorStack.from_list(["a", "b"]), batch_size=[2])
