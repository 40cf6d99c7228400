"""What td-core (and through it td-nn) finds under the ``td_core.extensions`` entry point.

Kept light on purpose: td-nn loads it to learn its default
``distribution_class`` without importing the rest of td-distributions' API.
"""

from td_distributions._delta import Delta

__all__ = ["DEFAULT_DISTRIBUTION_CLASS"]

DEFAULT_DISTRIBUTION_CLASS = Delta
