"""share_non_tensor=True: non-tensor values that every process sees, through files."""

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from td_core import NonTensorData, NonTensorStack, TensorDict, lazy_stack
from td_memmap import (
    MemmapFormatError,
    MissingLeafError,
    SharedNonTensorData,
    SharedNonTensorStack,
    UnsafePathError,
    load_memmap,
    memmap,
    memmap_,
)


def _td() -> TensorDict:
    td = TensorDict({"x": torch.zeros(2), "sub": {"y": torch.ones(2)}}, [2])
    td["mode"] = "train"
    td["sub", "cfg"] = NonTensorData({"lr": 0.1, "sizes": (64, 64)}, batch_size=[2])
    td["names"] = NonTensorStack.from_list(["a", "b"])
    return td


def _run(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class TestSharedLeaves:
    def test_leaves_are_shared_and_hold_the_values(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        assert isinstance(out.get("mode"), SharedNonTensorData)
        assert isinstance(out.get(("sub", "cfg")), SharedNonTensorData)
        assert isinstance(out.get("names"), SharedNonTensorStack)
        assert out["mode"] == "train" and out["names"] == ["a", "b"]
        assert out["sub", "cfg"] == {"lr": 0.1, "sizes": (64, 64)}
        assert sorted(os.listdir(tmp_path / "s")) == [
            "meta.json",
            "mode.nt.json",
            "names.nt.json",
            "sub",
            "x.memmap",
        ]
        meta = json.loads((tmp_path / "s" / "meta.json").read_text())
        entry = next(e for e in meta["entries"] if e["key"] == "mode")
        assert (entry["value"], entry["shared"]) == ("train", "mode.nt.json")

    def test_writes_through_the_leaf_are_seen_everywhere_in_this_process(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        view = out[1]  # indexing keeps the value shared
        out.get("mode").data = "eval"
        out.get("names").data = ["c", "d"]
        assert out["mode"] == view["mode"] == "eval"
        assert out["names"] == ["c", "d"] and out[1]["names"] == "d"
        assert load_memmap(tmp_path / "s")["mode"] == "eval"  # the folder holds the live value
        assert load_memmap(tmp_path / "s")["names"] == ["c", "d"]

    def test_values_that_are_not_json_are_refused(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        with pytest.raises(TypeError, match="no JSON form"):
            out.get("mode").data = object()
        with pytest.raises(ValueError, match="batch_size"):
            out.get("names").data = ["only one"]
        assert out["mode"] == "train" and out["names"] == ["a", "b"]

    def test_save_refuses_values_without_json(self, tmp_path):
        td = _td()
        td["bad"] = NonTensorData({1, 2})
        with pytest.raises(TypeError, match=r"'bad'.*cannot be shared"):
            memmap(td, tmp_path / "s", share_non_tensor=True, allow_pickle=True)
        assert not (tmp_path / "s").exists()

    def test_prefix_is_needed(self):
        with pytest.raises(ValueError, match="share_non_tensor=True needs a prefix"):
            memmap(_td(), share_non_tensor=True)
        out = memmap(TensorDict({"a": torch.zeros(1)}, [1]), share_non_tensor=True)
        assert out["a"].is_shared()

    def test_in_place(self, tmp_path):
        td = _td()
        memmap_(td, tmp_path / "s", share_non_tensor=True)
        assert isinstance(td.get("mode"), SharedNonTensorData)
        td.get("mode").data = "eval"
        assert load_memmap(tmp_path / "s")["mode"] == "eval"

    def test_lazy_stack_members_share_their_values(self, tmp_path):
        a, b = TensorDict(batch_size=[]), TensorDict(batch_size=[])
        a["v"], b["v"] = "a", "b"
        out = memmap(lazy_stack([a, b]), tmp_path / "s", share_non_tensor=True)
        out.tensordicts[1].get("v").data = "B"
        assert load_memmap(tmp_path / "s")["v"] == ["a", "B"]

    def test_copies_are_not_shared(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        clone = out.clone()
        assert type(clone.get("mode")) is NonTensorData
        assert type(clone.get("names")) is NonTensorStack
        out.get("mode").data = "eval"
        assert clone["mode"] == "train"

    def test_pickling_sends_the_file_not_the_value(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        again = pickle.loads(pickle.dumps(out))
        assert isinstance(again.get("mode"), SharedNonTensorData)
        again.get("mode").data = "eval"
        assert out["mode"] == "eval"


class TestLoad:
    def test_writable_load_is_shared_read_only_load_is_a_snapshot(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        shared = load_memmap(tmp_path / "s", mode="r+")
        snapshot = load_memmap(tmp_path / "s", mode="r")
        assert isinstance(shared.get("names"), SharedNonTensorStack)
        assert type(snapshot.get("mode")) is NonTensorData
        shared.get("mode").data = "eval"
        assert out["mode"] == "eval" and snapshot["mode"] == "train"

    def test_shared_file_outside_the_folder(self, tmp_path):
        memmap(_td(), tmp_path / "s", share_non_tensor=True)
        meta_path = tmp_path / "s" / "meta.json"
        meta = json.loads(meta_path.read_text())
        next(e for e in meta["entries"] if e["key"] == "mode")["shared"] = "../mode.nt.json"
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(UnsafePathError, match="not a plain name"):
            load_memmap(tmp_path / "s")

    def test_missing_or_broken_shared_file(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        (tmp_path / "s" / "names.nt.json").write_text('["only one"]')
        with pytest.raises(MemmapFormatError, match=r"names\.nt\.json.*batch_size"):
            load_memmap(tmp_path / "s")
        os.unlink(tmp_path / "s" / "mode.nt.json")
        with pytest.raises(MissingLeafError, match=r"mode\.nt\.json"):
            load_memmap(tmp_path / "s")
        with pytest.raises(MissingLeafError, match=r"mode\.nt\.json"):
            _ = out["mode"]


_CHILD = """
import pickle, sys
from td_memmap import load_memmap
with open(sys.argv[1], "rb") as f:
    td = pickle.load(f)  # a TensorDict pickled by the parent: its leaves name the files
print(td["mode"], flush=True)
td.get("mode").data = "written by the child"
td.get("names").data = ["x", "y"]
loaded = load_memmap(sys.argv[2], mode="r+")  # the folder, loaded on its own
loaded.get(("sub", "cfg")).data = {"lr": 0.5}
"""

_HAMMER = """
import os, sys
from td_memmap import load_memmap
leaf = load_memmap(sys.argv[1], mode="r+").get("mode")
i = 0
while not os.path.exists(sys.argv[2]):
    leaf.data = {"i": i, "pad": "x" * (i * 37 % 4000)}
    i += 1
"""


class TestAcrossProcesses:
    def test_a_child_writes_and_the_parent_sees_it(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        (tmp_path / "td.pkl").write_bytes(pickle.dumps(out))
        assert _run(_CHILD, str(tmp_path / "td.pkl"), str(tmp_path / "s")) == "train\n"
        assert out["mode"] == "written by the child"
        assert out["names"] == ["x", "y"] and out[0]["names"] == "x"
        assert out["sub", "cfg"] == {"lr": 0.5}

    def test_readers_never_see_a_partial_value(self, tmp_path):
        out = memmap(_td(), tmp_path / "s", share_non_tensor=True)
        leaf, stop = out.get("mode"), tmp_path / "stop"
        child = subprocess.Popen([sys.executable, "-c", _HAMMER, str(tmp_path / "s"), str(stop)])
        seen = set()
        deadline = time.monotonic() + 120
        try:
            while len(seen) < 200 and child.poll() is None and time.monotonic() < deadline:
                value = leaf.data  # raises on a torn or empty file
                if value == "train":  # the child is still starting: leave it the CPU
                    time.sleep(0.01)
                else:
                    assert value["pad"] == "x" * (value["i"] * 37 % 4000)
                    seen.add(value["i"])
        finally:
            stop.touch()
            child.wait(timeout=120)
        assert child.returncode == 0
        assert len(seen) >= 200  # the reader ran while the writer wrote


def test_set_and_update_inplace_write_into_the_shared_file(tmp_path):
    from td_core import TensorDict

    td = TensorDict(batch_size=[2])
    td["mode"] = "train"
    shared = td.memmap(str(tmp_path / "shared"), share_non_tensor=True)
    leaf = shared.get("mode")
    shared.set_("mode", "eval")
    assert leaf.data == "eval" and shared.get("mode") is leaf
    shared.update_({"mode": "test"})
    assert leaf.data == "test"


def test_writes_at_an_index_and_through_the_read_list_reach_the_shared_file(tmp_path):
    shared = memmap(_td(), tmp_path / "s", share_non_tensor=True)
    leaf = shared.get("names")
    values = shared["names"]
    values[0] = "z"  # td[key]'s LinkedList writes through set_at_
    shared.set_at_("names", "q", 1)
    assert shared.get("names") is leaf  # still the shared leaf, not an in-memory copy
    assert load_memmap(tmp_path / "s")["names"] == ["z", "q"]
    shared.set_at_("mode", "train", 0)  # the value every element holds: still one value
    assert load_memmap(tmp_path / "s")["mode"] == "train"


def test_one_element_of_a_shared_single_value_is_refused(tmp_path):
    shared = memmap(_td(), tmp_path / "s", share_non_tensor=True)
    with pytest.raises(ValueError, match=r"shared non-tensor entry 'mode'"):
        shared.set_at_("mode", "eval", 0)
    assert shared["mode"] == "train" and isinstance(shared.get("mode"), SharedNonTensorData)
    assert load_memmap(tmp_path / "s")["mode"] == "train"
