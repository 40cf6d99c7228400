"""Saving a sub-TensorDict view writes the entries it shows (not its whole source)."""

from pathlib import Path

import pytest
import torch

from td_core import TensorDict
from td_memmap import MemoryMappedTensor


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(24.0).reshape(4, 3, 2), "n": {"c": torch.arange(12.0).reshape(4, 3)}},
        [4, 3],
    )


@pytest.mark.parametrize("idx", [1, (slice(None), slice(0, 2)), torch.tensor([0, 2])], ids=str)
def test_memmap_of_a_sub_saves_what_it_shows(tmp_path: Path, idx: object) -> None:
    td = _td()
    sub = td._get_sub_tensordict(idx)
    saved = sub.memmap(tmp_path / "sub")
    assert isinstance(saved["a"], MemoryMappedTensor)
    loaded = TensorDict.load_memmap(tmp_path / "sub")
    assert type(loaded) is TensorDict
    assert loaded.batch_size == sub.batch_size
    assert (loaded["a"] == td["a"][idx]).all()
    assert (loaded["n", "c"] == td["n", "c"][idx]).all()
    # the data file holds the leaves shown, each from a 64-byte boundary: not the source
    shown = [td["a"][idx].numel() * 4, td["n", "c"][idx].numel() * 4]
    padded = sum(-(-n // 64) * 64 for n in shown)
    assert (tmp_path / "sub" / "data.pack").stat().st_size == padded


def test_load_memmap_into_a_sub_writes_its_source(tmp_path: Path) -> None:
    _td()._get_sub_tensordict((slice(None), slice(0, 2))).memmap(tmp_path / "sub")
    dest = TensorDict({"a": torch.zeros(4, 3, 2), "n": {"c": torch.zeros(4, 3)}}, [4, 3])
    dest._get_sub_tensordict((slice(None), slice(0, 2))).load_memmap_(tmp_path / "sub")
    assert (dest["a"][:, :2] == _td()["a"][:, :2]).all()
    assert (dest["a"][:, 2] == 0).all()
