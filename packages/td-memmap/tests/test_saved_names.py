"""Dim names survive a save: written in the metadata, checked and set again on load."""

import json
import os

import pytest
import torch
from saved_files import edit_meta, read_meta

from td_core import LazyStackedTensorDict, TensorDict, tensorclass
from td_memmap import MemmapFormatError, load_memmap, save


def _named() -> TensorDict:
    return TensorDict(
        {
            "a": torch.zeros(3, 4),
            "n": {"b": torch.ones(3, 4, 2)},
            "s": TensorDict({"c": torch.ones(3, 4, 5)}, [3, 4, 5], names=[None, None, "e"]),
        },
        [3, 4],
        names=["x", "y"],
    )


@pytest.mark.parametrize("layout", ["packed", "files"])
def test_names_round_trip(tmp_path, layout):
    save(_named(), tmp_path / "d", layout=layout)
    back = load_memmap(tmp_path / "d")
    assert back.names == ["x", "y"] and back["n"].names == ["x", "y"]
    assert back["s"].names == ["x", "y", "e"]


def test_a_lazy_stack_and_a_tensorclass_keep_their_names(tmp_path):
    lazy = LazyStackedTensorDict.lazy_stack([_named(), _named()], 1)
    lazy.names = ["x", "k", "y"]
    save(lazy, tmp_path / "lazy")
    back = load_memmap(tmp_path / "lazy")
    assert back.names == ["x", "k", "y"] and back["s"].names == ["x", "k", "y", "e"]

    @tensorclass
    class Obs:
        a: torch.Tensor

    save(Obs(a=torch.zeros(3, 4), batch_size=[3, 4], names=["x", "y"]), tmp_path / "tc")
    assert load_memmap(tmp_path / "tc").names == ["x", "y"]


def test_unnamed_saves_write_no_names(tmp_path):
    save(TensorDict({"a": torch.zeros(3)}, [3]), tmp_path / "d")
    assert "names" not in read_meta(tmp_path / "d")
    assert load_memmap(tmp_path / "d").names == [None]


@pytest.mark.parametrize("names", [["x"], ["x", 3], ["x", "x"], "xy", {"x": 1}, ["x", "y", None]])
def test_bad_saved_names_are_refused(tmp_path, names):
    save(_named(), tmp_path / "d", layout="files")
    edit_meta(tmp_path / "d", lambda m: m.update(names=names))
    with pytest.raises(MemmapFormatError, match="'names'"):
        load_memmap(tmp_path / "d")


def test_saved_names_clashing_with_a_sub_folder_are_refused(tmp_path):
    save(_named(), tmp_path / "d", layout="files")
    edit_meta(tmp_path / "d", lambda m: m.update(names=["x", "e"]))  # "s" names its dim 2 "e"
    with pytest.raises(MemmapFormatError, match="names"):
        load_memmap(tmp_path / "d")


def _upstream_folder(folder, names):
    """A one-leaf folder in upstream tensordict's layout whose metadata has `_names`."""
    os.makedirs(folder)
    meta = {
        "a": {"device": "cpu", "shape": [2, 3], "dtype": "torch.float32", "is_nested": False},
        "shape": [2, 3],
        "device": "cpu",
        "_type": "<class 'tensordict._td.TensorDict'>",
        "_names": names,
    }
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(folder, "a.memmap"), "wb") as f:
        f.write(torch.zeros(2, 3).numpy().tobytes())
    return folder


def test_an_upstream_folder_keeps_its_names(tmp_path):
    assert load_memmap(_upstream_folder(tmp_path / "u", ["t", None])).names == ["t", None]
    assert load_memmap(_upstream_folder(tmp_path / "v", None)).names == [None, None]
    with pytest.raises(MemmapFormatError, match="'names'"):
        load_memmap(_upstream_folder(tmp_path / "w", ["t", "t"]))
