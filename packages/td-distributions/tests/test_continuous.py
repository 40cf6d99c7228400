import pytest
import torch
from torch import nn

from td_distributions import (
    AddStateIndependentNormalScale,
    NormalParamExtractor,
    NormalParamWrapper,
    biased_softplus,
    mappings,
)


def test_wrapper_runs_the_seed_example_module():
    torch.manual_seed(0)
    gru = nn.GRUCell(4, 8)
    module = NormalParamWrapper(gru)
    x, h = torch.randn(3, 4), torch.randn(3, 8)
    loc, scale = module(x, h)
    out = gru(x, h)
    torch.testing.assert_close(loc, out[..., :4])
    torch.testing.assert_close(scale, biased_softplus(1.0)(out[..., 4:]).clamp_min(1e-4))
    assert bool((scale > 0).all())
    assert next(n for n, _ in module.named_parameters()).startswith("operator.")


def test_wrapper_passes_extra_outputs_through():
    lstm = nn.LSTM(3, 6, batch_first=True)
    loc, scale, (h, c) = NormalParamWrapper(lstm)(torch.randn(2, 5, 3))
    assert loc.shape == scale.shape == (2, 5, 3)
    assert h.shape == c.shape == (1, 2, 6)


@pytest.mark.parametrize(
    "mapping", ["exp", "softplus", "relu", "expln", "none", "biased_softplus_2.0"]
)
def test_scale_mappings(mapping):
    raw = torch.randn(5, 2)
    loc, scale = NormalParamExtractor(scale_mapping=mapping, scale_lb=0.0)(
        torch.cat([raw, raw], -1)
    )
    torch.testing.assert_close(scale, mappings(mapping)(raw).clamp_min(0.0))
    torch.testing.assert_close(loc, raw)


def test_scale_lb_and_callable_mapping():
    loc, scale = NormalParamExtractor(scale_mapping=torch.exp, scale_lb=0.5)(
        torch.tensor([0.0, -10.0])
    )
    assert loc.item() == 0.0 and scale.item() == 0.5


def test_extractor_passes_others():
    loc, scale, other = NormalParamExtractor()(torch.zeros(2, 4), "hidden")
    assert other == "hidden" and loc.shape == scale.shape == (2, 2)
    torch.testing.assert_close(scale, torch.ones(2, 2))


def test_odd_last_dimension_is_an_error():
    with pytest.raises(ValueError, match=r"\(5\) must be even"):
        NormalParamExtractor()(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="even"):
        NormalParamWrapper(nn.Linear(2, 3))(torch.zeros(2))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"scale_mapping": "nope"}, KeyError),
        ({"scale_mapping": 3}, TypeError),
        ({"scale_lb": -1.0}, ValueError),
    ],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        NormalParamExtractor(**kwargs)
    with pytest.raises(error):
        NormalParamWrapper(nn.Identity(), **kwargs)


def test_wrapper_needs_a_callable():
    with pytest.raises(TypeError, match="callable"):
        NormalParamWrapper(3)


def test_state_independent_scale_is_a_parameter():
    module = AddStateIndependentNormalScale(4, init_value=0.5)
    loc = torch.randn(3, 4)
    out_loc, scale = module(loc)
    assert out_loc is loc
    torch.testing.assert_close(scale, torch.full((3, 4), 0.5).exp())
    scale.sum().backward()
    assert module.state_independent_scale.grad is not None
    assert [n for n, _ in module.named_parameters()] == ["state_independent_scale"]


def test_state_independent_scale_as_buffer_and_shapes():
    module = AddStateIndependentNormalScale((2, 3), make_param=False, scale_mapping="softplus")
    assert list(module.parameters()) == [] and "state_independent_scale" in dict(
        module.named_buffers()
    )
    _, scale, extra = module(torch.zeros(5, 2, 3), "extra")
    assert scale.shape == (5, 2, 3) and extra == "extra"
    scalar = AddStateIndependentNormalScale()
    assert scalar(torch.zeros(4, 7))[1].shape == (4, 7)


def test_state_independent_scale_lower_bound():
    module = AddStateIndependentNormalScale(2, init_value=-100.0, scale_lb=1e-3)
    torch.testing.assert_close(module(torch.zeros(2))[1], torch.full((2,), 1e-3))


def test_state_independent_scale_shape_mismatch():
    module = AddStateIndependentNormalScale(4)
    with pytest.raises(ValueError, match=r"\[3, 5\]"):
        module(torch.zeros(3, 5))
    with pytest.raises(RuntimeError):  # what upstream raises
        module(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="non-negative"):
        AddStateIndependentNormalScale((-1,))


def test_matches_upstream_extractor():
    upstream = pytest.importorskip("tensordict.nn.distributions")
    x = torch.randn(6, 8)
    for ours, theirs in zip(NormalParamExtractor()(x), upstream.NormalParamExtractor()(x)):
        torch.testing.assert_close(ours, theirs)
    ours = AddStateIndependentNormalScale(8, init_value=0.3)(x)
    theirs = upstream.AddStateIndependentNormalScale(8, init_value=0.3)(x)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
