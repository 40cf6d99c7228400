"""Pickling on every kind, against upstream: `pickle` and `torch.save` round trips.

td pickles a small plain TensorDict as one consolidated buffer (`td_core._io.pickle_pack`);
the values, keys, batch size and non-tensor data that come back are what upstream gives.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import pytest
import torch


def _torch_save(td: Any) -> Any:
    buf = io.BytesIO()
    torch.save(td, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


CASES = {
    "pickle": lambda td: pickle.loads(pickle.dumps(td)),
    "pickle_consolidated": lambda td: pickle.loads(pickle.dumps(td.consolidate())),
    "torch_save": _torch_save,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pickle(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
