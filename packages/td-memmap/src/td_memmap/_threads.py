"""How many threads a save uses by default, and running work in them.

`num_threads=None` (the default of `memmap`, `save`, `memmap_like` and
`load_memmap`) means `default_threads()`: one thread per CPU this process may
run on, at most `MAX_DEFAULT_THREADS`, and none (the calling thread does
everything) when it may run on one CPU only. A save spends most of its time in
system calls that release the GIL: creating each file (a scan of the inode
table on some file systems), copying its bytes into the page cache. With two
CPUs, two threads overlap them; with one, threads would only take turns.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = [
    "MAX_DEFAULT_THREADS",
    "default_threads",
    "resolve_threads",
    "shares",
    "run_shares",
]

T = TypeVar("T")

#: The most threads `num_threads=None` gives (measured on 2 CPUs; more threads than
#: CPUs only contend for the GIL between system calls).
MAX_DEFAULT_THREADS = 4


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what `taskset` or a container allows
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def default_threads() -> int:
    """The threads a save uses when `num_threads` is None: 0 on one CPU, else one per CPU (at most 4)."""
    cpus = _usable_cpus()
    return 0 if cpus < 2 else min(cpus, MAX_DEFAULT_THREADS)


def resolve_threads(num_threads: int | None) -> int:
    """`num_threads`, checked; None gives `default_threads()`."""
    if num_threads is None:
        return default_threads()
    if not isinstance(num_threads, int) or num_threads < 0:
        raise ValueError(f"num_threads must be None or a non-negative int, got {num_threads!r}")
    return num_threads


def shares(items: Sequence[T], weights: Sequence[int], n: int) -> list[list[T]]:
    """`items` cut into at most `n` contiguous shares of about equal total weight."""
    total = sum(weights)
    out: list[list[T]] = [[]]
    done = 0
    for item, weight in zip(items, weights):
        if done >= total * len(out) / n and len(out) < n:
            out.append([])
        out[-1].append(item)
        done += weight
    return [share for share in out if share]


def run_shares(
    num_threads: int,
    fn: Callable[[T], object],
    items: Sequence[T],
    weights: Sequence[int],
    *,
    min_share: int,
) -> None:
    """`fn` on every item; with threads when the work is worth it.

    The items are cut into contiguous shares of at least `min_share` total
    weight, at most `num_threads`; the calling thread runs the first, one
    thread each the others (one hand-over per thread, not per item: on a busy
    machine waking a thread costs milliseconds). Every share is finished
    before the first error is raised, so that the caller's clean-up never
    runs beside a write.
    """
    n = min(num_threads, sum(weights) // max(min_share, 1))
    if n < 2 or len(items) < 2:
        for item in items:
            fn(item)
        return

    def run(share: list[T]) -> None:
        for item in share:
            fn(item)

    first, *rest = shares(items, weights, n)
    with ThreadPoolExecutor(len(rest), thread_name_prefix="td-memmap-save") as pool:
        futures = [pool.submit(run, share) for share in rest]
        try:
            run(first)
        finally:
            wait(futures)
    for future in futures:
        future.result()
