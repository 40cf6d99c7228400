import td_core
import td_distributions


def test_entry_point_gives_delta_as_default_distribution_class():
    ext = td_core.load_extension("distributions", "td-distributions")
    assert ext.DEFAULT_DISTRIBUTION_CLASS is td_distributions.Delta
    assert td_core.has_extension("distributions")


def test_shared_vocabulary_is_td_cores():
    for name in (
        "InteractionType",
        "interaction_type",
        "set_interaction_type",
        "composite_lp_aggregate",
        "set_composite_lp_aggregate",
        "biased_softplus",
        "expln",
        "inv_softplus",
        "mappings",
    ):
        assert getattr(td_distributions, name) is getattr(td_core, name), name


def test_all_lists_existing_names():
    for name in td_distributions.__all__:
        assert hasattr(td_distributions, name), name
