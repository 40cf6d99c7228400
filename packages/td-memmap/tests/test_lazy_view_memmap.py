"""Memory-mapping a legacy lazy view (`set_lazy_legacy(True)`) whose source already has files."""

from pathlib import Path

import pytest
import torch

from td_core import TensorDict, set_lazy_legacy


def _view() -> TensorDict:
    source = TensorDict({"a": torch.randn(3, 1, 4, 2), "n": {"b": torch.ones(3, 1, 4)}}, [3, 1, 4])
    with set_lazy_legacy(True):
        return source.permute(2, 0, 1)


def test_the_view_saves_in_its_own_layout(tmp_path: Path) -> None:
    view = _view()
    expected = view.to_tensordict()
    assert view.memmap_(tmp_path / "one") is view
    loaded = TensorDict.load_memmap(tmp_path / "one")
    assert loaded.batch_size == (4, 3, 1)
    assert (loaded == expected).all()
    assert (view.to_tensordict() == expected).all()


@pytest.mark.parametrize("in_place", [True, False])
def test_another_prefix_needs_copy_existing(tmp_path: Path, in_place: bool) -> None:
    view = _view()
    view.memmap_(tmp_path / "one")
    save = view.memmap_ if in_place else view.memmap
    with pytest.raises(RuntimeError, match="already has a file associated"):
        save(tmp_path / "two")
    assert not (tmp_path / "two").exists()
    save(tmp_path / "two", copy_existing=True)
    assert (TensorDict.load_memmap(tmp_path / "two") == view.to_tensordict()).all()


def test_the_same_prefix_saves_again(tmp_path: Path) -> None:
    view = _view()
    view.memmap_(tmp_path / "one")
    view.memmap_(tmp_path / "one")
    assert (TensorDict.load_memmap(tmp_path / "one") == view.to_tensordict()).all()
