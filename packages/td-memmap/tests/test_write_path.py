"""The write path: new large files get their blocks reserved; sparse allocations stay sparse."""

from __future__ import annotations

import os

import pytest
import torch

from td_core import TensorDict
from td_memmap import _io


def test_large_leaves_are_written_whole(tmp_path: os.PathLike) -> None:
    big = torch.arange(_io.RESERVE_FROM // 4 + 7, dtype=torch.float32)
    td = TensorDict({"big": big, "sub": {"small": torch.arange(3)}}, [])
    td.memmap(tmp_path)
    loaded = TensorDict.load_memmap(tmp_path)
    assert torch.equal(loaded["big"], big)
    assert os.path.getsize(os.path.join(tmp_path, "big.memmap")) == big.numel() * 4
    td.memmap(tmp_path)  # re-save: rewritten in place, same size
    assert torch.equal(TensorDict.load_memmap(tmp_path)["big"], big)


@pytest.mark.skipif(_io._fallocate is None, reason="fallocate(2) is Linux only")
def test_memmap_like_files_stay_sparse(tmp_path: os.PathLike) -> None:
    proto = TensorDict({"x": torch.zeros(4 << 20, dtype=torch.uint8)}, [])
    like = proto.memmap_like(tmp_path)
    assert like["x"].sum() == 0
    st = os.stat(os.path.join(tmp_path, "x.memmap"))
    assert st.st_blocks * 512 < st.st_size  # no blocks reserved for zeros
