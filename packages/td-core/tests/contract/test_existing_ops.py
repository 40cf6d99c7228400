"""Ops that predate the contract suite, on every kind, against upstream."""

from __future__ import annotations

import pytest
import torch


def _with_text(td):
    td.set_non_tensor(("nested", "text"), "hello")  # a number says nothing about it: left out
    return td


CASES = {
    "clone": lambda td: td.clone(),
    "getitem_int": lambda td: td[0],
    "getitem_slice": lambda td: td[1:],
    "getitem_2d_tensor": lambda td: td[torch.tensor([[0, 1], [1, 2]])],
    "getitem_2d_tensor_dim1": lambda td: td[:, torch.tensor([[0, 1], [1, 2]])],
    "getitem_0d_tensor": lambda td: td[torch.tensor(1)],
    "getitem_set": lambda td: td[{0, 1}],
    "add_scalar": lambda td: td + 1,
    "mul_td": lambda td: td * td,
    "abs": lambda td: abs(td),
    "neg": lambda td: -td,
    "eq_self": lambda td: td == td,
    "eq_dict": lambda td: td == td.to_dict(),
    "ne_dict_zero": lambda td: td != td.clone().zero_().to_dict(),
    "eq_str": lambda td: td == "z",
    "ne_str": lambda td: td != "z",
    "eq_text_leaf_scalar": lambda td: _with_text(td) == 0,
    "le_text_leaf_scalar": lambda td: _with_text(td) <= 1.0,
    "bool": lambda td: bool(td),
    "torch_maximum": lambda td: torch.maximum(td, td * 2),
    "torch_add": lambda td: torch.add(td, 1),
    "torch_clamp": lambda td: torch.clamp(td.float(), -0.5, 0.5),
    "torch_exp": lambda td: torch.exp(td.float()),
    "to_double": lambda td: td.to(torch.float64),
    "unsqueeze": lambda td: td.unsqueeze(0),
    "flatten_keys": lambda td: td.flatten_keys("."),
    "select": lambda td: td.select("obs"),
    "exclude": lambda td: td.exclude("obs"),
    "apply": lambda td: td.apply(lambda x: x * 2),
    "add_": lambda td: td.add_(1),
    "zero_": lambda td: td.zero_(),
    "all": lambda td: td.all(),
    "any": lambda td: td.any(),
    "unbind": lambda td: td.unbind(0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_existing(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
