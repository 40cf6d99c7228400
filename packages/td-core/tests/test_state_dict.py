"""state_dict / load_state_dict: formats, metadata, strictness (issue 22)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch

from td_core import TensorDict, lazy_stack


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.ones(3), "b": {"c": torch.full((3,), 2.0), "d": {"e": torch.zeros(3, 2)}}}, [3]
    )


@pytest.mark.parametrize("kind", ["dense", "lazy"])
@pytest.mark.parametrize("flatten", [True, False])
def test_round_trip_in_either_format(kind: str, flatten: bool) -> None:
    source = _td() if kind == "dense" else lazy_stack(list(_td().unbind(0)))
    sd = source.state_dict(flatten=flatten)
    if flatten:
        assert list(sd) == ["a", "b.c", "b.d.e"]
        assert set(sd._metadata) == {"", "b", "b.d"}
    else:
        assert list(sd) == ["a", "b"] and list(sd["b"]) == ["c", "d"]
        assert sd["b"]._metadata[""]["batch_size"] == torch.Size([3])
    assert sd._metadata[""]["batch_size"] == torch.Size([3])
    target = source.clone().zero_()
    assert target.load_state_dict(sd) is target
    assert (target == source).all()


def test_keep_vars_and_destination() -> None:
    leaf = torch.ones(2, requires_grad=True)
    td = TensorDict(a=leaf)
    assert not td.state_dict()["a"].requires_grad
    assert td.state_dict(keep_vars=True)["a"] is leaf
    dest: OrderedDict = OrderedDict()
    assert td.state_dict(destination=dest, prefix="m.") is dest and list(dest) == ["m.a"]


def test_strict_mismatch_raises_runtime_error_and_writes_nothing() -> None:
    td = _td()
    sd = td.state_dict()
    del sd["a"]
    target = td.clone().zero_()
    with pytest.raises(RuntimeError, match=r"missing keys \['a'\]") as info:
        target.load_state_dict(sd)
    assert isinstance(info.value, KeyError)
    assert (target == 0).all()  # nothing written
    target.load_state_dict(sd, strict=False)
    assert (target["a"] == 0).all() and (target["b", "c"] == 2).all()


def test_legacy_format_and_saved_batch_size() -> None:
    legacy = OrderedDict(a=torch.tensor(1), __batch_size=torch.Size([]), __device=None)
    td = TensorDict(a=torch.tensor(0))
    td.load_state_dict(legacy)
    assert td["a"] == 1
    sized = TensorDict(a=torch.ones(4, 2), batch_size=[4, 2])
    target = TensorDict(a=torch.zeros(4, 2), batch_size=[4])
    target.load_state_dict(sized.state_dict())
    assert target.batch_size == (4, 2) and (target["a"] == 1).all()


def test_strict_load_names_the_unexpected_key_in_upstreams_words():
    td = TensorDict(x=torch.zeros(3))
    sd = td.state_dict()
    sd["a"] = torch.ones(3)
    with pytest.raises(KeyError, match="Key 'a' wasn't expected in the state-dict"):
        td.load_state_dict(sd)
    assert (td["x"] == 0).all()
