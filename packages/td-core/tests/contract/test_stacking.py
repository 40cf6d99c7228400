"""Stacking methods on every kind, against upstream."""

from __future__ import annotations

import pytest
import torch

CASES = {
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
