"""Reading a non-tensor stack gives a `LinkedList` whose item assignments write back, on every kind.

Each case gives the container a `names` entry (one string per batch element),
reads it with `td[key]`, assigns into the list and returns the list; `check`
also compares the container afterwards, so a write the list did not send to
the TensorDict (or sent to the wrong element) fails.
"""

from __future__ import annotations

from typing import Any

import pytest


def _strings(shape: tuple[int, ...], tag: str) -> Any:
    """Nested lists of distinct strings over `shape`."""
    if not shape:
        return tag
    return [_strings(shape[1:], f"{tag}{i}") for i in range(shape[0])]


def _with_names(td: Any, key: Any = "names") -> Any:
    td.set(key, _strings(tuple(td.batch_size), "n"))
    return td


def _first_row(values: Any) -> Any:
    """The innermost list holding the first element."""
    while isinstance(values[0], list):
        values = values[0]
    return values


def _item(td: Any) -> Any:
    values = _with_names(td)["names"]
    _first_row(values)[0] = "z"
    return values


def _negative_item(td: Any) -> Any:
    values = _with_names(td)["names"]
    _first_row(values)[-1] = "z"
    return values


def _slice(td: Any) -> Any:
    values = _with_names(td)["names"]
    row = _first_row(values)
    row[1:] = [f"s{i}" for i in range(len(row) - 1)]
    return values


def _outer_row(td: Any) -> Any:
    values = _with_names(td)["names"]
    values[-1] = _strings(tuple(td.batch_size[1:]), "r")
    return values


def _nested_key(td: Any) -> Any:
    values = _with_names(td, ("nested", "names"))["nested", "names"]
    _first_row(values)[0] = "z"
    return values


def _after_append(td: Any) -> Any:
    values = _with_names(td)["names"]
    values.append("extra")  # unlinks this list: the assignment below stays in it
    values[0] = "z"
    return td.get("names"), values


def _get_non_tensor(td: Any) -> Any:
    values = _with_names(td).get_non_tensor("names")
    _first_row(values)[0] = "z"
    return values


CASES = {
    "item": _item,
    "negative_item": _negative_item,
    "slice": _slice,
    "outer_row": _outer_row,
    "nested_key": _nested_key,
    "after_append": _after_append,
    "get_non_tensor": _get_non_tensor,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_linked_list(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
