"""td_nn."""

from td_nn._version import __version__

__all__ = ["__version__"]
