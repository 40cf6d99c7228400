"""Conversions (numpy, lists, namedtuples, pytrees, struct arrays, ``from_*``) on every kind."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

import td_core

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as upstream


def _ns(td: Any) -> Any:
    """The namespace (td_core or upstream tensordict) that built ``td``."""
    return td_core if getattr(type(td), "_td_collection", False) else upstream


def _arrays(obj: Any) -> Any:
    """numpy arrays as tensors (so results compare), recursively."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, dict):
        return {k: _arrays(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_arrays(v) for v in obj]
    return obj


def _struct(arr: np.ndarray) -> Any:
    return (
        arr.shape,
        str(arr.dtype),
        _arrays({n: arr[n] for n in arr.dtype.names if arr[n].dtype.names is None}),
    )


def _plain(td: Any) -> Any:
    """A plain dense TensorDict of the tensor leaves (for ``from_*`` inputs)."""
    return td.to_tensordict().filter_non_tensor_data()


CASES = {
    "numpy": lambda td: _arrays(td.numpy()),
    "to_dict": lambda td: td.to_dict(),
    "to_dict_lists": lambda td: td.to_dict(convert_tensors=True),
    "to_dict_numpy": lambda td: _arrays(td.to_dict(convert_tensors="numpy")),
    "tolist": lambda td: td.tolist(),
    "tolist_convert_tensors": lambda td: td.tolist(convert_tensors=True),
    "tolist_numpy": lambda td: _arrays(td.tolist(convert_tensors="numpy")),
    "tolist_nodes": lambda td: td.tolist(convert_nodes=False),
    "to_namedtuple": lambda td: td.to_namedtuple(),
    "to_namedtuple_fields": lambda td: type(td.to_namedtuple())._fields,
    "to_pytree": lambda td: td.to_pytree() is td,
    "to_struct_array": lambda td: _struct(_plain(td).to_struct_array()),
    "struct_array_round_trip": lambda td: _ns(td).TensorDict.from_struct_array(
        _plain(td).to_struct_array()
    ),
    "from_dict": lambda td: _ns(td).TensorDict.from_dict(td.to_dict()),
    "from_dict_batch_size": lambda td: _ns(td).TensorDict.from_dict(
        td.to_dict(), batch_size=td.batch_size
    ),
    "from_dict_auto": lambda td: _ns(td).TensorDict.from_dict(td.to_dict(), auto_batch_size=True),
    "from_dict_batch_dims": lambda td: _ns(td).TensorDict.from_dict(td.to_dict(), batch_dims=1),
    "from_dict_bad_batch_size": lambda td: _ns(td).TensorDict.from_dict(
        td.to_dict(), batch_size=[7]
    ),
    "from_dict_top_level": lambda td: _ns(td).from_dict(td.to_dict(), auto_batch_size=True),
    "from_dict_instance": lambda td: _plain(td).from_dict_instance(
        td.to_dict(), auto_batch_size=True
    ),
    "from_namedtuple": lambda td: _ns(td).TensorDict.from_namedtuple(
        _plain(td).to_namedtuple(), auto_batch_size=True
    ),
    "from_any_dict": lambda td: _ns(td).TensorDict.from_any(td.to_dict(), auto_batch_size=True),
    "from_any_namedtuple": lambda td: _ns(td).from_any(_plain(td).to_namedtuple()),
    "from_any_self": lambda td: _ns(td).TensorDict.from_any(td) is td,
    "from_tuple": lambda td: _ns(td).TensorDict.from_tuple(
        tuple(_plain(td).values()), auto_batch_size=True
    ),
    "from_list": lambda td: _ns(td).TensorDict.from_list(list(_plain(td).unbind(0))),
    "from_list_auto": lambda td: _ns(td).TensorDict.from_list(
        [x.to_dict() for x in _plain(td).unbind(0)], auto_batch_size=True
    ),
    "from_pytree_round_trip": lambda td: (
        _ns(td)
        .TensorDict.from_pytree(
            {"x": _plain(td).get("obs"), "y": (_plain(td).get("obs") + 1, [_plain(td).get("obs")])}
        )
        .to_pytree()
    ),
    "from_pytree_keys": lambda td: sorted(
        map(str, _ns(td).from_pytree({"x": td.get("obs"), "y": (td.get("obs"),)}).keys(True, True))
    ),
    "auto_batch_size_": lambda td: _plain(td).auto_batch_size_().batch_size,
    "auto_batch_size_dims": lambda td: _plain(td).auto_batch_size_(batch_dims=1).batch_size,
    "auto_device_": lambda td: _plain(td).clear_device_().auto_device_().device,
    "apply_is_leaf": lambda td: td.apply(lambda x: x, is_leaf=_ns(td).is_leaf_nontensor),
    "constructor_device": lambda td: _ns(td).TensorDict(
        _plain(td).to_dict(), batch_size=td.batch_size, device="cpu"
    ),
    "constructor_names": lambda td: (
        _ns(td)
        .TensorDict(
            _plain(td).to_dict(), batch_size=td.batch_size[:1], device="cpu", names=["first"]
        )
        .names
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_convert(case: str, kind: str, check_named) -> None:
    check_named(case, CASES[case], kind)
