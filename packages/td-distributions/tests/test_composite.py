import math

import pytest
import torch
from torch import distributions as D

from td_core import TensorDict, set_composite_lp_aggregate
from td_distributions import CompositeDistribution, Delta, OneHotCategorical, TruncatedNormal


def _params():
    return TensorDict(
        {
            "cont": {"loc": torch.randn(3, 4), "scale": torch.rand(3, 4) + 0.5},
            ("nested", "disc"): {"logits": torch.randn(3, 10)},
        },
        batch_size=[3],
    )


def _dist(**kwargs):
    return CompositeDistribution(
        _params(), {"cont": D.Normal, ("nested", "disc"): D.Categorical}, **kwargs
    )


def test_components_and_mapping_access():
    dist = _dist()
    assert isinstance(dist["cont"], D.Normal)
    assert isinstance(dist["nested", "disc"], D.Categorical)
    assert dist[("nested", ("disc",))] is dist["nested", "disc"]
    assert list(dist) == ["cont", ("nested", "disc")] and len(dist) == 2
    assert "cont" in dist and ("nested", "disc") in dist and "nope" not in dist
    assert dist.batch_shape == (3,) and dist.event_shape == ()
    assert "Normal" in repr(dist)


@pytest.mark.parametrize("shape", [(), (4,), (2, 5)])
def test_sample_shapes(shape):
    dist = _dist()
    sample = dist.sample(shape)
    assert sample.batch_size == (*shape, 3)
    assert sample["cont"].shape == (*shape, 3, 4)
    assert sample["nested", "disc"].shape == (*shape, 3)


def test_rsample_carries_gradients():
    loc = torch.zeros(3, 4, requires_grad=True)
    params = TensorDict({"cont": {"loc": loc, "scale": torch.ones(3, 4)}}, batch_size=[3])
    dist = CompositeDistribution(params, {"cont": D.Normal})
    assert dist.has_rsample
    dist.rsample((2,))["cont"].sum().backward()
    torch.testing.assert_close(loc.grad, torch.full((3, 4), 2.0))


def test_rsample_refuses_components_without_rsample():
    with pytest.raises(NotImplementedError, match="nested"):
        _dist().rsample()
    assert not _dist().has_rsample


def test_log_prob_per_leaf_by_default():
    dist = _dist()
    sample = dist.sample((5,))
    lp = dist.log_prob(sample)
    assert isinstance(lp, TensorDict) and lp.batch_size == (5, 3)
    torch.testing.assert_close(lp["cont_log_prob"], dist["cont"].log_prob(sample["cont"]))
    torch.testing.assert_close(
        lp["nested", "disc_log_prob"], dist["nested", "disc"].log_prob(sample["nested", "disc"])
    )
    assert set(lp.keys(True, True)) == {"cont_log_prob", ("nested", "disc_log_prob")}
    # the sample is left alone
    assert set(sample.keys(True, True)) == {"cont", ("nested", "disc")}


def _summed(dist, sample):
    return dist["cont"].log_prob(sample["cont"]).sum(-1) + dist["nested", "disc"].log_prob(
        sample["nested", "disc"]
    )


def test_log_prob_aggregated_by_switch_constructor_and_call():
    dist = _dist()
    sample = dist.sample((5,))
    expected = _summed(dist, sample)
    with set_composite_lp_aggregate(True):
        torch.testing.assert_close(dist.log_prob(sample), expected)
        # an explicit False wins over the switch
        assert isinstance(dist.log_prob(sample, aggregate_probabilities=False), TensorDict)
    torch.testing.assert_close(dist.log_prob(sample, aggregate_probabilities=True), expected)
    fixed = _dist(aggregate_probabilities=True)
    torch.testing.assert_close(fixed.log_prob(sample), _summed(fixed, sample))


def test_log_prob_include_sum_and_key():
    dist = _dist(log_prob_key=("sums", "lp"))
    sample = dist.sample()
    lp = dist.log_prob_composite(sample, include_sum=True)
    torch.testing.assert_close(lp["sums", "lp"], _summed(dist, sample))
    assert dist.log_prob_key == ("sums", "lp")
    assert _dist().log_prob_key == "sample_log_prob"
    lp2 = dist.log_prob(sample, include_sum=True)
    torch.testing.assert_close(lp2["sums", "lp"], lp["sums", "lp"])


def test_entropy_per_leaf_and_aggregated():
    dist = _dist()
    ent = dist.entropy()
    assert isinstance(ent, TensorDict) and ent.batch_size == (3,)
    torch.testing.assert_close(ent["cont_entropy"], dist["cont"].entropy())
    torch.testing.assert_close(ent["nested", "disc_entropy"], dist["nested", "disc"].entropy())
    total = dist["cont"].entropy().sum(-1) + dist["nested", "disc"].entropy()
    with set_composite_lp_aggregate(True):
        torch.testing.assert_close(dist.entropy(), total)
    torch.testing.assert_close(dist.entropy_composite(include_sum=True)["entropy"], total)
    with pytest.raises(ValueError, match="samples_mc"):
        dist.entropy(0)


def test_entropy_monte_carlo_fallback():
    params = TensorDict({"t": {"loc": torch.zeros(2), "scale": torch.ones(2)}}, batch_size=[2])

    def tanh_normal(loc, scale):
        return D.TransformedDistribution(D.Normal(loc, scale), [D.TanhTransform()])

    dist = CompositeDistribution(params, {"t": tanh_normal})
    torch.manual_seed(0)
    ent = dist.entropy(4000)["t_entropy"]
    # entropy of tanh(N(0, 1)), about 0.7
    assert ent.shape == (2,) and bool(((ent > 0.6) & (ent < 0.8)).all())


def test_summaries():
    params = TensorDict(
        {
            "n": {"loc": torch.tensor([1.0, 2.0]), "scale": torch.ones(2)},
            "c": {"logits": torch.tensor([[0.0, 5.0], [5.0, 0.0]])},
            "t": {
                "loc": torch.tensor([5.0, -5.0]),
                "scale": torch.ones(2),
                "a": torch.full((2,), -1.0),
                "b": torch.ones(2),
            },
            "o": {"logits": torch.tensor([[0.0, 5.0], [5.0, 0.0]])},
        },
        batch_size=[2],
    )
    dist = CompositeDistribution(
        params, {"n": D.Normal, "c": D.Categorical, "t": TruncatedNormal, "o": OneHotCategorical}
    )
    det = dist.deterministic_sample
    assert det.batch_size == (2,)
    torch.testing.assert_close(det["n"], torch.tensor([1.0, 2.0]))  # mean
    assert det["c"].tolist() == [1, 0]  # mode
    torch.testing.assert_close(det["t"], torch.tensor([1.0, -1.0]))  # its own deterministic_sample
    assert det["o"].tolist() == [[0, 1], [1, 0]]
    assert dist.mode["c"].tolist() == [1, 0]
    torch.testing.assert_close(dist.mean["n"], torch.tensor([1.0, 2.0]))


def test_deterministic_sample_without_mean_or_mode():
    params = TensorDict({"t": {"loc": torch.zeros(2), "scale": torch.ones(2)}}, batch_size=[2])

    def tanh_normal(loc, scale):
        return D.TransformedDistribution(D.Normal(loc, scale), [D.TanhTransform()])

    with pytest.raises(NotImplementedError, match="'t'"):
        _ = CompositeDistribution(params, {"t": tanh_normal}).deterministic_sample


def test_name_map_and_extra_kwargs():
    params = TensorDict({"a": {"loc": torch.zeros(2)}}, batch_size=[2])
    dist = CompositeDistribution(
        params,
        {"a": D.Normal},
        name_map={"a": ("out", "action")},
        extra_kwargs={"a": {"scale": 2.0}},
    )
    assert list(dist) == [("out", "action")]
    assert dist["out", "action"].scale.tolist() == [2.0, 2.0]
    sample = dist.sample()
    assert set(sample.keys(True, True)) == {("out", "action")}
    assert set(dist.log_prob(sample).keys(True, True)) == {("out", "action_log_prob")}


def test_cdf_and_icdf_round_trip_without_touching_the_sample():
    params = TensorDict(
        {
            "a": {"loc": torch.zeros(3), "scale": torch.ones(3)},
            "b": {"loc": torch.ones(3), "scale": torch.ones(3)},
        },
        batch_size=[3],
    )
    dist = CompositeDistribution(params, {"a": D.Normal, "b": D.Normal})
    sample = dist.sample()
    cdf = dist.cdf(sample)
    assert set(cdf.keys()) == {"a", "b", "a_cdf", "b_cdf"} and set(sample.keys()) == {"a", "b"}
    icdf = dist.icdf(cdf)
    assert set(icdf.keys()) == {"a", "b", "a_cdf", "b_cdf", "a_icdf", "b_icdf"}
    assert set(cdf.keys()) == {"a", "b", "a_cdf", "b_cdf"}  # the input is untouched
    torch.testing.assert_close(icdf["a_icdf"], icdf["a"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dist.icdf(sample)["b_icdf"], sample["b"], rtol=1e-4, atol=1e-4)
    with pytest.raises(KeyError, match=r"'a_cdf' or 'a' in the TensorDict; its keys are \[\]"):
        dist.icdf(TensorDict({}, batch_size=[3]))


def test_sample_and_log_prob():
    dist = _dist()
    sample, lp = dist.sample_and_log_prob((2,))
    torch.testing.assert_close(lp["cont_log_prob"], dist["cont"].log_prob(sample["cont"]))
    with set_composite_lp_aggregate(True):
        sample, lp = dist.sample_and_log_prob()
        torch.testing.assert_close(lp, _summed(dist, sample))


def test_from_distributions():
    dist = CompositeDistribution.from_distributions(
        TensorDict(batch_size=[3]),
        {"a": D.Normal(torch.zeros(3), 1.0), ("b", "c"): Delta(torch.ones(3, 2))},
        name_map={"a": "x"},
    )
    sample = dist.sample()
    assert set(sample.keys(True, True)) == {"x", ("b", "c")}
    assert dist.log_prob(sample)["b", "c_log_prob"].tolist() == [math.inf] * 3


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: CompositeDistribution({"a": {}}, {"a": D.Normal}), TypeError, "TensorDict"),
        (lambda: CompositeDistribution(_params(), {}), ValueError, "at least one"),
        (lambda: CompositeDistribution(_params(), {"missing": D.Normal}), KeyError, "missing"),
        (
            lambda: CompositeDistribution(
                TensorDict({"a": torch.zeros(3)}, batch_size=[3]), {"a": D.Normal}
            ),
            TypeError,
            "keyword arguments",
        ),
        (lambda: CompositeDistribution(_params(), {"cont": "Normal"}), TypeError, "callable"),
        (
            lambda: CompositeDistribution(_params(), {"cont": D.Normal}, name_map={"typo": "x"}),
            KeyError,
            "typo",
        ),
        (
            lambda: CompositeDistribution(_params(), {"cont": D.Normal}, extra_kwargs={"typo": {}}),
            KeyError,
            "typo",
        ),
        (
            lambda: CompositeDistribution(
                _params(),
                {"cont": D.Normal, ("nested", "disc"): D.Categorical},
                name_map={"cont": "x", ("nested", "disc"): "x"},
            ),
            ValueError,
            "same key",
        ),
        (
            lambda: CompositeDistribution.from_distributions(
                TensorDict(batch_size=[4]), {"a": D.Normal(torch.zeros(3), 1.0)}
            ),
            ValueError,
            r"batch shape \[3\]",
        ),
    ],
)
def test_constructor_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_log_prob_needs_every_component():
    dist = _dist()
    with pytest.raises(KeyError, match=r"entry \('nested', 'disc'\).*its keys are \['cont'\]"):
        dist.log_prob(TensorDict({"cont": torch.zeros(3, 4)}, batch_size=[3]))
    with pytest.raises(TypeError, match="TensorDict"):
        dist.log_prob(torch.zeros(3))


def test_matches_upstream():
    upstream_nn = pytest.importorskip("tensordict.nn")
    upstream_td = pytest.importorskip("tensordict")
    raw = {
        "cont": {"loc": torch.randn(3, 4), "scale": torch.rand(3, 4) + 0.5},
        ("nested", "disc"): {"logits": torch.randn(3, 10)},
    }
    dmap = {"cont": D.Normal, ("nested", "disc"): D.Categorical}
    ours = CompositeDistribution(TensorDict(raw, batch_size=[3]), dmap)
    theirs = upstream_nn.CompositeDistribution(upstream_td.TensorDict(raw, batch_size=[3]), dmap)
    sample = ours.sample((2,))
    their_sample = upstream_td.TensorDict(
        {"cont": sample["cont"], ("nested", "disc"): sample["nested", "disc"]}, batch_size=[2, 3]
    )
    lp, their_lp = ours.log_prob(sample), theirs.log_prob(their_sample)
    torch.testing.assert_close(lp["cont_log_prob"], their_lp["cont_log_prob"])
    torch.testing.assert_close(lp["nested", "disc_log_prob"], their_lp["nested", "disc_log_prob"])
    with set_composite_lp_aggregate(True), upstream_nn.set_composite_lp_aggregate(True):
        torch.testing.assert_close(ours.log_prob(sample), theirs.log_prob(their_sample))
        torch.testing.assert_close(ours.entropy(), theirs.entropy())
