"""The attributes and return_composite of the probabilistic modules, against upstream's."""

import warnings

import pytest
import torch
from torch import distributions as dists

import td_core
import td_nn

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up
    import tensordict.nn as up_nn

SIDES = [(td_core, td_nn), (up, up_nn)]


def build(nn_, in_keys=("loc", "scale"), return_composite=None):
    prob = nn_.ProbabilisticTensorDictModule(
        in_keys=list(in_keys) if not isinstance(in_keys, dict) else in_keys,
        out_keys=["action"],
        distribution_class=dists.Normal,
        return_log_prob=True,
    )
    net = nn_.TensorDictModule(lambda o: (o, o.exp()), in_keys=["obs"], out_keys=["loc", "scale"])
    kwargs = {} if return_composite is None else {"return_composite": return_composite}
    return prob, nn_.ProbabilisticTensorDictSequential(net, prob, **kwargs)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_key_attributes_match_upstream():
    rows = []
    for _, nn_ in SIDES:
        prob, seq = build(nn_)
        rows.append(
            [
                list(prob.dist_keys),
                prob.dist_params_keys,
                prob.dist_sample_keys,
                prob.out_keys_source,
                seq.dist_params_keys,
                seq.dist_sample_keys,
                seq.out_keys_source,
                str(seq.default_interaction_type).split(".")[-1].lower(),
                seq.return_composite,
                seq.det_part.out_keys,
            ]
        )
    assert rows[0] == rows[1]


def test_mapping_in_keys_attributes_match_upstream():
    rows = []
    for _, nn_ in SIDES:
        prob, seq = build(nn_, in_keys={"loc": "my_loc", "scale": ("n", "sc")})
        rows.append([list(prob.dist_keys), prob.dist_params_keys, seq.dist_params_keys])
    assert rows[0] == rows[1]


def test_get_dist_params_and_build_dist_from_params():
    for core, nn_ in SIDES:
        prob, seq = build(nn_)
        data = core.TensorDict(obs=torch.zeros(3), batch_size=[3])
        params = seq.get_dist_params(data)
        assert sorted(params.keys()) == ["loc", "obs", "scale"]
        dist = seq.build_dist_from_params(params)
        assert isinstance(dist, dists.Normal)
        torch.testing.assert_close(dist.scale, torch.ones(3))
        assert isinstance(prob.build_dist_from_params(params), dists.Normal)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_return_composite_matches_upstream():
    results = []
    for core, nn_ in SIDES:
        _, seq = build(nn_, return_composite=True)
        data = core.TensorDict(obs=torch.zeros(3), batch_size=[3])
        dist = seq.get_dist(data)
        sample = dist.sample()
        lp = seq.log_prob(seq(data.clone()))
        results.append(
            (type(dist).__name__, sorted(sample.keys()), sorted(lp.keys()), lp["action_log_prob"])
        )
    assert results[0][:3] == results[1][:3]
    torch.testing.assert_close(results[0][3], results[1][3])


def test_return_composite_false_keeps_plain_distribution():
    _, seq = build(td_nn, return_composite=False)
    data = td_core.TensorDict(obs=torch.zeros(3), batch_size=[3])
    assert isinstance(seq.get_dist(data), dists.Normal)
    assert seq.log_prob(seq(data.clone())).shape == (3,)
    assert seq.select_subsequence(out_keys=["action"]).return_composite is False
