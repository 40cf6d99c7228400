"""Indexing with first-class dims (`functorch.dim`) and writing the result into a module."""

from __future__ import annotations

import pytest
import torch
from functorch import dim as ftdim
from torch import nn

from td_core import TensorDict, TensorDictParams, lazy_stack


def _td() -> TensorDict:
    td = TensorDict(
        {"a": torch.randn(3, 4, 5), "nested": {"b": torch.randn(3, 4)}},
        batch_size=[3, 4],
        names=["x", "y"],
    )
    td["label"] = "text"
    return td


def test_a_first_class_dim_binds_the_batch_dim_it_indexes() -> None:
    td = _td()
    d0 = ftdim.dims(1)
    out = td[d0]
    assert out.batch_size == (4,) and out.names == ["y"]
    assert out["nested"].batch_size == (4,)
    assert out["label"] == "text"
    leaf = out["a"]
    assert leaf.dims == (d0,) and tuple(leaf.shape) == (4, 5)
    assert torch.equal(leaf._tensor, td["a"])  # a view of the same data, dim bound
    d1 = ftdim.dims(1)
    assert td[:, d1].names == ["x"] and td[:, d1].batch_size == (3,)


def test_a_lazy_stack_refuses_one_on_its_stack_dim_and_takes_it_elsewhere() -> None:
    stack = lazy_stack([TensorDict({"a": torch.zeros(4, 2)}, [4]) for _ in range(3)], 1)
    d0, d1 = ftdim.dims(2)
    assert stack[d0].batch_size == (3,)
    with pytest.raises(ValueError, match=r"stack dim \(1\) with the first-class dim"):
        stack[:, d1]


def test_a_leaf_of_a_lazy_stack_indexed_by_one_is_the_members_leaves_stacked() -> None:
    data = torch.randn(4, 3, 2)
    stack = lazy_stack([TensorDict({"a": data[:, i]}, [4]) for i in range(3)], 1)
    d0 = ftdim.dims(1)
    leaf = stack[d0]["a"]  # each member's leaf is a functorch.dim.Tensor bound to d0
    assert tuple(leaf.shape) == (3, 2) and leaf.dims == (d0,)
    assert torch.equal(leaf.order(d0), data)


def test_to_module_runs_the_module_over_the_bound_dim_and_restores_it() -> None:
    module = nn.Linear(3, 4)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    params = TensorDict.from_module(module).expand(5).clone()
    params["weight"] += torch.arange(5.0).view(5, 1, 1)
    d0 = ftdim.dims(1)
    swap = TensorDictParams(params)[d0].to_module(module, preserve_module_state=False)
    x = torch.randn(2, 3)
    y = module(x)
    assert y.dims == (d0,) and y._tensor.shape == (5, 2, 4)
    expected = torch.stack(
        [nn.functional.linear(x, w, b) for w, b in zip(params["weight"], params["bias"])]
    )
    torch.testing.assert_close(y._tensor, expected)
    swap.to_module(module)
    assert isinstance(module.weight, nn.Parameter)
    for key, value in module.state_dict().items():
        assert torch.equal(value, before[key])


def test_to_module_refuses_an_unknown_slot_for_a_bound_leaf() -> None:
    d0 = ftdim.dims(1)
    bound = TensorDict({"nope": torch.zeros(2, 3)}, [2])[d0]
    with pytest.raises(KeyError, match="no parameter or buffer 'nope'"):
        bound.to_module(nn.Linear(3, 3))


def test_more_first_class_dims_than_batch_dims_raise_what_torch_raises() -> None:
    d0, d1, d2 = ftdim.dims(3)
    with pytest.raises(ValueError, match="too many indices"):  # torch's class for a tensor
        _td()[d0, d1, d2]
    with pytest.raises(IndexError, match="too many indices"):  # and the one for plain indices
        _td()[0, 0, 0]
