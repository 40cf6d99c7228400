"""consolidate() on every kind, against upstream."""

from __future__ import annotations

import pytest

CASES = {
    "consolidate": lambda td: td.consolidate(),
    "consolidate_is": lambda td: td.consolidate().is_consolidated(),
    "is_consolidated": lambda td: td.is_consolidated(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_consolidate(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
