"""TensorDictParams.clone keeps the kind of every leaf and ties (issue 22)."""

from __future__ import annotations

import pytest
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


def test_a_parent_modules_to_updates_the_device_it_reports() -> None:
    """`nn.Module.to` moves the registered leaves in place; the device the TensorDictParams
    (and each nested one) reports follows them (the meta device stands in for a GPU)."""
    params = TensorDictParams(TensorDict(w=torch.ones(3), b={"x": torch.zeros(2)}, device="cpu"))
    nn.ModuleList([params]).to(torch.float64)
    assert params.device == torch.device("cpu") and params["w"].dtype == torch.float64
    nn.ModuleList([params]).to("meta")
    assert params.device == torch.device("meta") and params["b"].device == torch.device("meta")
    assert params["w"].is_meta and params["b", "x"].is_meta
    undeclared = TensorDictParams(TensorDict(w=torch.ones(3)))
    nn.ModuleList([undeclared]).to("meta")
    assert undeclared.device is None  # no device declared: none is made up


def test_pin_memory_in_place_is_refused_before_anything_is_pinned() -> None:
    """As upstream: pinning copies each leaf, so in place it would swap out the parameters an
    optimizer holds (refused on machines without an accelerator too)."""
    params = TensorDictParams(TensorDict(w=torch.ones(3)))
    held = params["w"]
    with pytest.raises(RuntimeError, match="Cannot pin_memory in-place with TensorDictParams"):
        params.pin_memory(inplace=True)
    assert params["w"] is held
