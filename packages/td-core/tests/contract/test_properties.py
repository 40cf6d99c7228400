"""Properties that hold on every kind of container, over containers drawn by `strategies.py`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import td_core

if str(Path(__file__).parent) not in sys.path:  # the strategies module sits beside this file
    sys.path.insert(0, str(Path(__file__).parent))
from strategies import KINDS, assert_same_td, containers, quick, ragged

# few examples each, no example database on disk: the suite stays fast and leaves no files
SETTINGS = quick(15)


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(data=st.data())
def test_every_kind_is_built(kind: str, data: st.DataObject) -> None:
    td = data.draw(containers((kind,)))
    assert td_core.is_tensor_collection(td)
    assert td.batch_dims >= 0


@SETTINGS
@given(containers(), st.data())
def test_unbind_then_stack_round_trips(td: Any, data: st.DataObject) -> None:
    assume(td.batch_dims > 0)
    dim = data.draw(st.integers(-td.batch_dims, td.batch_dims - 1))
    parts = td.unbind(dim)
    assert len(parts) == td.batch_size[dim]
    stacked = td_core.lazy_stack(list(parts), dim) if ragged(td) else torch.stack(parts, dim)
    assert_same_td(stacked, td)


@SETTINGS
@given(containers())
def test_clone_is_equal_and_independent(td: Any) -> None:
    copy = td.clone()
    assert_same_td(copy, td)
    before = td.clone()
    copy.apply_(lambda t: t.zero_() if t.dtype is not torch.bool else t.fill_(False))
    assert_same_td(td, before)


@SETTINGS
@given(containers(), st.data())
def test_index_then_set_round_trips(td: Any, data: st.DataObject) -> None:
    assume(td.batch_dims > 0)
    i = data.draw(st.integers(0, td.batch_size[0] - 1))
    target = td.clone()
    if isinstance(target, torch.nn.Module):  # a TensorDictParams' clone holds leaf parameters,
        target = target.detach()  # which refuse indexed writes (as upstream)
    zeros = target[i].apply(torch.zeros_like)
    target[i] = zeros
    assert_same_td(target[i], zeros)
    for j in range(td.batch_size[0]):
        if j != i:  # the other rows are untouched
            assert_same_td(target[j], td[j])


@SETTINGS
@given(containers())
def test_to_dict_from_dict_round_trips(td: Any) -> None:
    assume(not ragged(td))
    dense = td.to_tensordict() if not td_core.is_tensorclass(td) else td._tensordict
    back = td_core.TensorDict.from_dict(dense.to_dict(), batch_size=td.batch_size)
    assert_same_td(back, dense)


@SETTINGS
@given(containers(), st.data())
def test_reductions_match_torch_per_leaf(td: Any, data: st.DataObject) -> None:
    assume(td.batch_dims > 0 and not ragged(td))
    dim = data.draw(st.integers(0, td.batch_dims - 1))
    name = data.draw(st.sampled_from(["sum", "amax", "mean", "prod"]))
    if name == "mean":  # torch's mean takes floating tensors only
        td = td.select(*(k for k in td.keys(True, True) if td.get(k).is_floating_point()))
        assume(len(list(td.keys(True, True))) > 0)
    result = getattr(td, name)(dim)
    for key in td.keys(True, True):
        assert torch.equal(result.get(key), getattr(torch, name)(td.get(key), dim)), key
