"""The nested keys of lazy stacks: listed from the members, without stacking any entry.

`keys(include_nested=True, ...)` with the default `is_leaf` walks the members'
entries level by level; with any other `is_leaf` it reads the stacked entries
(`lazy[key]`) instead. Both must list the same keys in the same order.
"""

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, UnbatchedTensor, lazy_stack, tensorclass
from td_core.errors import BatchSizeError

FLAGS = [(True, True), (True, False), (False, True), (False, False)]


def tensors_only(cls):
    """`is_leaf` that says what the default says, but is not it: the walk reads stacked entries."""
    return issubclass(cls, torch.Tensor)


def read_keys(td, include_nested, leaves_only):
    return list(td.keys(include_nested, leaves_only, is_leaf=tensors_only))


def check_walk(td):
    for include_nested, leaves_only in FLAGS:
        view = td.keys(include_nested, leaves_only)
        listed = list(view)
        assert listed == read_keys(td, include_nested, leaves_only)
        assert len(view) == len(listed)


def heterogeneous(batch=(3,)):
    b = list(batch)
    first = TensorDict(
        {
            "a": torch.zeros(*b, 2),
            "x": torch.zeros(*b),
            "n": {"b": torch.zeros(*b), "y": torch.zeros(*b), "m": {"c": torch.zeros(*b)}},
            "s": "hello",
        },
        b,
    )
    second = TensorDict(
        {
            "w": torch.ones(*b),
            "n": {"m": {"z": torch.ones(*b), "c": torch.ones(*b, 5)}, "b": torch.ones(*b)},
            "a": torch.ones(*b, 4),  # ragged: never stacked by the key walk
            "s": "world",
        },
        b,
    )
    return first, second


def test_common_keys_at_every_depth_in_the_first_members_order():
    lazy = lazy_stack(heterogeneous())
    assert list(lazy.keys(True, True)) == ["a", ("n", "b"), ("n", "m", "c")]
    assert list(lazy.keys(True)) == ["a", ("n", "b"), ("n", "m", "c"), ("n", "m"), "n", "s"]
    assert len(lazy.keys(True)) == 6
    check_walk(lazy)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_every_stack_dim(dim):
    check_walk(lazy_stack(heterogeneous((2, 3)), dim))


def test_stacks_of_stacks_and_of_mixed_kinds():
    first, second = heterogeneous((2,))
    third, fourth = heterogeneous((2,))
    third["extra"] = torch.zeros(2)
    inner = lazy_stack([first, second])
    other = lazy_stack([third, fourth])
    check_walk(lazy_stack([inner, other], 1))
    dense = TensorDict(
        {"q": torch.zeros(2, 2), "n": {"m": {"c": torch.zeros(2, 2)}, "b": torch.zeros(2, 2)}},
        [2, 2],
    )
    dense["a"] = torch.zeros(2, 2, 3)
    mixed = lazy_stack([inner, dense])
    assert list(mixed.keys(True, True)) == ["a", ("n", "b"), ("n", "m", "c")]
    assert list(lazy_stack([dense, inner]).keys(True, True)) == [("n", "m", "c"), ("n", "b"), "a"]
    check_walk(mixed)
    check_walk(lazy_stack([dense, inner]))


def test_non_tensor_and_unbatched_leaves():
    members = [
        TensorDict(
            {
                "t": torch.zeros(3),
                "u": UnbatchedTensor(torch.zeros(7)),
                "s": f"text {i}",
                "n": {"s": "shared", "t": torch.zeros(3, 2)},
            },
            [3],
        )
        for i in range(2)
    ]
    lazy = lazy_stack(members)
    assert list(lazy.keys(True, True)) == ["t", "u", ("n", "t")]
    assert list(lazy.keys(True)) == ["t", "u", "s", ("n", "s"), ("n", "t"), "n"]
    check_walk(lazy)


def test_keys_follow_the_members_after_writes():
    first, second = heterogeneous()
    lazy = lazy_stack([first, second])
    view = lazy.keys(True, True)
    assert ("n", "y") not in list(view)
    second["n", "y"] = torch.ones(3)  # now common to both members
    assert ("n", "y") in list(view) and len(view) == 4
    del first["n", "m", "c"]
    assert list(view) == ["a", ("n", "b"), ("n", "y")]
    check_walk(lazy)


def test_a_nested_entry_that_is_no_tensordict_in_one_member_raises_as_a_read():
    first, second = heterogeneous()
    second["n"] = torch.zeros(3)  # a tensor where the first member has a TensorDict
    lazy = lazy_stack([first, second])
    with pytest.raises(TypeError, match="not a TensorDict"):
        lazy["n"]
    for include_nested, leaves_only in FLAGS[:2]:
        with pytest.raises(TypeError, match="not a TensorDict"):
            list(lazy.keys(include_nested, leaves_only))
        with pytest.raises(TypeError, match="not a TensorDict"):
            len(lazy.keys(include_nested, leaves_only))


def test_nested_entries_with_different_batch_dims_raise_as_a_read():
    first, second = heterogeneous()
    first["n"] = TensorDict({"b": torch.zeros(3, 4)}, [3, 4])
    lazy = lazy_stack([first, second])
    with pytest.raises(BatchSizeError):
        lazy["n"]
    with pytest.raises(BatchSizeError):
        list(lazy.keys(True, True))


def test_nested_entries_of_one_rank_and_different_sizes_are_walked():
    first, second = heterogeneous()
    first["n"] = TensorDict({"b": torch.zeros(3, 4)}, [3, 4])
    second["n"] = TensorDict({"b": torch.zeros(3, 5), "c": torch.zeros(3, 5)}, [3, 5])
    lazy = lazy_stack([first, second])
    assert isinstance(lazy["n"], LazyStackedTensorDict)
    assert list(lazy.keys(True, True)) == ["a", ("n", "b")]
    check_walk(lazy)


def test_tensorclass_members():
    @tensorclass
    class Pair:
        left: torch.Tensor
        right: TensorDict

    pairs = [
        Pair(
            left=torch.zeros(3), right=TensorDict({"r": torch.zeros(3, i + 1)}, [3]), batch_size=[3]
        )
        for i in range(2)
    ]
    lazy = lazy_stack(pairs)
    assert list(lazy.keys(True, True)) == ["left", ("right", "r")]
    check_walk(lazy)
