"""td-nn's probabilistic modules with td-distributions' classes (both packages installed)."""

import pytest
import torch
from torch.distributions import Categorical, Normal

import td_distributions
from td_core import TensorDict
from td_nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    make_functional,
    set_composite_lp_aggregate,
    set_interaction_type,
)


def test_seed_gru_normal_param_wrapper_example():
    # the tensordict.nn page's example; its printout names the sample "action",
    # a typo for the out key it declares ("sample")
    from td_distributions import NormalParamWrapper

    td = TensorDict({"input": torch.randn(3, 4), "hidden": torch.randn(3, 8)}, [3])
    net = torch.nn.GRUCell(4, 8)
    module = TensorDictModule(
        NormalParamWrapper(net), in_keys=["input", "hidden"], out_keys=["loc", "scale"]
    )
    prob_module = ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"],
        out_keys=["sample"],
        distribution_class=Normal,
        return_log_prob=True,
    )
    td_module = ProbabilisticTensorDictSequential(module, prob_module)
    td_module(td)
    leaves = {
        key: (tuple(value.shape), value.dtype)
        for key, value in td.items(include_nested=True, leaves_only=True)
    }
    assert leaves == {
        "sample": ((3, 4), torch.float32),
        "hidden": ((3, 8), torch.float32),
        "input": ((3, 4), torch.float32),
        "loc": ((3, 4), torch.float32),
        "sample_log_prob": ((3, 4), torch.float32),
        "scale": ((3, 4), torch.float32),
    }
    assert td.batch_size == torch.Size([3]) and td.device is None
    assert (td["scale"] > 0).all()
    torch.testing.assert_close(td["sample"], td["loc"])  # deterministic by default
    # the seed imports make_functional alongside: the same sequence works functionally
    params = make_functional(td_module)
    out = td_module(td.exclude("loc", "scale", "sample", "sample_log_prob"), params)
    torch.testing.assert_close(out["sample"], td["sample"])


def test_default_distribution_class_is_delta():
    module = ProbabilisticTensorDictModule(
        in_keys=["param"], out_keys=["action"], return_log_prob=True
    )
    assert module.distribution_class is td_distributions.Delta
    td = TensorDict(param=torch.randn(3, 2), batch_size=[3])
    module(td)
    torch.testing.assert_close(td["action"], td["param"])
    with set_interaction_type(InteractionType.RANDOM):
        torch.testing.assert_close(module(td.copy())["action"], td["param"])


def _composite_head(distribution_map, out_keys=None, **distribution_kwargs):
    """A module reading `"params"` through a CompositeDistribution, writing log-probs."""
    return ProbabilisticTensorDictModule(
        in_keys=["params"],
        **({} if out_keys is None else {"out_keys": out_keys}),
        distribution_class=td_distributions.CompositeDistribution,
        distribution_kwargs={"distribution_map": distribution_map, **distribution_kwargs},
        return_log_prob=True,
    )


def _params():
    params = TensorDict(
        {
            "cont": {"loc": torch.randn(3, 4), "scale": torch.rand(3, 4) + 0.1},
            ("nested", "disc"): {"logits": torch.randn(3, 10)},
        },
        [3],
    )
    return TensorDict(params=params, batch_size=[3])


@pytest.mark.parametrize("aggregate", [False, True])
def test_composite_distribution(aggregate):
    with set_composite_lp_aggregate(aggregate):
        module = _composite_head(
            {"cont": Normal, ("nested", "disc"): Categorical}, ["cont", ("nested", "disc")]
        )
        td = module(_params())
        assert td["cont"].shape == (3, 4) and td["nested", "disc"].shape == (3,)
        if aggregate:
            assert module.log_prob_keys == ["sample_log_prob"]
            assert td["sample_log_prob"].shape == (3,)
            lp = module.log_prob(td)
            torch.testing.assert_close(lp, td["sample_log_prob"])
        else:
            assert module.log_prob_keys == ["cont_log_prob", ("nested", "disc_log_prob")]
            assert td["cont_log_prob"].shape == (3, 4)
            assert td["nested", "disc_log_prob"].shape == (3,)
        with set_interaction_type("random"):
            sampled = module(_params())
        assert sampled["nested", "disc"].dtype == torch.int64


INTERACTIONS = [
    InteractionType.MODE,
    InteractionType.MEAN,
    InteractionType.RANDOM,
    InteractionType.DETERMINISTIC,
]


def _gru_policy(distribution_class, distribution_kwargs=None):
    from td_distributions import NormalParamWrapper

    net = TensorDictModule(
        NormalParamWrapper(torch.nn.GRUCell(4, 8)),
        in_keys=["input", "hidden"],
        out_keys=["loc", "scale"],
    )
    head = ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"],
        out_keys=["sample"],
        distribution_class=distribution_class,
        distribution_kwargs=distribution_kwargs or {},
        return_log_prob=True,
    )
    return ProbabilisticTensorDictSequential(net, head)


@pytest.mark.parametrize("interaction", INTERACTIONS, ids=lambda i: i.value)
@pytest.mark.parametrize("kind", ["normal", "truncated_normal"])
def test_gru_policy_under_each_interaction_type(kind, interaction):
    if kind == "normal":
        policy = _gru_policy(Normal)
    else:
        policy = _gru_policy(td_distributions.TruncatedNormal, {"a": -1.0, "b": 1.0})
    td = TensorDict({"input": torch.randn(3, 4), "hidden": torch.randn(3, 8)}, [3])
    with set_interaction_type(interaction):
        out = policy(td)
    assert out["sample"].shape == (3, 4)
    assert out["sample_log_prob"].shape == (3, 4)
    assert torch.isfinite(out["sample_log_prob"]).all()
    if kind == "truncated_normal":
        assert (out["sample"].abs() <= 1).all()
    if interaction is not InteractionType.RANDOM and kind == "normal":
        torch.testing.assert_close(out["sample"], out["loc"])
    dist = policy.get_dist(td)
    assert dist.log_prob(out["sample"]).shape == (3, 4)


@pytest.mark.parametrize("interaction", INTERACTIONS, ids=lambda i: i.value)
def test_composite_over_two_heads_under_each_interaction_type(interaction):
    from td_distributions import TruncatedNormal

    params = TensorDictModule(
        lambda x: (x, x.abs() + 0.5, x.tanh() * 0.5, x.abs() + 0.2),
        in_keys=["obs"],
        out_keys=[
            ("params", "move", "loc"),
            ("params", "move", "scale"),
            ("params", "turn", "loc"),
            ("params", "turn", "scale"),
        ],
    )
    head = _composite_head(
        {"move": Normal, "turn": TruncatedNormal},
        ["move", "turn"],
        extra_kwargs={"turn": {"a": -1.0, "b": 1.0}},
    )
    policy = ProbabilisticTensorDictSequential(params, head)
    td = TensorDict({"obs": torch.randn(6, 2)}, [6])
    with set_interaction_type(interaction):
        out = policy(td)
    assert out["move"].shape == (6, 2) and out["turn"].shape == (6, 2)
    assert (out["turn"].abs() <= 1).all()
    for key in ("move_log_prob", "turn_log_prob"):
        assert out[key].shape == (6, 2) and torch.isfinite(out[key]).all(), key


@pytest.mark.parametrize("interaction", ["mode", "random", "deterministic"])
def test_composite_with_a_discrete_head(interaction):
    params = TensorDictModule(
        lambda x: (x, x.abs() + 0.5, x.sum(-1, keepdim=True).expand(-1, 5)),
        in_keys=["obs"],
        out_keys=[
            ("params", "move", "loc"),
            ("params", "move", "scale"),
            ("params", "pick", "logits"),
        ],
    )
    head = _composite_head({"move": Normal, "pick": Categorical}, ["move", "pick"])
    with set_interaction_type(interaction):
        out = ProbabilisticTensorDictSequential(params, head)(
            TensorDict({"obs": torch.randn(6, 2)}, [6])
        )
    assert out["pick"].shape == (6,) and out["pick_log_prob"].shape == (6,)
    assert torch.isfinite(out["pick_log_prob"]).all() and torch.isfinite(out["move_log_prob"]).all()


def _composite_params():
    return TensorDict(
        {
            "params": {
                "cont": {"loc": torch.randn(3, 4), "scale": torch.rand(3, 4) + 0.1},
                ("nested", "cont"): {"loc": torch.randn(3, 4), "scale": torch.rand(3, 4) + 0.1},
            }
        },
        batch_size=[3],
    )


@pytest.mark.parametrize("name_map", [False, True])
def test_composite_out_keys_come_from_the_distribution_kwargs(name_map):
    kwargs = {}
    expected = ["cont", ("nested", "cont")]
    if name_map:
        kwargs["name_map"] = {"cont": ("s", "cont"), ("nested", "cont"): ("s", "nested", "cont")}
        expected = [("s", "cont"), ("s", "nested", "cont")]
    module = _composite_head({"cont": Normal, ("nested", "cont"): Normal}, **kwargs)
    assert module.dist_sample_keys == expected
    assert module.log_prob_keys == [
        (*k[:-1], f"{k[-1]}_log_prob") if isinstance(k, tuple) else f"{k}_log_prob"
        for k in expected
    ]
    out = module(_composite_params())
    assert all(key in out.keys(include_nested=True) for key in module.out_keys)


def test_composite_aggregated_log_prob_writes_the_leaves_and_their_sum():
    with set_composite_lp_aggregate(True):
        module = _composite_head({"cont": Normal, ("nested", "cont"): Normal})
        out = module(_composite_params())
        leaves = out["cont_log_prob"].sum(-1) + out["nested", "cont_log_prob"].sum(-1)
        torch.testing.assert_close(out["sample_log_prob"], leaves)
        sample = out.exclude("cont_log_prob", ("nested", "cont_log_prob"), "sample_log_prob")
        torch.testing.assert_close(module.log_prob(sample), leaves)
        assert "cont_log_prob" in sample.keys()  # the per-leaf values are written, as upstream


def test_sequence_composite_over_an_intermediate_probabilistic_member():
    from td_distributions import CompositeDistribution
    from td_nn import TensorDictSequential

    seq = ProbabilisticTensorDictSequential(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc"],
            out_keys=["y"],
            distribution_class=Normal,
            distribution_kwargs={"scale": 1.0},
            default_interaction_type="random",
            num_samples=2,
        ),
        TensorDictModule(lambda y: y * 2, in_keys=["y"], out_keys=["z"]),
    )
    assert seq.return_composite  # the last member is not probabilistic
    td = TensorDict(x=torch.zeros(3, 4), batch_size=[3])
    dist = seq.get_dist(td)
    assert isinstance(dist, CompositeDistribution) and list(td.keys()) == ["x"]
    out = seq(td)
    assert out.batch_size == (2, 3) and out["z"].shape == (2, 3, 4)
    assert isinstance(seq.log_prob(out), TensorDict)
    assert type(seq[:2]) is ProbabilisticTensorDictSequential
    assert type(seq[2:]) is TensorDictSequential
