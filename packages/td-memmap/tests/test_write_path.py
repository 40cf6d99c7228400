"""The write path: new large files get their blocks reserved; sparse allocations stay sparse."""

from __future__ import annotations

import os

import pytest
import torch

import td_memmap
from td_core import TensorDict
from td_memmap import _io, save

# these tests check the files layout's write path (version 1); test_packed.py the packed one


def test_large_leaves_are_written_whole(tmp_path: os.PathLike) -> None:
    big = torch.arange(_io.RESERVE_FROM // 4 + 7, dtype=torch.float32)
    td = TensorDict({"big": big, "sub": {"small": torch.arange(3)}}, [])
    save(td, tmp_path, layout="files")
    loaded = TensorDict.load_memmap(tmp_path)
    assert torch.equal(loaded["big"], big)
    assert os.path.getsize(os.path.join(tmp_path, "big.memmap")) == big.numel() * 4
    td.memmap(tmp_path)  # re-save: rewritten in place, same size
    assert torch.equal(TensorDict.load_memmap(tmp_path)["big"], big)


@pytest.mark.skipif(_io._fallocate is None, reason="fallocate(2) is Linux only")
def test_memmap_like_files_stay_sparse(tmp_path: os.PathLike) -> None:
    proto = TensorDict({"x": torch.zeros(4 << 20, dtype=torch.uint8)}, [])
    like = td_memmap.memmap_like(proto, tmp_path, layout="files")
    assert like["x"].sum() == 0
    st = os.stat(os.path.join(tmp_path, "x.memmap"))
    assert st.st_blocks * 512 < st.st_size  # no blocks reserved for zeros


def test_a_save_into_a_new_folder_creates_each_file_without_looking_first(
    tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[str] = []
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        looked.append(os.fspath(path))
        return real_lstat(path, *args, **kwargs)

    td = TensorDict({"a": torch.arange(3), "sub": {"b": torch.ones(2)}}, [])
    monkeypatch.setattr(_io.os, "lstat", lstat)
    save(td, os.path.join(tmp_path, "new"), layout="files")
    assert not [p for p in looked if p.endswith(".memmap")]  # a syscall a leaf saved
    looked.clear()
    td.memmap(os.path.join(tmp_path, "new"))  # a re-save looks: it may rewrite in place
    assert [p for p in looked if p.endswith(".memmap")]
    assert TensorDict.load_memmap(os.path.join(tmp_path, "new"))["sub", "b"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("mode", ["overwrite", "replace"])
def test_a_file_made_in_a_fresh_folder_meanwhile_is_handled_as_the_mode_says(
    tmp_path: os.PathLike, mode: str
) -> None:
    path = os.path.join(tmp_path, "x.memmap")
    with open(path, "wb") as f:
        f.write(b"\0" * 8)
    inode = os.stat(path).st_ino
    keep = os.open(path, os.O_RDONLY)  # the old inode stays allocated, so numbers cannot repeat
    try:
        _io.write_bytes(path, b"\1" * 8, mode=mode, fresh=True)
        with open(path, "rb") as f:
            assert f.read() == b"\1" * 8
        assert (os.stat(path).st_ino == inode) == (mode == "overwrite")
    finally:
        os.close(keep)
