"""What td-memmap's loaders share with td-core's: the safe look-up of a recorded class."""

from td_core._core.class_lookup import loaded_object

__all__ = ["loaded_object"]
