"""td_distributions."""

from td_distributions._version import __version__

__all__ = ["__version__"]
