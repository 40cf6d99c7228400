"""What the sibling packages' own kinds build on (td-memmap's `TensorDictStore`, its files)."""

from td_core._core.utils import index_device, stand_in
from td_core._kinds.inplace_route import InPlaceRouteMixin

__all__ = ["InPlaceRouteMixin", "index_device", "stand_in"]
