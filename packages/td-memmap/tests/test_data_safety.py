"""No write is ever silently dropped: shared loads, read-only loads, saves killed part-way (issue 14)."""

import inspect
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from functools import partial

import numpy as np
import pytest
import torch

import td_memmap._pack_save as pack_save
from td_core import LazyStackedTensorDict, TensorDict
from td_memmap import (
    MemmapFormatError,
    MemoryMappedTensor,
    ReadOnlyMemmapError,
    load,
    load_memmap,
    save,
)


def _td(value: float = 0.0) -> TensorDict:
    return TensorDict(
        {"a": torch.full((3, 2), value), "n": {"b": torch.full((3,), value)}}, batch_size=[3]
    )


class TestSharedLoads:
    def test_a_write_to_a_loaded_leaf_reaches_the_file(self, tmp_path):
        save(_td(), tmp_path / "s")
        loaded = TensorDict.load_memmap(tmp_path / "s")
        loaded["a"][0] = 42.0
        loaded["n", "b"].add_(1)
        again = TensorDict.load_memmap(tmp_path / "s")
        assert again["a"][0].tolist() == [42.0, 42.0]
        assert again["n", "b"].tolist() == [1.0, 1.0, 1.0]

    def test_memmap_like_then_reopen_then_fill(self, tmp_path):
        # the seeds' on-disk data set: allocate, reopen elsewhere, fill, read back
        TensorDict({"x": torch.zeros(4, 2)}, [4]).memmap_like(tmp_path / "d")
        filler = TensorDict.load_memmap(tmp_path / "d")
        filler["x"][2:] = 7.0
        assert TensorDict.load_memmap(tmp_path / "d")["x"][:, 0].tolist() == [0, 0, 7, 7]

    def test_a_lazy_stack_loaded_writes_through_to_member_files(self, tmp_path):
        stack = LazyStackedTensorDict(_td(), TensorDict({"a": torch.zeros(3, 2)}, [3]))
        save(stack, tmp_path / "s")
        load(tmp_path / "s").tensordicts[1]["a"].fill_(5.0)
        assert (load(tmp_path / "s").tensordicts[1]["a"] == 5).all()

    def test_another_process_sees_writes_both_ways(self, tmp_path):
        save(_td(), tmp_path / "s")
        parent = load(tmp_path / "s")
        child = textwrap.dedent(
            """
            import sys, time
            from td_core import TensorDict
            td = TensorDict.load_memmap(sys.argv[1])
            td["a"][1] = 3.0               # the parent waits for this
            while td["n", "b"][0].item() != 9.0:  # then writes this
                time.sleep(0.01)
            print("seen")
            """
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", child, str(tmp_path / "s")], stdout=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while parent["a"][1, 0].item() != 3.0:  # the same pages: no reload needed
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        parent["n", "b"][0] = 9.0
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "seen"


class TestReadOnlyLoads:
    @pytest.fixture
    def ro(self, tmp_path):
        save(_td(1.0), tmp_path / "s")
        return TensorDict.load_memmap(tmp_path / "s", mode="r")

    @pytest.mark.parametrize(
        "write",
        [
            lambda td: td["a"].__setitem__(0, 5.0),
            lambda td: td["a"].add_(1),
            lambda td: td["a"].__iadd__(1),
            lambda td: td["n", "b"].copy_(torch.zeros(3)),
            lambda td: torch.add(td["a"], 1, out=td["a"]),
            lambda td: td["a"][0].zero_(),  # a view
            lambda td: td["a"].view(-1).fill_(2.0),  # another kind of view
            lambda td: torch.nn.functional.relu(td["a"], inplace=True),
            lambda td: td["a"].unbind(0)[1].mul_(2),
            lambda td: torch._foreach_add_([td["a"]], 1.0),
        ],
        ids=[
            "setitem",
            "add_",
            "iadd",
            "copy_",
            "out=",
            "index-view",
            "view",
            "inplace=",
            "unbind",
            "foreach",
        ],
    )
    def test_every_write_raises_and_changes_nothing(self, ro, tmp_path, write):
        with pytest.raises(ReadOnlyMemmapError, match=r"read-only.*mode='r'") as info:
            write(ro)
        assert isinstance(info.value, RuntimeError)
        assert (ro["a"] == 1).all() and (ro["n", "b"] == 1).all()
        assert (load(tmp_path / "s")["a"] == 1).all()

    def test_the_result_is_locked_and_reads_freely(self, ro):
        assert ro.is_locked
        with pytest.raises(RuntimeError):
            ro["c"] = torch.zeros(3)
        assert ro["a"].sum().item() == 6.0 and (ro["a"] + 1 == 2).all()
        copy = ro["a"].clone()
        copy.add_(1)  # a copy is a plain, writable tensor
        assert type(copy) is torch.Tensor and (ro["a"] == 1).all()
        assert isinstance(ro["a"], MemoryMappedTensor) and isinstance(
            ro["a"][0], MemoryMappedTensor
        )

    def test_numpy_views_are_read_only(self, ro):
        array = ro["a"].numpy()
        with pytest.raises(ValueError, match="read-only"):
            array[0, 0] = 3.0
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(ro["a"])[0, 0] = 3.0

    def test_bad_mode(self, tmp_path):
        save(_td(), tmp_path / "s")
        with pytest.raises(ValueError, match="mode"):
            load_memmap(tmp_path / "s", mode="w")


# --------------------------------------------------------------------------------- killed saves


def _layouts(value: float) -> dict[str, object]:
    big = 1 << 16  # floats per leaf: enough leaves and bytes that a save takes a while
    flat = TensorDict({f"w{i}": torch.full((big,), value) for i in range(24)}, [])
    nested = TensorDict(
        {
            f"m{i}": {"w": torch.full((big,), value), "b": torch.full((4,), value)}
            for i in range(12)
        },
        [],
    )
    stack = LazyStackedTensorDict(
        *[TensorDict({"w": torch.full((4, big // 4), value)}, [4]) for _ in range(6)],
        TensorDict({"w": torch.full((4, 8), value), "only": torch.full((4,), value)}, [4]),
    )
    # leaves large enough that the default num_threads writes them with threads
    large = TensorDict(
        {f"t{i}": torch.full((1 << 20,), value) for i in range(7)}
        | {"sub": {"a": torch.full((1 << 20,), value), "b": torch.full((1 << 20,), value)}},
        [],
    )
    return {"flat": flat, "nested": nested, "lazy": stack, "large": large}


def _values(td) -> set[float]:
    if isinstance(td, LazyStackedTensorDict):
        return set().union(*(_values(m) for m in td.tensordicts))
    return {v.unique().item() for v in td.values(include_nested=True, leaves_only=True)}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize(
    "layout, fmt",
    [
        ("flat", "files"),
        ("nested", "files"),
        ("lazy", "files"),
        ("large", "files"),
        ("nested", "packed"),
        ("lazy", "packed"),
        ("large", "packed"),
        ("large", "split"),
    ],
)
def test_a_save_killed_at_random_points_keeps_the_previous_save(
    tmp_path, run_killed, monkeypatch, layout, fmt
):
    split = fmt == "split"
    if split:  # packed in 3 data files, written by 3 threads, whatever the machine
        monkeypatch.setattr(pack_save, "usable_cpus", lambda: 3)
        monkeypatch.setattr(pack_save, "default_threads", lambda: 3)
        monkeypatch.setattr(pack_save, "MIN_PART", 1 << 20)
        fmt = "packed"
    rng = random.Random(14)
    prefix = tmp_path / "save"
    save(_layouts(0.0)[layout], prefix, layout=fmt)  # later saves keep the folder's layout
    durations = []
    for _ in range(3):
        start = time.perf_counter()
        save(_layouts(0.0)[layout], tmp_path / "timing", layout=fmt)
        durations.append(time.perf_counter() - start)
    scale = min(durations)  # kill at uniform times over a range adapted to the machine's speed
    current, interrupted, switched = 0.0, 0, 0
    for trial in range(1, 23):
        new = float(trial)
        td = _layouts(new)[layout]
        finished = run_killed(partial(save, td, prefix), rng.uniform(0, 1.3 * scale))
        scale *= 0.7 if finished else 1.1
        loaded = load(prefix)  # whatever happened, the folder loads ...
        found = _values(loaded)
        assert found in ({current}, {new}), (trial, found)  # ... as one whole save
        assert type(loaded) is type(td)
        if found == {new}:
            switched += 1
        if not finished:
            interrupted += 1
        current = found.pop()
    assert interrupted >= 5, "the saves finished before SIGKILL: the test proves nothing"
    assert switched >= 1
    assert sorted(os.listdir(tmp_path)) == ["save", "timing"]  # nothing written beside it
    # left-over files of killed saves are reused (as spares) by the next save
    save(_layouts(99.0)[layout], prefix)
    assert _values(load(prefix)) == {99.0}
    names = [n for _, _, files in os.walk(prefix) for n in files]
    if fmt == "packed":  # the data files a killed save wrote are replaced or removed
        data = json.loads((prefix / "meta.json").read_text())["data"]
        parts = data if isinstance(data, list) else [data]
        assert sorted(names) == sorted([*parts, "meta.json"])
        assert len(parts) == 3 or not split
        return
    leaves = len(list(_layouts(0.0)[layout].values(True, True))) if layout != "lazy" else 8
    assert leaves <= len([n for n in names if n.endswith(".memmap")]) <= 2 * leaves
    assert not [n for n in names if n.startswith(".")]


# --------------------------------------------------------------------------------- shapes


def test_a_shape_of_more_than_64_dims_is_refused_naming_the_file(tmp_path):
    save(TensorDict({"a": torch.ones(1)}, []), tmp_path / "p")  # packed: one data file
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    meta["entries"][0]["shape"] = [1] * 300
    (tmp_path / "p" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(MemmapFormatError, match=r"data\.pack.*300 dims.*64"):
        load(tmp_path / "p")
    save(TensorDict({"a": torch.ones(1)}, []), tmp_path / "s", layout="files")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    meta["entries"][0]["shape"] = [1] * 300  # the same element count as the file holds
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(MemmapFormatError, match=r"a\.memmap.*300 dims.*64"):
        load(tmp_path / "s")
    with pytest.raises(ValueError, match=r"300 dims.*a\.memmap"):
        MemoryMappedTensor.from_filename(tmp_path / "s" / "a.memmap", torch.float32, [1] * 300)


# --------------------------------------------------------------------------------- signatures


@pytest.mark.parametrize(
    "name, upstream_name",
    [
        ("memmap", "memmap"),
        ("memmap_", "memmap_"),
        ("memmap_like", "memmap_like"),
        ("save", "save"),
        ("load_memmap", "load_memmap"),
        ("load", "load_memmap"),
        ("load_memmap_", "load_memmap_"),
        ("make_memmap", "make_memmap"),
        ("make_memmap_from_tensor", "make_memmap_from_tensor"),
        ("make_memmap_from_storage", "make_memmap_from_storage"),
        ("memmap_refresh_", "memmap_refresh_"),
    ],
)
def test_methods_have_upstreams_keywords_and_no_var_keyword(name, upstream_name):
    upstream = pytest.importorskip("tensordict")
    ours = inspect.signature(getattr(TensorDict, name)).parameters
    theirs = inspect.signature(getattr(upstream.TensorDict, upstream_name)).parameters
    assert not [p for p in ours.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    missing = [k for k, p in theirs.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert [k for k in missing if k not in ours] == []
