"""Probabilistic modules: num_samples, generators, log-prob keys under the aggregation switch."""

from __future__ import annotations

import pytest
import torch
from torch import distributions as D

from td_core import NonTensorData, TensorDict, composite_lp_aggregate, set_composite_lp_aggregate
from td_nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)


def _normal(**kwargs):
    kwargs.setdefault("default_interaction_type", "random")
    return ProbabilisticTensorDictModule(
        in_keys=["loc"],
        out_keys=["sample"],
        distribution_class=D.Normal,
        distribution_kwargs={"scale": 1.0},
        **kwargs,
    )


@pytest.mark.parametrize(("num_samples", "lead"), [(2, (2,)), ((2, 5), (2, 5)), (None, ())])
def test_num_samples_expands_the_output(num_samples, lead) -> None:
    module = _normal(num_samples=num_samples, return_log_prob=True)
    td = module(TensorDict(loc=torch.randn(3, 4), batch_size=[3]))
    assert td.batch_size == (*lead, 3)
    assert td["sample"].shape == (*lead, 3, 4)
    assert td["sample_log_prob"].shape == (*lead, 3, 4)
    assert td["loc"].shape == (*lead, 3, 4)  # the inputs are expanded views


def test_num_samples_only_applies_to_random_draws() -> None:
    module = _normal(num_samples=2, default_interaction_type="mean")
    td = module(TensorDict(loc=torch.ones(3), batch_size=[3]))
    assert td.batch_size == (3,) and (td["sample"] == 1).all()


def test_num_samples_in_a_sequence() -> None:
    seq = ProbabilisticTensorDictSequential(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]), _normal(num_samples=2)
    )
    td = seq(TensorDict(x=torch.randn(3, 4), batch_size=[3]))
    assert td.batch_size == (2, 3) and td["sample"].shape == (2, 3, 4)


def test_a_generator_makes_samples_reproducible_and_spares_the_global_rng() -> None:
    first = _normal(generator=torch.Generator().manual_seed(0))
    second = _normal(generator=0)  # an int seeds a generator
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = first(TensorDict(loc=torch.zeros(4)))["sample"]
    b = second(TensorDict(loc=torch.zeros(4)))["sample"]
    assert torch.equal(before, torch.get_rng_state())
    assert torch.equal(a, b)
    assert not torch.equal(a, first(TensorDict(loc=torch.zeros(4)))["sample"])  # it advances


def test_a_generator_does_not_advance_for_a_statistic() -> None:
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state().clone()
    _normal(generator=generator, default_interaction_type="mode")(TensorDict(loc=torch.ones(3)))
    assert torch.equal(generator.get_state(), state)


def test_generator_key_holding_a_generator() -> None:
    td = TensorDict(loc=torch.zeros(4))
    td["rng"] = NonTensorData(torch.Generator().manual_seed(0))
    from_key = _normal(generator="rng")(td)["sample"]
    direct = _normal(generator=0)(TensorDict(loc=torch.zeros(4)))["sample"]
    assert torch.equal(from_key, direct)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_generator_key_holding_a_seed_writes_the_next_seed(as_tensor: bool) -> None:
    module = _normal(generator=("meta", "rng"))

    def run(seed: int) -> tuple[list[torch.Tensor], object]:
        td = TensorDict(loc=torch.zeros(4))
        td["meta", "rng"] = torch.tensor(seed) if as_tensor else NonTensorData(seed)
        samples = [module(td)["sample"].clone() for _ in range(2)]
        return samples, td["meta", "rng"]

    (a1, a2), last_a = run(7)
    (b1, b2), last_b = run(7)
    assert torch.equal(a1, b1) and torch.equal(a2, b2) and not torch.equal(a1, a2)
    assert isinstance(last_a, torch.Tensor) is as_tensor
    assert int(last_a) == int(last_b) != 7


def test_generator_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator.*1\.5"):
        _normal(generator=1.5)


def test_log_prob_keys_follow_the_setting_at_construction() -> None:
    def two_keys(**kwargs):
        return ProbabilisticTensorDictModule(
            in_keys=["loc"],
            out_keys=["a", ("b", "c")],
            distribution_class=D.Normal,
            return_log_prob=True,
            **kwargs,
        )

    module = two_keys()
    assert module.log_prob_keys == ["a_log_prob", ("b", "c_log_prob")]
    assert module.out_keys == ["a", ("b", "c"), "a_log_prob", ("b", "c_log_prob")]
    with pytest.raises(RuntimeError, match="log_prob_keys instead"):
        _ = module.log_prob_key
    assert two_keys(log_prob_keys=("x", ("y", "z"))).log_prob_keys == ["x", ("y", "z")]
    with pytest.raises(RuntimeError, match="pass log_prob_keys instead"):
        two_keys(log_prob_key="lp")
    with set_composite_lp_aggregate(True):
        aggregated = two_keys()
        assert aggregated.log_prob_key == "sample_log_prob"
        assert aggregated.log_prob_keys == ["sample_log_prob"]
        with pytest.raises(RuntimeError, match="pass log_prob_key instead"):
            two_keys(log_prob_keys=["x", "y"])
        with pytest.raises(RuntimeError, match="built with False"):
            _ = module.out_keys
    with pytest.raises(RuntimeError, match="built with True"):
        _ = aggregated.log_prob_keys


def test_set_composite_lp_aggregate_accepts_none_and_nowarn() -> None:
    with set_composite_lp_aggregate(True), set_composite_lp_aggregate(None):
        assert composite_lp_aggregate(nowarn=True) is False
    with pytest.raises(TypeError, match="a bool or None"):
        set_composite_lp_aggregate("yes")


def test_lkj_cholesky_has_no_statistic() -> None:
    module = ProbabilisticTensorDictModule(
        in_keys=["concentration"],
        out_keys=["sample"],
        distribution_class=D.LKJCholesky,
        distribution_kwargs={"dim": 3},
    )
    with pytest.raises(RuntimeError, match="DETERMINISTIC, MEAN and MODE are not implemented"):
        module(TensorDict(concentration=torch.ones(())))


def test_module_without_out_keys_may_return_none() -> None:
    calls = []
    module = TensorDictModule(lambda: calls.append(1), in_keys=[], out_keys=[])
    td = TensorDict(x=torch.zeros(()))
    assert module(td) is td and calls == [1]


@pytest.mark.parametrize(
    ("dist_class", "kwargs", "expected"),
    [
        (D.RelaxedBernoulli, {"probs": torch.tensor([0.2, 0.9])}, torch.tensor([0.0, 1.0])),
        (D.RelaxedOneHotCategorical, {"probs": torch.tensor([0.2, 0.8])}, torch.tensor([0.0, 1.0])),
    ],
)
def test_deterministic_value_of_relaxed_distributions(dist_class, kwargs, expected) -> None:
    module = ProbabilisticTensorDictModule(
        in_keys=[],
        out_keys=["out"],
        distribution_class=dist_class,
        distribution_kwargs={"temperature": 1, **kwargs},  # an int temperature, as upstream's tests
    )
    torch.testing.assert_close(module(TensorDict())["out"], expected)


def test_probabilistic_sequence_without_probabilistic_members_is_a_sequence() -> None:
    seq = ProbabilisticTensorDictSequential(
        TensorDictModule(lambda x, y: x + y, in_keys=["a", "b"], out_keys=["c"]),
        selected_out_keys=["c"],
    )
    td = TensorDict(a=torch.ones(()), b=torch.ones(()))
    assert seq(td) is td and td["c"] == 2 and seq.return_composite
    with pytest.raises(RuntimeError, match="no probabilistic member"):
        seq.get_dist(td)


def test_probabilistic_sequence_subclass_whose_base_lacks_selected_out_keys() -> None:
    from td_nn import TensorDictSequential

    class Plain(TensorDictSequential):
        def __init__(self, *modules, partial_tolerant=False, inplace=None):
            super().__init__(*modules, partial_tolerant=partial_tolerant, inplace=inplace)

    class Custom(ProbabilisticTensorDictSequential, Plain):
        pass

    seq = Custom(
        TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["loc"]), _normal(generator=0)
    )
    assert "sample" in seq(TensorDict(x=torch.zeros(3), batch_size=[3])).keys()
