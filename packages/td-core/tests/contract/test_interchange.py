"""Interchange formats (safetensors, HDF5) on every kind, against upstream.

Each case writes the container to a file and reads it back; the result is
compared as (batch_size, {nested key: leaf}) so that the container classes a
loader returns (upstream keeps lazy stacks) do not matter, only the data.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("safetensors")
pytest.importorskip("h5py")


def _upstream(td: Any) -> bool:
    import td_core

    return not td_core.is_tensor_collection(td)


def _flat(out: Any) -> tuple[Any, dict[str, Any]]:
    return tuple(out.batch_size), {str(k): out.get(k) for k in out.keys(True, True)}


def _safetensors(td: Any) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.safetensors"
        if _upstream(td):
            import tensordict

            tensordict.to_safetensors(td, path)
            out = tensordict.from_safetensors(path)
        else:
            import td_core

            td.to_safetensors(path)
            out = td_core.from_safetensors(path)
        return _flat(out.to_tensordict() if _upstream(td) else out)


def _h5(td: Any) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        ptd = td.to_h5(Path(tmp) / "t.h5")  # a tensorclass: the class over the file (both sides)
        try:
            return _flat(ptd.to_tensordict())
        finally:
            getattr(ptd, "_tensordict", ptd).close()


CASES = {
    "safetensors_round_trip": _safetensors,
    "h5_round_trip": _h5,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interchange(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
