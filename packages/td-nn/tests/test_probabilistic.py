"""ProbabilisticTensorDictModule and ProbabilisticTensorDictSequential (torch.distributions only)."""

from typing import ClassVar

import pytest
import torch
from torch import distributions as D
from torch import nn

import td_core
from td_core import TensorDict
from td_nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    interaction_type,
    set_composite_lp_aggregate,
    set_interaction_type,
)


def _normal(**kwargs):
    kwargs.setdefault("out_keys", ["sample"])
    return ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"], distribution_class=D.Normal, **kwargs
    )


def _td(batch=3):
    return TensorDict(
        loc=torch.arange(batch * 2.0).reshape(batch, 2),
        scale=torch.ones(batch, 2),
        batch_size=[batch],
    )


def test_shared_vocabulary_is_td_core_s():
    assert InteractionType is td_core.InteractionType
    assert set_interaction_type is td_core.set_interaction_type
    assert interaction_type is td_core.interaction_type
    assert {m.name for m in InteractionType} == {
        "MODE",
        "MEDIAN",
        "MEAN",
        "RANDOM",
        "DETERMINISTIC",
    }


def test_deterministic_default_writes_the_mean_and_log_prob():
    module = _normal(return_log_prob=True)
    assert module.out_keys == ["sample", "sample_log_prob"]
    assert module.log_prob_key == "sample_log_prob"
    td = module(_td())
    torch.testing.assert_close(td["sample"], td["loc"])
    torch.testing.assert_close(
        td["sample_log_prob"], D.Normal(td["loc"], td["scale"]).log_prob(td["loc"])
    )


@pytest.mark.parametrize("kind", ["mode", "mean", InteractionType.MODE, InteractionType.MEAN])
def test_statistics(kind):
    with set_interaction_type(kind):
        td = _normal()(_td())
    torch.testing.assert_close(td["sample"], td["loc"])


def test_median_falls_back_to_an_estimate():
    module = _normal(n_empirical_estimate=4000)
    with set_interaction_type("median"):
        td = module(_td())
    torch.testing.assert_close(td["sample"], td["loc"], atol=0.15, rtol=0)


def test_random_uses_rsample_and_gradients_flow():
    loc = torch.zeros(1000, requires_grad=True)
    td = TensorDict(loc=loc, scale=torch.ones(1000), batch_size=[1000])
    with set_interaction_type(InteractionType.RANDOM):
        out = _normal()(td)
    assert out["sample"].std() > 0.5
    out["sample"].sum().backward()
    assert (loc.grad == 1).all()


def test_default_interaction_type_and_decorator():
    module = _normal(default_interaction_type="random")
    assert module.default_interaction_type is InteractionType.RANDOM
    assert not torch.equal(module(_td())["sample"], _td()["loc"])

    @set_interaction_type("mode")
    def run():
        assert interaction_type() is InteractionType.MODE
        return module(_td())["sample"]

    torch.testing.assert_close(run(), _td()["loc"])
    assert interaction_type() is None


def test_discrete_deterministic_is_the_mode():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 0.0]])
    module = ProbabilisticTensorDictModule(
        in_keys=["logits"],
        out_keys=["action"],
        distribution_class=D.Categorical,
        return_log_prob=True,
    )
    td = module(TensorDict(logits=logits, batch_size=[2]))
    assert td["action"].tolist() == [1, 0]
    assert module.log_prob_keys == ["action_log_prob"]
    assert td["action_log_prob"].shape == (2,)


def test_nested_and_dict_keys_and_explicit_log_prob_key():
    module = ProbabilisticTensorDictModule(
        in_keys={"loc": ("params", "mu"), "scale": ("params", "sigma")},
        out_keys=[("agent", "action")],
        distribution_class=D.Normal,
        return_log_prob=True,
    )
    assert module.in_keys == [("params", "mu"), ("params", "sigma")]
    assert module.out_keys == [("agent", "action"), ("agent", "action_log_prob")]
    td = TensorDict({("params", "mu"): torch.zeros(3), ("params", "sigma"): torch.ones(3)}, [3])
    module(td)
    assert td["agent", "action_log_prob"].shape == (3,)
    nested = ProbabilisticTensorDictModule(
        in_keys=[("params", "loc"), ("params", "scale")],
        distribution_class=D.Normal,
        return_log_prob=True,
        log_prob_key="lp",
    )
    assert nested.out_keys == ["sample", "lp"]
    td = TensorDict({("params", "loc"): torch.zeros(3), ("params", "scale"): torch.ones(3)}, [3])
    assert sorted(map(str, nested(td).keys())) == ["lp", "params", "sample"]


def test_distribution_kwargs_are_passed():
    module = ProbabilisticTensorDictModule(
        in_keys=["probs"],
        out_keys=["k"],
        distribution_class=D.Binomial,
        distribution_kwargs={"total_count": 10},
    )
    td = module(TensorDict(probs=torch.full((2,), 0.5), batch_size=[2]))
    torch.testing.assert_close(td["k"], torch.full((2,), 5.0))


def test_missing_input_names_key_and_module():
    with pytest.raises(KeyError, match=r"ProbabilisticTensorDictModule\(Normal\).*'scale'"):
        _normal()(TensorDict(loc=torch.zeros(3), batch_size=[3]))


def test_get_dist_log_prob_cache_and_repr():
    module = _normal(cache_dist=True)
    td = module(_td())
    assert isinstance(module.dist, D.Normal)
    dist = module.get_dist(td)
    torch.testing.assert_close(module.log_prob(td), dist.log_prob(td["sample"]))
    text = repr(module)
    assert "distribution_class=Normal" in text and "in_keys=['loc', 'scale']" in text


def test_called_with_tensors():
    module = _normal()
    torch.testing.assert_close(
        module(loc=torch.zeros(4, 2), scale=torch.ones(4, 2)), torch.zeros(4, 2)
    )
    torch.testing.assert_close(module(torch.zeros(4), torch.ones(4)), torch.zeros(4))


class _NoStats(D.Distribution):
    """A distribution that defines neither mean nor mode (fallbacks are estimated)."""

    arg_constraints: ClassVar[dict] = {}
    support = D.constraints.real

    def __init__(self, loc):
        self.loc = loc
        super().__init__(loc.shape, validate_args=False)

    def sample(self, sample_shape=()):
        return self.loc + 0.01 * torch.randn(torch.Size(sample_shape) + self.loc.shape)

    def log_prob(self, value):
        return -((value - self.loc) ** 2)


@pytest.mark.parametrize("kind", ["mean", "mode", "deterministic"])
def test_undefined_statistics_are_estimated(kind):
    module = ProbabilisticTensorDictModule(
        in_keys=["loc"], out_keys=["x"], distribution_class=_NoStats, n_empirical_estimate=200
    )
    with set_interaction_type(kind):
        td = module(TensorDict(loc=torch.arange(3.0), batch_size=[3]))
    torch.testing.assert_close(td["x"], torch.arange(3.0), atol=0.05, rtol=0)


class _Composite:
    """Takes a TensorDict of parameters, returns TensorDict samples and log-probs (td-distributions-like)."""

    has_rsample = False

    def __init__(self, params):
        self.params = params
        self.dists = {
            "cont": D.Normal(params["cont", "loc"], params["cont", "scale"]),
            ("nested", "disc"): D.Categorical(logits=params["nested", "disc", "logits"]),
        }

    def sample(self):
        out = TensorDict(batch_size=self.params.batch_size)
        for key, dist in self.dists.items():
            out.set(key, dist.sample())
        return out

    @property
    def deterministic_sample(self):
        out = TensorDict(batch_size=self.params.batch_size)
        out.set("cont", self.dists["cont"].mean)
        out.set(("nested", "disc"), self.dists[("nested", "disc")].mode)
        return out

    def log_prob(self, sample):
        lps = {key: dist.log_prob(sample.get(key)) for key, dist in self.dists.items()}
        if td_core.composite_lp_aggregate():
            return lps["cont"].sum(-1) + lps[("nested", "disc")]
        out = TensorDict(batch_size=self.params.batch_size)
        out.set("cont_log_prob", lps["cont"])
        out.set(("nested", "disc_log_prob"), lps[("nested", "disc")])
        return out


def _composite_td():
    params = TensorDict(
        {
            "cont": {"loc": torch.zeros(3, 4), "scale": torch.ones(3, 4)},
            ("nested", "disc"): {"logits": torch.randn(3, 10)},
        },
        [3],
    )
    return TensorDict(params=params, batch_size=[3])


@pytest.mark.parametrize("aggregate", [False, True])
def test_tensordict_distributions_plug_in(aggregate):
    with set_composite_lp_aggregate(aggregate):
        module = ProbabilisticTensorDictModule(
            in_keys=["params"],
            out_keys=["cont", ("nested", "disc")],
            distribution_class=_Composite,
            return_log_prob=True,
        )
        td = module(_composite_td())
        if aggregate:
            assert module.log_prob_keys == ["sample_log_prob"]
            assert td["sample_log_prob"].shape == (3,)
        else:
            assert module.log_prob_keys == ["cont_log_prob", ("nested", "disc_log_prob")]
            assert td["cont_log_prob"].shape == (3, 4)
            assert td["nested", "disc_log_prob"].shape == (3,)
        assert td["cont"].shape == (3, 4) and td["nested", "disc"].dtype == torch.int64
        lp = module.log_prob(td)
        assert (isinstance(lp, torch.Tensor)) is aggregate
        with set_interaction_type("random"):
            assert module(_composite_td())["nested", "disc"].shape == (3,)


def test_default_distribution_class_comes_from_td_distributions():
    if td_core.has_extension("distributions"):
        module = ProbabilisticTensorDictModule(in_keys=["param"], out_keys=["x"])
        expected = td_core.load_extension("distributions", "td-distributions")
        assert module.distribution_class is expected.DEFAULT_DISTRIBUTION_CLASS
    else:
        with pytest.raises(TypeError, match="td-distributions"):
            ProbabilisticTensorDictModule(in_keys=["param"], out_keys=["x"])


def _policy():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(2, 4), in_keys=["obs"], out_keys=["hidden"]),
        TensorDictModule(
            lambda h: (h[..., :2], h[..., 2:].exp()), in_keys=["hidden"], out_keys=["loc", "scale"]
        ),
        _normal(out_keys=["action"], return_log_prob=True),
    )


def test_sequence_get_dist_log_prob_do_not_touch_the_input():
    policy = _policy()
    assert policy.in_keys == ["obs"]
    assert policy.out_keys == ["hidden", "loc", "scale", "action", "action_log_prob"]
    td = TensorDict(obs=torch.randn(5, 2), batch_size=[5])
    dist = policy.get_dist(td)
    assert sorted(td.keys()) == ["obs"] and isinstance(dist, D.Normal)
    with set_interaction_type("random"):
        out = policy(td.copy())
    torch.testing.assert_close(policy.log_prob(out), out["action_log_prob"])
    assert policy.log_prob_key == "action_log_prob"


def test_sequence_must_end_with_probabilistic_module_and_subsequences():
    with pytest.raises(TypeError, match="must end with a ProbabilisticTensorDictModule"):
        ProbabilisticTensorDictSequential(
            TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["y"]), return_composite=False
        )
    policy = _policy()
    head = policy.select_subsequence(out_keys=["loc"])
    assert type(head) is TensorDictSequential and len(head) == 2
    assert type(policy[1:]) is ProbabilisticTensorDictSequential


def test_distribution_kwargs_as_tensordict_params_are_buffers_and_compile():
    # kept as the TensorDictParams it is (a submodule), not copied into a dict: its tensor is a
    # buffer of the module, and its non-tensor entry reaches the distribution as a value
    from td_core import NonTensorData, TensorDictParams

    kwargs = TensorDictParams(
        TensorDict(scale=2.0, validate_args=NonTensorData(False)), no_convert=True
    )
    prob = ProbabilisticTensorDictModule(
        in_keys=["loc"],
        out_keys=["sample"],
        distribution_class=torch.distributions.Normal,
        distribution_kwargs=kwargs,
        return_log_prob=True,
    )
    assert [b.item() for b in prob.buffers()] == [2.0]
    dist = prob.get_dist(TensorDict(loc=torch.zeros(3)))
    assert dist.scale.tolist() == [2.0] * 3 and dist._validate_args is False
    assert "distribution_kwargs=TensorDictParams" in repr(prob)
    torch._dynamo.reset()
    compiled = torch.compile(prob, fullgraph=True, backend="eager")
    assert compiled(TensorDict(loc=torch.zeros(3)))["sample"].shape == torch.Size([3])
