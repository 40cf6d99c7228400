"""A sub-TensorDict of a live locked TensorDict cannot be unlocked alone (the lock graph)."""

from __future__ import annotations

import gc

import pytest
import torch

from td_core import TensorDict, lazy_stack, tensorclass
from td_core.errors import LockedError


def _tree() -> TensorDict:
    return TensorDict({("a", "b", "c"): torch.zeros(2)}, [2])


def test_a_sub_tensordict_of_a_locked_one_cannot_be_unlocked() -> None:
    td = _tree().lock_()
    a, b = td["a"], td["a", "b"]
    for sub in (a, b):
        with pytest.raises(LockedError, match="part of a locked graph"):
            sub.unlock_()
    assert td.is_locked and a.is_locked and b.is_locked  # nothing was unlocked
    with pytest.raises(RuntimeError, match="Cannot modify locked TensorDict"):
        a["new"] = torch.zeros(2)


def test_it_can_once_the_locked_holder_is_gone_or_unlocked() -> None:
    td = _tree().lock_()
    a, b = td["a"], td["a", "b"]
    td.unlock_()
    td.lock_()
    del td
    gc.collect()
    a.unlock_()
    a.lock_()
    with pytest.raises(LockedError):
        b.unlock_()  # a holds it now
    a.unlock_()
    b.unlock_()


def test_a_shared_sub_tensordict_keeps_both_roots_locked() -> None:
    td = _tree().lock_()
    other = TensorDict({"a": td["a"]}, [2]).lock_()
    for root in (td, other):
        with pytest.raises(LockedError, match="part of a locked graph"):
            root.unlock_()
    group = TensorDict({"td": td, "other": other}, [2]).lock_()
    group.unlock_()
    assert not td.is_locked and not other.is_locked


def test_unlock_blocks_on_the_root_relock_the_whole_graph() -> None:
    td = _tree().lock_()
    a = td["a"]
    with td.unlock_():
        a["new"] = torch.ones(2)
    assert td.is_locked and a.is_locked
    with pytest.raises(LockedError):
        a.unlock_()


def test_a_locked_lazy_stack_hands_out_locked_sub_stacks() -> None:
    members = [_tree(), _tree()]
    stack = lazy_stack(members).lock_()
    sub = stack["a"]
    assert sub.is_locked
    with pytest.raises(RuntimeError, match="Cannot modify locked TensorDict"):
        stack.set(("a", "x"), torch.zeros(2, 2))
    with pytest.raises(LockedError, match="part of a locked graph"):
        sub.unlock_()
    assert all("x" not in m["a"].keys() for m in members)


def test_a_refused_unlock_names_the_held_sub_tensordict_and_keeps_the_graph() -> None:
    td = _tree().lock_()
    other = TensorDict({"x": td["a"]}, [2]).lock_()  # a second locked root holds td["a"]
    with pytest.raises(LockedError, match=r"the TensorDict\['a'\] is held"):
        td.unlock_()
    assert td.is_locked and td["a", "b"].is_locked
    with pytest.raises(LockedError, match=r"the TensorDict\['a'\] is held"):
        td.unlock_()  # the refused unlock forgot nothing: still refused
    with pytest.raises(LockedError, match=r"the TensorDict\['x'\] is held"):
        other.unlock_()  # each root holds the shared one: both stay locked
    del other
    gc.collect()
    td.unlock_()  # the other locked holder is gone
    assert not td.is_locked and not td["a", "b"].is_locked


def test_unlock_of_a_tensorclass_over_a_ragged_stack_reads_no_stacked_leaf() -> None:
    @tensorclass
    class Item:
        obs: torch.Tensor

    ragged = lazy_stack([TensorDict({"obs": torch.zeros(3)}), TensorDict({"obs": torch.zeros(2)})])
    item = Item.from_tensordict(ragged)
    item.lock_()
    item.unlock_()  # the walk must not stack the ragged leaf 'obs'
    assert not item.is_locked
