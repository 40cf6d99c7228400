"""td-distributions: the distributions of td (Delta, TruncatedNormal, OneHotCategorical, ...).

Distributions follow `torch.distributions` conventions; the helper modules
build normal parameters from network outputs. The positive scale mappings and
the interaction-type and log-prob aggregation switches live in td-core and are
re-exported here.
"""

from td_core import (
    InteractionType,
    add_custom_mapping,
    biased_softplus,
    composite_lp_aggregate,
    expln,
    interaction_type,
    inv_softplus,
    mappings,
    set_composite_lp_aggregate,
    set_interaction_type,
)
from td_distributions._composite import CompositeDistribution
from td_distributions._continuous import (
    AddStateIndependentNormalScale,
    NormalParamExtractor,
    NormalParamWrapper,
)
from td_distributions._delta import Delta
from td_distributions._one_hot import OneHotCategorical, rand_one_hot
from td_distributions._truncated_normal import TruncatedNormal
from td_distributions._version import __version__

__all__ = [
    "__version__",
    # distributions
    "CompositeDistribution",
    "Delta",
    "OneHotCategorical",
    "TruncatedNormal",
    "rand_one_hot",
    # normal parameters from network outputs
    "AddStateIndependentNormalScale",
    "NormalParamExtractor",
    "NormalParamWrapper",
    # shared with td-nn, defined in td-core (its public names; tests-integration checks that the
    # siblings re-export the same ones): interaction type, log-prob aggregation, scale mappings
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
