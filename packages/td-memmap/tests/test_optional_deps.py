"""A missing optional dependency gives an ImportError naming the td-memmap extra that installs it."""

from __future__ import annotations

import sys

import pytest
import torch

import td_memmap
from td_core import TensorDict


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(2)}, batch_size=[2])


@pytest.mark.parametrize(
    ("module", "write", "message"),
    [
        ("h5py", lambda p: _td().to_h5(p / "x.h5"), r"HDF5 support needs the 'h5py' package"),
        ("zarr", lambda p: _td().to_zarr(p / "x.zarr"), r"zarr support needs the 'zarr' package"),
        (
            "safetensors.torch",
            lambda p: _td().to_safetensors(p / "x.st"),
            r"safetensors support needs the 'safetensors' package",
        ),
        (
            "streaming",
            lambda p: td_memmap.to_mds(_td(), out=str(p / "mds")),
            r"to_mds needs the 'mosaicml-streaming' package",
        ),
    ],
)
def test_missing_optional_package_names_the_extra(tmp_path, monkeypatch, module, write, message):
    extra = {"h5py": "h5", "zarr": "zarr", "safetensors.torch": "safetensors", "streaming": "mds"}
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(
        ImportError, match=message + rf".*pip install 'td-memmap\[{extra[module]}\]'"
    ):
        write(tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
