"""A folder's index of the metadata below it: the save's own view, validated as the files.

A sub-folder's own ``meta.json`` is read instead only when it is newer (saved again on its own).
"""

import json
import os

import pytest
import torch
from saved_files import edit_meta, read_meta, saved_in

import td_memmap._meta as meta_module
from td_core import TensorDict
from td_memmap import IncompleteSaveError, MemmapFormatError, UnsafePathError, load
from td_memmap import save as _save


def save(td, prefix, **kwargs):
    """The index is part of the files layout (version 1): a packed save has one meta.json."""
    return _save(td, prefix, layout="files", **kwargs)


def _tree() -> TensorDict:
    return TensorDict(
        {
            "x": torch.arange(3.0),
            "layer": {"w": torch.ones(3, 2), "deep": {"b": torch.zeros(3, dtype=torch.int64)}},
        },
        batch_size=[3],
    )


@pytest.fixture
def saved(tmp_path):
    return saved_in(tmp_path, _tree(), layout="files")


@pytest.fixture
def meta_reads(monkeypatch):
    """The folders whose meta.json the loader reads from disk."""
    read = []
    real = meta_module._open_meta

    def spy(ctx):
        read.append(os.path.relpath(ctx.folder, ctx.root))
        return real(ctx)

    monkeypatch.setattr(meta_module, "_open_meta", spy)
    return read


def test_save_indexes_every_sub_folder_with_its_file_content(saved):
    index = read_meta(saved)["index"]
    assert sorted(index) == ["layer", "layer/deep"]
    for rel, (stamp, meta) in index.items():
        path = saved / rel / "meta.json"
        own = json.loads(path.read_text())
        own.pop("index", None)  # a sub-folder indexes the folders below it
        assert meta == own
        st = os.lstat(path)
        assert stamp == [st.st_ino, st.st_size, st.st_mtime_ns]
    assert sorted(read_meta(saved / "layer")["index"]) == ["deep"]


def test_a_flat_save_has_no_index(tmp_path):
    save(TensorDict({"a": torch.ones(2)}, [2]), tmp_path / "flat")
    assert "index" not in read_meta(tmp_path / "flat")


def test_load_reads_only_the_top_file_while_the_index_is_current(saved, meta_reads):
    back = load(saved)
    assert meta_reads == ["."]
    assert (back == _tree()).all()


def test_a_sub_folder_loaded_alone_reads_its_own_file_only(saved, meta_reads):
    back = load(saved / "layer")
    assert meta_reads == ["."]  # every folder of a save indexes those below it
    assert (back == _tree()["layer"]).all()


def test_a_sub_folder_saved_again_is_read_from_disk(saved, meta_reads):
    save(TensorDict({"new": torch.full((3,), 7)}, [3]), saved / "layer" / "deep")
    back = load(saved)
    assert "layer/deep" in meta_reads
    assert set(back["layer", "deep"].keys()) == {"new"}
    assert (back["layer", "deep", "new"] == 7).all()


def test_a_touched_sub_folder_file_is_read_from_disk(saved, meta_reads):
    os.utime(saved / "layer" / "meta.json")
    load(saved)
    assert meta_reads == [".", "layer"]


def test_a_sub_folder_whose_file_is_not_yet_published_loads_from_the_index(saved):
    # a save killed after its commit, before it renamed the sub-folders' files into place
    os.remove(saved / "layer" / "deep" / "meta.json")
    assert (load(saved) == _tree()).all()
    with pytest.raises(IncompleteSaveError, match="deep"):
        load(saved / "layer" / "deep")  # that folder alone is not (yet) a save


def test_an_older_sub_folder_file_loses_to_the_index(saved, meta_reads):
    # after the commit of a re-save, a sub-folder's file can still be the previous save's
    old = (saved / "layer" / "meta.json").read_bytes()
    save(TensorDict({"x": torch.arange(3.0), "layer": {"w": torch.full((3, 2), 5.0)}}, [3]), saved)
    (saved / "layer" / "meta.json").write_bytes(old)
    back = load(saved)
    assert "layer" in meta_reads  # its stamp differs: read, found older, not used
    assert set(back["layer"].keys()) == {"w"} and (back["layer", "w"] == 5).all()


@pytest.mark.parametrize(
    "bad_index",
    [[], {"layer": "nope"}, {"layer": [1, 2]}, {"layer": [[1], {}, 3]}],
    ids=["not-an-object", "record-a-string", "stamp-not-a-list", "three-items"],
)
def test_a_malformed_index_is_refused_naming_the_top_file(saved, bad_index):
    edit_meta(saved, lambda d: d.__setitem__("index", bad_index))
    with pytest.raises(MemmapFormatError, match="index") as info:
        load(saved)
    assert str(saved / "meta.json") in str(info.value)


def test_a_current_record_is_validated_like_the_file(saved):
    def corrupt(d):
        d["index"]["layer"][1]["entries"][0]["dtype"] = "float128"

    edit_meta(saved, corrupt)
    with pytest.raises(MemmapFormatError, match="float128") as info:
        load(saved)
    assert str(saved / "layer" / "meta.json") in str(info.value)


def test_a_current_record_cannot_name_a_file_outside_the_save(saved, tmp_path):
    (tmp_path / "secret.memmap").write_bytes(b"\0" * 24)

    def escape(d):
        d["index"]["layer"][1]["entries"][0]["file"] = "../../secret.memmap"

    edit_meta(saved, escape)
    with pytest.raises(UnsafePathError, match="secret"):
        load(saved)


def test_an_index_inside_a_sub_folder_record_is_ignored(saved, meta_reads):
    def plant(d):
        d["index"]["layer"][1]["index"] = {"deep": [[0, 0, 0, 0], {"bogus": True}]}

    edit_meta(saved, plant)
    assert (load(saved) == _tree()).all()
    assert meta_reads == ["."]


def test_lazy_stack_members_are_indexed(tmp_path, meta_reads):
    from td_core import LazyStackedTensorDict

    stack = LazyStackedTensorDict(
        TensorDict({"a": torch.zeros(2)}, [2]),
        TensorDict({"a": torch.ones(2), "b": torch.ones(2, 3)}, [2]),
    )
    save(stack, tmp_path / "stack")
    assert sorted(read_meta(tmp_path / "stack")["index"]) == ["0", "1"]
    back = load(tmp_path / "stack")
    assert meta_reads == ["."]
    assert isinstance(back, LazyStackedTensorDict)
    assert (back.tensordicts[1]["a"] == 1).all()


def test_threaded_load_uses_the_index_and_gives_the_same_tree(tmp_path, monkeypatch, meta_reads):
    import td_memmap._load as load_module

    monkeypatch.setattr(load_module, "MIN_SHARE", 1)  # threads even for a few folders
    tree = TensorDict(
        {f"m{i}": {"w": torch.full((3, 2), float(i)), "b": torch.arange(3)} for i in range(8)}, [3]
    )
    save(tree, tmp_path / "many", num_threads=4)
    back = load(tmp_path / "many", num_threads=4)
    assert meta_reads == ["."]
    assert (back == tree).all()
    assert [k for k in back.keys()] == [f"m{i}" for i in range(8)]
