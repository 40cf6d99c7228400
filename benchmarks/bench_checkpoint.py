"""Checkpoints into a fresh folder, timed as a plain script (not through ``harness``).

From the repository root::

    uv run python benchmarks/bench_checkpoint.py             # 7 rounds (a few minutes)
    uv run python benchmarks/bench_checkpoint.py --rounds 11 --only transformer

Issue 24 asks for these numbers measured this way, beside the harness's
(``bench_memmap.py``): every round runs each side once, in a shuffled order;
``os.sync()`` runs before each save (no writeback of an earlier save competes
with it) and the output is deleted after it, outside the timing. Each row is
the median over the rounds; ratios are td / reference medians. Cases:

- ``8 leaves``: 8 leaves of 32 MB (256 MB) ``td.memmap(new_folder)`` with the
  default ``num_threads`` against safetensors' ``save_file`` of the same dict;
- ``transformer``: ``TensorDict.from_module(nn.Transformer())`` (184 leaves,
  177 MB) ``memmap(new_folder)`` with ``num_threads=16`` (the
  seeds' example) and the default, against ``save_file`` of the flat dict and
  ``torch.save(model.state_dict())``;
- ``small``: 1,000 leaves of 16 KB (16 MB) against ``save_file`` and ``torch.save``;
- for each, the load: ``load_memmap`` then every 4 KB page of every leaf read,
  against ``load_file`` then the same reads.

It also measures the disk's floor: one file of the same size written from
memory (into the page cache, which is what every side's save measures: none
of them calls ``fsync``), and the same plus ``fsync`` (the disk itself).

td's fresh saves are packed: one ``meta.json`` and one data file (format version
2), or one data file per writer thread for a large save with threads (version 3).
With one file per leaf (``layout="files"``, version 1), the cost that dominated
td's save of many leaves on an ext4 file system without a journal (the machine
the docs' numbers come from) was creating files: ext4 skips
the inodes freed in the last ``dirty_expire`` seconds (``recently_deleted`` in
``find_inode_bit``), so every file created scans past the files deleted lately,
by this script's own rounds or any other process on the disk. One create costs
0.05 to 1 ms there, depending on what was deleted in the last 30 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from td_core import TensorDict

MB = 1 << 20


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def _saves(rounds: int, cases: dict[str, tuple[Callable[[], object], str]]) -> dict[str, float]:
    """Median seconds of each save: shuffled each round, `os.sync()` before, output removed after."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name in random.sample(list(cases), len(cases)):
            save, out = cases[name]
            _remove(out)
            os.sync()
            start = time.perf_counter()
            save()
            times[name].append(time.perf_counter() - start)
            _remove(out)
    return {name: statistics.median(t) for name, t in times.items()}


def _loads(rounds: int, cases: dict[str, Callable[[], object]]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name in random.sample(list(cases), len(cases)):
            start = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _touch(tensors: Iterable[torch.Tensor]) -> int:
    """Read one element of every 4 KB page of every tensor (each page faulted in).

    Not a `sum`: that would time torch's reduction and its OpenMP threads, which
    on a busy 2-CPU machine swing by 3x, more than the load.
    """
    total = 0
    for t in tensors:
        flat = torch.Tensor._make_subclass(torch.Tensor, t).reshape(-1)
        total += int(flat[:: max(4096 // t.element_size(), 1)].count_nonzero())
    return total


def _read_td(path: str) -> int:
    return _touch(TensorDict.load_memmap(path).values(True, True))


def _read_st(path: str) -> int:
    return _touch(load_file(path).values())


def _floor(folder: str, nbytes: int, rounds: int) -> tuple[float, float]:
    """Median seconds to write `nbytes` to a new file: into the page cache, and with fsync."""
    data = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    cached, synced = [], []
    path = os.path.join(folder, "floor.bin")
    for _ in range(rounds):
        os.sync()
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        cached.append(time.perf_counter() - start)
        os.fsync(fd)
        synced.append(time.perf_counter() - start)
        os.close(fd)
        os.remove(path)
    return statistics.median(cached), statistics.median(synced)


def _report(title: str, medians: dict[str, float], refs: list[str], nbytes: int) -> None:
    print(f"\n== {title}")
    for name, t in medians.items():
        ratios = "  ".join(
            f"{t / medians[ref]:.2f}x {ref}"
            for ref in refs
            if ref != name and name.startswith("td")
        )
        print(f"  {name:34s} {t * 1e3:8.1f} ms  {nbytes / t / 1e9:5.2f} GB/s  {ratios}")


def _case(
    label: str, td: TensorDict, extra: dict[str, Callable[[str], object]], folder: str, rounds: int
) -> None:
    flat = {k: v.detach().clone() for k, v in td.flatten_keys(".").items()}
    nbytes = sum(v.numel() * v.element_size() for v in flat.values())
    out = {name: os.path.join(folder, f"{label}-{i}") for i, name in enumerate(extra)}
    saves: dict[str, tuple[Callable[[], object], str]] = {
        name: ((lambda fn=fn, p=out[name]: fn(p)), out[name]) for name, fn in extra.items()
    }
    st = os.path.join(folder, f"{label}.safetensors")
    saves["safetensors save_file"] = (lambda: save_file(flat, st), st)
    medians = _saves(rounds, saves)
    cached, synced = _floor(folder, nbytes, rounds)
    refs = [n for n in medians if not n.startswith("td")]
    _report(f"{label}: save into a fresh folder ({nbytes / MB:.0f} MB)", medians, refs, nbytes)
    print(
        f"  floor: one {nbytes / MB:.0f} MB file {cached * 1e3:.1f} ms into the page cache "
        f"({nbytes / cached / 1e9:.2f} GB/s), {synced * 1e3:.1f} ms with fsync "
        f"({nbytes / synced / 1e9:.2f} GB/s)"
    )
    td_dir = os.path.join(folder, f"{label}-td")
    td.memmap(td_dir)
    save_file(flat, st)
    loads = _loads(
        rounds,
        {
            "td load_memmap + read": lambda: _read_td(td_dir),
            "safetensors load_file + read": lambda: _read_st(st),
        },
    )
    _report(f"{label}: load, then read every leaf", loads, ["safetensors load_file + read"], nbytes)
    _remove(td_dir)
    _remove(st)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default="", help="8, transformer or small (default: all)")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp folder)")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench_checkpoint_", dir=args.dir)
    try:
        if args.only in ("", "8"):
            gen = torch.Generator().manual_seed(1)
            td = TensorDict(
                {f"t{i}": torch.randn(32 * MB // 4 // 256, 256, generator=gen) for i in range(8)},
                [],
            )
            _case(
                "8 leaves", td, {"td memmap, default": lambda p: td.memmap(p)}, folder, args.rounds
            )
        if args.only in ("", "transformer"):
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # nn.Transformer's note on nested tensors
                model = torch.nn.Transformer()
            td = TensorDict.from_module(model)
            state = model.state_dict()
            _case(
                "transformer",
                td,
                {
                    "td memmap, num_threads=16": lambda p: td.memmap(p, num_threads=16),
                    "td memmap, default": lambda p: td.memmap(p),
                    "torch.save(state_dict)": lambda p: torch.save(state, p),
                },
                folder,
                args.rounds,
            )
        if args.only in ("", "small"):
            gen = torch.Generator().manual_seed(2)
            td = TensorDict({f"l{i}": torch.randn(64, 64, generator=gen) for i in range(1000)}, [])
            flat = td.to_dict()
            _case(
                "small",
                td,
                {
                    "td memmap, default": lambda p: td.memmap(p),
                    "torch.save": lambda p: torch.save(flat, p),
                },
                folder,
                args.rounds,
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
