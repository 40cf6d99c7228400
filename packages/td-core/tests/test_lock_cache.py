"""Results cached on a locked TensorDict are never stale, and never changed by a caller."""

from __future__ import annotations

import pytest
import torch

from td_core import TensorDict, TensorDictParams, lazy_stack, set_lazy_legacy
from td_core.errors import LockedError


def _tree() -> TensorDict:
    return TensorDict(
        {"a": torch.zeros(3), "n": {"b": torch.ones(3), "s": "hello"}, "x.y": torch.ones(3)}, [3]
    )


def test_flatten_and_unflatten_are_computed_once_while_locked() -> None:
    td = _tree()
    assert td.flatten_keys() is not td.flatten_keys()  # unlocked: nothing is kept
    assert td._cache is None
    td.lock_()
    flat = td.flatten_keys()
    assert td.flatten_keys() is flat
    assert td.flatten_keys(separator=".") is flat  # the same call, spelled differently
    assert td.flatten_keys("-") is not flat
    assert td.unflatten_keys() is td.unflatten_keys()
    assert set(td._cache) == {"flatten_keys", "unflatten_keys"}


def test_the_cached_result_holds_the_leaves_so_in_place_writes_show() -> None:
    td = _tree().lock_()
    flat = td.flatten_keys()
    td["n", "b"].mul_(5)
    td.set_("a", torch.full((3,), 2.0))
    again = td.flatten_keys()
    assert again is flat
    assert (again["n.b"] == 5).all() and (again["a"] == 2).all()


def test_unlocking_forgets_every_cache_of_the_tree() -> None:
    td = _tree().lock_()
    sub = td["n"]
    first, sub_first = td.flatten_keys(), sub.flatten_keys()
    assert td.sorted_keys == ["a", "n", "x.y"] and sub._cache is not None
    td.unlock_()
    assert td._cache is None and sub._cache is None
    td["new"] = torch.zeros(3)
    assert "new" in td.flatten_keys().keys()
    td.lock_()
    assert td.flatten_keys() is not first and sub.flatten_keys() is not sub_first
    assert "new" in td.flatten_keys().keys() and "new" in td.sorted_keys


def test_a_cached_result_is_locked_so_no_caller_changes_it() -> None:
    td = _tree().lock_()
    flat = td.flatten_keys()
    assert flat.is_locked
    with pytest.raises(LockedError):
        flat["z"] = torch.zeros(3)
    assert list(td.flatten_keys().keys()) == ["a", "n.b", "n.s", "x.y"]


def test_unlocking_a_cached_result_drops_it_from_the_cache() -> None:
    td = _tree().lock_()
    flat = td.flatten_keys()
    flat.unlock_()
    flat["z"] = torch.zeros(3)
    assert td._cache is None
    assert "z" not in td.flatten_keys().keys()
    unflat = td.unflatten_keys()
    unflat["x"].unlock_()  # a sub-TensorDict the result built: its change reaches no cache
    unflat["x", "w"] = torch.zeros(3)
    assert "w" not in td.unflatten_keys()["x"].keys()


def test_an_entry_replaced_in_place_drops_the_caches_above_it() -> None:
    td = _tree().lock_()
    flat, sub_flat = td.flatten_keys(), td["n"].flatten_keys()
    td["n"].set_("s", "bye")  # a non-tensor value is replaced, not written into
    assert td.flatten_keys()["n.s"] == "bye"
    assert td["n"].flatten_keys()["s"] == "bye"
    assert flat["n.s"] == "hello" and sub_flat["s"] == "hello"  # earlier results: snapshots


def test_new_dim_names_drop_the_cache() -> None:
    td = TensorDict({"a": {"b": torch.zeros(3, 2)}}, [3, 2]).lock_()
    flat = td.flatten_keys()
    td.names = ["x", "y"]
    assert td.flatten_keys() is not flat
    assert td.flatten_keys().names == ["x", "y"]


def test_a_lazy_stack_is_cached_member_by_member() -> None:
    members = [TensorDict({"a": torch.zeros(2), "n.m": torch.ones(2)}, [2]) for _ in range(3)]
    stack = lazy_stack(members).lock_()
    flat, unflat = stack.flatten_keys(), stack.unflatten_keys()
    assert stack.flatten_keys() is flat and stack.unflatten_keys() is unflat
    assert type(unflat) is type(stack)  # member by member: it holds the members' leaves
    members[1]["a"].fill_(7)
    assert (stack.unflatten_keys()["a"][1] == 7).all()
    stack.unlock_()
    assert stack._cache is None and all(m._cache is None for m in members)


def test_a_lazy_stack_whose_member_list_changed_misses() -> None:
    members = [TensorDict({"a": torch.zeros(2)}, [2]) for _ in range(2)]
    stack = lazy_stack(members).lock_()
    flat = stack.flatten_keys()
    other = TensorDict({"a": torch.full((2,), 3.0)}, [2]).lock_()
    stack.tensordicts[0] = other  # behind the lock's back
    assert stack.flatten_keys() is not flat
    assert (stack.flatten_keys()["a"][0] == 3).all()


def test_results_holding_copies_are_not_cached() -> None:
    members = [TensorDict({"a": torch.zeros(2)}, [2]) for _ in range(3)]
    td = TensorDict({"stack": lazy_stack(members)}, [3]).lock_()  # reading it stacks: a copy
    first = td.flatten_keys()
    members[0]["a"].fill_(4)
    assert td.flatten_keys() is not first
    assert (td.flatten_keys()["stack.a"][0] == 4).all()
    sub = td._get_sub_tensordict(0)  # a view: its reads index the source
    assert sub.flatten_keys() is not sub.flatten_keys() and sub._cache is None
    params = TensorDictParams(TensorDict({"w": torch.zeros(3)}, [3]), lock=True)
    assert params.flatten_keys() is not params.flatten_keys()


def test_sorted_keys_are_kept_and_handed_out_as_new_lists() -> None:
    td = _tree().lock_()
    keys = td.sorted_keys
    keys.append("junk")
    assert td.sorted_keys == ["a", "n", "x.y"]
    assert td._cache["sorted_keys"] is not None
    params = TensorDictParams(TensorDict({"w": torch.zeros(3)}, [3]), lock=True)
    assert params.sorted_keys == ["w"] and "sorted_keys" in params._cache
    params.unlock_()
    assert params._cache is None


def test_the_cache_can_only_be_reset() -> None:
    td = _tree().lock_()
    td.flatten_keys()
    td._cache = None
    assert td._cache is None
    with pytest.raises(TypeError, match="can only be reset"):
        td._cache = {}
    td.flatten_keys()
    with pytest.raises(TypeError):
        td._cache["x"] = {}  # type: ignore[index]  # a read-only view


def _lazy_view(td: TensorDict) -> TensorDict:
    with set_lazy_legacy(True):
        return td.unsqueeze(0)


def test_a_lazy_view_of_a_locked_source_keeps_its_results_as_upstream() -> None:
    src = _tree()
    view = _lazy_view(src)
    assert view._cache is None
    src.lock_()
    assert view.sorted_keys == ["a", "n", "x.y"]
    flat = view.flatten_keys()
    assert view.flatten_keys() is flat
    assert flat.is_locked
    assert set(view._cache) == {"sorted_keys", "flatten_keys"}
    src["a"].add_(2)  # its leaves view the source's memory
    assert (flat["a"] == 2).all()


def test_unlocking_the_source_of_a_lazy_view_drops_the_view_s_results() -> None:
    src = _tree().lock_()
    view = _lazy_view(src)
    view.flatten_keys()
    view.sorted_keys  # noqa: B018
    src.unlock_()
    assert view._cache is None
    src["new"] = torch.zeros(3)
    src.lock_()
    assert "new" in view.sorted_keys
    assert "new" in view.flatten_keys().keys()


def test_a_value_replaced_in_the_locked_source_drops_the_lazy_view_s_results() -> None:
    src = _tree().lock_()
    view = _lazy_view(src["n"])
    assert view.flatten_keys()["s"] == "hello"
    src.set_(("n", "s"), "bye")
    assert view.flatten_keys()["s"] == "bye"
