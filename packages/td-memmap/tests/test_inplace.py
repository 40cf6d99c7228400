"""TensorDicts that live in a folder: saved_path, load_memmap_, memmap_refresh_, make_memmap*."""

import os

import pytest
import torch

from td_core import TensorDict
from td_memmap import MemoryMappedTensor, load, save


def _saved(tmp_path) -> TensorDict:
    # the files layout (version 1), whose file names these tests check; test_packed.py
    # checks the same operations on a packed save
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.ones(3)}}, [3])
    return save(td, tmp_path / "s", layout="files")


def test_saved_path_of_saved_loaded_and_plain_tds(tmp_path):
    td = _saved(tmp_path)
    assert td.saved_path == str(tmp_path / "s")
    assert td["n"].saved_path == str(tmp_path / "s" / "n")
    assert TensorDict.load_memmap(tmp_path / "s")["n"].saved_path == str(tmp_path / "s" / "n")
    assert TensorDict({"a": torch.zeros(3)}, [3]).saved_path is None


def test_load_memmap_replaces_content_in_place(tmp_path):
    _saved(tmp_path)
    target = TensorDict({"a": torch.full((2,), 5.0), "stale": torch.zeros(2)}, [2])
    out = target.load_memmap_(tmp_path / "s")
    assert out is target
    assert set(target.keys()) == {"a", "n"} and target.batch_size == torch.Size([3])
    assert isinstance(target["a"], MemoryMappedTensor)
    assert target.load_(tmp_path / "s", mode="r") is target and target.is_locked


def test_memmap_refresh_reloads_a_newer_save(tmp_path):
    td = _saved(tmp_path)
    TensorDict({"a": torch.full((3,), 9.0), "q": torch.ones(3)}, [3]).memmap(tmp_path / "s")
    td.memmap_refresh_()
    assert set(td.keys()) == {"a", "q"} and (td["a"] == 9).all()
    with pytest.raises(RuntimeError, match="no folder"):
        TensorDict({"a": torch.zeros(3)}, [3]).memmap_refresh_()


def test_make_memmap_adds_a_saved_leaf(tmp_path):
    td = _saved(tmp_path)
    t = td.make_memmap("c", (3, 2), dtype=torch.int64)
    assert isinstance(t, MemoryMappedTensor) and t.shape == (3, 2) and (t == 0).all()
    assert td["c"] is t and td.is_locked
    t[1] = 4  # writes reach the file
    back = load(tmp_path / "s")
    assert set(back.keys()) == {"a", "n", "c"} and back["c"][1].tolist() == [4, 4]
    assert os.path.dirname(t.filename) == str(tmp_path / "s")


def test_make_memmap_from_tensor_and_storage_nested(tmp_path):
    td = _saved(tmp_path)
    td.make_memmap_from_tensor(("n", "x"), torch.arange(3))
    td.make_memmap_from_storage(
        ("n", "y"), torch.arange(6.0).untyped_storage(), (3, 2), dtype=torch.float32
    )
    back = load(tmp_path / "s")
    assert back["n", "x"].tolist() == [0, 1, 2]
    assert back["n", "y"][2].tolist() == [4.0, 5.0]
    with pytest.raises(RuntimeError, match="already exists"):
        td.make_memmap_from_tensor(("n", "x"), torch.arange(3), existsok=False)


def test_make_memmap_from_a_storage_with_its_own_file_copies_it(tmp_path):
    # td: the data is copied into the folder, so a storage mapped from another file is fine
    # (upstream refuses it: "Providing a storage with an associated filename")
    td = _saved(tmp_path)
    other = MemoryMappedTensor.ones([3, 6], filename=tmp_path / "other.memmap")
    td.make_memmap_from_storage(("n", "d"), other.untyped_storage(), (3, 6), dtype=torch.float32)
    assert os.path.dirname(td["n", "d"].filename) == str(tmp_path / "s" / "n")
    other.zero_()
    assert (load(tmp_path / "s")["n", "d"] == 1).all()


def test_make_memmap_needs_a_folder():
    with pytest.raises(RuntimeError, match="no folder"):
        TensorDict({"a": torch.zeros(3)}, [3]).make_memmap("c", (3,))


def test_memory_mapped_tensor_parent_shape_and_from_storage(tmp_path):
    t = MemoryMappedTensor.from_tensor(torch.arange(12).view(3, 4), filename=tmp_path / "x.memmap")
    assert t.parent_shape == torch.Size([3, 4]) and t[1].parent_shape == torch.Size([3, 4])
    s = MemoryMappedTensor.from_storage(
        torch.arange(4).untyped_storage(), shape=(2, 2), dtype=torch.int64, index=1
    )
    assert isinstance(s, MemoryMappedTensor) and s.tolist() == [2, 3]
    with pytest.raises(ValueError, match="needs 64 bytes"):
        MemoryMappedTensor.from_storage(
            torch.arange(4).untyped_storage(), shape=(8,), dtype=torch.int64
        )


class TestMakeMemmapKeys:
    @pytest.mark.parametrize(
        "add",
        [
            lambda td, key: td.make_memmap(key, (3, 2)),
            lambda td, key: td.make_memmap_from_tensor(key, torch.ones(3, 2)),
            lambda td, key: td.make_memmap_from_storage(
                key, torch.ones(6).untyped_storage(), (3, 2)
            ),
        ],
    )
    def test_missing_sub_tensordicts_are_created_in_their_folders(self, tmp_path, add):
        td = _saved(tmp_path)
        leaf = add(td, ("new", ("deeper", "x")))
        assert isinstance(leaf, MemoryMappedTensor) and leaf.shape == (3, 2)
        assert leaf.filename == str(tmp_path / "s" / "new" / "deeper" / "x.memmap")
        assert td["new", "deeper", "x"] is leaf and td.is_locked and td["new", "deeper"].is_locked
        assert td["new"].batch_size == (3,) and td["new"].saved_path == str(tmp_path / "s" / "new")
        back = load(tmp_path / "s")
        assert torch.equal(back["new", "deeper", "x"], leaf) and torch.equal(back["a"], td["a"])

    @pytest.mark.parametrize(
        "add",
        [
            lambda td, key: td.make_memmap(key, (3,)),
            lambda td, key: td.make_memmap_from_tensor(key, torch.ones(3)),
            lambda td, key: td.make_memmap_from_storage(key, torch.ones(3).untyped_storage(), (3,)),
        ],
    )
    def test_an_existing_key_is_refused_and_kept(self, tmp_path, add):
        td = _saved(tmp_path)
        before = td["n", "b"]
        with pytest.raises(RuntimeError, match="'b' already exists within the target tensordict"):
            add(td, ("n", "b"))
        assert td["n", "b"] is before and td.is_locked
        assert load(tmp_path / "s")["n", "b"].tolist() == [1.0] * 3

    def test_a_failed_add_changes_nothing(self, tmp_path):
        td = _saved(tmp_path)
        with pytest.raises(ValueError, match="negative"):
            td.make_memmap(("x", "y"), (-1,))
        with pytest.raises(
            RuntimeError, match=r"\('a',\) is a MemoryMappedTensor, not a TensorDict"
        ):
            td.make_memmap(("a", "z"), (3,))
        assert set(td.keys()) == {"a", "n"} and td.is_locked
        assert sorted(os.listdir(tmp_path / "s")) == ["a.memmap", "meta.json", "n"]


@pytest.mark.parametrize("where", ["shared memory", "folder"])
@pytest.mark.parametrize("kind", ["dense", "lazy stack", "tensorclass"])
def test_memmap_in_place_records_the_cpu_as_the_device(tmp_path, where, kind):
    # the leaves now live in CPU memory: the TensorDict and its sub-TensorDicts say so,
    # as the copy `memmap()` makes does (and as upstream's memmap_)
    from td_core import LazyStackedTensorDict, tensorclass

    @tensorclass
    class Pair:
        x: torch.Tensor
        n: TensorDict

    def make():
        td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.ones(3)}}, [3])
        if kind == "lazy stack":
            return LazyStackedTensorDict(*td.unbind(0), stack_dim=0)
        if kind == "tensorclass":
            return Pair(x=td["a"], n=td["n"], batch_size=[3])
        return td

    td = make()
    assert td.device is None
    prefix = None if where == "shared memory" else tmp_path / "s"
    assert td.memmap_(prefix) is td
    assert td.device == torch.device("cpu")
    assert td["n"].device == torch.device("cpu")
    assert td.device == make().memmap(None if prefix is None else tmp_path / "c").device
    assert (td["n"]["b"] == 1).all()
