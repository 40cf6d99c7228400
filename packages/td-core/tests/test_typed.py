"""TypedTensorDict, against upstream's on the same class."""

import pickle
import warnings

import pytest
import torch

import td_core as td

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def make(m):
    class State(m.TypedTensorDict):
        obs: torch.Tensor
        reward: torch.Tensor

    return State


class State(td.TypedTensorDict):
    obs: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor = None


class Child(State):
    action: torch.Tensor


def test_results_keep_the_class_like_upstream():
    rows = []
    for m in (td, up):
        cls = make(m)
        s = cls(obs=torch.zeros(3, 4), reward=torch.ones(3), batch_size=[3])
        rows.append(
            [
                type(s[0]).__name__,
                type(s.clone()).__name__,
                type(torch.stack([s, s])).__name__,
                type(s + 1).__name__,
                tuple(s.obs.shape),
                isinstance(s, m.TensorDictBase),
            ]
        )
    assert rows[0] == rows[1]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"obs": torch.zeros(3)}, "missing required field"),
        ({"obs": torch.zeros(3), "reward": torch.zeros(3), "extra": 1}, "unexpected field"),
    ],
)
def test_constructor_errors_match_upstream(kwargs, match):
    for m in (td, up):
        with pytest.raises(TypeError, match=match):
            make(m)(**kwargs, batch_size=[3])


def test_attribute_access_defaults_and_inheritance():
    s = State(obs=torch.zeros(3, 4), reward=torch.ones(3), batch_size=[3])
    assert "done" not in s.keys()
    s.obs = torch.ones(3, 4)
    assert s["obs"].sum() == 12
    assert Child._field_names == ("obs", "reward", "done", "action")
    c = Child(obs=torch.zeros(2), reward=torch.zeros(2), action=torch.ones(2), batch_size=[2])
    assert c.action.sum() == 2 and isinstance(c, State)
    assert State(obs=torch.zeros(()), reward=torch.zeros(())).batch_size == ()


def test_from_tensordict_and_pickle():
    plain = td.TensorDict(obs=torch.zeros(2), reward=torch.ones(2), batch_size=[2])
    view = State.from_tensordict(plain)
    assert type(view) is State and view.reward.sum() == 2
    with pytest.raises(TypeError, match="missing"):
        State.from_tensordict(td.TensorDict(obs=torch.zeros(2), batch_size=[2]))
    s = State(obs=torch.zeros(2), reward=torch.ones(2), batch_size=[2])
    back = pickle.loads(pickle.dumps(s))
    assert type(back) is State and back.reward.sum() == 2


def test_field_hiding_an_attribute_is_refused():
    with pytest.raises(AttributeError, match="hide"):

        class Bad(td.TypedTensorDict):
            keys: torch.Tensor


def test_a_plain_subclass_of_tensordict_survives_every_op():
    class Sub(td.TensorDict):
        pass

    t = Sub(a=torch.randn(3))
    stacked = torch.stack([t, t])
    results = [
        t + t,
        2 / t,
        t.to(torch.float64),
        torch.zeros_like(t),
        t.clone(),
        t.select(),
        t.exclude("a"),
        t.flatten_keys(),
        stacked,
        stacked[0],
        stacked.unbind(0)[0],
        stacked.unsqueeze(0).permute(1, 0),
        stacked.reshape(-1),
    ]
    assert all(type(r) is Sub for r in results)


# ------------------------------------------------------------------ class options
class Shadowing(td.TypedTensorDict["shadow"]):
    data: torch.Tensor
    clone: torch.Tensor


class Frozen(td.TypedTensorDict, frozen=True):
    x: torch.Tensor


def test_shadow_option_allows_fields_named_like_attributes():
    s = Shadowing(data=torch.zeros(3, 2), clone=torch.ones(3, 4), batch_size=[3])
    assert s.data.shape == (3, 2) and s.clone.shape == (3, 4)
    s.data = torch.ones(3, 2)
    assert (s["data"] == 1).all()

    class Child(Shadowing):
        extra: torch.Tensor

    assert Child._shadow is True and Shadowing._shadow is True
    assert td.TypedTensorDict._shadow is False
    with pytest.raises(AttributeError, match=r"shadows a TensorDictBase attribute.*'shadow'"):

        class Bad(td.TypedTensorDict):
            clone: torch.Tensor


def test_frozen_option_locks_instances_and_is_inherited():
    f = Frozen(x=torch.zeros(3), batch_size=[3])
    assert f.is_locked
    with pytest.raises(RuntimeError):
        f["y"] = torch.ones(3)

    class Child(Frozen):
        y: torch.Tensor

    assert Child._frozen is True
    assert Child(x=torch.zeros(3), y=torch.zeros(3), batch_size=[3]).is_locked
    both = td.TypedTensorDict["shadow", "frozen"]
    assert both._shadow and both._frozen


def test_unknown_and_no_effect_options():
    with pytest.raises(ValueError, match="Unknown TypedTensorDict option: 'nope'"):
        td.TypedTensorDict["nope"]
    with pytest.warns(DeprecationWarning, match="'autocast' has no effect"):

        class Cast(td.TypedTensorDict, autocast=True):
            x: torch.Tensor


# ------------------------------------------------------------------ declared fields
class Observed(td.TypedTensorDict):
    eta: "torch.Tensor"
    noise: "NotRequired[torch.Tensor]"  # noqa: F821 - a string annotation, read as text
    scale: "typing.NotRequired[torch.Tensor]"  # noqa: F821
    count: "ClassVar[int]" = 0  # noqa: F821 - not a field
    done: torch.Tensor = None


def test_required_and_optional_keys_from_annotations():
    assert Observed.__expected_keys__ == {"eta", "noise", "scale", "done"}
    assert Observed.__required_keys__ == {"eta"}
    assert Observed.__optional_keys__ == {"noise", "scale", "done"}
    o = Observed(eta=torch.zeros(3), batch_size=[3])
    assert set(o.keys()) == {"eta"}
    assert o.done is None  # a default is returned, not stored
    with pytest.raises(AttributeError, match="'noise' declared but not set"):
        o.noise  # noqa: B018
    with pytest.raises(TypeError, match=r"missing required field.*eta"):
        Observed(noise=torch.zeros(3), batch_size=[3])


def test_names_are_passed_to_the_tensordict():
    o = Observed(eta=torch.zeros(3, 2), batch_size=[3, 2], names=["b", "t"])
    assert o.names == ["b", "t"]


# ------------------------------------------------------------------ from_tensordict
def test_from_tensordict_check_false_accepts_a_partial_source():
    state = State.from_tensordict(td.TensorDict(batch_size=[5]), check=False)
    assert len(state.keys()) == 0
    with pytest.raises(AttributeError, match="declared but not set"):
        state.obs  # noqa: B018
    state.obs = torch.zeros(5)
    with pytest.raises(TypeError, match=r"from_tensordict\(\) missing required field\(s\): obs"):
        State.from_tensordict(td.TensorDict(batch_size=[5]))


@pytest.mark.parametrize("kind", ["dense", "lazy"])
def test_from_tensordict_writes_through_to_its_source(kind):
    dense = td.TensorDict(
        obs=torch.zeros(2, 3), reward=torch.zeros(2), old={"a": torch.zeros(2)}, batch_size=[2]
    )
    source = dense if kind == "dense" else td.lazy_stack(list(dense.unbind(0)))
    state = State.from_tensordict(source)
    assert state._source is source
    state.obs = torch.ones(2, 3)
    state["extra"] = torch.full((2,), 2.0)
    state.update({"reward": torch.ones(2)})
    state["new", "x"] = torch.ones(2)  # a new sub-TensorDict, then a write into it
    state["old", "b"] = torch.ones(2)  # a write into an existing one
    assert (source["obs"] == 1).all() and (source["reward"] == 1).all()
    assert (source["extra"] == 2).all()
    assert (source["new", "x"] == 1).all() and (source["old", "b"] == 1).all()
    del state["extra"]
    assert "extra" not in source.keys() and "extra" not in state.keys()
    # results of ops, and a pickled copy, are new, unlinked instances
    for other in (state.clone(), pickle.loads(pickle.dumps(state))):
        assert type(other) is State
        other.obs = torch.full((2, 3), 5.0)
    assert (source["obs"] == 1).all()


def test_a_write_the_source_refuses_changes_neither():
    source = td.TensorDict(obs=torch.zeros(2), reward=torch.zeros(2), batch_size=[2]).lock_()
    state = State.from_tensordict(source)
    assert state.is_locked  # as the source, as upstream
    state.unlock_()
    with pytest.raises(RuntimeError, match="locked"):
        state["new"] = torch.zeros(2)
    assert "new" not in state.keys() and "new" not in source.keys()


def test_a_batch_size_change_goes_to_the_source_first():
    source = td.TensorDict(obs=torch.zeros(2, 3), reward=torch.zeros(2, 3), batch_size=[2])
    state = State.from_tensordict(source)
    state.batch_size = [2, 3]
    assert source.batch_size == (2, 3) and state.batch_size == (2, 3)
    state.obs = torch.ones(2, 3)
    assert (source["obs"] == 1).all()
    with pytest.raises(RuntimeError, match="batch_size"):
        state.batch_size = [4]
    assert source.batch_size == (2, 3) and state.batch_size == (2, 3)
