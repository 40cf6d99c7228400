import pytest
import torch

import td_core
from td_core import (
    InteractionType,
    composite_lp_aggregate,
    interaction_type,
    inv_softplus,
    mappings,
    set_composite_lp_aggregate,
    set_interaction_type,
)


def test_interaction_type_context_and_decorator():
    assert interaction_type() is None
    with set_interaction_type("RANDOM"):
        assert interaction_type() is InteractionType.RANDOM
        with set_interaction_type(InteractionType.MODE):
            assert interaction_type() is InteractionType.MODE
        assert interaction_type() is InteractionType.RANDOM
    assert interaction_type() is None

    @set_interaction_type("mean")
    def f():
        return interaction_type()

    assert f() is InteractionType.MEAN
    assert interaction_type() is None


def test_interaction_type_rejects_unknown_name():
    with pytest.raises(ValueError, match="'sometimes'"):
        set_interaction_type("sometimes")


def test_lp_aggregate_switch():
    assert composite_lp_aggregate() is False
    with set_composite_lp_aggregate(True):
        assert composite_lp_aggregate() is True
    assert composite_lp_aggregate() is False
    with pytest.raises(TypeError, match="'yes'"):
        set_composite_lp_aggregate("yes")


@pytest.mark.parametrize("bias", [0.1, 1.0, 5.0])
def test_inv_softplus_inverts_softplus(bias):
    x = inv_softplus(bias)
    assert torch.nn.functional.softplus(torch.tensor(x)).item() == pytest.approx(bias, rel=1e-5)
    t = inv_softplus(torch.tensor([bias]))
    assert torch.nn.functional.softplus(t).item() == pytest.approx(bias, rel=1e-5)


def test_mappings():
    x = torch.linspace(-20, 20, 101)
    for name in [
        "softplus",
        "exp",
        "relu",
        "expln",
        "biased_softplus_1.0",
        "biased_softplus_1.0_0.1",
    ]:
        y = mappings(name)(x)
        assert (y >= 0).all(), name
    assert mappings("biased_softplus_2.0")(torch.zeros(())).item() == pytest.approx(2.0, rel=1e-5)
    assert mappings("biased_softplus_1.0_0.5")(torch.full((), -100.0)).item() == pytest.approx(0.5)
    assert torch.equal(mappings("none")(x), x)
    with pytest.raises(KeyError, match="'cube'"):
        mappings("cube")
    with pytest.raises(ValueError, match="biased_softplus_x"):
        mappings("biased_softplus_x")


def test_missing_extension_names_the_package():
    assert not td_core.has_extension("no-such-extension")
    with pytest.raises(ImportError, match="td-nothing"):
        td_core.load_extension("no-such-extension", "td-nothing")
