"""consolidate() on every kind, against upstream."""

from __future__ import annotations

import pytest
import torch

CASES = {
    "consolidate": lambda td: td.consolidate(),
    "consolidate_is": lambda td: td.consolidate().is_consolidated(),
    "is_consolidated": lambda td: td.is_consolidated(),
    # a consolidated TensorDict moved to a device stays consolidated (one buffer moved)
    "to_meta": lambda td: td.consolidate().to("meta"),
    "to_meta_is": lambda td: td.consolidate().to("meta").is_consolidated(),
    "to_meta_non_blocking_is": lambda td: (
        td.consolidate().to(device="meta", non_blocking=True).is_consolidated()
    ),
    "to_cpu_values": lambda td: td.consolidate().to("cpu"),
    "to_dtype_is": lambda td: td.consolidate().to(torch.float64).is_consolidated(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_consolidate(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
