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
