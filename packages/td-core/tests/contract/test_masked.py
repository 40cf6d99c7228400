"""Masked and indexed reads and writes on every kind, against upstream."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch


def _mask(td: Any, ndim: int | None = None, *, bcast: bool = False) -> torch.Tensor:
    """A seeded boolean mask over the first ``ndim`` batch dims (all of them by default)."""
    shape = list(td.batch_size[:ndim])
    if bcast:
        shape[-1] = 1
    g = torch.Generator().manual_seed(3)
    # drawn on the CPU, then moved where the case runs (the contract suite's device)
    return torch.rand(shape, generator=g, device="cpu").to(torch.get_default_device()) > 0.5


def _index(td: Any, dim: int, size: int) -> torch.Tensor:
    """A long index for gather along ``dim``: the batch size with ``size`` at ``dim``."""
    shape = list(td.batch_size)
    shape[dim] = size
    values = torch.arange(math.prod(shape)).reshape(shape) * 7
    return values % td.batch_size[dim]


def _zeros(td: Any) -> Any:
    return td.masked_fill(torch.ones(td.batch_size, dtype=torch.bool), 0)


def _with(td: Any, key: str, value: Any) -> Any:
    td[key] = value
    return td


CASES = {
    # where
    "where_scalar": lambda td: td.where(_mask(td), 0.0),
    "where_int_scalar": lambda td: td.where(_mask(td), 1),
    "where_td": lambda td: td.where(_mask(td), _zeros(td)),
    "where_self": lambda td: td.where(_mask(td), td),
    "where_prefix": lambda td: td.where(_mask(td, 1), -1.0),
    "where_bcast": lambda td: td.where(_mask(td, bcast=True), 0.0),
    "where_0d_tensor": lambda td: td.where(_mask(td), torch.tensor(2.0)),
    "where_out": lambda td: td.where(_mask(td), _zeros(td), out=td.masked_fill(_mask(td), 1)),
    "where_out_promotes": lambda td: td.where(_mask(td), 0.5, out=td.masked_fill(_mask(td), 1)),
    "where_pad": lambda td: td.where(_mask(td), _zeros(td).select("obs"), pad=0),
    "where_missing_no_pad": lambda td: td.where(_mask(td), _zeros(td).select("obs")),
    "where_bad_mask": lambda td: td.where(torch.ones(7, dtype=torch.bool), 0.0),
    "where_too_many_dims": lambda td: td.where(torch.ones(*td.batch_size, 5, dtype=torch.bool), 0),
    "where_int_mask": lambda td: td.where(_mask(td).long(), 0.0),
    "torch_where": lambda td: torch.where(_mask(td), td, 0.0),
    "torch_where_swapped": lambda td: torch.where(_mask(td), 0.0, td),
    "torch_where_td_td": lambda td: torch.where(_mask(td), td, _zeros(td)),
    # masked_fill(_)
    "masked_fill": lambda td: td.masked_fill(_mask(td), 1.5),
    "masked_fill_int": lambda td: td.masked_fill(_mask(td), 3),
    "masked_fill_prefix": lambda td: td.masked_fill(_mask(td, 1), -1.0),
    "masked_fill_bcast": lambda td: td.masked_fill(_mask(td, bcast=True), 0.0),
    "masked_fill_bad_mask": lambda td: td.masked_fill(torch.ones(7, dtype=torch.bool), 0.0),
    "masked_fill_int_mask": lambda td: td.masked_fill(_mask(td).long(), 0.0),
    "masked_fill_": lambda td: td.masked_fill_(_mask(td), -2.0),
    "masked_fill__prefix": lambda td: td.masked_fill_(_mask(td, 1), 7),
    "masked_fill__bad_mask": lambda td: td.masked_fill_(torch.ones(7, dtype=torch.bool), 0.0),
    # masked_select
    "masked_select": lambda td: td.masked_select(_mask(td)),
    "masked_select_prefix": lambda td: td.masked_select(_mask(td, 1)),
    "masked_select_bad_mask": lambda td: td.masked_select(torch.ones(7, dtype=torch.bool)),
    "masked_select_inplace": lambda td: td.masked_select(_mask(td, 1), inplace=True),
    "torch_masked_select": lambda td: torch.masked_select(td, _mask(td)),
    # get_at
    "get_at_int": lambda td: td.get_at("obs", 1),
    "get_at_tuple": lambda td: td.get_at("obs", (1, 0)),
    "get_at_slice": lambda td: td.get_at("obs", slice(1, 3)),
    "get_at_mask": lambda td: td.get_at("obs", _mask(td, 1)),
    "get_at_nested": lambda td: td.get_at(("nested", "x"), 2, None),
    "get_at_subtd": lambda td: td.get_at("nested", 1, None),
    "get_at_keyword": lambda td: td.get_at("obs", index=0),
    "get_at_missing": lambda td: td.get_at("missing", 0),
    "get_at_default": lambda td: td.get_at("missing", 0, default=3),
    "get_at_default_positional": lambda td: td.get_at(("nested", "missing"), 0, 3),
    "get_at_ragged": lambda td: td.get_at("ragged", 1, None),
    # set_at_
    "set_at_scalar": lambda td: td.set_at_("obs", 1.0, 0),
    "set_at_tensor": lambda td: td.set_at_("obs", torch.ones(3), (0, 1)),
    "set_at_slice": lambda td: td.set_at_("obs", 5.0, slice(1, 3)),
    "set_at_mask": lambda td: td.set_at_("obs", 2.0, _mask(td, 1)),
    "set_at_last_dim": lambda td: td.set_at_("obs", -1.0, (slice(None), 1)),
    "set_at_nested": lambda td: td.set_at_(("nested", "x"), 0.0, 1),
    "set_at_subtd": lambda td: td.set_at_("nested", 0.0, 1),
    "set_at_float64_value": lambda td: td.set_at_("obs", torch.ones(3, dtype=torch.float64), 0),
    "set_at_keyword": lambda td: td.set_at_("obs", value=4.0, index=1),
    "set_at_locked": lambda td: td.lock_().set_at_("obs", 3.0, 1),
    "set_at_missing": lambda td: td.set_at_("missing", 1.0, 0),
    "set_at_missing_nested": lambda td: td.set_at_(("nested", "missing"), 1.0, 0),
    "set_at_bad_shape": lambda td: td.set_at_("obs", torch.ones(7), 0),
    "set_at_ragged": lambda td: td.set_at_("ragged", 0.0, 1),
    # update_at_
    "update_at_dict": lambda td: td.update_at_(
        {"obs": torch.zeros(3), ("nested", "y"): torch.tensor(1.0)}, 1
    ),
    "update_at_nested_dict": lambda td: td.update_at_({"nested": {"x": torch.ones(2)}}, 2),
    "update_at_td": lambda td: td.update_at_(td[0], 1),
    "update_at_clone": lambda td: td.update_at_({"obs": torch.ones(3)}, 0, clone=True),
    "update_at_keys_to_update": lambda td: td.update_at_(
        {"obs": torch.zeros(3), "missing": torch.zeros(3)}, 1, keys_to_update=["obs"]
    ),
    "update_at_missing": lambda td: td.update_at_(
        {"obs": torch.zeros(3), "missing": torch.zeros(td.batch_size[1:])}, 1
    ),
    "update_at_bad_shape": lambda td: td.update_at_({"obs": torch.zeros(7)}, 1),
    # copy_ / copy_at_
    "copy_": lambda td: td.copy_(_zeros(td)),
    "copy_positional": lambda td: td.copy_(_zeros(td), False),
    "copy_bad_shape": lambda td: td.copy_(td[:2]),
    "copy_at_": lambda td: td.copy_at_(td[0], 1),
    "copy_at_slow": lambda td: td.copy_at_(td[0], 2, fast=False),
    "copy_at_missing": lambda td: td.copy_at_(
        _with(_zeros(td[0]), "missing", torch.zeros(td.batch_size[1:])), 1
    ),
    # fill_ / zero_
    "fill_": lambda td: td.fill_("obs", 2.0),
    "fill_nested_leaf": lambda td: td.fill_(("nested", "x"), 1),
    "fill_subtd": lambda td: td.fill_("nested", -1.0),
    "fill_missing": lambda td: td.fill_("missing", 0.0),
    "zero_": lambda td: td.zero_(),
    # gather
    "gather_dim0": lambda td: td.gather(0, _index(td, 0, 2)),
    "gather_last": lambda td: td.gather(-1, _index(td, -1, 4)),
    "gather_keyword": lambda td: td.gather(dim=1, index=_index(td, 1, 1)),
    "gather_out": lambda td: td.gather(0, _index(td, 0, td.batch_size[0]), out=_zeros(td)),
    "gather_inplace": lambda td: td.gather(-1, _index(td, -1, td.batch_size[-1]), inplace=True),
    "gather_dim_oob": lambda td: td.gather(td.batch_dims, _index(td, 0, 2)),
    "gather_short_index": lambda td: td.gather(0, torch.tensor([1, 0])),
    "torch_gather": lambda td: torch.gather(td, 0, _index(td, 0, 3)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_masked(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
