"""`apply`, `named_apply` and the `_fast_apply` compatibility shim on every kind, against upstream."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import td_core

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as upstream


def _ns(td: Any) -> Any:
    """The namespace (td_core or upstream tensordict) that built ``td``."""
    return td_core if getattr(type(td), "_td_collection", False) else upstream


def _floats(td: Any) -> Any:
    return td.apply(lambda x: x.float())


def _out(td: Any) -> Any:
    out = _floats(td).clone()
    result = _floats(td).apply(lambda x: x + 1, out=out)
    return result, out


def _out_self(td: Any) -> Any:
    td = _floats(td)
    td.apply(lambda x: x * 2, out=td)
    return td


def _inplace_is_self(td: Any) -> Any:
    td = _floats(td)
    result = td.apply(lambda x: x + 1, inplace=True)
    return result is td, td


def _named_inplace(td: Any) -> Any:
    td = _floats(td)
    result = td.named_apply(lambda k, x: x + 1 if "o" in k else None, inplace=True)
    return result is td, td


CASES = {
    # nothing left: None, unless filter_empty=False keeps the (emptied) structure
    "none_everywhere": lambda td: td.apply(lambda x: None) is None,
    "none_filter_true": lambda td: td.apply(lambda x: None, filter_empty=True) is None,
    "none_filter_false": lambda td: td.apply(lambda x: None, filter_empty=False),
    "none_is_leaf_nontensor": lambda td: (
        td.apply(lambda x: None, filter_empty=True, is_leaf=_ns(td).is_leaf_nontensor) is None
    ),
    "drop_nested": lambda td: td.apply(lambda x: x if x.ndim > 3 else None),
    "named_drop": lambda td: td.named_apply(lambda k, x: x if k == "x" else None),
    "named_drop_filter_false": lambda td: td.named_apply(
        lambda k, x: x if k == "obs" else None, filter_empty=False
    ),
    "empty_td_kept": lambda td: td.empty().apply(lambda x: None),
    "batch_size_empty": lambda td: _floats(td).apply(lambda x: x.sum(), batch_size=[]),
    "batch_size_first": lambda td: _floats(td).apply(lambda x: x[0], batch_size=td.shape[1:]),
    "inplace_returns_self": _inplace_is_self,
    "inplace_nothing": lambda td: td.apply(lambda x: None, inplace=True) is None,
    "named_inplace_returns_self": _named_inplace,
    "out": _out,
    "out_self": _out_self,
    "out_locked": lambda td: _floats(td).apply(lambda x: x, out=td.clone().lock_()),
    "out_batch_size": lambda td: _floats(td).apply(lambda x: x, out=td.clone(), batch_size=[1]),
    "fast_apply": lambda td: td._fast_apply(lambda x: x + 1),
    "fast_apply_filter": lambda td: td._fast_apply(lambda x: None),
    "fast_apply_named": lambda td: td._fast_apply(
        lambda k, x: x * 0 if isinstance(k, tuple) else x, named=True, nested_keys=True
    ),
    "fast_apply_inplace": lambda td: _floats(td)._fast_apply(lambda x: x + 1, inplace=True),
    "fast_apply_batch_size": lambda td: td._fast_apply(
        lambda x: x.reshape(-1, *x.shape[2:]), batch_size=[td.numel()]
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_apply(case: str, kind: str, check) -> None:
    check(CASES[case], kind)


def test_inplace_on_grad_leaves_refused_unchanged() -> None:
    """`apply(inplace=True)` on parameters outside `no_grad` raises before writing any leaf."""
    params = td_core.TensorDictParams(
        td_core.TensorDict(a=torch.zeros(3), b=torch.zeros(3), batch_size=[3])
    )
    with pytest.raises(ValueError, match="Failed to update 'a'"):
        params.apply(lambda x: x + 1, inplace=True)
    assert (params["a"] == 0).all() and (params["b"] == 0).all()
    params.apply_(lambda x: x + 1)  # under no_grad, as upstream
    assert (params["a"] == 1).all()
