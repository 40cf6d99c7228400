"""A tensorclass over a lazy stack or a view wraps it: every write through the instance reaches it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    TensorDict,
    assert_close,
    lazy_stack,
    maybe_dense_stack,
    tensorclass,
)


@tensorclass
class Pair:
    obs: torch.Tensor
    r: torch.Tensor


def _dense() -> TensorDict:
    return TensorDict({"obs": torch.arange(15.0).view(5, 3), "r": torch.ones(5)}, [5])


def _row() -> TensorDict:
    return TensorDict({"obs": torch.full((3,), -1.0), "r": torch.tensor(7.0)})


KINDS: dict[str, Callable[[], Any]] = {
    "lazy stack": lambda: lazy_stack(list(_dense().unbind(0))),
    "lazy stack, dim 1": lambda: lazy_stack(list(_dense()[None].unbind(1)), 1)[0],
    "sub-TensorDict of a lazy stack": lambda: lazy_stack(
        list(_dense().expand(2, 5).clone().unbind(0))
    )._get_sub_tensordict(0),
}

OPS: dict[str, Callable[[Any], Any]] = {
    "obj.field = value": lambda obj: setattr(obj, "obs", torch.zeros(5, 3)),
    "obj[i] = row": lambda obj: obj.__setitem__(1, _row()),
    "obj[i] = instance": lambda obj: obj.__setitem__(2, Pair.from_tensordict(_row())),
    "set_": lambda obj: obj.set_("r", torch.zeros(5)),
    "set_at_": lambda obj: obj.set_at_("obs", torch.zeros(3), 3),
    "update_": lambda obj: obj.update_(_dense() * 2),
    "update_at_": lambda obj: obj.update_at_(_row(), 0),
    "copy_at_": lambda obj: obj.copy_at_(_row(), 4),
    "copy_": lambda obj: obj.copy_(_dense() + 1),
    "add_": lambda obj: obj.add_(1),
    "*=": lambda obj: obj.__imul__(3),
    "apply_": lambda obj: obj.apply_(lambda x: x - 1),
    "zero_": lambda obj: obj.zero_(),
    "masked_fill_": lambda obj: obj.masked_fill_(
        torch.tensor([True, False, True, False, False]), 9
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("op", list(OPS))
def test_a_write_through_the_instance_reaches_the_wrapped_kind(kind: str, op: str) -> None:
    wrapped = KINDS[kind]()
    obj = Pair.from_tensordict(wrapped)
    assert obj._tensordict is wrapped  # not a copy
    expected = Pair.from_tensordict(_dense())
    OPS[op](expected)
    OPS[op](obj)
    assert_close(wrapped.to_tensordict(), expected.to_tensordict())
    assert_close(obj.to_tensordict(), expected.to_tensordict())


def test_a_lazy_stack_wrapped_keeps_its_members_and_reads_stacked() -> None:
    members = list(_dense().unbind(0))
    obj = Pair.from_tensordict(lazy_stack(members))
    assert isinstance(obj._tensordict, LazyStackedTensorDict)
    assert obj.obs.shape == torch.Size([5, 3])
    obj.r = torch.arange(5.0)
    assert [m["r"].item() for m in members] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert type(obj.to_tensordict()) is TensorDict
    # out-of-place ops are the stack's own: the result is the class over a lazy stack
    assert type(obj + 1) is Pair and type((obj + 1)._tensordict) is LazyStackedTensorDict


def _ragged() -> list[TensorDict]:
    return [
        TensorDict(obs=torch.full((2,), float(i)), r=torch.ones(2, i + 1), batch_size=[2])
        for i in range(3)
    ]


RAGGED_OPS: dict[str, Callable[[Any], Any]] = {
    "apply": lambda o: o.apply(lambda x: x * 2),
    "+": lambda o: o + 1,
    "clone": lambda o: o.clone(),
    "to": lambda o: o.to(torch.float64),
    "exp": lambda o: o.exp(),
    "==": lambda o: o == 0,
    "sum(dim)": lambda o: o.sum(1),
    "unsqueeze": lambda o: o.unsqueeze(-1),
    "where": lambda o: o.where(torch.ones(3, 2, dtype=torch.bool), 0),
    "%": lambda o: o % 2,
    "1 | o": lambda o: 1 | (o > 0),
    "as_tensor": lambda o: o.as_tensor(),
    "consolidate": lambda o: o.consolidate(),
    "torch.cat": lambda o: torch.cat([o, o], 1),
    "F.mse_loss(reduction='none')": lambda o: torch.nn.functional.mse_loss(
        o, o + 1, reduction="none"
    ),
    "where(out=instance)": lambda o: o.where(torch.ones(3, 2, dtype=torch.bool), 0, out=o.clone()),
}


@pytest.mark.parametrize("op", list(RAGGED_OPS))
def test_out_of_place_ops_over_a_ragged_stack_run_member_by_member(op: str) -> None:
    # a stacked read of `r` would raise: the members' `r` differ in shape
    members = _ragged()
    result = RAGGED_OPS[op](Pair.from_tensordict(lazy_stack(members)))
    assert type(result) is Pair and type(result._tensordict) is LazyStackedTensorDict
    expected = RAGGED_OPS[op](lazy_stack(_ragged()))
    for got, want in zip(result._tensordict.tensordicts, expected.tensordicts, strict=True):
        assert_close(got, want)


RAGGED_READS: dict[str, Callable[[Any], Any]] = {
    "bytes": lambda o: o.bytes(),
    "param_count": lambda o: o.param_count(),
    "dtype": lambda o: o.dtype,
    "depth": lambda o: o.depth,
    "is_consolidated": lambda o: o.is_consolidated(),
    "index (names carried)": lambda o: o[1].batch_size,
    "torch.stack": lambda o: torch.stack([o, o], 0).batch_size,
    "maybe_dense_stack": lambda o: type(maybe_dense_stack([o, o], 0)).__name__,
}


@pytest.mark.parametrize("op", list(RAGGED_READS))
def test_reads_over_a_ragged_stack_are_the_stacks_own(op: str) -> None:
    result = RAGGED_READS[op](Pair.from_tensordict(lazy_stack(_ragged())))
    expected = RAGGED_READS[op](lazy_stack(_ragged()))
    if op == "maybe_dense_stack":  # the class over a stack, where the stack gives a stack
        assert (result, expected) == ("Pair", "LazyStackedTensorDict")
    else:
        assert result == expected


def test_split_keys_in_place_over_a_ragged_stack_drops_the_keys_from_the_members() -> None:
    members = _ragged()
    obj = Pair.from_tensordict(lazy_stack(members))
    part, rest = obj.split_keys(["obs"], inplace=True)
    assert rest is obj and "obs" not in members[0].keys() and "r" in members[2].keys()
    assert part["obs"].shape == torch.Size([3, 2])


def test_an_identity_apply_over_a_lazy_stack_shares_the_members_tensors() -> None:
    members = list(_dense().unbind(0))
    same = Pair.from_tensordict(lazy_stack(members)).apply(lambda x: x)
    same.apply_(lambda x: x.add_(100))  # as upstream, and as on a dense instance
    assert members[1]["r"].item() == 101.0


def test_gather_out_into_an_instance_over_a_lazy_stack_writes_its_members() -> None:
    members = [TensorDict(obs=torch.zeros(3), r=torch.zeros(()), batch_size=[]) for _ in range(5)]
    out = Pair.from_tensordict(lazy_stack(members))
    index = torch.tensor([4, 3, 2, 1, 0])
    result = Pair.from_tensordict(_dense()).gather(0, index, out=out)
    assert result is out
    assert members[0]["obs"].tolist() == [12.0, 13.0, 14.0]  # row 4 of the source


def test_dense_subclasses_and_other_tensorclasses_are_copied_into_a_dense_tensordict() -> None:
    other = Pair.from_tensordict(_dense())
    again = Pair.from_tensordict(other)
    assert type(again._tensordict) is TensorDict and again._tensordict is not other._tensordict


def test_a_wrapped_lazy_stack_locks_and_unlocks_with_its_nested_members() -> None:
    # the lock graph walks the stack's members (not a stacked copy of their sub-TensorDicts)
    members = [
        TensorDict(obs=torch.zeros(3), r=TensorDict(x=torch.ones(3), batch_size=[3]))
        for _ in range(2)
    ]
    obj = Pair.from_tensordict(lazy_stack(members))
    obj.lock_()
    assert members[0].is_locked and members[1]["r"].is_locked
    obj.unlock_()
    assert not obj.is_locked and not members[1]["r"].is_locked


@pytest.mark.parametrize(
    "view", [lambda o: o.select("obs"), lambda o: o.exclude("r")], ids=["select", "exclude"]
)
def test_select_and_exclude_of_a_wrapped_lazy_stack_share_the_members(view) -> None:
    members = list(_dense().unbind(0))
    part = view(Pair.from_tensordict(lazy_stack(members)))
    assert type(part) is Pair and set(part.keys()) == {"obs"}
    part.apply_(lambda x: x.add_(100))  # as a dense instance's select shares its tensors
    assert [m["obs"][0].item() for m in members] == [100.0, 103.0, 106.0, 109.0, 112.0]


@pytest.mark.parametrize(
    "stack",
    [
        lambda rows: lazy_stack(rows),
        lambda rows: LazyStackedTensorDict.lazy_stack(rows, 0),
        lambda rows: TensorDict.maybe_dense_stack(rows),  # ragged rows: a lazy stack
    ],
    ids=["lazy_stack", "LazyStackedTensorDict.lazy_stack", "maybe_dense_stack"],
)
def test_a_lazy_stack_of_instances_of_one_class_is_the_class_over_a_stack(stack) -> None:
    rows = [Pair(obs=torch.zeros(3), r=torch.zeros(())), Pair(obs=torch.ones(2), r=torch.ones(()))]
    out = stack(rows)
    assert type(out) is Pair and isinstance(out._tensordict, LazyStackedTensorDict)
    assert [m is row._tensordict for m, row in zip(out._tensordict.tensordicts, rows)] == [
        True,
        True,
    ]  # the instances' own TensorDicts: writes through the stack reach them
    out.r = torch.tensor([5.0, 6.0])
    assert [row.r.item() for row in rows] == [5.0, 6.0]
    assert type(out[1]) is Pair and out[1].obs.tolist() == [1.0, 1.0]


def test_to_lazystack_of_an_instance_is_the_class_over_a_stack_of_its_rows() -> None:
    obj = Pair.from_tensordict(_dense())
    out = obj.to_lazystack(0)
    assert type(out) is Pair and len(out._tensordict.tensordicts) == 5
    out[2] = Pair.from_tensordict(_row())  # the rows are views of the instance's tensors
    assert obj.obs[2].tolist() == [-1.0, -1.0, -1.0]


def test_other_stacks_of_instances_stay_lazy_stacks_of_them() -> None:
    @tensorclass
    class Other:
        obs: torch.Tensor

    a, b = Pair(obs=torch.zeros(3), r=torch.zeros(())), Other(obs=torch.ones(3))
    mixed = lazy_stack([a, b])  # two classes: no one class to wrap the stack in, as upstream
    assert type(mixed) is LazyStackedTensorDict and mixed.tensordicts == [a, b]
    held = LazyStackedTensorDict(a, a.clone())  # the constructor keeps its members, as upstream
    assert held.tensordicts[0] is a


def test_a_nested_entry_of_instances_reads_as_the_class_over_a_stack() -> None:
    rows = [TensorDict(p=Pair(obs=torch.full((3,), float(i)), r=torch.zeros(()))) for i in range(2)]
    nested = lazy_stack(rows)["p"]
    assert type(nested) is Pair and isinstance(nested._tensordict, LazyStackedTensorDict)
    nested.obs = torch.full((2, 3), 9.0)  # reaches the rows' instances
    assert rows[1]["p"].obs.tolist() == [9.0, 9.0, 9.0]


def test_an_operand_that_grows_the_batch_grows_it_over_a_wrapped_view() -> None:
    # entry by entry (the view's reads are copies): the result's batch follows its entries
    view = TensorDict(obs=torch.zeros(2, 4, 3), r=torch.zeros(2, 4), batch_size=[2, 4])[1]
    obj = Pair.from_tensordict(view._get_sub_tensordict(slice(None)))
    out = obj + torch.ones(1, 4)
    assert out.batch_size == torch.Size([1, 4]) and out.obs.shape == torch.Size([1, 4, 3])
    assert_close(
        out.to_tensordict(), (Pair.from_tensordict(view.clone()) + torch.ones(1, 4)).to_tensordict()
    )


def test_over_a_sub_view_ops_are_the_views_own_as_upstream() -> None:
    source = _dense().expand(2, 5).clone()
    obj = Pair.from_tensordict(source._get_sub_tensordict(1))
    # a shallow copy of a view is a view of the same region, so replace writes into it
    assert type(obj.copy()._tensordict) is type(obj._tensordict)
    out = obj.replace(r=torch.full((5,), 3.0))
    assert isinstance(out, Pair) and out is not obj
    assert source["r"][1].eq(3).all() and source["r"][0].eq(1).all()
    # a view's names are its source's: refused before the names are checked
    with pytest.raises(RuntimeError, match="subtensordict cannot be modified"):
        obj.refine_names("n")
    # a deep clone is a TensorDict of its own
    clone = obj.clone()
    clone.r.zero_()
    assert source["r"][1].eq(3).all()
