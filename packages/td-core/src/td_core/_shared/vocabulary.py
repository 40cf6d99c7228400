"""The names that td-core, td-nn and td-distributions all export, listed once.

td-nn and td-distributions re-export this vocabulary (the interaction-type
switch, the log-prob aggregation switch and the positive-scale mappings) with
`from td_core._shared.vocabulary import *`, and add `__all__` below to their
own, so the three packages cannot drift apart: a name added here is exported
by all of them.
"""

from __future__ import annotations

from td_core._shared.interaction import InteractionType, interaction_type, set_interaction_type
from td_core._shared.lp_aggregate import composite_lp_aggregate, set_composite_lp_aggregate
from td_core._shared.scale_maps import (
    add_custom_mapping,
    biased_softplus,
    expln,
    inv_softplus,
    mappings,
)

__all__ = [
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
