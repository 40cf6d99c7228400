"""td-distributions: the distributions of td (Delta, TruncatedNormal, OneHotCategorical, ...).

Distributions follow `torch.distributions` conventions; the helper modules
build normal parameters from network outputs. The positive scale mappings and
the interaction-type and log-prob aggregation switches live in td-core and are
re-exported here.
"""

from td_core._shared import interaction as _interaction
from td_core._shared import lp_aggregate as _lp_aggregate
from td_core._shared import scale_maps as _scale_maps
from td_core._shared.interaction import *  # noqa: F403 (re-exported: see __all__)
from td_core._shared.lp_aggregate import *  # noqa: F403 (re-exported: see __all__)
from td_core._shared.scale_maps import *  # noqa: F403 (re-exported: see __all__)
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
# Shared with td-nn, defined in td-core (one list: the `__all__` of the modules that
# define them; tests-integration checks that the siblings re-export the same names):
# interaction type, log-prob aggregation, scale mappings.
__all__ += _interaction.__all__ + _lp_aggregate.__all__ + _scale_maps.__all__
