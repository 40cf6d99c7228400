"""The packed layout (format version 2): one data file and one meta.json for the whole tree."""

import os
import signal

import pytest
import torch
from saved_files import (
    check_folder_in_place_of,
    check_link_outside_refused,
    check_read_only_load,
    check_refused_untouched,
    edit_meta,
    file_contents,
    meta_entry,
    read_meta,
    saved_in,
)

import td_memmap
from td_core import TensorDict, UnbatchedTensor, lazy_stack
from td_memmap import (
    IncompleteSaveError,
    LeafSizeError,
    MemmapFormatError,
    MemoryMappedTensor,
    UnsafePathError,
    append_memmap,
    load_memmap,
    pack_memmap,
    save,
)


def _td() -> TensorDict:
    td = TensorDict(
        {
            "a": torch.arange(6.0).view(3, 2),
            "enc": {"w": torch.ones(3, 4, dtype=torch.int16), "deep": {"b": torch.arange(3)}},
            "e": torch.zeros(3, 0),
        },
        batch_size=[3],
    )
    td["s"] = "text"
    return td


@pytest.fixture
def saved(tmp_path):
    return saved_in(tmp_path, _td())


class TestLayout:
    def test_a_fresh_save_is_one_data_file_and_one_meta_json(self, saved):
        assert sorted(os.listdir(saved)) == ["data.pack", "meta.json"]
        meta = read_meta(saved)
        assert meta["version"] == 2 and meta["data"] == "data.pack"
        assert meta["data_size"] == os.path.getsize(saved / "data.pack")
        a = meta_entry(meta, "a")
        w = meta_entry(meta_entry(meta, "enc")["meta"], "w")
        assert "file" not in a and a["offset"] % 64 == 0 and w["offset"] % 64 == 0
        raw = (saved / "data.pack").read_bytes()
        assert raw[a["offset"] : a["offset"] + 24] == _td()["a"].numpy().tobytes()

    def test_loads_as_saved_with_each_leaf_a_view_of_the_data_file(self, saved):
        back = load_memmap(saved)
        assert (back == _td()).all() and back["s"] == "text"
        leaf = back["enc", "deep", "b"]
        assert isinstance(leaf, MemoryMappedTensor)
        assert leaf.filename == str(saved / "data.pack")

    def test_default_and_r_plus_loads_write_through(self, saved):
        load_memmap(saved)["a"][0, 0] = 41.0
        load_memmap(saved, mode="r+")["enc", "w"][1] = 7
        back = load_memmap(saved)
        assert back["a"][0, 0] == 41.0 and back["enc", "w"][1].tolist() == [7] * 4

    def test_read_only_load_refuses_writes(self, saved):
        check_read_only_load(saved, "a")

    def test_lazy_stacks_and_like(self, tmp_path):
        stack = lazy_stack([TensorDict({"x": torch.ones(2)}), TensorDict({"x": torch.ones(5)})])
        save(stack, tmp_path / "files")  # by default members are sub-folders, as upstream's
        assert sorted(os.listdir(tmp_path / "files")) == ["0", "1", "meta.json"]
        save(TensorDict({"st": stack}), tmp_path / "nested")
        assert (tmp_path / "nested" / "st" / "1" / "meta.json").exists()
        save(stack, tmp_path / "s", layout="packed")
        assert sorted(os.listdir(tmp_path / "s")) == ["data.pack", "meta.json"]
        save(stack, tmp_path / "s")  # a re-save keeps the layout
        assert read_meta(tmp_path / "s")["version"] == 2
        assert load_memmap(tmp_path / "s" / "1")["x"].shape == (5,)
        like = td_memmap.memmap_like(_td(), tmp_path / "like")
        assert like["a"].sum() == 0 and load_memmap(tmp_path / "like")["enc", "w"].shape == (3, 4)

    def test_like_stays_sparse(self, tmp_path):
        proto = TensorDict({"x": torch.zeros(4 << 20, dtype=torch.uint8)}, [])
        like = td_memmap.memmap_like(proto, tmp_path / "like")
        assert like["x"].sum() == 0
        st = os.stat(tmp_path / "like" / "data.pack")
        assert st.st_size >= 4 << 20 and st.st_blocks * 512 < st.st_size

    def test_unbatched_leaves_and_odd_dtypes(self, tmp_path):
        td = TensorDict({"n": {"u": UnbatchedTensor(torch.ones(7, 11))}}, [3])
        td["c"] = torch.ones(3, 4, dtype=torch.float16).view(torch.complex32)  # no warning
        td["b"] = torch.tensor([True, False, True])
        save(td, tmp_path / "u")
        entry = meta_entry(meta_entry(read_meta(tmp_path / "u"), "n")["meta"], "u")
        assert entry["unbatched"] is True and entry["shape"] == [7, 11]
        back = load_memmap(tmp_path / "u")
        assert type(back.get(("n", "u"))) is UnbatchedTensor
        assert back["c"].dtype == torch.complex32 and back["b"].tolist() == [True, False, True]

    def test_files_layout_on_request_and_for_pickles(self, tmp_path):
        save(_td(), tmp_path / "f", layout="files")
        assert read_meta(tmp_path / "f")["version"] == 1 and (tmp_path / "f" / "enc").is_dir()
        td = _td()
        td["o"] = {1, 2}  # no JSON form: a pickle, which needs a file of its own
        save(td, tmp_path / "p", allow_pickle=True)
        assert read_meta(tmp_path / "p")["version"] == 1
        with pytest.raises(ValueError, match="layout='files'"):
            save(td, tmp_path / "q", allow_pickle=True, layout="packed")
        with pytest.raises(ValueError, match="layout must be"):
            save(_td(), tmp_path / "r", layout="zip")


class TestSubtree:
    def test_a_sub_tensordict_loads_by_its_path(self, saved):
        assert (load_memmap(saved / "enc") == _td()["enc"]).all()
        assert load_memmap(saved / "enc" / "deep")["b"].tolist() == [0, 1, 2]
        sub = load_memmap(saved / "enc", mode="r+")
        sub["w"][0] = 3
        assert load_memmap(saved)["enc", "w"][0].tolist() == [3] * 4

    def test_a_path_the_save_lacks_is_not_a_save(self, saved):
        for missing in (saved / "nope", saved / "enc" / "nope", saved / "a", saved / "s" / "x"):
            with pytest.raises(IncompleteSaveError):
                load_memmap(missing)

    def test_the_walk_up_stops_at_an_existing_folder(self, saved):
        os.mkdir(saved / "enc")  # a real folder without a save: nothing to walk up from
        with pytest.raises(IncompleteSaveError):
            load_memmap(saved / "enc" / "deep")

    def test_saving_a_sub_tensordict_alone_into_its_path_is_refused(self, saved):
        before = file_contents(saved)
        with pytest.raises(ValueError, match="written whole"):
            save(load_memmap(saved / "enc").clone(), saved / "enc")
        assert file_contents(saved) == before and not (saved / "enc").exists()

    def test_a_files_layout_save_above_is_not_used(self, tmp_path):
        save(_td(), tmp_path / "f", layout="files")
        with pytest.raises(IncompleteSaveError):
            load_memmap(tmp_path / "f" / "nope")


class TestTamper:
    def test_truncated_or_grown_data_file(self, saved):
        size = os.path.getsize(saved / "data.pack")
        for new in (size - 64, size + 64):
            os.truncate(saved / "data.pack", new)
            with pytest.raises(LeafSizeError, match=r"data\.pack"):
                load_memmap(saved)

    @pytest.mark.parametrize(
        "edit, error, match",
        [
            (lambda m: meta_entry(m, "a").update(offset=1 << 20), LeafSizeError, "outside"),
            (lambda m: meta_entry(m, "a").update(offset=8), MemmapFormatError, "multiple of 64"),
            (lambda m: meta_entry(m, "a").update(offset=-64), MemmapFormatError, "offset"),
            (lambda m: meta_entry(m, "a").update(offset="0"), MemmapFormatError, "offset"),
            (
                lambda m: meta_entry(meta_entry(m, "enc")["meta"], "w").update(offset=0),
                MemmapFormatError,
                "overlap",
            ),
            (lambda m: meta_entry(m, "a").update(dtype="evil"), MemmapFormatError, "dtype"),
            (lambda m: meta_entry(m, "a").update(shape=[3, 1 << 40]), LeafSizeError, "outside"),
            (lambda m: meta_entry(m, "a").update(shape=[3, -2]), MemmapFormatError, "shape"),
            (lambda m: m.update(data="../data.pack"), UnsafePathError, "plain name"),
            (lambda m: m.update(data="meta.json"), MemmapFormatError, "data file"),
            (lambda m: m.update(data_size=None), MemmapFormatError, "data_size"),
            (lambda m: m.update(version=4), MemmapFormatError, "newer"),
            (lambda m: m.update(version=3), MemmapFormatError, "list of data file names"),
            (lambda m: meta_entry(m, "a").update(part=0), MemmapFormatError, "only version 3"),
            (
                lambda m: meta_entry(m, "enc")["meta"].update(version=1),
                MemmapFormatError,
                "version",
            ),
            (
                lambda m: meta_entry(m, "enc")["meta"].update(data="data.pack"),
                MemmapFormatError,
                "version",
            ),
            (lambda m: meta_entry(m, "enc").update(dir="../x"), UnsafePathError, "plain name"),
            (lambda m: meta_entry(m, "enc").update(meta=None), MemmapFormatError, "JSON object"),
            (
                lambda m: meta_entry(m, "s").update(encoding="pickle", file="data.pack"),
                MemmapFormatError,
                "plain JSON only",
            ),
            (
                lambda m: meta_entry(m, "s").update(shared="data.pack"),
                MemmapFormatError,
                "JSON only",
            ),
            (
                lambda m: meta_entry(meta_entry(m, "enc")["meta"], "w").update(dtype="float64"),
                MemmapFormatError,
                "overlap",
            ),
        ],
    )
    def test_bad_metadata_is_refused_before_anything_is_mapped(self, saved, edit, error, match):
        edit_meta(saved, edit)
        check_refused_untouched(saved, error, match)

    def test_a_data_file_linked_outside_is_refused(self, saved, tmp_path):
        check_link_outside_refused(saved, tmp_path / "outside.pack", "data.pack")

    def test_a_data_file_that_is_a_folder(self, saved):
        check_folder_in_place_of(saved, "data.pack")


class TestResave:
    def test_saving_its_own_leaves_again_rewrites_only_the_metadata(self, saved):
        td = load_memmap(saved)
        before = (saved / "data.pack").stat().st_ino
        td.memmap_(saved)
        assert sorted(os.listdir(saved)) == ["data.pack", "meta.json"]
        assert (saved / "data.pack").stat().st_ino == before
        td["a"][1, 1] = -1.0  # still the folder's leaves
        assert load_memmap(saved)["a"][1, 1] == -1.0

    def test_new_data_goes_to_a_new_data_file(self, saved):
        td = _td()
        td["a"] += 10
        out = save(td, saved)
        assert sorted(os.listdir(saved)) == ["data.b.pack", "meta.json"]
        assert out["a"].filename == str(saved / "data.b.pack")
        assert (load_memmap(saved) == td).all()
        save(_td(), saved)
        assert sorted(os.listdir(saved)) == ["data.pack", "meta.json"]

    def test_a_failed_save_leaves_the_previous_save_and_its_files(self, saved, monkeypatch):
        before = file_contents(saved)

        def fail(fd, batch):
            raise OSError("disk full")

        monkeypatch.setattr("td_memmap._pack_save._write_batch", fail)
        td = _td()
        td["a"] += 1
        with pytest.raises(OSError, match="disk full"):
            save(td, saved)
        assert file_contents(saved) == before and (load_memmap(saved) == _td()).all()

    def test_a_planted_link_is_replaced_not_followed(self, saved, tmp_path):
        outside = tmp_path / "outside"
        outside.write_bytes(b"keep")
        os.symlink(outside, saved / "data.b.pack")
        td = _td()
        td["a"] += 1
        save(td, saved)
        assert outside.read_bytes() == b"keep" and not os.path.islink(saved / "data.b.pack")
        assert (load_memmap(saved) == td).all()

    def test_a_resave_leaves_folders_at_sub_tensordict_paths_alone(self, saved):
        other = saved / "enc"  # not part of the packed save: someone else's folder
        other.mkdir()
        (other / "meta.json").write_text("{}")
        (other / "data.pack").write_bytes(b"theirs")
        td = _td()
        td["a"] += 1
        save(td, saved)
        assert (other / "meta.json").read_text() == "{}"
        assert (other / "data.pack").read_bytes() == b"theirs"

    def test_a_files_layout_save_is_resaved_as_files(self, tmp_path):
        save(_td(), tmp_path / "f", layout="files")
        save(_td(), tmp_path / "f")
        assert read_meta(tmp_path / "f")["version"] == 1

    def test_converting_between_layouts(self, saved):
        save(load_memmap(saved), saved, layout="files")
        assert read_meta(saved)["version"] == 1 and not (saved / "data.pack").exists()
        assert (load_memmap(saved) == _td()).all()
        save(load_memmap(saved), saved, layout="packed")
        assert sorted(os.listdir(saved)) == ["data.pack", "meta.json"]
        assert (load_memmap(saved) == _td()).all()


class TestOtherOperations:
    def test_append(self, saved):
        before = file_contents(saved)
        with pytest.raises(ValueError):
            append_memmap(saved, TensorDict({"a": torch.zeros(1, 2)}, [1]))
        assert file_contents(saved) == before  # refused rows change nothing
        rows = _td()[:1].clone()
        append_memmap(saved, rows)
        back = load_memmap(saved)
        assert back.batch_size == (4,) and read_meta(saved)["version"] == 2
        assert back["enc", "deep", "b"].tolist() == [0, 1, 2, 0]

    def test_an_append_failing_part_way_leaves_the_previous_save(self, saved, monkeypatch):
        before = file_contents(saved)

        def fail(fd, batch):
            raise OSError("disk full")

        monkeypatch.setattr("td_memmap._pack_save._write_batch", fail)
        with pytest.raises(OSError, match="disk full"):
            append_memmap(saved, _td()[:1].clone())
        assert file_contents(saved) == before and load_memmap(saved).batch_size == (3,)

    def test_make_memmap_on_the_whole_save(self, saved):
        td = load_memmap(saved)
        leaf = td.make_memmap(("enc", "new"), (3, 2))
        leaf.fill_(5.0)
        assert load_memmap(saved)["enc", "new"].sum() == 30.0
        assert (load_memmap(saved)["a"] == _td()["a"]).all()

    def test_make_memmap_on_a_locked_saved_tensordict_keeps_its_locks(self, tmp_path):
        td = save(_td(), tmp_path / "s")  # locked, as memmap gives it
        td.make_memmap_from_tensor(("enc", "x"), torch.arange(3))
        td.make_memmap_from_storage(("enc", "y"), torch.ones(6).untyped_storage(), (3, 2))
        assert td.is_locked and td["enc"].is_locked
        assert td["enc", "x"].filename == td["a"].filename  # one data file
        back = load_memmap(tmp_path / "s")
        assert back["enc", "x"].tolist() == [0, 1, 2] and back["enc", "y"].sum() == 6
        assert (back["a"] == _td()["a"]).all()
        unlocked = load_memmap(tmp_path / "s")
        unlocked.make_memmap("z", (3,))
        assert not unlocked.is_locked

    def test_an_unknown_class_error_names_the_sub_tensordict(self, saved):
        edit_meta(
            saved,
            lambda m: meta_entry(m, "enc")["meta"].update(
                {"kind": "tensorclass", "class": "nowhere:C"}
            ),
        )
        with pytest.raises(
            td_memmap.UnknownClassError, match=r"meta\.json' \(sub-TensorDict 'enc'\)"
        ):
            load_memmap(saved)

    def test_make_memmap_on_a_sub_tensordict_is_refused(self, saved):
        sub = load_memmap(saved / "enc")
        with pytest.raises(RuntimeError, match="packed save"):
            sub.make_memmap("new", (3,))
        assert "new" not in load_memmap(saved)["enc"].keys()

    def test_pack_memmap_of_a_packed_save(self, saved, tmp_path):
        archive = pack_memmap(saved, tmp_path / "x.tdz")
        assert (load_memmap(archive) == _td()).all()
        assert sorted(os.listdir(saved)) == ["data.pack", "meta.json"]  # the folder untouched
        assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def _large(value: float) -> TensorDict:
    return TensorDict(
        {f"t{i}": torch.full((1 << 20,), value + i) for i in range(7)}
        | {"sub": {"a": torch.full((3 << 18,), value), "b": torch.arange(5)}},
        [],
    )


class TestLargeLeaves:
    @pytest.mark.parametrize("num_threads", [0, 2, 4, None])
    def test_any_num_threads_gives_the_same_save(self, tmp_path, num_threads):
        td = _large(1.0)
        out = save(td, tmp_path / "s", num_threads=num_threads)
        back = load_memmap(tmp_path / "s")
        assert (out == td).all() and (back == td).all()
        assert sorted(os.listdir(tmp_path / "s")) == ["data.pack", "meta.json"]

    def test_a_write_failing_part_way_fails_the_save_and_keeps_the_previous(
        self, tmp_path, monkeypatch
    ):
        save(_large(1.0), tmp_path / "s")
        before = file_contents(tmp_path / "s")
        real, calls = td_memmap._pack_save._write_batch, []

        def flaky(fd, batch):
            calls.append(1)
            if len(calls) == 3:
                raise OSError("disk full")
            real(fd, batch)

        monkeypatch.setattr("td_memmap._pack_save._write_batch", flaky)
        with pytest.raises(OSError, match="disk full"):
            save(_large(5.0), tmp_path / "s", num_threads=2)
        assert file_contents(tmp_path / "s") == before
        assert (load_memmap(tmp_path / "s") == _large(1.0)).all()


def test_a_short_write_is_completed(tmp_path, monkeypatch):
    real = os.pwritev

    def short(fd, buffers, offset):  # the kernel may write less than asked (~2 GB a call)
        return real(fd, buffers[:1], offset) // 2

    monkeypatch.setattr(os, "pwritev", short)
    td = TensorDict({f"l{i}": torch.arange(10 + i, dtype=torch.uint8) for i in range(5)}, [])
    save(td, tmp_path / "s")
    assert (load_memmap(tmp_path / "s") == td).all()


def test_sigkill_during_a_packed_save_keeps_the_previous_save(tmp_path, kill_mid_save):
    root = tmp_path / "save"
    save(_td(), root)
    assert kill_mid_save(root, "data.b.pack") == -signal.SIGKILL
    assert (load_memmap(root) == _td()).all()  # the previous save, intact
    td = TensorDict({f"leaf{i}": torch.full((4,), float(i)) for i in range(20)}, batch_size=[])
    save(td, root)  # the dead save's data file is replaced
    assert (load_memmap(root) == td).all()
    assert sorted(os.listdir(root)) == ["data.b.pack", "meta.json"]
