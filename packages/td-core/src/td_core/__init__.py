"""td-core: TensorDict, a dict of tensors that behaves like a tensor over its batch dims."""

from td_core import errors
from td_core._base import TensorDictBase, is_tensor_collection
from td_core._consolidate import from_consolidated
from td_core._dataloader import collate, register_collate
from td_core._extensions import has_extension, load_extension
from td_core._interaction import InteractionType, interaction_type, set_interaction_type
from td_core._interchange import from_h5, from_safetensors, to_safetensors
from td_core._keys import (
    NestedKey,
    default_is_leaf,
    is_leaf_nontensor,
    unravel_key,
    unravel_key_list,
)
from td_core._lazy import LazyStackedTensorDict, lazy_stack, lazy_stack_enabled, set_lazy_stack
from td_core._lp_aggregate import composite_lp_aggregate, set_composite_lp_aggregate
from td_core._mappings import biased_softplus, expln, inv_softplus, mappings
from td_core._modules import from_module, from_modules, make_tensordict, to_module
from td_core._nontensor import NonTensorData, NonTensorStack, is_non_tensor
from td_core._params import TensorDictParams
from td_core._stack import cat, stack
from td_core._td import TensorDict
from td_core._tensorclass import is_tensorclass, tensorclass
from td_core._version import __version__

__all__ = [
    "__version__",
    "errors",
    # the container
    "TensorDict",
    "TensorDictBase",
    "is_tensor_collection",
    "NonTensorData",
    "NonTensorStack",
    "is_non_tensor",
    "stack",
    "cat",
    "from_consolidated",
    "from_safetensors",
    "to_safetensors",
    "from_h5",
    "collate",
    "LazyStackedTensorDict",
    "lazy_stack",
    "set_lazy_stack",
    "lazy_stack_enabled",
    "make_tensordict",
    "tensorclass",
    "is_tensorclass",
    # module parameters
    "TensorDictParams",
    "from_module",
    "from_modules",
    "to_module",
    # keys
    "NestedKey",
    "unravel_key",
    "unravel_key_list",
    "default_is_leaf",
    "is_leaf_nontensor",
    # shared vocabulary of the siblings
    "InteractionType",
    "interaction_type",
    "set_interaction_type",
    "composite_lp_aggregate",
    "set_composite_lp_aggregate",
    "biased_softplus",
    "expln",
    "inv_softplus",
    "mappings",
    # extension lookup
    "has_extension",
    "load_extension",
]

register_collate(TensorDictBase)
