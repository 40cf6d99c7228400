"""Packed saves in several data files (format version 3), one per writer thread."""

import os

import pytest
import saved_files as files
import torch
from saved_files import edit_meta, file_contents, meta_entry, read_meta

import td_memmap._pack_save as pack_save
from td_core import TensorDict
from td_memmap import (
    LeafSizeError,
    MemmapFormatError,
    UnsafePathError,
    append_memmap,
    load_memmap,
    pack_memmap,
    save,
)

KB = 1 << 10


def _td(value: float = 0.0) -> TensorDict:
    """Six leaves of 4 to 12 KB and a nested one, a string and an empty leaf, batch [4]."""
    td = TensorDict(
        {
            f"w{i}": torch.arange(4 * 256 * (i % 3 + 1), dtype=torch.float32).view(4, -1) + value
            for i in range(6)
        },
        batch_size=[4],
    )
    td["enc", "b"] = torch.arange(4 * 512, dtype=torch.int16).view(4, 512)
    td["e"] = torch.zeros(4, 0)
    td["s"] = "text"
    return td


@pytest.fixture
def split(monkeypatch):
    """Saves get a data file per 4 KB, on as many CPUs as they ask for."""
    monkeypatch.setattr(pack_save, "MIN_PART", 4 * KB)
    monkeypatch.setattr(pack_save, "usable_cpus", lambda: 8)
    monkeypatch.setattr(pack_save, "default_threads", lambda: 2)


@pytest.fixture
def saved(tmp_path, split):
    prefix = tmp_path / "save"
    save(_td(), prefix, num_threads=3)
    return prefix


def _leaves(meta):
    for entry in meta["entries"]:
        if entry["type"] == "tensor":
            yield entry
        elif entry["type"] == "tensordict":
            yield from _leaves(entry["meta"])


class TestLayout:
    def test_one_data_file_per_thread_listed_with_sizes(self, saved):
        meta = read_meta(saved)
        assert meta["version"] == 3
        assert meta["data"] == ["data.pack", "data.1.pack", "data.2.pack"]
        assert meta["data_size"] == [os.path.getsize(saved / n) for n in meta["data"]]
        assert sorted(os.listdir(saved)) == sorted([*meta["data"], "meta.json"])
        assert meta_entry(meta, "enc")["meta"]["version"] == 3
        parts = [entry["part"] for entry in _leaves(meta)]
        assert parts == sorted(parts) and set(parts) == {0, 1, 2}  # in order, each file used

    def test_each_leaf_lies_at_its_offset_in_its_data_file(self, saved):
        meta = read_meta(saved)
        flat = _td().flatten_keys(".")
        for entry in _leaves(meta):
            raw = (saved / meta["data"][entry["part"]]).read_bytes()
            off = entry["offset"]
            key = entry["key"] if entry["key"] != "b" else "enc.b"
            want = flat[key].numpy().tobytes()
            assert off % 64 == 0 and raw[off : off + len(want)] == want

    def test_files_hold_about_equal_shares(self, saved):
        sizes = read_meta(saved)["data_size"]
        assert max(sizes) <= 2 * min(sizes)

    def test_one_thread_or_a_small_save_is_one_data_file_version_2(self, tmp_path, split):
        save(_td(), tmp_path / "a", num_threads=0)
        save(TensorDict({"x": torch.ones(4)}, []), tmp_path / "b", num_threads=3)
        for name in ("a", "b"):
            meta = read_meta(tmp_path / name)
            assert meta["version"] == 2 and meta["data"] == "data.pack"
            assert all("part" not in e for e in _leaves(meta))

    def test_no_more_files_than_cpus(self, tmp_path, split, monkeypatch):
        monkeypatch.setattr(pack_save, "usable_cpus", lambda: 2)
        save(_td(), tmp_path / "s", num_threads=16)
        assert len(read_meta(tmp_path / "s")["data"]) == 2


class TestLoad:
    def test_loads_as_saved_each_leaf_a_view_of_its_file(self, saved):
        back = load_memmap(saved)
        assert (back == _td()).all() and back["s"] == "text"
        meta = read_meta(saved)
        for entry in _leaves(meta):
            key = entry["key"] if entry["key"] != "b" else ("enc", "b")
            assert back[key].filename == str(saved / meta["data"][entry["part"]])

    def test_writes_reach_the_right_file(self, saved):
        load_memmap(saved)["w5"][0, 0] = -5.0
        load_memmap(saved, mode="r+")["enc", "b"][1, 1] = -7
        back = load_memmap(saved)
        assert back["w5"][0, 0] == -5.0 and back["enc", "b"][1, 1] == -7
        assert back["w0"][0, 0] == 0.0

    def test_read_only_load_refuses_writes(self, saved):
        files.check_read_only_load(saved, "w4")

    def test_a_sub_tensordict_loads_alone(self, saved):
        assert (load_memmap(saved / "enc") == _td()["enc"]).all()

    def test_the_result_of_the_save_is_mapped_from_the_files(self, tmp_path, split):
        out = save(_td(), tmp_path / "s", num_threads=3)
        out["w3"][2, 2] = 99.0
        assert load_memmap(tmp_path / "s")["w3"][2, 2] == 99.0


class TestResave:
    def test_its_own_leaves_keep_their_files(self, saved):
        td = load_memmap(saved)
        inodes = {n: (saved / n).stat().st_ino for n in read_meta(saved)["data"]}
        td.memmap_(saved)
        meta = read_meta(saved)
        assert {n: (saved / n).stat().st_ino for n in meta["data"]} == inodes
        td["w1"][0, 0] = -1.0  # still the folder's leaves
        assert load_memmap(saved)["w1"][0, 0] == -1.0

    def test_new_data_goes_to_new_files_and_the_old_are_removed(self, saved):
        save(_td(1.0), saved, num_threads=3)
        meta = read_meta(saved)
        assert meta["data"] == ["data.b.pack", "data.b.1.pack", "data.b.2.pack"]
        assert sorted(os.listdir(saved)) == sorted([*meta["data"], "meta.json"])
        assert (load_memmap(saved) == _td(1.0)).all()

    def test_fewer_threads_give_version_2_and_back(self, saved):
        save(_td(2.0), saved, num_threads=0)
        assert sorted(os.listdir(saved)) == ["data.b.pack", "meta.json"]
        assert read_meta(saved)["version"] == 2
        save(_td(3.0), saved, num_threads=2)
        assert read_meta(saved)["data"] == ["data.pack", "data.1.pack"]
        assert sorted(os.listdir(saved)) == ["data.1.pack", "data.pack", "meta.json"]
        assert (load_memmap(saved) == _td(3.0)).all()

    def test_data_files_of_killed_saves_are_removed_other_files_kept(self, saved):
        for junk in ("data.b.pack", "data.b.7.pack", "data.d.3.pack"):
            (saved / junk).write_bytes(b"partial")
        (saved / "notes.txt").write_text("mine")
        (saved / "data.e.pack").write_text("not a name td gives")
        save(_td(4.0), saved, num_threads=3)
        names = sorted(os.listdir(saved))
        assert names == sorted([*read_meta(saved)["data"], "meta.json", "notes.txt", "data.e.pack"])

    def test_a_failed_write_leaves_the_previous_save_and_no_new_file(self, saved, monkeypatch):
        real = pack_save._write_pack
        before = file_contents(saved)

        def fail_on_second(path, *args):
            if path.endswith(".1.pack"):
                raise OSError(28, "No space left on device")
            real(path, *args)

        monkeypatch.setattr(pack_save, "_write_pack", fail_on_second)
        with pytest.raises(OSError, match="No space"):
            save(_td(5.0), saved, num_threads=3)
        assert file_contents(saved) == before
        assert (load_memmap(saved) == _td()).all()

    def test_append_and_archive(self, saved, tmp_path):
        append_memmap(saved, _td(6.0)[:2])
        back = load_memmap(saved)
        assert back.batch_size == (6,) and (back[4:] == _td(6.0)[:2]).all()
        pack_memmap(saved, tmp_path / "a.tdz")
        assert (load_memmap(tmp_path / "a.tdz") == back).all()


class TestTamper:
    @pytest.mark.parametrize(
        "edit, error, match",
        [
            (lambda m: meta_entry(m, "w0").update(part=3), MemmapFormatError, "part 3"),
            (lambda m: meta_entry(m, "w0").update(part=-1), MemmapFormatError, "part -1"),
            (lambda m: meta_entry(m, "w0").update(part="0"), MemmapFormatError, "part '0'"),
            (lambda m: meta_entry(m, "w0").pop("part"), MemmapFormatError, "part None"),
            (lambda m: m.update(data="data.pack"), MemmapFormatError, "list of data file"),
            (lambda m: m.update(data=[]), MemmapFormatError, "list of data file"),
            (lambda m: m["data_size"].pop(), MemmapFormatError, "one per data file"),
            (lambda m: m.update(data_size=7), MemmapFormatError, "one per data file"),
            (lambda m: m["data"].__setitem__(1, "data.pack"), MemmapFormatError, "twice"),
            (lambda m: m["data"].__setitem__(1, "../x.pack"), UnsafePathError, "plain name"),
            (lambda m: m["data"].__setitem__(1, "meta.json"), MemmapFormatError, "data file"),
            (lambda m: m["data_size"].__setitem__(2, 64), LeafSizeError, r"data\.2\.pack"),
            (
                lambda m: meta_entry(m, "w3").update(part=meta_entry(m, "w0")["part"]),
                MemmapFormatError,
                "overlap",
            ),
            (
                lambda m: meta_entry(m, "enc")["meta"].update(version=2),
                MemmapFormatError,
                "version",
            ),
            (lambda m: meta_entry(m, "w5").update(offset=1 << 20), LeafSizeError, "outside"),
        ],
    )
    def test_bad_metadata_is_refused_before_anything_is_mapped(self, saved, edit, error, match):
        edit_meta(saved, edit)
        files.check_refused_untouched(saved, error, match)

    def test_a_truncated_data_file_is_named(self, saved):
        os.truncate(saved / "data.1.pack", 64)
        with pytest.raises(LeafSizeError, match=r"data\.1\.pack"):
            load_memmap(saved)

    def test_a_data_file_linked_outside_is_refused(self, saved, tmp_path):
        files.check_link_outside_refused(saved, tmp_path / "outside.pack", "data.2.pack")

    def test_two_names_of_one_file_are_refused(self, saved):
        sizes = read_meta(saved)["data_size"]
        os.remove(saved / "data.1.pack")
        os.truncate(saved / "data.pack", sizes[1])  # so that its size matches either record
        os.link(saved / "data.pack", saved / "data.1.pack")
        edit_meta(saved, lambda m: m.update(data_size=[sizes[1], sizes[1], sizes[2]]))
        files.check_refused_untouched(saved, MemmapFormatError, "same file")

    def test_leaves_at_the_same_offset_of_two_files_do_not_overlap(self, saved):
        meta = read_meta(saved)
        first = {e["part"]: e["offset"] for e in reversed(list(_leaves(meta)))}
        assert first == dict.fromkeys(first, 0)  # each file starts with a leaf at offset 0
        assert (load_memmap(saved) == _td()).all()


class TestPlan:
    @pytest.mark.parametrize(
        "nbytes, threads, cpus, want",
        [(64 << 20, 0, 4, 1), (64 << 20, 2, 4, 2), (64 << 20, 8, 4, 4), (20 << 20, 8, 4, 1)],
    )
    def test_part_count(self, monkeypatch, nbytes, threads, cpus, want):
        monkeypatch.setattr(pack_save, "usable_cpus", lambda: cpus)
        assert pack_save.part_count(nbytes, threads) == want

    def test_the_default_is_default_threads(self, monkeypatch):
        monkeypatch.setattr(pack_save, "usable_cpus", lambda: 4)
        monkeypatch.setattr(pack_save, "default_threads", lambda: 0)  # one CPU
        assert pack_save.part_count(1 << 30, None) == 1
        monkeypatch.setattr(pack_save, "default_threads", lambda: 3)
        assert pack_save.part_count(1 << 30, None) == 3

    @pytest.mark.parametrize(
        "sizes, count, parts",
        [
            ([32] * 8, 2, [0, 0, 0, 0, 1, 1, 1, 1]),
            ([200, 10, 10], 2, [0, 1, 1]),
            ([10, 10, 200], 2, [0, 0, 0]),  # one file: the big leaf is not cut
            ([0, 64, 0, 64, 0], 2, [0, 0, 0, 1, 1]),
            ([64, 64], 5, [0, 1]),
        ],
    )
    def test_lay_out_cuts_the_leaves_in_order(self, sizes, count, parts):
        got, offsets, totals = pack_save._lay_out(sizes, count)
        assert got == parts and len(totals) == max(parts) + 1
        for part in range(len(totals)):  # each file: its leaves back to back, aligned
            mine = [(o, n) for p, o, n in zip(got, offsets, sizes) if p == part]
            assert any(n for _, n in mine)
            at = 0
            for offset, n in mine:
                assert offset == at and offset % 64 == 0
                at = -(-(at + n) // 64) * 64
            assert totals[part] == at


class TestOptions:
    def test_durable_fsyncs_every_data_file(self, tmp_path, split, monkeypatch):
        synced = []
        real = os.fsync

        def fsync(fd):
            synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
            return real(fd)

        if not os.path.isdir("/proc/self/fd"):
            pytest.skip("needs /proc/self/fd to name the file synced")
        monkeypatch.setattr(os, "fsync", fsync)
        save(_td(), tmp_path / "s", num_threads=3, durable=True)
        assert {"data.pack", "data.1.pack", "data.2.pack"} <= set(synced)
        assert (load_memmap(tmp_path / "s") == _td()).all()

    def test_return_early_gives_the_split_save(self, tmp_path, split):
        future = _td().memmap(tmp_path / "s", num_threads=3, return_early=True)
        out = future.result()
        assert (out == _td()).all() and len(read_meta(tmp_path / "s")["data"]) == 3

    def test_memmap_like_writes_nothing_and_is_one_sparse_file(self, tmp_path, split):
        out = _td().memmap_like(tmp_path / "s", num_threads=3)
        meta = read_meta(tmp_path / "s")
        assert meta["version"] == 2 and (out["w5"] == 0).all()

    def test_load_with_threads(self, saved):
        assert (load_memmap(saved, num_threads=4) == _td()).all()
