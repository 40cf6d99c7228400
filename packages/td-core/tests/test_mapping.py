"""Errors and all-or-nothing behaviour of the dict surface."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, TensorDictParams
from td_core.errors import LockedError


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3)}}, [3])


def test_popitem_empty_names_the_problem():
    with pytest.raises(KeyError, match="empty"):
        TensorDict().popitem()


def test_popitem_locked_leaves_td_unchanged():
    td = _td().lock_()
    with pytest.raises(LockedError):
        td.popitem()
    assert set(td.keys()) == {"a", "b"}


def test_clear_locked_leaves_td_unchanged():
    td = _td().lock_()
    with pytest.raises(RuntimeError, match="locked"):
        td.clear()
    assert set(td.keys()) == {"a", "b"}


def test_separates_missing_key_named_and_nothing_removed():
    td = _td()
    with pytest.raises(KeyError, match="'zz'"):
        td.separates("a", "zz")
    assert set(td.keys()) == {"a", "b"}


def test_separates_drops_emptied_parents():
    td = _td()
    out = td.separates(("b", "c"))
    assert "b" not in td.keys()
    assert torch.equal(out["b", "c"], torch.ones(3))


def test_rename_keys_missing_key_named():
    with pytest.raises(KeyError, match="'zz'"):
        _td().rename_keys({"zz": "y"})


def test_rename_keys_leaves_source_unchanged():
    td = _td()
    out = td.rename_keys({"a": "z", ("b", "c"): ("q", "r")})
    assert set(td.keys(True)) == {"a", "b", ("b", "c")}
    assert set(out.keys(True)) == {"z", "q", ("q", "r")}
    assert out["z"] is td["a"]


def test_set_non_tensor_locked_leaves_td_unchanged():
    td = _td().lock_()
    with pytest.raises(RuntimeError):
        td.set_non_tensor("s", "x")
    assert "s" not in td.keys()


def test_create_nested_locked_raises():
    with pytest.raises(LockedError, match="'q'"):
        _td().lock_().create_nested("q")


def test_is_non_tensor_missing_key_named():
    with pytest.raises(KeyError, match="'zz'"):
        _td().is_non_tensor("zz")


def test_replace_does_not_touch_self():
    td = _td()
    out = td.replace({"b": {"c": torch.zeros(3)}}, z=torch.ones(3))
    assert torch.equal(td["b", "c"], torch.ones(3))
    assert "z" not in td.keys()
    assert torch.equal(out["b", "c"], torch.zeros(3))


def test_filter_empty_recurses():
    td = TensorDict({"a": {"b": {}}, "c": {"d": torch.zeros(())}})
    assert set(td.filter_empty_().keys(True)) == {"c", ("c", "d")}


def test_fromkeys_nested():
    td = TensorDict.fromkeys(["a", ("b", "c")], 2)
    assert td["b", "c"].item() == 2


@pytest.mark.parametrize(
    "make",
    [
        _td,
        lambda: LazyStackedTensorDict(_td(), _td()),
        lambda: TensorDictParams(_td()),
    ],
)
def test_lock_contexts_restore_previous_state(make):
    td = make().lock_()
    with td.unlock_():
        assert not td.is_locked
        td["new"] = td["a"] * 0 if td.batch_dims == 1 else torch.zeros(td.batch_size)
    assert td.is_locked
    td.unlock_()
    with td.lock_():
        assert td.is_locked
    assert not td.is_locked


def test_lock_context_restores_on_error():
    td = _td().lock_()
    with pytest.raises(ZeroDivisionError), td.unlock_():
        1 / 0  # noqa: B018
    assert td.is_locked


def test_lock_reaches_nested():
    td = _td()
    with td.lock_():
        assert td["b"].is_locked
    assert not td["b"].is_locked
