"""What the sibling packages' own kinds build on (td-memmap's `TensorDictStore`)."""

from td_core._kinds.inplace_route import InPlaceRouteMixin

__all__ = ["InPlaceRouteMixin"]
