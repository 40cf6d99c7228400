"""td-core: TensorDict, a dict of tensors that behaves like a tensor over its batch dims."""

from typing import TYPE_CHECKING, Any

from td_core import errors
from td_core._core.deprecated import deprecated_attribute
from td_core._core.extensions import has_extension, load_extension
from td_core._core.flags import (
    capture_non_tensor_stack,
    get_defaults_to_none,
    lazy_legacy,
    lazy_stack_enabled,
    list_to_stack,
    set_capture_non_tensor_stack,
    set_get_defaults_to_none,
    set_lazy_legacy,
    set_lazy_stack,
    set_list_to_stack,
)
from td_core._core.keys import (
    NestedKey,
    default_is_leaf,
    is_leaf_nontensor,
    unravel_key,
    unravel_key_list,
)
from td_core._core.predicates import (
    KEY_SEPARATOR,
    is_bool,
    is_floating,
    is_inexact,
    is_integer,
    is_tensor_collection,
    is_tensorclass,
    unravel_key_to_tuple,
)
from td_core._core.utils import convert_ellipsis_to_idx, logger, strtobool
from td_core._core.versions import implement_for
from td_core._functions.dedup import isin, remove_duplicates
from td_core._functions.functional import (
    collate,
    dense_stack_tds,
    group_by,
    maybe_dense_stack,
    merge_tensordicts,
)
from td_core._functions.padding import pad, pad_sequence, unpad_sequence
from td_core._functions.parse import parse_tensor_dict_string
from td_core._functions.testing import assert_allclose_td, assert_close
from td_core._functions.tools import (
    Buffer,
    DeviceType,
    IndexType,
    expand_as_right,
    expand_right,
    timeit,
)
from td_core._io.arrow import from_arrow, to_arrow
from td_core._io.consolidate import TensorDictFuture, from_consolidated
from td_core._io.convert_from import (
    from_any,
    from_json,
    from_namedtuple,
    from_pytree,
    from_struct_array,
    from_tuple,
)
from td_core._io.directory import print_directory_tree
from td_core._io.formats import from_h5, from_safetensors, from_zarr, to_safetensors
from td_core._io.json_backend import get_json_backend, json_dumps, set_json_backend
from td_core._io.pack import PackLayout
from td_core._io.printoptions import get_printoptions, set_printoptions
from td_core._io.spare_buffer import empty_cache
from td_core._kinds import lazy_view as _lazy_view  # noqa: F401  (registers the lazy view kind)
from td_core._kinds import sub as _sub  # noqa: F401  (registers the SubTensorDict kind)
from td_core._kinds.attrs import TensorAttrs
from td_core._kinds.base import TensorDictBase
from td_core._kinds.dense import TensorDict, from_dict
from td_core._kinds.lazy import LazyStackedTensorDict, lazy_stack
from td_core._kinds.params import TensorDictParams
from td_core._kinds.tensorclass_dataclass import from_dataclass
from td_core._kinds.tensorclass_options import TensorClass, tensorclass
from td_core._kinds.typed import TypedTensorDict
from td_core._leaves.collection import NonTensorDataBase, TensorCollection
from td_core._leaves.linked_list import LinkedList
from td_core._leaves.metadata import MetaData
from td_core._leaves.nontensor import NonTensorData, NonTensorStack, is_non_tensor
from td_core._leaves.unbatched import UnbatchedTensor
from td_core._ops.dict_methods import fromkeys
from td_core._ops.stack import cat, stack
from td_core._parallel.dataloader import register_collate
from td_core._shared.interaction import InteractionType, interaction_type, set_interaction_type
from td_core._shared.lp_aggregate import composite_lp_aggregate, set_composite_lp_aggregate
from td_core._shared.modules import from_module, from_modules, make_tensordict, to_module
from td_core._shared.scale_maps import (
    add_custom_mapping,
    biased_softplus,
    expln,
    inv_softplus,
    mappings,
)
from td_core._version import __version__

# the top-level table readers are the dense class's own: one implementation, one signature
from_csv = TensorDict.from_csv
from_pandas = TensorDict.from_pandas
from_parquet = TensorDict.from_parquet

__all__ = [
    "__version__",
    "print_directory_tree",
    "errors",
    # the container
    "TensorDict",
    "TensorDictBase",
    "TensorDictFuture",
    "is_tensor_collection",
    "NonTensorData",
    "NonTensorStack",
    "is_non_tensor",
    "stack",
    "cat",
    "from_consolidated",
    "empty_cache",
    "from_safetensors",
    "to_safetensors",
    "from_h5",
    "from_zarr",
    "from_pandas",
    "from_csv",
    "from_parquet",
    "from_arrow",
    "to_arrow",
    "collate",
    "LazyStackedTensorDict",
    "lazy_stack",
    "set_lazy_stack",
    "lazy_stack_enabled",
    "make_tensordict",
    # conversion
    "from_dict",
    "from_any",
    "from_dataclass",
    "from_json",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "fromkeys",
    "tensorclass",
    "is_tensorclass",
    "TensorClass",
    "TensorCollection",
    "NonTensorDataBase",
    "MetaData",
    "LinkedList",
    "TypedTensorDict",
    "TensorAttrs",
    "PackLayout",
    "UnbatchedTensor",
    # functions over TensorDicts
    "pad",
    "pad_sequence",
    "unpad_sequence",
    "merge_tensordicts",
    "maybe_dense_stack",
    "dense_stack_tds",
    "group_by",
    "isin",
    "remove_duplicates",
    # small tools of upstream's tensordict.utils
    "Buffer",
    "DeviceType",
    "IndexType",
    "expand_as_right",
    "expand_right",
    "timeit",
    "assert_close",
    "parse_tensor_dict_string",
    "assert_allclose_td",
    "is_bool",
    "is_floating",
    "is_inexact",
    "is_integer",
    "convert_ellipsis_to_idx",
    "implement_for",
    # switches
    "set_lazy_legacy",
    "lazy_legacy",
    "set_list_to_stack",
    "strtobool",
    "logger",
    "list_to_stack",
    "set_capture_non_tensor_stack",
    "capture_non_tensor_stack",
    "set_get_defaults_to_none",
    "get_defaults_to_none",
    "set_printoptions",
    "get_printoptions",
    "set_json_backend",
    "get_json_backend",
    "json_dumps",
    # module parameters
    "TensorDictParams",
    "from_module",
    "from_modules",
    "to_module",
    # keys
    "NestedKey",
    "unravel_key",
    "unravel_key_list",
    "unravel_key_to_tuple",
    "KEY_SEPARATOR",
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
    "add_custom_mapping",
    # extension lookup
    "has_extension",
    "load_extension",
]

register_collate(TensorDictBase)


if not TYPE_CHECKING:  # for type checkers, td_core has only the names above

    def __getattr__(name: str) -> Any:
        """Upstream's deprecated `tensordict.utils` dtype tables, with their warning."""
        return deprecated_attribute(__name__, name)
