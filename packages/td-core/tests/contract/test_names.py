"""Named batch dims (names, refine_names, rename, rename_) and how shape ops carry them, on every kind."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def _named(td: Any) -> Any:
    """``td`` with its first batch dim named ``"first"`` and its last ``"last"``."""
    return td.refine_names("first", ..., "last")


CASES = {
    "names_default": lambda td: td.names,
    "refine_names": lambda td: _named(td).names,
    "refine_names_in_place": lambda td: (_named(td) is td, td.names),
    "refine_names_nested": lambda td: getattr(_named(td).get("nested", None), "names", None),
    "refine_names_twice": lambda td: _named(td).refine_names("first", ..., "last").names,
    "refine_names_conflict": lambda td: _named(td).refine_names("other", ...),
    "refine_names_too_many": lambda td: td.refine_names(*["n"] * (td.ndim + 1)),
    "refine_names_duplicate": lambda td: td.refine_names("n", "n", ...),
    "rename": lambda td: (_named(td).rename(*[f"d{i}" for i in range(td.ndim)]).names, td.names),
    "rename_mapping": lambda td: _named(td).rename(first="f").names,
    "rename_mapping_unknown": lambda td: _named(td).rename(nope="f"),
    "rename_none": lambda td: _named(td).rename(None).names,
    "rename_wrong_count": lambda td: _named(td).rename("a"),
    "rename_": lambda td: (_named(td).rename_(first="f").names, td.names),
    "rename_locked": lambda td: _named(td).lock_().rename_(first="f").names,
    "names_setter": lambda td: (setattr(td, "names", [f"s{i}" for i in range(td.ndim)]), td.names),
    "index_int": lambda td: _named(td)[0].names,
    "index_slice": lambda td: _named(td)[1:].names,
    "index_none": lambda td: _named(td)[None].names,
    "index_ellipsis": lambda td: _named(td)[..., 0].names,
    "unsqueeze": lambda td: _named(td).unsqueeze(1).names,
    "unsqueeze_last": lambda td: _named(td).unsqueeze(-1).names,
    "squeeze": lambda td: _named(td)[:1].squeeze(0).names,
    "permute": lambda td: _named(td).permute(*reversed(range(td.ndim))).names,
    "transpose": lambda td: _named(td).transpose(0, -1).names,
    "unbind": lambda td: _named(td).unbind(0)[0].names,
    "split": lambda td: _named(td).split(1, 0)[0].names,
    "expand": lambda td: _named(td).expand(2, *td.batch_size).names,
    "stack": lambda td: torch.stack([_named(td).clone(), _named(td).clone()], 0).names,
    "cat": lambda td: torch.cat([_named(td).clone(), _named(td).clone()], 0).names,
    "clone": lambda td: _named(td).clone().names,
    "apply": lambda td: _named(td).apply(lambda x: x).names,
    "select": lambda td: _named(td).select("obs").names,
    "view_forgets": lambda td: _named(td).view(-1).names,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_names(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
