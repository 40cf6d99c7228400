import torch

import td_core
import td_distributions


def test_entry_point_gives_delta_as_default_distribution_class():
    ext = td_core.load_extension("distributions", "td-distributions")
    assert ext.DEFAULT_DISTRIBUTION_CLASS is td_distributions.Delta
    assert td_core.has_extension("distributions")


def test_shared_vocabulary_works_through_td_distributions():
    # uses every name td_distributions shares with td_core and td-nn
    x = torch.tensor([-1.0, 0.0, 2.0])
    assert torch.equal(td_distributions.mappings("expln")(x), td_distributions.expln(x))
    assert abs(float(td_distributions.biased_softplus(2.0)(torch.zeros(()))) - 2.0) < 1e-6
    assert abs(td_distributions.inv_softplus(1.0) - 0.5413248546129181) < 1e-9
    with td_distributions.set_interaction_type("mode"):
        assert td_distributions.interaction_type() is td_distributions.InteractionType.MODE
    with td_distributions.set_composite_lp_aggregate(True):
        assert td_distributions.composite_lp_aggregate() is True


def test_all_lists_the_public_names_and_re_exports_the_shared_vocabulary(check_public_names):
    check_public_names(td_distributions)
