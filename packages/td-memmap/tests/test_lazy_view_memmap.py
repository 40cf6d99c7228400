"""`memmap_()` of a legacy lazy view (`set_lazy_legacy(True)`) memory-maps its source in place."""

from pathlib import Path

import pytest
import torch

from td_core import TensorDict, set_lazy_legacy
from td_memmap import MemoryMappedTensor


def _view() -> TensorDict:
    with set_lazy_legacy(True):
        return TensorDict(
            {"a": torch.randn(3, 1, 4, 2), "n": {"b": torch.ones(3, 1, 4)}}, [3, 1, 4]
        ).permute(2, 0, 1)


def test_the_source_gets_the_files(tmp_path: Path) -> None:
    view = _view()
    expected = view.get("a").clone()
    assert view.memmap_(tmp_path / "one") is view
    source = view.source
    assert isinstance(source.get("a"), MemoryMappedTensor)
    assert isinstance(source.get(("n", "b")), MemoryMappedTensor)
    assert (view.get("a") == expected).all()
    assert view.get("a").shape == (4, 3, 1, 2)


def test_a_second_prefix_needs_copy_existing(tmp_path: Path) -> None:
    view = _view()
    view.memmap_(tmp_path / "one")
    with pytest.raises(RuntimeError, match="already has a file associated"):
        view.memmap_(tmp_path / "two")
    leaves = dict(view.source.items(True, True))
    assert view.memmap_() is view  # no prefix: nothing moves
    assert all(view.source.get(k) is v for k, v in leaves.items())
    view.memmap_(tmp_path / "two", copy_existing=True)
    assert Path(view.source.get("a").filename).parent == tmp_path / "two"


def test_return_early_gives_a_future_of_the_view(tmp_path: Path) -> None:
    view = _view()
    future = view.memmap_(tmp_path / "one", return_early=True)
    assert future.result() is view
    assert isinstance(view.source.get("a"), MemoryMappedTensor)
