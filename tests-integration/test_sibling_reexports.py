"""td-nn and td-distributions re-export the same names of td-core, as the same objects.

The interaction-type switch, the log-prob aggregation switch and the positive-scale
mappings are defined once in td-core; a user who imports them from any of the three
packages gets the same object (one `ContextVar`, one mapping registry), and neither
sibling lacks a name the other has.
"""

from __future__ import annotations

import pytest

import td_core
import td_distributions
import td_nn


def _from_td_core(package) -> set[str]:
    """The names of `package.__all__` that are td-core's own objects, re-exported."""
    return {
        name
        for name in package.__all__
        if name != "__version__" and getattr(package, name) is getattr(td_core, name, None)
    }


def test_both_siblings_re_export_the_same_vocabulary_of_td_core():
    nn_only = {"TensorDictParams", "make_tensordict"}  # td-nn's modules use them, as upstream's
    vocabulary = _from_td_core(td_distributions)
    assert _from_td_core(td_nn) - nn_only == vocabulary
    assert {"InteractionType", "set_interaction_type", "mappings", "expln"} <= vocabulary
    assert {"composite_lp_aggregate", "add_custom_mapping", "biased_softplus"} <= vocabulary
    assert vocabulary <= set(td_core.__all__)


@pytest.mark.parametrize("package", [td_core, td_nn, td_distributions], ids=lambda m: m.__name__)
def test_all_lists_each_name_once_and_every_name_exists(package):
    assert len(package.__all__) == len(set(package.__all__))
    assert all(hasattr(package, name) for name in package.__all__)


def test_a_mapping_added_through_one_package_is_seen_by_the_others():
    td_distributions.add_custom_mapping("vocabulary_test_abs", abs)
    assert td_nn.mappings("vocabulary_test_abs") is abs
    assert td_core.mappings("vocabulary_test_abs") is abs
