"""LazyStackedTensorDict's own API: members, nested tensors, constructors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import LazyStackedTensorDict, TensorDict, set_get_defaults_to_none
from td_core.errors import LockedError


def _stack() -> tuple[TensorDict, TensorDict, LazyStackedTensorDict]:
    a = TensorDict(a=torch.zeros(3), batch_size=[3])
    b = TensorDict(a=torch.ones(3), batch_size=[3])
    return a, b, LazyStackedTensorDict.lazy_stack([a, b])


def test_append_insert_extend_add_members_by_reference() -> None:
    a, b, s = _stack()
    c = a.clone()
    s.append(c)
    assert s.batch_size == torch.Size([3, 3]) and s.tensordicts[-1] is c
    s.insert(0, b)
    assert s[0] is b and s.batch_size[0] == 4
    s.extend([a, b])
    assert s.batch_size[0] == 6
    s.extend(s[:2])  # a TensorDict is unbound along the stack dim
    assert s.batch_size[0] == 8
    s["a"] = torch.full((8, 3), 5.0)
    assert (c["a"] == 5).all()


def test_adding_a_member_of_another_batch_size_raises_and_adds_nothing() -> None:
    a, _, s = _stack()
    with pytest.raises(ValueError, match=r"\[4\]"):
        s.extend([a, TensorDict(a=torch.zeros(4), batch_size=[4])])
    assert s.batch_size[0] == 2
    with pytest.raises(TypeError):
        s.append(torch.zeros(3))  # type: ignore[arg-type]
    s.lock_()
    with pytest.raises(LockedError):
        s.append(a)


def test_get_nestedtensor_for_ragged_entries() -> None:
    s = LazyStackedTensorDict.lazy_stack(
        [TensorDict(r=torch.zeros(3, i + 1), batch_size=[3]) for i in range(2)]
    )
    nt = s.get_nestedtensor("r")
    assert nt.is_nested and [t.shape[-1] for t in nt.unbind()] == [1, 2]
    assert s.get_nestedtensor("r", layout=torch.jagged).layout == torch.jagged
    assert s.get_nestedtensor("nope", 0) == 0
    assert s.get_nestedtensor("nope") is None and s.get("nope", as_nested_tensor=True) is None
    with set_get_defaults_to_none(False), pytest.raises(KeyError, match="nope"):
        s.get_nestedtensor("nope")


def test_valid_keys_are_the_common_keys() -> None:
    s = LazyStackedTensorDict.lazy_stack(
        [
            TensorDict(a=torch.zeros(3), x=torch.zeros(3), batch_size=[3]),
            TensorDict(a=torch.zeros(3), batch_size=[3]),
        ]
    )
    assert list(s.valid_keys()) == ["a"]


def test_auto_batch_size_grows_the_members() -> None:
    s = LazyStackedTensorDict.lazy_stack(
        [TensorDict(a=torch.zeros(3, 4)), TensorDict(a=torch.zeros(3, 5))]
    )
    assert s.auto_batch_size_().batch_size == torch.Size([2, 3])
    assert s.tensordicts[0].batch_size == torch.Size([3])


def test_from_dict_builds_one_member_per_mapping() -> None:
    # as upstream 0.15: the stack dim only; the members' batch sizes are inferred on request
    s = LazyStackedTensorDict.from_dict([{"a": torch.zeros(3)}, {"a": torch.ones(3)}])
    assert isinstance(s, LazyStackedTensorDict) and s.batch_size == torch.Size([2])
    assert (s[1]["a"] == 1).all()
    back = LazyStackedTensorDict.from_dict({"0": {"a": torch.zeros(3)}, "1": {"a": torch.ones(3)}})
    assert back.batch_size == torch.Size([2])


def test_module_constructors_give_tensordicts_as_upstream() -> None:
    params = LazyStackedTensorDict.from_module(nn.Linear(2, 3))
    assert type(params) is TensorDict and params.is_locked
    stacked = LazyStackedTensorDict.from_modules(nn.Linear(2, 3), nn.Linear(2, 3))
    assert stacked.batch_size == torch.Size([2])


def test_stacking_methods() -> None:
    a, b, s = _stack()
    assert TensorDict.stack([a, b]).batch_size == torch.Size([2, 3])
    assert TensorDict.cat([a, b]).batch_size == torch.Size([6])
    assert isinstance(TensorDict.lazy_stack([a, b]), LazyStackedTensorDict)
    ragged = TensorDict(a=torch.zeros(3, 2), batch_size=[3])
    assert isinstance(TensorDict.maybe_dense_stack([a, ragged]), LazyStackedTensorDict)
    assert type(TensorDict.maybe_dense_stack([a, b])) is TensorDict
    assert s.to_lazystack(0) is s
    view = a.to_lazystack(0)
    view.set_("a", torch.full((3,), 2.0))
    assert (a["a"] == 2).all()  # members are views of the original


def test_stack_tensors_removes_inputs_only_on_success() -> None:
    td = TensorDict(x=torch.zeros(3, 2), y=torch.ones(3, 2), batch_size=[3])
    with pytest.raises(RuntimeError):
        td.stack_tensors("x", "y", out_key="z", dim=0)  # [2, 3, 2] does not fit batch [3]
    assert set(td.keys()) == {"x", "y"}
    td.stack_tensors("x", "y", out_key="z", dim=1)
    assert list(td.keys()) == ["z"] and td["z"].shape == torch.Size([3, 2, 2])


@pytest.mark.parametrize("combine", ["stack_tensors", "cat_tensors"])
def test_combining_an_entry_with_itself_is_refused_before_anything_is_written(combine) -> None:
    td = TensorDict(x=torch.zeros(3, 2), y=torch.ones(3, 2), batch_size=[3])
    with pytest.raises(KeyError, match="listed twice"):  # it would be removed twice
        getattr(td, combine)("x", "x", out_key="z", dim=1)
    assert set(td.keys()) == {"x", "y"}  # no "z" written, "x" kept
    kept = getattr(td, combine)("x", "x", out_key="z", dim=1, keep_entries=True)
    assert set(kept.keys()) == {"x", "y", "z"}


def test_stacking_ragged_lazy_stacks_stays_lazy() -> None:
    ragged = LazyStackedTensorDict.lazy_stack(
        [TensorDict(r=torch.zeros(3, i + 1), batch_size=[3]) for i in range(2)]
    )
    stacked = torch.stack([ragged, ragged], 1)
    assert isinstance(stacked, LazyStackedTensorDict) and stacked.batch_size == torch.Size(
        [2, 2, 3]
    )
    joined = torch.cat([ragged, ragged], 0)
    assert joined.batch_size == torch.Size([4, 3]) and len(joined.tensordicts) == 4
    wide = torch.cat([ragged, ragged], 1)
    assert wide.batch_size == torch.Size([2, 6])
