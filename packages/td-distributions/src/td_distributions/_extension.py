"""What td-core (and through it td-nn) finds under the `td_core.extensions` entry point.

Kept light on purpose: td-nn loads it to learn its default
`distribution_class` without importing the rest of td-distributions' API
(`_delta` and `_composite` need only torch and td-core, which td-nn has
already imported).
"""

from td_distributions._composite import CompositeDistribution
from td_distributions._delta import Delta

__all__ = ["DEFAULT_DISTRIBUTION_CLASS", "composite_distribution"]

DEFAULT_DISTRIBUTION_CLASS = Delta


def composite_distribution() -> type:
    """`CompositeDistribution` (td-nn's `return_composite=True`)."""
    return CompositeDistribution
