"""Legacy lazy views (`set_lazy_legacy(True)`) and shape ops on write-through views."""

import pickle

import pytest
import torch

import td_core
from td_core import TensorDict, lazy_stack, set_lazy_legacy


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(24.0).reshape(2, 3, 4), "n": {"x": torch.zeros(2, 3, 5)}},
        batch_size=[2, 3],
    )


VIEWS = {
    "permute": (lambda td: td.permute(1, 0), lambda t: t.permute(1, 0, *range(2, t.ndim))),
    "transpose": (lambda td: td.transpose(0, 1), lambda t: t.transpose(0, 1)),
    "unsqueeze": (lambda td: td.unsqueeze(1), lambda t: t.unsqueeze(1)),
    "squeeze": (lambda td: td.unsqueeze(0).squeeze(0), lambda t: t),
    "view": (lambda td: td.view(-1), lambda t: t.reshape(6, *t.shape[2:])),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_reads_apply_the_op_and_follow_the_source(name):
    td = _td()
    make, op = VIEWS[name]
    with set_lazy_legacy(True):
        view = make(td)
    if name != "squeeze":
        assert type(view).__name__ == "LazyViewTensorDict"
    assert torch.equal(view["a"], op(td["a"]))
    assert view["n"].batch_size == view.batch_size
    td["a"] += 1  # the view reads the source on every access
    assert torch.equal(view["a"], op(td["a"]))


@pytest.mark.parametrize("name", ["permute", "transpose", "unsqueeze", "view"])
def test_writes_new_keys_and_in_place_values_reach_the_source(name):
    td = _td()
    make, _ = VIEWS[name]
    with set_lazy_legacy(True):
        view = make(td)
        view["b"] = torch.ones(*view.batch_size, 7)
        view.set(("some", "nested"), torch.full(view.batch_size, 2.0))
        view.set_("a", torch.zeros_like(view["a"]))
        view["n"].apply_(lambda t: t.add_(3))
    assert td["b"].shape == (2, 3, 7) and bool((td["b"] == 1).all())
    assert td["some", "nested"].shape == (2, 3) and bool((td["some", "nested"] == 2).all())
    assert bool((td["a"] == 0).all()) and bool((td["n", "x"] == 3).all())
    del view["b"]
    assert "b" not in td.keys()


def test_the_op_undone_gives_the_source_and_other_ops_chain():
    td = _td()
    with set_lazy_legacy(True):
        assert td.permute(1, 0).permute(1, 0) is td
        assert td.transpose(0, 1).transpose(1, 0) is td
        assert td.unsqueeze(-1).squeeze(-1) is td
        assert td.view(-1).view(2, 3) is td
        assert td.permute(0, 1) is td and td.view(2, 3) is td  # no-ops
        chained = td.unsqueeze(0).permute(2, 1, 0)
        assert chained.batch_size == (3, 2, 1) and chained.source.source is td
        chained["c"] = torch.ones(3, 2, 1)
    assert td["c"].shape == (2, 3)


def test_lock_and_names_are_the_sources():
    td = _td()
    td.names = ["b", "t"]
    with set_lazy_legacy(True):
        view = td.permute(1, 0)
    assert view.names == ["t", "b"]
    with pytest.raises(RuntimeError, match="lazy tensordict cannot be modified"):
        view.names = ["x", "y"]
    view.lock_()
    assert td.is_locked
    with pytest.raises(RuntimeError, match="locked"):
        view["new"] = torch.zeros(3, 2)
    view.set_("a", torch.ones(3, 2, 4))  # in place is allowed on a locked source
    assert bool((td["a"] == 1).all())
    view.unlock_()
    assert not td.is_locked


def test_copies_batch_size_and_pickling():
    td = _td()
    with set_lazy_legacy(True):
        view = td.permute(1, 0)
    dense = view.clone()
    assert type(dense) is TensorDict and dense.batch_size == (3, 2)
    shallow = view.clone(recurse=False)
    shallow["new"] = torch.zeros(3, 2)
    assert "new" not in td.keys()
    with pytest.raises(RuntimeError, match="lazy representation"):
        view.batch_size = [6]
    with pytest.raises(TypeError, match="Cannot pass batch-size to"):
        view.to(batch_size=[])
    back = pickle.loads(pickle.dumps(view))
    assert torch.equal(back["a"], view["a"])


def test_a_view_of_a_lazy_stack_writes_into_its_members():
    members = [TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)]
    stack = lazy_stack(members, 0)
    with set_lazy_legacy(True):
        view = stack.transpose(0, 1)
    view.set_("a", torch.ones(3, 2))
    view["b"] = torch.full((3, 2), 2.0)
    assert all(bool((m["a"] == 1).all()) and bool((m["b"] == 2).all()) for m in members)


@pytest.mark.parametrize(
    "call",
    [
        lambda v: v.apply(lambda t: t + 1, inplace=True),
        lambda v: v.named_apply(lambda k, t: t + 1, inplace=True),
        lambda v: v._fast_apply(lambda t: t + 1, inplace=True),
    ],
    ids=["apply", "named_apply", "_fast_apply"],
)
def test_inplace_apply_through_a_view_of_a_lazy_stack_reaches_its_members(call):
    members = [TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)]
    with set_lazy_legacy(True):
        view = lazy_stack(members, 0).transpose(0, 1)
    assert call(view) is view
    assert all(bool((m["a"] == 1).all()) for m in members)


def test_legacy_unsqueeze_of_a_lazy_stack_views_its_members():
    members = [TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(2)]
    stack = lazy_stack(members, 0)
    with set_lazy_legacy(True):
        out = stack.unsqueeze(1)
        out["b"] = torch.ones(2, 1, 3)
    assert all(m["b"].shape == (3,) for m in members)


@pytest.mark.parametrize(
    "op",
    [
        lambda v: v.permute(1, 0),
        lambda v: v.permute(0, 1),
        lambda v: v.transpose(0, 1),
        lambda v: v.swapaxes(0, 1),
        lambda v: v.movedim(0, 1),
        lambda v: v.unsqueeze(0),
        lambda v: v.squeeze(),
        lambda v: v.view(-1),
    ],
)
@pytest.mark.parametrize("kind", ["sub", "lazy"])
def test_shape_ops_on_write_through_views_ask_to_make_it_dense(op, kind):
    td = _td()
    if kind == "sub":
        view = TensorDict({"a": td["a"].unsqueeze(0)}, [1, 2, 3])._get_sub_tensordict(0)
    else:
        with set_lazy_legacy(True):
            view = td.permute(1, 0)
    with pytest.raises(td_core.errors.NotDenseError, match=r"Make it dense|Call `reshape`"):
        op(view)
    assert isinstance(td_core.errors.NotDenseError("x"), RuntimeError)
    assert view.reshape(-1).batch_size == (6,)  # a copy: allowed
    assert view.transpose(0, 0) is view and view.view(*view.batch_size) is view


@pytest.mark.parametrize(
    "call",
    [
        lambda v: v.select("a", inplace=True),
        lambda v: v.exclude("a", inplace=True),
        lambda v: v.flatten_keys(inplace=True),
        lambda v: v.unflatten_keys(inplace=True),
    ],
)
def test_in_place_key_restructuring_of_a_view_is_refused(call):
    td = _td()
    for view in (td._get_sub_tensordict(0), td.unsqueeze(0)._get_sub_tensordict(0)):
        with pytest.raises(RuntimeError, match=r"Cannot call (select|exclude) inplace"):
            call(view)
        assert set(td.keys()) == {"a", "n"}


def test_split_keys_in_place_on_a_view_deletes_from_the_source():
    td = _td()
    sub = td._get_sub_tensordict(0)
    taken, rest = sub.split_keys(["a"], inplace=True)
    assert rest is sub and "a" in taken.keys() and "a" not in td.keys()
