"""TensorDictParams.clone keeps the kind of every leaf and ties (issue 22)."""

from __future__ import annotations

import torch
from torch import nn

from td_core import TensorDict, TensorDictParams


def test_clone_is_a_tensordict_params_of_copies_of_the_same_kinds() -> None:
    source = TensorDict(
        {
            "a": {"p": nn.Parameter(torch.zeros(2)), "b": nn.Buffer(torch.ones(2))},
            "e": nn.Parameter(torch.zeros(()), requires_grad=False),
            "f": torch.arange(3),
        }
    )
    params = TensorDictParams(source, no_convert=True)
    copy = params.clone()
    assert type(copy) is TensorDictParams
    for key, value in copy.items(include_nested=True, leaves_only=True):
        original = params.get(key)
        assert type(value) is type(original), key
        assert value.requires_grad == original.requires_grad
        assert value.data_ptr() != original.data_ptr()
        assert (value == original).all()
    assert sorted(n for n, _ in copy.named_parameters()) == ["a.p", "e"]


def test_clone_keeps_tied_leaves_tied_and_shallow_clone_shares() -> None:
    tied = nn.Parameter(torch.zeros(()))
    params = TensorDictParams(TensorDict({"a": {"b": tied}, "c": tied}), no_convert=True)
    copy = params.clone()
    assert copy["c"] is copy["a", "b"] and copy["c"] is not tied
    assert params.clone(recurse=False)["c"] is tied


def test_clone_of_a_locked_params_is_unlocked_like_every_clone() -> None:
    params = TensorDictParams(TensorDict({"w": torch.zeros(2), "n": {"b": torch.ones(2)}}))
    params.lock_()
    for copy in (params.clone(), params.clone(recurse=False)):
        assert not copy.is_locked and not copy["n"].is_locked
        copy["new"] = torch.zeros(2)
    assert params.is_locked and "new" not in params.keys()
