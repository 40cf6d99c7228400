"""td-nn: nn.Modules that read and write TensorDicts by key.

The interaction-type switch, the positive mappings and `TensorDictParams`
live in td-core (they are shared with td-distributions) and are re-exported here.
"""

from td_core import TensorDictParams, make_tensordict
from td_core._shared import interaction as _interaction
from td_core._shared import lp_aggregate as _lp_aggregate
from td_core._shared import scale_maps as _scale_maps
from td_core._shared.interaction import *  # noqa: F403 (re-exported: see __all__)
from td_core._shared.lp_aggregate import *  # noqa: F403 (re-exported: see __all__)
from td_core._shared.scale_maps import *  # noqa: F403 (re-exported: see __all__)
from td_nn._base import TensorDictModuleBase
from td_nn._common import TensorDictModule
from td_nn._cudagraphs import CudaGraphModule
from td_nn._dispatch import dispatch
from td_nn._ensemble import EnsembleModule
from td_nn._functional import get_functional, is_functional, make_functional, repopulate_module
from td_nn._probabilistic import ProbabilisticTensorDictModule
from td_nn._probabilistic_sequence import ProbabilisticTensorDictSequential
from td_nn._sequence import TensorDictSequential
from td_nn._skip import set_skip_existing, skip_existing
from td_nn._tensorclass_module import TensorClassModuleBase, TensorClassModuleWrapper
from td_nn._trace import symbolic_trace
from td_nn._version import __version__
from td_nn._wrap import WrapModule, as_tensordict_module
from td_nn._wrapper import TensorDictModuleWrapper

__all__ = [
    "__version__",
    # modules
    "TensorDictModuleBase",
    "TensorDictModule",
    "TensorDictSequential",
    "TensorDictModuleWrapper",
    "ProbabilisticTensorDictModule",
    "ProbabilisticTensorDictSequential",
    "EnsembleModule",
    "CudaGraphModule",
    "WrapModule",
    "as_tensordict_module",
    "TensorClassModuleBase",
    "TensorClassModuleWrapper",
    # functional API of the seeds
    "make_functional",
    "get_functional",
    "is_functional",
    "repopulate_module",
    # tracing
    "symbolic_trace",
    # utilities
    "dispatch",
    "set_skip_existing",
    "skip_existing",
    # defined in td-core
    "TensorDictParams",
    "make_tensordict",
]
# Shared with td-distributions, defined in td-core (one list: the `__all__` of the modules that
# define them; tests-integration checks that the siblings re-export the same names):
# interaction type, log-prob aggregation, scale mappings.
__all__ += _interaction.__all__ + _lp_aggregate.__all__ + _scale_maps.__all__
