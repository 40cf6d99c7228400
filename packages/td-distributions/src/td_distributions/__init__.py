"""td-distributions: the distributions of td (Delta, TruncatedNormal, OneHotCategorical, ...).

Distributions follow `torch.distributions` conventions; the helper modules
build normal parameters from network outputs. The positive scale mappings and
the interaction-type and log-prob aggregation switches live in td-core and are
re-exported here.
"""

from td_core._shared import vocabulary as _vocabulary
from td_core._shared.vocabulary import *  # noqa: F403  (its __all__ is added to ours below)
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
]
# shared with td-nn, defined in td-core: interaction type, log-prob aggregation, scale mappings
__all__ += _vocabulary.__all__
