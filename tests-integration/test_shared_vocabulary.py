"""td-nn and td-distributions export td-core's shared vocabulary, all of it, as the same objects.

The interaction-type switch, the log-prob aggregation switch and the positive-scale
mappings are defined once in td-core; a user who imports them from any of the three
packages gets the same object (one `ContextVar`, one mapping registry).
"""

from __future__ import annotations

import pytest

import td_core
import td_distributions
import td_nn

VOCABULARY = [
    "InteractionType",
    "interaction_type",
    "set_interaction_type",
    "composite_lp_aggregate",
    "set_composite_lp_aggregate",
    "biased_softplus",
    "expln",
    "inv_softplus",
    "mappings",
    "add_custom_mapping",
]


@pytest.mark.parametrize("package", [td_core, td_nn, td_distributions], ids=lambda m: m.__name__)
@pytest.mark.parametrize("name", VOCABULARY)
def test_the_shared_vocabulary_is_exported_by_each_package(package, name):
    assert name in package.__all__
    assert getattr(package, name) is getattr(td_core, name)


@pytest.mark.parametrize("package", [td_core, td_nn, td_distributions], ids=lambda m: m.__name__)
def test_all_lists_each_name_once(package):
    assert len(package.__all__) == len(set(package.__all__))


def test_a_mapping_added_through_one_package_is_seen_by_the_others():
    td_distributions.add_custom_mapping("vocabulary_test_abs", abs)
    assert td_nn.mappings("vocabulary_test_abs") is abs
    assert td_core.mappings("vocabulary_test_abs") is abs
