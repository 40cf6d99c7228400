"""The fast paths of hot operations give the general path's results and errors."""

from __future__ import annotations

import pytest
import tensordict
import torch

from td_core import TensorDict
from td_core.errors import BatchSizeError


def _nested() -> dict:
    return {"a": torch.zeros(3, 2), "n": {"b": torch.zeros(3), "m": {"c": torch.zeros(3, 4)}}}


def test_contains_flat_and_nested() -> None:
    td = TensorDict(_nested(), [3])
    assert "a" in td and "z" not in td
    assert ("n", "m", "c") in td and ("n", ("m",)) in td
    assert 1 not in td


def test_empty_and_unbatched_construction() -> None:
    assert TensorDict({}, []).batch_size == torch.Size([])
    assert TensorDict({}, (2, 3)).batch_size == torch.Size([2, 3])
    td = TensorDict({"a": torch.zeros(3), "b": torch.zeros(())})
    assert td.batch_size == torch.Size([]) and list(td.keys()) == ["a", "b"]
    with pytest.raises(TypeError, match="mapping"):
        TensorDict([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        TensorDict({}, [-1])


def test_items_and_values_are_iterators() -> None:
    td = TensorDict(_nested(), [3])
    items = td.items()
    assert next(items)[0] == "a"
    assert [k for k, _ in td.items(include_nested=True, leaves_only=True)] == [
        "a",
        ("n", "b"),
        ("n", "m", "c"),
    ]
    assert len(list(td.values())) == 2


def test_update_nested_merges_and_is_all_or_nothing() -> None:
    td = TensorDict(_nested(), [3])
    sub = td["n"]
    other = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    assert td.update(other) is td
    assert td["n"] is sub  # merged into the existing sub-TensorDict
    assert (td["n", "m", "c"] == 1).all()
    bad = TensorDict({"a": torch.full((3, 2), 5.0), "n": {"b": torch.zeros(4)}}, [])
    with pytest.raises(BatchSizeError):
        td.update(bad)
    assert (td["a"] == 1).all()  # nothing was written


def test_to_same_device_returns_self_as_upstream() -> None:
    td = TensorDict(_nested(), [3], device="cpu")
    up = tensordict.TensorDict(_nested(), [3], device="cpu")
    assert (td.to("cpu") is td) == (up.to("cpu") is up)
    plain = TensorDict(_nested(), [3])
    moved = plain.to("cpu")
    assert moved is not plain and moved.device == torch.device("cpu")
    assert moved["n", "m"].device == torch.device("cpu")
    assert moved["a"] is plain["a"]


def test_select_order_follows_the_arguments_as_upstream() -> None:
    src = {
        "a": torch.zeros(3),
        "n": {"b": torch.zeros(3), "c": torch.zeros(3)},
        "z": torch.zeros(3),
    }
    keys = [("n", "c"), "z", ("n", "b"), "a"]
    ours = TensorDict(src, [3]).select(*keys)
    theirs = tensordict.TensorDict(src, [3]).select(*keys)
    assert list(ours.keys()) == list(theirs.keys()) == ["n", "z", "a"]
    assert list(ours["n"].keys()) == list(theirs["n"].keys()) == ["c", "b"]
    assert list(TensorDict(src, [3]).select("z", "a").keys()) == ["z", "a"]
    with pytest.raises(KeyError, match="'q'"):
        TensorDict(src, [3]).select("a", "q")


def test_copy_of_two_dense_trees_falls_back_where_the_fast_walk_stops() -> None:
    td = TensorDict(_nested(), [3])
    src = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    src["n", "m", "c"] = torch.ones(3, 1)  # broadcast into the leaf: the general route
    src["extra"] = torch.ones(3)  # a key td lacks: skipped
    td.copy_(src)
    assert torch.equal(td["n", "m", "c"], torch.ones(3, 4)) and "extra" not in td.keys()
    assert torch.equal(td["a"], src["a"])


def test_copy_checks_every_shape_before_writing() -> None:
    td = TensorDict(_nested(), [3])
    bad = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    bad["n", "m", "c"] = torch.ones(3, 5)
    with pytest.raises(BatchSizeError, match="'n', 'm', 'c'"):
        td.copy_(bad)
    assert (td["a"] == 0).all()
