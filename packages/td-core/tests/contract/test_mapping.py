"""The dict surface (popitem, clear, fromkeys, separates, rename_keys, lock contexts, ...) on every kind."""

from __future__ import annotations

from typing import Any

import pytest


def _lock_states(td: Any) -> list[bool]:
    """The lock state inside and after ``with td.unlock_()`` and ``with td.lock_()`` blocks."""
    states = []
    td.lock_()
    with td.unlock_():
        states.append(td.is_locked)
    states.append(td.is_locked)
    td.unlock_()
    with td.lock_():
        states.append(td.is_locked)
    states.append(td.is_locked)
    with td.unlock_():
        states.append(td.is_locked)
    states.append(td.is_locked)
    return states


CASES = {
    "popitem": lambda td: td.popitem(),
    "clear": lambda td: td.clear(),
    "clear_locked": lambda td: td.lock_().clear(),
    "popitem_locked": lambda td: td.lock_().popitem(),
    "fromkeys": lambda td: td.fromkeys(["a", ("b", "c")], 1),
    "fromkeys_default": lambda td: td.fromkeys(["a", "b"]),
    "sorted_keys": lambda td: td.sorted_keys,
    "setdefault_new": lambda td: td.setdefault("new", td.get("obs") * 0),
    "setdefault_existing": lambda td: td.setdefault("obs", td.get("obs") * 0),
    "rename_key_": lambda td: td.rename_key_("obs", "o"),
    "rename_key_nested": lambda td: td.rename_key_("obs", ("deep", "o")),
    "rename_key_missing": lambda td: td.rename_key_("missing", "o"),
    "getitem_through_a_leaf": lambda td: td["obs", "x"],
    "getitem_missing": lambda td: td["missing"],
    "getitem_missing_nested": lambda td: td["nested", "missing"],
    "get_missing": lambda td: td.get("missing"),
    "get_missing_parent": lambda td: td.get(("missing", "x")),
    "get_missing_in_nested": lambda td: td.get(("nested", "missing")),
    "get_missing_default": lambda td: td.get(("nested", "missing"), 7),
    "get_through_a_leaf": lambda td: td.get(("obs", "x")),
    "rename_key_locked": lambda td: td.lock_().rename_key_("obs", "o"),
    "rename_keys": lambda td: td.rename_keys({"obs": "o"}),
    "rename_keys_missing": lambda td: td.rename_keys({"missing": "o"}),
    "rename_keys_not_strict": lambda td: td.rename_keys({"missing": "o"}, strict=False),
    "create_nested": lambda td: td.create_nested("new"),
    "create_nested_deep": lambda td: td.create_nested(("new", "deeper")),
    "create_nested_locked": lambda td: td.lock_().create_nested("new"),
    "filter_empty_": lambda td: td.create_nested(("e", "f")).filter_empty_(),
    "set_non_tensor": lambda td: td.set_non_tensor("label", "hello"),
    "set_non_tensor_nested": lambda td: td.set_non_tensor(("meta", "label"), 3),
    "set_non_tensor_locked": lambda td: td.lock_().set_non_tensor("label", "hello"),
    "get_non_tensor": lambda td: td.set_non_tensor("label", "hello").get_non_tensor("label"),
    "get_non_tensor_tensor": lambda td: td.get_non_tensor("obs"),
    "get_non_tensor_missing": lambda td: td.get_non_tensor("missing"),
    "get_non_tensor_default": lambda td: td.get_non_tensor("missing", 7),
    "is_non_tensor": lambda td: (
        td.set_non_tensor("label", "x").is_non_tensor("label"),
        td.is_non_tensor("obs"),
    ),
    "is_non_tensor_missing": lambda td: td.is_non_tensor("missing"),
    "non_tensor_items": lambda td: [
        k for k, _ in td.set_non_tensor(("meta", "label"), "x").non_tensor_items(True)
    ],
    "non_tensor_items_top": lambda td: [
        k for k, _ in td.set_non_tensor(("meta", "label"), "x").non_tensor_items()
    ],
    "filter_non_tensor_data": lambda td: td.set_non_tensor("label", "x").filter_non_tensor_data(),
    "separates": lambda td: td.separates("obs"),
    "separates_missing": lambda td: td.separates("missing"),
    "separates_not_strict": lambda td: td.separates("obs", "missing", strict=False),
    "separates_default": lambda td: td.separates("obs", "missing", default=None),
    "split_keys": lambda td: td.split_keys(["obs"]),
    "split_keys_inplace": lambda td: td.split_keys(["obs"], inplace=True),
    "split_keys_missing": lambda td: td.split_keys(["missing"]),
    "split_keys_not_strict": lambda td: td.split_keys(["missing"], strict=False),
    "replace": lambda td: td.replace({"obs": td.get("obs") * 0}),
    "replace_kwargs": lambda td: td.replace(obs=td.get("obs") + 1),
    "to_tensordict": lambda td: td.to_tensordict(),
    "to_tensordict_retain_none": lambda td: td.to_tensordict(retain_none=True),
    "lock_returns_self": lambda td: td.lock_() is td and td.unlock_() is td,
    "lock_context": _lock_states,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mapping(case: str, kind: str, check_named) -> None:
    check_named(case, CASES[case], kind)
