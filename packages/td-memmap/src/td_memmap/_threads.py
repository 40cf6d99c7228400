"""How many threads a save uses by default, and running work in them.

`num_threads=None` (the default of `memmap`, `save`, `memmap_` and
`memmap_like`) gives a save of large leaves `default_threads()`: one thread per
CPU this process may run on, at most `MAX_DEFAULT_THREADS`, and none (the
calling thread does everything) when it may run on one CPU only; other saves
get none (see `_save.LARGE_LEAF`). Copying large leaves into the page cache
releases the GIL for long stretches, which a second CPU overlaps; with one CPU,
threads would only take turns.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = [
    "MAX_DEFAULT_THREADS",
    "default_threads",
    "usable_cpus",
    "resolve_threads",
    "run_parallel",
]

T = TypeVar("T")

#: The most threads `num_threads=None` gives (measured on 2 CPUs; more threads than
#: CPUs only contend for the GIL between system calls).
MAX_DEFAULT_THREADS = 4


def usable_cpus() -> int:
    """The CPUs this process may run on (what `taskset` or a container allows)."""
    try:
        return len(os.sched_getaffinity(0))  # what `taskset` or a container allows
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def default_threads() -> int:
    """The threads a save of large leaves uses when `num_threads` is None: 0 on one CPU, else one per CPU (at most 4)."""
    cpus = usable_cpus()
    return 0 if cpus < 2 else min(cpus, MAX_DEFAULT_THREADS)


def resolve_threads(num_threads: int | None) -> int:
    """`num_threads`, checked; None gives `default_threads()`."""
    if num_threads is None:
        return default_threads()
    if not isinstance(num_threads, int) or num_threads < 0:
        raise ValueError(f"num_threads must be None or a non-negative int, got {num_threads!r}")
    return num_threads


def run_parallel(
    num_threads: int,
    fn: Callable[[T], object],
    items: Sequence[T],
    weights: Sequence[int],
    *,
    min_share: int,
) -> None:
    """`fn` on every item; with threads when the work is worth it.

    `n = min(num_threads, sum(weights) // min_share)` threads (the calling
    one and `n - 1` more) take the items in order, each the next one left
    when it is done with its last: one hand-over per thread, not per item (on
    a busy machine waking a thread costs milliseconds), and a thread that the
    machine holds up delays no fixed share of the work. After an error no
    thread takes another item, and every thread has finished before the first
    error is raised, so that the caller's clean-up never runs beside a write.
    """
    n = min(num_threads, len(items), sum(weights) // max(min_share, 1))
    if n < 2:
        for item in items:
            fn(item)
        return
    lock = threading.Lock()
    todo = iter(items)
    errors: list[BaseException] = []

    def take() -> None:
        while True:
            with lock:
                if errors:
                    return
                item = next(todo, _DONE)
            if item is _DONE:
                return
            try:
                fn(item)  # type: ignore[arg-type]  # not _DONE
            except BaseException as e:
                with lock:
                    errors.append(e)
                return

    with ThreadPoolExecutor(n - 1, thread_name_prefix="td-memmap-save") as pool:
        futures = [pool.submit(take) for _ in range(n - 1)]
        try:
            take()
        finally:
            wait(futures)
    if errors:
        raise errors[0]


_DONE = object()
