"""td_query."""

from td_query._version import __version__

__all__ = ["__version__"]
