"""The default `num_threads` of a save, and saves whose leaves are written by threads."""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from td_core import TensorDict
from td_memmap import default_threads, load, load_memmap, memmap, memmap_like, save

_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _large(value: float = 1.0) -> TensorDict:
    """Large leaves (4 MB each, 36 MB in all): what the default num_threads writes with threads."""
    return TensorDict(
        {f"t{i}": torch.full((1 << 20,), value + i) for i in range(7)}
        | {"sub": {"a": torch.full((1 << 20,), value), "b": torch.full((1 << 20,), value)}},
        [],
    )


def _wide(value: float = 1.0, folders: int = 80) -> TensorDict:
    """Enough folders and bytes that a save shares its leaves between threads."""
    return TensorDict(
        {
            f"m{i}": {"w": torch.full((1 << 16,), value + i), "b": torch.arange(3.0)}
            for i in range(folders)
        },
        [],
    )


def test_the_save_functions_default_to_none_and_load_to_0():
    for fn in (memmap, save, memmap_like, TensorDict.memmap, TensorDict.memmap_like):
        assert inspect.signature(fn).parameters["num_threads"].default is None, fn
    for fn in (load_memmap, load, TensorDict.load_memmap):
        assert inspect.signature(fn).parameters["num_threads"].default == 0, fn


def test_default_threads_follows_the_cpus_this_process_may_use():
    assert default_threads() == (0 if _CPUS < 2 else min(_CPUS, 4))


def _threads_writing(
    cpus: set[int], tmp_path, num_threads: str, tree: str = "_large"
) -> tuple[int, int]:
    """`default_threads()` and how many threads create the leaf files of a save, on `cpus` only."""
    script = textwrap.dedent(
        f"""
        import os, sys, threading, time, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        os.sched_setaffinity(0, {cpus!r})
        from test_threads import _large, _wide
        from td_memmap import default_threads, save
        writers, real_open = set(), os.open
        def spy(path, flags, *args, **kwargs):
            if str(path).endswith(".memmap"):
                writers.add(threading.get_ident())
                time.sleep(0.001)  # a slow disk: every thread gets some leaves
            return real_open(path, flags, *args, **kwargs)
        os.open = spy
        save({tree}(), {str(tmp_path / "s")!r}, num_threads={num_threads}, layout="files")
        print(default_threads(), len(writers))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    default, writers = map(int, out.stdout.split())
    return default, writers


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_on_one_cpu_the_default_writes_in_the_calling_thread(tmp_path):
    default, writers = _threads_writing({0}, tmp_path, "None")
    assert (default, writers) == (0, 1)
    assert load(tmp_path / "s")["t6"][0].item() == 7.0


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or _CPUS < 2, reason="needs 2 CPUs and CPU affinity"
)
def test_on_two_cpus_the_default_shares_the_leaves_between_two_threads(tmp_path):
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    default, writers = _threads_writing(cpus, tmp_path, "None")
    assert (default, writers) == (2, 2)
    # an explicit 0 still writes everything in the calling thread
    assert _threads_writing(cpus, tmp_path, "0")[1] == 1


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or _CPUS < 2, reason="needs 2 CPUs and CPU affinity"
)
def test_the_default_writes_many_small_leaves_in_the_calling_thread(tmp_path):
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    # 160 files of at most 256 KB: creating the files is the cost, threads measured no faster
    assert _threads_writing(cpus, tmp_path, "None", "_wide") == (2, 1)
    # asked for, threads are used
    assert _threads_writing(cpus, tmp_path, "2", "_wide") == (2, 2)


def test_a_small_save_uses_no_thread(tmp_path):
    td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(2)}}, [])
    script = textwrap.dedent(
        f"""
        import threading, torch
        from td_core import TensorDict
        from td_memmap import save
        before = threading.active_count()
        td = TensorDict({{"a": torch.zeros(3), "b": {{"c": torch.ones(2)}}}}, [])
        started = []
        real_start = threading.Thread.start
        threading.Thread.start = lambda self: (started.append(self.name), real_start(self))[1]
        save(td, {str(tmp_path / "s")!r}, num_threads=4)
        print(started)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert torch.equal(load(tmp_path / "s")["b", "c"], td["b", "c"])


@pytest.mark.parametrize("num_threads", [0, 2, 4])
def test_a_threaded_save_is_the_same_save(tmp_path, num_threads):
    td = _wide()
    out = save(td, tmp_path / "s", num_threads=num_threads, layout="files")  # packed: test_packed
    back = load(tmp_path / "s")
    for key in td.keys(True, True):
        assert torch.equal(out.get(key), td.get(key)) and torch.equal(back.get(key), td.get(key))
    # every sub-folder's own metadata is published: each loads alone
    assert torch.equal(load(tmp_path / "s" / "m41")["w"], td["m41", "w"])
    names = sorted(n for _, _, files in os.walk(tmp_path / "s") for n in files)
    assert names == sorted(["meta.json"] * 81 + ["w.memmap", "b.memmap"] * 80)


def test_a_leaf_failing_in_a_thread_fails_the_save_and_keeps_the_previous_one(tmp_path):
    prefix = tmp_path / "s"
    save(_wide(1.0), prefix, num_threads=2, layout="files")  # packed: test_packed.py
    # the next save writes m70's leaf as w.b.memmap (w.memmap is the previous save's): block it
    os.mkdir(prefix / "m70" / "w.b.memmap")
    (prefix / "m70" / "w.b.memmap" / "x").write_text("not empty")
    with pytest.raises(OSError):
        save(_wide(5.0), prefix, num_threads=2)
    back = load(prefix)
    assert back["m0", "w"][0].item() == 1.0 and back["m79", "w"][0].item() == 80.0
    # no file of the failed save is left; the previous save's are all there
    names = sorted(n for _, _, files in os.walk(prefix) for n in files)
    assert names == sorted(["meta.json"] * 81 + ["w.memmap", "b.memmap"] * 80 + ["x"])


@pytest.mark.parametrize("num_threads", [0, 2, 8, None])
def test_an_anonymous_memmap_copies_every_leaf_once_with_any_threads(monkeypatch, num_threads):
    td = _large().update({"p": torch.nn.Parameter(torch.ones(3)), "i": torch.arange(4)})
    td["sub", "empty"] = torch.zeros(0, 2)

    def refuse(self):
        raise AssertionError("a private copy moved into shared memory: written twice")

    monkeypatch.setattr(torch.Tensor, "share_memory_", refuse)
    out = memmap(td, num_threads=num_threads)
    for key in td.keys(True, True):
        leaf = out.get(key)
        assert leaf.is_shared() and not leaf.requires_grad
        assert torch.equal(leaf, td.get(key).detach())
    like = memmap_like(td, num_threads=num_threads)
    assert all(like.get(k).is_shared() and not like.get(k).any() for k in td.keys(True, True))
