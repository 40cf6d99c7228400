"""`append_memmap`: rows grow the first dim, checked first, committed all or nothing."""

import os
import random
import time
from functools import partial

import pytest
import torch
from saved_files import file_contents

import td_memmap._io
from td_core import TensorDict, lazy_stack, tensorclass
from td_memmap import (
    PickleNotAllowedError,
    append_memmap,
    load_memmap,
    save,
)


@tensorclass
class Step:
    obs: torch.Tensor
    env: str = ""


def _td(n: int = 3, value: float = 0.0) -> TensorDict:
    return TensorDict(
        {
            "a": torch.full((n, 2), value),
            "n": {"b": torch.full((n, 4), value, dtype=torch.int32)},
            "name": "cartpole",
        },
        batch_size=[n],
    )


def test_append_grows_the_first_dim_and_keeps_old_rows(tmp_path):
    old = TensorDict(
        {"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.ones(3, 4, dtype=torch.int32)}},
        batch_size=[3],
    )
    old.memmap(tmp_path / "f")
    assert append_memmap(tmp_path / "f", _td(2, 9.0).exclude("name")) is None
    loaded = load_memmap(tmp_path / "f")
    assert loaded.batch_size == (5,) and loaded["n"].batch_size == (5,)
    assert torch.equal(loaded["a"][:3], old["a"]) and loaded["a"][3:].eq(9).all()
    assert torch.equal(loaded["n", "b"][:3], old["n", "b"]) and loaded["n", "b"][3:].eq(9).all()
    append_memmap(tmp_path / "f", _td(1, 7.0).exclude("name"))
    assert load_memmap(tmp_path / "f")["a"][5].eq(7).all()
    # two generations of files at most: the save's and the spares
    assert len([n for n in file_contents(tmp_path / "f") if n.endswith(".memmap")]) <= 4


def test_append_keeps_non_tensor_values_and_nested_batch_dims(tmp_path):
    td = TensorDict({"x": torch.zeros(2, 3, 5), "s": "env"}, batch_size=[2, 3])
    td.memmap(tmp_path / "f")
    append_memmap(tmp_path / "f", TensorDict({"x": torch.ones(4, 3, 5), "s": "env"}, [4, 3]))
    loaded = load_memmap(tmp_path / "f")
    assert loaded.batch_size == (6, 3) and loaded["s"] == "env"
    assert loaded["x"][2:].eq(1).all()


def test_append_to_a_tensorclass_save(tmp_path):
    Step(obs=torch.zeros(2, 3), env="a", batch_size=[2]).memmap(tmp_path / "f")
    append_memmap(tmp_path / "f", Step(obs=torch.ones(3, 3), env="a", batch_size=[3]))
    loaded = load_memmap(tmp_path / "f")
    assert type(loaded) is Step and loaded.batch_size == (5,) and loaded.obs[2:].eq(1).all()
    with pytest.raises(ValueError, match="TensorDict"):
        append_memmap(tmp_path / "f", TensorDict({"obs": torch.ones(1, 3), "env": "a"}, [1]))


@pytest.mark.parametrize(
    "rows, match",
    [
        (_td(1).set("a", torch.zeros(1, 2, dtype=torch.float64)), r"float64.*entry 'a'.*float32"),
        (_td(1).set("a", torch.zeros(1, 3)), r"shape \[1, 3\] to entry 'a'"),
        (_td(1).exclude(("n", "b")), r"keys \[\] to entry 'n'"),
        (_td(1).set("z", torch.zeros(1)), r"keys \['a', 'n', 'name', 'z'\]"),
        (_td(1).set_non_tensor("name", "other"), r"entry 'name'.*'cartpole'.*'other'"),
        (TensorDict({"a": torch.zeros(2)}, []), "first batch dim"),
        (
            TensorDict(
                {
                    "a": torch.zeros(1, 2),
                    "n": {"b": torch.zeros(1, 4, dtype=torch.int64)},
                    "name": "cartpole",
                },
                [1],
            ),
            r"int64.*entry \('n', 'b'\)",
        ),
    ],
)
def test_bad_rows_are_refused_naming_the_key_and_nothing_changes(tmp_path, rows, match):
    _td().memmap(tmp_path / "f")
    before = file_contents(tmp_path / "f")
    with pytest.raises(ValueError, match=match):
        append_memmap(tmp_path / "f", rows)
    assert file_contents(tmp_path / "f") == before


def test_what_cannot_grow(tmp_path):
    with pytest.raises(TypeError, match="dict"):
        append_memmap(tmp_path, {"a": torch.zeros(1)})
    _td().memmap(tmp_path / "x.tdz")
    with pytest.raises(ValueError, match="archive cannot grow"):
        append_memmap(tmp_path / "x.tdz", _td(1))
    with pytest.raises(ValueError, match="does not exist"):
        append_memmap(tmp_path / "missing", _td(1))
    lazy = lazy_stack(
        [TensorDict({"a": torch.zeros(2)}, [2]), TensorDict({"a": torch.ones(2)}, [2])]
    )
    lazy.memmap(tmp_path / "lazy")
    with pytest.raises(ValueError, match="lazy stacks cannot grow"):
        append_memmap(tmp_path / "lazy", lazy)
    stacked = torch.stack([TensorDict({"s": "p"}, []), TensorDict({"s": "q"}, [])])
    stacked.memmap(tmp_path / "stack")
    with pytest.raises(ValueError, match="stack of non-tensor values"):
        append_memmap(tmp_path / "stack", stacked)


def test_pickled_values_need_allow_pickle(tmp_path):
    save(TensorDict({"a": torch.zeros(2), "o": {1, 2}}, [2]), tmp_path / "f", allow_pickle=True)
    rows = TensorDict({"a": torch.ones(1), "o": {1, 2}}, [1])
    with pytest.raises(PickleNotAllowedError):
        append_memmap(tmp_path / "f", rows)
    append_memmap(tmp_path / "f", rows, allow_pickle=True)
    assert load_memmap(tmp_path / "f", allow_pickle=True)["o"] == {1, 2}


def test_a_failure_part_way_leaves_the_previous_save(tmp_path, monkeypatch):
    td_memmap.save(_td(), tmp_path / "f", layout="files")  # packed: test_packed.py
    before = file_contents(tmp_path / "f")
    real = td_memmap._io.write_grown
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr("td_memmap._save.write_grown", failing)
    with pytest.raises(OSError, match="disk full"):
        append_memmap(tmp_path / "f", _td(2, 5.0))
    assert file_contents(tmp_path / "f") == before  # what was written is removed again
    assert load_memmap(tmp_path / "f").batch_size == (3,)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_an_append_killed_at_random_points_keeps_a_whole_save(tmp_path, run_killed):
    rng = random.Random(12)
    big = 1 << 15
    start = TensorDict({f"w{i}": torch.zeros(4, big) for i in range(8)}, [4])
    start["n"] = TensorDict({"b": torch.zeros(4, big)}, [4])
    start.memmap(tmp_path / "f")
    rows = start[:2].clone().apply(lambda t: t + 1)
    timing = time.perf_counter()
    append_memmap(tmp_path / "f", rows)
    scale = time.perf_counter() - timing
    rows_seen, interrupted = load_memmap(tmp_path / "f").batch_size[0], 0
    for _ in range(20):
        finished = run_killed(
            partial(append_memmap, tmp_path / "f", rows), rng.uniform(0, 1.3 * scale)
        )
        scale *= 0.7 if finished else 1.1
        loaded = load_memmap(tmp_path / "f")
        n = loaded.batch_size[0]
        assert n in (rows_seen, rows_seen + 2)
        for value in loaded.values(True, True):
            assert value.shape[0] == n
            assert value[:4].eq(0).all() and value[4:].eq(1).all()
        interrupted += not finished
        rows_seen = n
    assert interrupted >= 3, "the appends finished before SIGKILL: the test proves nothing"


def test_append_matches_upstream_on_the_same_data(tmp_path):
    upstream = pytest.importorskip("tensordict")
    data = {"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.ones(3, 4, dtype=torch.int32)}}
    more = {"a": torch.full((2, 2), 9.0), "n": {"b": torch.zeros(2, 4, dtype=torch.int32)}}
    TensorDict(data, [3]).memmap(tmp_path / "ours")
    upstream.TensorDict(data, batch_size=[3]).memmap(tmp_path / "theirs")
    append_memmap(tmp_path / "ours", TensorDict(more, [2]))
    upstream.append_memmap(tmp_path / "theirs", upstream.TensorDict(more, batch_size=[2]))
    ours = load_memmap(tmp_path / "ours")
    theirs = upstream.TensorDict.load_memmap(tmp_path / "theirs")
    assert ours.batch_size == theirs.batch_size == (5,)
    for key in (("a",), ("n", "b")):
        assert torch.equal(ours[key], theirs[key])
    bad = {
        "a": torch.zeros(1, 2, dtype=torch.float64),
        "n": {"b": torch.zeros(1, 4, dtype=torch.int32)},
    }
    for fn, path, cls in (
        (append_memmap, "ours", TensorDict),
        (upstream.append_memmap, "theirs", upstream.TensorDict),
    ):
        with pytest.raises(ValueError, match="'a'"):
            fn(tmp_path / path, cls(bad, batch_size=[1]))
        with pytest.raises(TypeError):
            fn(tmp_path / path, {"a": torch.zeros(1, 2)})
