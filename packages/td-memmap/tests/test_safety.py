import hashlib
import json
import os
import signal
import sys

import numpy as np
import pytest
import torch
from saved_files import check_folder_in_place_of, edit_meta, meta_entry, saved_in

from td_core import NonTensorData, TensorDict
from td_memmap import (
    IncompleteSaveError,
    LeafSizeError,
    MemmapFormatError,
    MissingLeafError,
    PickleNotAllowedError,
    UnsafePathError,
    load,
)
from td_memmap import save as _save


def save(td, prefix, **kwargs):
    """This file checks the files layout (version 1); test_packed.py checks the packed one."""
    return _save(td, prefix, layout="files", **kwargs)


def _td() -> TensorDict:
    td = TensorDict(
        {"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.ones(3, dtype=torch.int64)}},
        batch_size=[3],
    )
    td["s"] = "text"
    return td


def _snapshot(root) -> dict[str, tuple[int, int, str]]:
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            st = os.stat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, digest)
    return out


@pytest.fixture
def saved(tmp_path):
    return saved_in(tmp_path, _td(), layout="files")


class TestLoadNeverWrites:
    @pytest.mark.parametrize("mode", [None, "r", "r+"])
    def test_loading_leaves_every_file_unchanged(self, saved, mode):
        before = _snapshot(saved)  # sizes, mtimes and contents
        back = load(saved, mode=mode, num_threads=2)
        assert back["a"].sum().item() == 15 and back["n", "b"].tolist() == [1, 1, 1]
        del back
        assert _snapshot(saved) == before

    def test_default_load_writes_through_to_the_files(self, saved):
        back = load(saved)
        back["a"].add_(100)
        back["n", "b"][1] = 7
        again = load(saved)
        assert again["a"][0, 0].item() == 100
        assert again["n", "b"].tolist() == [1, 7, 1]

    def test_writable_mapping_writes_through(self, saved):
        back = load(saved, mode="r+")
        back["a"][0, 0] = -5.0
        assert load(saved)["a"][0, 0].item() == -5.0

    def test_loads_from_a_read_only_folder(self, saved):
        for folder, _, files in os.walk(saved):
            for name in files:
                os.chmod(os.path.join(folder, name), 0o444)
        before = _snapshot(saved)
        assert load(saved)["n", "b"].tolist() == [1, 1, 1]
        assert _snapshot(saved) == before


class TestBrokenLeaves:
    def test_missing_leaf_raises_naming_the_file(self, saved):
        os.unlink(saved / "n" / "b.memmap")
        with pytest.raises(MissingLeafError, match=r"b\.memmap") as info:
            load(saved)
        assert isinstance(info.value, FileNotFoundError)
        with pytest.raises(MissingLeafError):
            load(saved / "n")

    @pytest.mark.parametrize("size", [0, 5, 24 + 8])
    def test_wrong_size_raises_and_is_not_regrown(self, saved, size):
        path = saved / "a.memmap"
        path.write_bytes(path.read_bytes()[:size].ljust(size, b"\0"))
        with pytest.raises(LeafSizeError, match=rf"a\.memmap.*{size} bytes.*needs 24"):
            load(saved)
        with pytest.raises(LeafSizeError):
            load(saved, mode="r+")
        assert path.stat().st_size == size

    def test_leaf_that_is_a_folder(self, saved):
        check_folder_in_place_of(saved, "a.memmap")


class TestBrokenMetadata:
    def test_missing(self, saved):
        os.unlink(saved / "meta.json")
        with pytest.raises(IncompleteSaveError, match=r"meta\.json.*not found") as info:
            load(saved)
        assert isinstance(info.value, FileNotFoundError)

    def test_missing_folder(self, tmp_path):
        with pytest.raises(IncompleteSaveError, match="not a folder"):
            load(tmp_path / "nothing")

    @pytest.mark.parametrize(
        "content",
        [
            b"",
            b"{",
            b'{"format": "td-memmap", "version": 1',
            b"not json",
            b"\xff\xfe",
            b"[1, 2]",
            b'{"a": NaN}',
        ],
    )
    def test_truncated_or_invalid(self, saved, content):
        (saved / "meta.json").write_bytes(content)
        with pytest.raises(MemmapFormatError, match=r"meta\.json"):
            load(saved)

    def test_truncated_real_metadata(self, saved):
        raw = (saved / "meta.json").read_bytes()
        for cut in (1, len(raw) // 2, len(raw) - 3):
            (saved / "meta.json").write_bytes(raw[:cut])
            with pytest.raises(MemmapFormatError, match=r"meta\.json"):
                load(saved)

    @pytest.mark.parametrize(
        ("edit", "message"),
        [
            (lambda m: m.update(format="other"), "'format'"),
            (lambda m: m.update(version=99), "newer"),
            (lambda m: m.update(version="1"), "'version'"),
            (lambda m: m.update(kind="Evil"), "'kind'"),
            (lambda m: m.update(byteorder="middle"), "byteorder"),
            (lambda m: m.update(batch_size=[-1]), "batch_size"),
            (lambda m: m.update(device="warp-drive"), "device"),
            (lambda m: m.update(device="cuda:0"), "expected null or 'cpu'"),
            (lambda m: m.update(entries={"a": 1}), "entries"),
            (lambda m: meta_entry(m, "a").update(dtype="float128"), "unknown dtype 'float128'"),
            (lambda m: meta_entry(m, "a").update(dtype="torch.float32"), "unknown dtype"),
            (lambda m: meta_entry(m, "a").update(shape=[3, 3]), r"a\.memmap.*24 bytes.*needs 36"),
            (lambda m: meta_entry(m, "a").update(shape=[3, "2"]), "shape"),
            (lambda m: meta_entry(m, "a").update(shape=[2, 3]), "does not start with batch_size"),
            (lambda m: meta_entry(m, "a").update(type="mystery"), "unknown type"),
            (lambda m: meta_entry(m, "s").update(encoding="yaml"), "unknown encoding"),
            (
                lambda m: meta_entry(m, "s").update(value={"$td": "exec", "v": "rm -rf"}),
                "bad value",
            ),
            (lambda m: m["entries"].append(dict(m["entries"][0])), "twice"),
            (lambda m: m["entries"].append({"key": 3, "type": "tensor"}), "not a string"),
        ],
    )
    def test_invalid_fields(self, saved, edit, message):
        edit_meta(saved, edit)
        with pytest.raises(MemmapFormatError, match=message) as info:
            load(saved)
        assert str(saved / "meta.json") in str(info.value)

    @pytest.mark.parametrize(
        "name",
        ["../a.memmap", "/etc/passwd", "n/b.memmap", "..", ".", "", "a\x00.memmap", ".hidden"],
    )
    def test_file_outside_the_folder(self, saved, name):
        edit_meta(saved, lambda m: meta_entry(m, "a").update(file=name))
        with pytest.raises(UnsafePathError, match="not a plain name"):
            load(saved)

    @pytest.mark.parametrize("name", ["..", ".", "/tmp", "../save", "n/.."])
    def test_folder_outside_the_folder(self, saved, name):
        edit_meta(saved, lambda m: meta_entry(m, "n").update(dir=name))
        with pytest.raises(UnsafePathError):
            load(saved)

    def test_symlinked_leaf_leaving_the_save(self, saved, tmp_path):
        secret = tmp_path / "secret.memmap"
        secret.write_bytes(b"\0" * 24)
        os.unlink(saved / "a.memmap")
        os.symlink(secret, saved / "a.memmap")
        with pytest.raises(UnsafePathError, match="leaves the saved folder"):
            load(saved)

    def test_symlinked_folder_cycle(self, saved):
        os.symlink(saved, saved / "loop")
        edit_meta(saved, lambda m: meta_entry(m, "n").update(dir="loop"))
        with pytest.raises(UnsafePathError, match="strictly inside"):
            load(saved)

    def test_endless_nesting_is_refused(self, tmp_path):
        folder = tmp_path / "deep"
        folder.mkdir()
        root = folder
        for _ in range(205):
            meta = {
                "format": "td-memmap",
                "version": 1,
                "kind": "TensorDict",
                "byteorder": sys.byteorder,
                "batch_size": [],
                "device": None,
                "entries": [{"key": "d", "type": "tensordict", "dir": "d"}],
            }
            (folder / "meta.json").write_text(json.dumps(meta))
            folder = folder / "d"
            folder.mkdir()
        with pytest.raises(UnsafePathError, match="nested more than"):
            load(root)

    def test_nested_error_names_the_nested_file(self, saved):
        edit_meta(saved / "n", lambda m: meta_entry(m, "b").update(dtype="int13"))
        with pytest.raises(MemmapFormatError, match=r"n/meta\.json.*int13"):
            load(saved)


class _Marker:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class TestPickleOptIn:
    def test_save_refuses_values_without_json(self, tmp_path):
        td = TensorDict(batch_size=[])
        td["s"] = NonTensorData({1, 2})
        with pytest.raises(PickleNotAllowedError, match=r"'s'.*allow_pickle=True"):
            save(td, tmp_path / "x")
        assert not (tmp_path / "x").exists()  # refused before touching the disk

    def test_pickle_needs_opt_in_on_both_sides(self, tmp_path):
        td = TensorDict(batch_size=[])
        td["s"] = NonTensorData({1, 2})
        save(td, tmp_path / "x", allow_pickle=True)
        with pytest.raises(PickleNotAllowedError, match=r"pickle.*allow_pickle=True"):
            load(tmp_path / "x")
        with pytest.raises(PickleNotAllowedError):
            TensorDict.load_memmap(tmp_path / "x")
        assert load(tmp_path / "x", allow_pickle=True)["s"] == {1, 2}

    def test_refusal_is_the_runtime_error_upstream_raises(self, tmp_path):
        td = TensorDict(batch_size=[])
        td["s"] = NonTensorData({1, 2})
        with pytest.raises(RuntimeError, match="allow_pickle=True"):
            save(td, tmp_path / "x")
        td.memmap_(tmp_path / "y", allow_pickle=True)
        with pytest.raises(RuntimeError, match="allow_pickle=True"):
            TensorDict.load_memmap(tmp_path / "y", allow_pickle=False)
        with pytest.raises(RuntimeError, match="allow_pickle=True"):
            td.memmap_refresh_(allow_pickle=False)
        assert issubclass(PickleNotAllowedError, ValueError)

    @pytest.mark.parametrize("flag", [0, 1, "yes", np.bool_(True)], ids=repr)
    def test_allow_pickle_must_be_a_real_bool(self, tmp_path, flag):
        td = TensorDict(batch_size=[])
        td["s"] = NonTensorData({1, 2})
        save(td, tmp_path / "x", allow_pickle=True)
        with pytest.raises(TypeError, match="allow_pickle must be a bool or None"):
            TensorDict.load_memmap(tmp_path / "x", allow_pickle=flag)

    def test_no_code_runs_without_opt_in(self, tmp_path):
        marker = tmp_path / "pwned"
        td = TensorDict(batch_size=[])
        td["s"] = NonTensorData(_Marker(str(marker)))
        save(td, tmp_path / "x", allow_pickle=True)
        with pytest.raises(PickleNotAllowedError):
            load(tmp_path / "x")
        assert not marker.exists()


class TestKeysStayInside:
    @pytest.mark.parametrize(
        "key", ["../evil", "a/b", "\x00", "..", ".", "/abs", "meta.json", "x" * 300]
    )
    def test_hostile_key(self, tmp_path, key):
        prefix = tmp_path / "save"
        td = TensorDict({key: torch.ones(2), "sub": {key: torch.zeros(2)}}, batch_size=[2])
        save(td, prefix)
        assert sorted(os.listdir(tmp_path)) == ["save"]
        for folder, _, files in os.walk(prefix):
            for name in files:
                assert os.path.commonpath([os.path.join(folder, name), str(prefix)]) == str(prefix)
        back = load(prefix)
        assert back[key].tolist() == [1.0, 1.0] and back["sub", key].tolist() == [0.0, 0.0]


class TestCrash:
    def test_sigkill_during_save_keeps_the_previous_save(self, tmp_path, kill_mid_save):
        prefix = tmp_path / "save"
        save(_td(), prefix)  # a complete earlier save, overwritten by the killed one
        assert kill_mid_save(prefix, "leaf0.memmap") == -signal.SIGKILL
        assert (load(prefix) == _td()).all()  # the previous save, intact
        td = TensorDict(
            {f"leaf{i}": torch.full((1 << 10,), float(i)) for i in range(20)}, batch_size=[]
        )
        save(td, prefix)
        back = load(prefix)
        assert [back[f"leaf{i}"][0].item() for i in range(20)] == [float(i) for i in range(20)]
        assert set(back.keys()) == set(td.keys())
        leftovers = [n for n in os.listdir(prefix) if n.startswith(".")]
        assert leftovers == []  # the dead save's temporary files were cleaned up

    def test_failed_planning_leaves_the_earlier_save_intact(self, tmp_path):
        prefix = tmp_path / "save"
        save(_td(), prefix)
        td = _td()
        td["bad"] = NonTensorData(object())  # refused while planning, before any write
        with pytest.raises(PickleNotAllowedError):
            save(td, prefix)
        assert load(prefix)["s"] == "text"

    def test_save_failing_part_way_keeps_the_previous_save(self, tmp_path):
        prefix = tmp_path / "save"
        save(_td(), prefix)
        os.mkdir(prefix / "zz.memmap")  # the last leaf cannot be written: an I/O error mid-save
        td = TensorDict({"a": torch.zeros(3, 2), "zz": torch.zeros(3)}, [3])
        with pytest.raises(OSError):
            save(td, prefix)
        assert (load(prefix) == _td()).all()
        assert [n for n in os.listdir(prefix) if n.startswith(".")] == []  # no temporary files left
        os.rmdir(prefix / "zz.memmap")
        save(td, prefix)
        assert set(load(prefix).keys()) == {"a", "zz"}


class TestOddMetadataFiles:
    def test_a_fifo_is_refused_without_blocking(self, saved):
        os.unlink(saved / "n" / "meta.json")
        os.mkfifo(saved / "n" / "meta.json")
        with pytest.raises(MemmapFormatError, match="not a regular file"):
            load(saved)

    def test_a_folder_is_refused(self, saved):
        os.unlink(saved / "n" / "meta.json")
        os.mkdir(saved / "n" / "meta.json")
        with pytest.raises(MemmapFormatError, match="not a regular file"):
            load(saved)

    def test_a_link_inside_the_save_is_followed(self, saved):
        os.rename(saved / "n" / "meta.json", saved / "n" / "real-meta.json")
        os.symlink("real-meta.json", saved / "n" / "meta.json")
        assert load(saved)["n", "b"].tolist() == [1, 1, 1]

    def test_a_link_leaving_the_save_is_refused(self, saved, tmp_path):
        os.rename(saved / "n" / "meta.json", tmp_path / "outside.json")
        os.symlink(tmp_path / "outside.json", saved / "n" / "meta.json")
        with pytest.raises(UnsafePathError, match="leaves the saved folder"):
            load(saved)

    @pytest.mark.parametrize("num_threads", [0, 4])
    def test_many_folders_with_threads(self, tmp_path, num_threads):
        td = TensorDict({f"m{i}": {"w": torch.full((2,), float(i))} for i in range(600)}, [2])
        save(td, tmp_path / "many")
        (tmp_path / "many" / "m599" / "w.memmap").write_bytes(b"\0")
        with pytest.raises(LeafSizeError, match=r"m599/w\.memmap"):
            load(tmp_path / "many", num_threads=num_threads)
        save(td, tmp_path / "many")
        back = load(tmp_path / "many", num_threads=num_threads)
        assert [back[f"m{i}", "w"][0].item() for i in range(600)] == [float(i) for i in range(600)]
