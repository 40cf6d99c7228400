"""Stacking methods on every kind, against upstream."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def _floats(td: Any) -> Any:
    """A dense float copy (grad-free), so `out=` targets take every entry in place."""
    return td.to_tensordict().apply(lambda x: x.float()).detach()


def _stack_out(td: Any, *, lazy: bool, dim: int = 0) -> Any:
    """Stack two float copies of `td` into a zeroed dense target; check it keeps its storage."""
    parts = [_floats(td), _floats(td) + 1]
    out = parts[0].unsqueeze(dim).expand(*parts[0].shape[:dim], 2, *parts[0].shape[dim:])
    out = out.clone().zero_()
    ptrs = [t.data_ptr() for t in out.values(True, True)]
    stacker = type(td).lazy_stack if lazy else type(td).stack
    result = stacker(parts, dim, out=out)
    assert result is not None
    return [t.data_ptr() for t in out.values(True, True)] == ptrs, out


def _unbind_non_tensor(td: Any) -> Any:
    """A non-tensor leaf survives a stack and an unbind (as upstream: its value, not a list)."""
    row = _floats(td)[:1]
    row.set_non_tensor("label", "hello")
    stacked = torch.stack([row, row.clone()], 0)
    back = stacked.unbind(0)[1]
    return back["label"], stacked[0]["label"], stacked["label"]


CASES = {
    "stack_out": lambda td: _stack_out(td, lazy=False),
    "stack_out_dim1": lambda td: _stack_out(td, lazy=False, dim=1),
    "lazy_stack_out": lambda td: _stack_out(td, lazy=True),
    "stack_out_bad_batch": lambda td: td.stack([_floats(td)] * 2, 0, out=_floats(td)),
    "unbind_non_tensor": _unbind_non_tensor,
    "stack_method": lambda td: td.stack([td, td], 0),
    "stack_method_last": lambda td: td.stack([td, td], -1),
    "cat_method": lambda td: td.cat([td, td], 0),
    "lazy_stack_method": lambda td: td.lazy_stack([td, td], 1),
    "maybe_dense_stack": lambda td: td.maybe_dense_stack([td, td.clone()], 0),
    "to_lazystack": lambda td: td.to_lazystack(0),
    "to_lazystack_last": lambda td: td.to_lazystack(-1),
    "stack_tensors": lambda td: td.stack_tensors(
        ("nested", "x"), ("nested", "x"), out_key=("nested", "pair"), dim=-1
    ),
    "stack_tensors_keep": lambda td: td.stack_tensors(
        ("nested", "y"), ("nested", "y"), out_key=("nested", "ys"), dim=-1, keep_entries=True
    ),
    "stack_tensors_bad_dim": lambda td: td.stack_tensors(
        ("nested", "x"), ("nested", "y"), out_key=("nested", "pair"), dim=0
    ),
    "cat_tensors": lambda td: td.cat_tensors(
        ("nested", "x"), ("nested", "x"), out_key=("nested", "wide"), dim=-1
    ),
    "stack_from_tensordict": lambda td: td.select("obs").stack_from_tensordict(0),
    "cat_from_tensordict": lambda td: td.select("obs").cat_from_tensordict(-1),
    "stack_from_tensordict_sorted": lambda td: td.select(
        ("nested", "y"), "reward"
    ).stack_from_tensordict(0, sorted=True),
    "stack_from_tensordict_mismatch": lambda td: td.stack_from_tensordict(0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_stacking(case: str, kind: str, check) -> None:
    check(CASES[case], kind)


def test_torch_stack_is_the_classmethod(kind: str, check) -> None:
    check(lambda td: torch.stack([td, td], 1), kind)
