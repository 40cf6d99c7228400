"""td_memmap."""

from td_memmap._version import __version__

__all__ = ["__version__"]
