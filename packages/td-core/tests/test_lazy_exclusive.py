"""Lazy stacks whose members hold keys the others lack (upstream's "exclusive" keys).

The stack lists the common keys. An op that runs member by member keeps the other
keys in the members; a conversion that needs one value per key for the whole stack
refuses rather than leave them out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, lazy_stack
from td_core.errors import ExclusiveKeysError


def _stack() -> LazyStackedTensorDict:
    members = [TensorDict(a=torch.full((3,), float(i)), batch_size=[3]) for i in range(4)]
    members[0]["extra"] = torch.ones(3, 2)
    return lazy_stack(members)


KEEPING: dict[str, Callable[[Any], Any]] = {
    "torch.stack": lambda s: torch.stack([s, s], 1),
    "view(-1)": lambda s: s.view(-1),
    "reshape": lambda s: s.reshape(12, 1),
    "flatten": lambda s: s.flatten(0, 1),
    "unsqueeze": lambda s: s.unsqueeze(-1),
    "repeat_interleave": lambda s: s.repeat_interleave(2, 1),
}


@pytest.mark.parametrize("op", list(KEEPING))
def test_ops_that_run_per_member_keep_the_keys_some_members_hold(op: str) -> None:
    out = KEEPING[op](_stack())
    assert isinstance(out, LazyStackedTensorDict)
    found = _holding(out, "extra")
    assert found, f"{op} dropped the key only the first member holds"
    assert all(m["extra"].eq(1).all() for m in found)


def _holding(td: Any, key: str) -> list[Any]:
    """The dense TensorDicts under `td` (members of members too) that hold `key`."""
    if isinstance(td, LazyStackedTensorDict):
        return [m for member in td.tensordicts for m in _holding(member, key)]
    return [td] if key in td.keys() else []


def test_to_dict_and_numpy_refuse_rather_than_drop_a_key() -> None:
    stack = _stack()
    for convert in (stack.to_dict, stack.numpy):
        with pytest.raises(ExclusiveKeysError, match=r"\[\['extra'\], \[\], \[\], \[\]\]"):
            convert()
    with pytest.raises(RuntimeError):  # upstream's class
        stack.to_dict()
    assert set(stack.select("a").to_dict()) == {"a"}


def test_reduce_true_counts_the_keys_only_some_members_hold() -> None:
    stack = _stack()
    # the common leaf sums to 3 * (0 + 1 + 2 + 3); the first member's extra adds 6 ones
    assert stack.sum(reduce=True).item() == 18 + 6
    assert stack.mean(reduce=True).item() == pytest.approx(24 / 18)


@pytest.mark.parametrize("op", ["softmax", "cummax", "cummin"])
def test_scans_over_a_member_dim_run_per_member_and_keep_every_key(op: str) -> None:
    stack = _stack()
    run = {
        "softmax": lambda td: td.softmax(1),
        "cummax": lambda td: td.cummax(1).values,
        "cummin": lambda td: td.cummin(1).values,
    }[op]
    out = run(stack)
    assert isinstance(out, LazyStackedTensorDict) and out.batch_size == (4, 3)
    for member, result in zip(stack.tensordicts, out.tensordicts, strict=True):
        assert set(result.keys()) == set(member.keys())
        for key in member.keys():
            torch.testing.assert_close(result[key], run(member.unsqueeze(0))[0][key])


def test_softmax_over_the_stack_dim_mixes_the_common_keys_and_keeps_the_others() -> None:
    """As upstream: the common keys get the softmax across members; a key only some members
    hold has none across members, and gets the softmax of its leaf along the same dim."""
    stack = _stack()
    out = stack.softmax(0)
    across = torch.stack([m["a"] for m in stack.tensordicts]).softmax(0)
    torch.testing.assert_close(out.get("a"), across)
    torch.testing.assert_close(out.tensordicts[0]["extra"], torch.ones(3, 2).softmax(0))
    assert [sorted(m.keys()) for m in out.tensordicts] == [["a", "extra"], ["a"], ["a"], ["a"]]


def test_densify_makes_nested_tensors_of_the_keys_some_members_hold() -> None:
    dense = _stack().densify()
    assert isinstance(dense, TensorDict) and dense["extra"].is_nested
    assert [t.shape for t in dense["extra"].unbind(0)] == [(3, 2), (3, 0), (3, 0), (3, 0)]
    torch.testing.assert_close(dense["extra"].unbind(0)[0], torch.ones(3, 2))
    with pytest.raises(ValueError, match="only some members"):  # nested tensors stack on dim 0
        lazy_stack(list(_stack().unbind(0)), 1).densify()
