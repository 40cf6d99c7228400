"""`with lazy_stack.<view op>(...) as view:` writes back member by member, ragged leaves included.

The view of a lazy stack across its stack dim (`view(-1)` of a stack along
dim 1, say) lays its members out differently from the source; the write-back
then reads each source member's slice of the view, so a leaf whose shape
differs between members is never stacked.
"""

from __future__ import annotations

import torch

from td_core import LazyStackedTensorDict, TensorDict


def _member(i: int) -> TensorDict:
    return TensorDict(
        {
            "a": torch.zeros(2),
            "ragged": torch.arange(2.0 * (i + 1)).reshape(2, i + 1),
            "n": {"b": torch.zeros(2)},
        },
        [2],
    )


def _ragged() -> tuple[LazyStackedTensorDict, list[TensorDict]]:
    members = [_member(0), _member(1)]
    return LazyStackedTensorDict(*members, stack_dim=1), members


def test_view_across_the_stack_dim_writes_back() -> None:
    td, members = _ragged()
    with td.view(-1) as v:
        v.set("a", torch.arange(4.0))
        v.set("new", torch.arange(4.0) + 10)
        v.set(("n", "b"), torch.full((4,), 7.0))
    expected = torch.arange(4.0).reshape(2, 2)
    assert (td.get("a") == expected).all()
    assert (td.get("new") == expected + 10).all()
    assert (td.get(("n", "b")) == 7).all()
    for i, member in enumerate(members):  # the writes reached the members themselves
        assert (member.get("a") == expected[:, i]).all()
        assert (member.get("ragged") == _member(i).get("ragged")).all()


def test_unchanged_leaves_keep_their_memory() -> None:
    td, members = _ragged()
    kept = [(m.get("ragged"), m.get(("n", "b"))) for m in members]
    with td.reshape(-1) as v:
        v.set("a", torch.ones(4))
    for member, (ragged, nested) in zip(members, kept):
        assert member.get("ragged") is ragged
        assert member.get(("n", "b")) is nested


def test_deleting_through_the_view_reaches_the_members() -> None:
    td, members = _ragged()
    with td.flatten() as v:
        v.del_("a")
    assert "a" not in td.keys()
    assert all("a" not in m.keys() for m in members)


def test_locked_ragged_source_takes_in_place_writes() -> None:
    td, members = _ragged()
    td.lock_()
    a = members[1].get("a")
    with td.view(-1) as v:
        v.set_("a", torch.arange(4.0))
    assert members[1].get("a") is a
    assert (a == torch.tensor([1.0, 3.0])).all()
