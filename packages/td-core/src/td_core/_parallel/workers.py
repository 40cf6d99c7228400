"""`TensorDict.map`: run a function over chunks of a TensorDict in a process pool.

The TensorDict's leaves are moved to shared memory first (unless they already
are, or are memory-mapped), so chunks reach the workers as views, not copies:
a function that writes into its chunk in place (`chunk.set_("x", ...)`)
writes into the original. Each chunk's result (or the chunk itself, when the
function returns `None`) is gathered with `torch.cat` (`chunksize > 0`)
or `torch.stack` (`chunksize == 0`, one element per call).
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_td, tensor_leaves
from td_core._core.utils import normalize_dim
from td_core._ops.best_stack import best_intention_stack
from td_core._ops.stack import stack

__all__ = ["WorkersMixin"]


class _Call:
    """A picklable wrapper that runs `fn` on one chunk (`None` gives the chunk back).

    A worker's exception is not caught: the pool sends it back and raises it in
    the caller, of the same class, with the worker's traceback as its
    `__cause__` (what `multiprocessing.Pool` does).

    With `by_value`, the result travels as plain pickled bytes: a worker that
    exits after its task (`max_tasks_per_child`) cannot hand over shared-memory
    tensors, which torch passes as file descriptors the sender must keep alive.
    """

    def __init__(self, fn: Callable[[Any], Any], by_value: bool = False) -> None:
        self.fn = fn
        self.by_value = by_value

    def __call__(self, job: tuple[int, TensorDictContract]) -> Any:
        _, chunk = job
        out = self.fn(chunk)
        out = chunk if out is None else out
        return _ByValue(pickle.dumps(out)) if self.by_value else out


class _ByValue:
    """A worker's result pickled by value (see `_Call`)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _received(result: Any) -> Any:
    return pickle.loads(result.data) if isinstance(result, _ByValue) else result


def _chunk_indices(
    size: int, chunksize: int | None, num_chunks: int | None, workers: int
) -> tuple[list[Any], bool]:
    """The index along the mapped dim of each chunk (ints or slices), and whether they are elements."""
    if chunksize is not None and num_chunks is not None:
        raise ValueError("map: pass chunksize or num_chunks but not both")
    if chunksize == 0:
        return list(range(size)), True
    if chunksize is not None:
        if chunksize < 0:
            raise ValueError(f"map: chunksize must be >= 0, got {chunksize}")
        step = chunksize
    else:
        count = num_chunks if num_chunks is not None else workers
        if count <= 0:
            raise ValueError(f"map: num_chunks must be positive, got {count}")
        step = max(1, math.ceil(size / count))
    return [slice(start, start + step) for start in range(0, size, step)], False


def _refuse_params(td: Any) -> None:
    refusal = getattr(type(td), "_map_refusal", None)
    if refusal is not None:
        raise RuntimeError(refusal)


def _share(td: TensorDictContract) -> None:
    for t in tensor_leaves(td):
        if not t.is_shared() and t.device.type == "cpu" and not _is_mapped(t):
            t.share_memory_()


def _is_mapped(t: torch.Tensor) -> bool:
    return getattr(t, "filename", None) is not None


def _progress(results: Iterator[Any], total: int, enabled: bool) -> Iterator[Any]:
    if not enabled:
        return results
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError as err:
        raise ImportError("map(..., pbar=True) needs tqdm: pip install tqdm") from err
    return iter(tqdm(results, total=total))


# ------------------------------------------------------------------ map_iter
def _init_seeded_worker(seed: int, started: Any, threads: int) -> None:
    """Give each worker its own seeds: torch `seed + i`, numpy one derived from both.

    `i` counts the workers started (`started`, a shared integer), so a worker that
    replaces one (`max_tasks_per_child`) gets a new rank instead of waiting for one.
    """
    import numpy as np

    torch.set_num_threads(threads)
    with started.get_lock():
        i = started.value
        started.value += 1
    torch.manual_seed(seed + i)
    np.random.seed((seed + i) % 2**32)


def _map_iter(
    call: _Call,
    jobs: Iterator[tuple[int, Any]],
    total: int,
    *,
    unordered: bool,
    pool: Any,
    workers: int,
    seed: int,
    max_tasks_per_child: int | None,
    worker_threads: int,
    pbar: bool,
    mp_start_method: str | None,
) -> Iterator[Any]:
    own = None
    if pool is None:
        import torch.multiprocessing as mp

        context = mp.get_context(mp_start_method)
        started = context.Value("q", 0)
        own = pool = context.Pool(
            workers,
            initializer=_init_seeded_worker,
            initargs=(seed, started, worker_threads),
            maxtasksperchild=max_tasks_per_child,
        )
    try:
        results = pool.imap_unordered(call, jobs) if unordered else pool.imap(call, jobs)
        yield from map(_received, _progress(results, total, pbar))
    finally:
        if own is not None:
            own.terminate()
            own.join()


class WorkersMixin(TensorDictContract):
    """`map` over a process pool, and `map_iter`, its streaming form."""

    __slots__ = ()

    def map(
        self,
        fn: Callable[[Any], Any],
        dim: int = 0,
        num_workers: int | None = None,
        *,
        out: Any = None,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool: Any = None,
        generator: torch.Generator | None = None,
        max_tasks_per_child: int | None = None,
        worker_threads: int = 1,
        index_with_generator: bool = False,
        pbar: bool = False,
        mp_start_method: str | None = None,
    ) -> Any:
        """Apply `fn` to chunks along `dim` in a process pool and gather the results.

        Leaves are moved to shared memory first (unless already shared or
        memory-mapped), so `fn` may update its chunk in place. `chunksize=0`
        calls `fn` on single elements (results stacked), `chunksize=k` on
        chunks of `k` (results concatenated); by default there is one chunk
        per worker. A worker's exception is raised here, of its own class, with
        the worker's traceback as its `__cause__`.

        Args:
            fn: a picklable function of a TensorDict; `None` keeps the (updated) chunk.
            dim: the dim along which the chunks are cut.
            num_workers: pool size (default: the CPU count); ignored with `pool`.
            out: write each chunk's result into `out` (of the result's batch
                size) at the chunk's index, and return `out`.
            chunksize: elements per chunk (`0`: one element at a time, unbound).
            num_chunks: the number of chunks instead (default: one per worker).
            pool: an existing `multiprocessing` pool (not closed here; its
                workers are not seeded).
            generator: draws the workers' base seed (worker `i` seeds torch
                with `seed + i`). Default: a fresh `torch.Generator()`, so the
                seeds are the same on every call.
            max_tasks_per_child: replace a worker after this many chunks.
            worker_threads: torch intra-op threads per worker (1 avoids OpenMP
                deadlocks in forked workers and oversubscription).
            index_with_generator: cut each chunk when the pool asks for it
                instead of all before the job starts.
            pbar: show a tqdm progress bar.
            mp_start_method: the multiprocessing start method (default: the platform's).

        Raises:
            RuntimeError: on a `TensorDictParams` (parameters cannot cross processes).
            ValueError: both `chunksize` and `num_chunks`, or a bad count.
        """
        _refuse_params(self)
        d = normalize_dim(dim, self.batch_dims)
        workers = num_workers if num_workers is not None else (os.cpu_count() or 1)
        if pool is None and workers <= 0:
            raise ValueError(f"map: num_workers must be positive, got {workers}")
        indices, stacked = _chunk_indices(self.batch_size[d], chunksize, num_chunks, workers)
        results = self.map_iter(
            fn,
            d,
            workers,
            chunksize=chunksize,
            num_chunks=num_chunks,
            pool=pool,
            generator=generator,
            max_tasks_per_child=max_tasks_per_child,
            worker_threads=worker_threads,
            index_with_generator=index_with_generator,
            pbar=pbar,
            mp_start_method=mp_start_method,
        )
        if out is not None:
            lead = (slice(None),) * d
            for index, result in zip(indices, results):
                out[lead + (index,)] = result
            return out
        gathered = list(results)
        if stacked and all(is_td(r) for r in gathered):
            # elements of a lazy stack may differ in keys: dense where they agree, as upstream
            return best_intention_stack(gathered, d, stack)
        # torch's stubs type stack/cat as tensor-only; TensorDicts route through __torch_function__
        return torch.stack(gathered, d) if stacked else torch.cat(gathered, d)

    def map_iter(
        self,
        fn: Callable[[Any], Any],
        dim: int = 0,
        num_workers: int | None = None,
        *,
        shuffle: bool = False,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool: Any = None,
        generator: torch.Generator | None = None,
        max_tasks_per_child: int | None = None,
        worker_threads: int = 1,
        index_with_generator: bool = True,
        pbar: bool = False,
        mp_start_method: str | None = None,
    ) -> Iterator[Any]:
        """Yield `fn(chunk)` for each chunk along `dim`, computed in a process pool, as they come.

        The streaming form of `map`: nothing is gathered, so it can serve as a
        data loader over a (memory-mapped) TensorDict. Leaves go to shared
        memory first (unless shared or memory-mapped already), and chunks
        reach the workers as slices. Arguments are checked on the call; the
        pool starts with the first `next()`.

        Args:
            fn: a picklable function of a chunk; `None` yields the chunk itself.
            dim: the dim along which the chunks are cut.
            num_workers: the pool size (default: the CPU count); ignored with `pool`.
            shuffle: chunks take their elements from a random permutation
                (drawn from `generator`) and results come in the order the
                workers finish them. Needs `index_with_generator=True`.
            chunksize: elements per chunk (`0`: one element at a time, unbound).
            num_chunks: the number of chunks instead (default: one per worker).
            pool: an existing `multiprocessing` pool (not closed here; its
                workers are not seeded).
            generator: draws the workers' base seed (worker `i` seeds torch
                with `seed + i`) and the shuffle. Default: a fresh
                `torch.Generator()`, so the seeds are the same on every call.
            max_tasks_per_child: replace a worker after this many chunks.
            worker_threads: torch intra-op threads per worker.
            index_with_generator: cut each chunk when the pool asks for it
                instead of all before the job starts.
            pbar: show a tqdm progress bar.
            mp_start_method: the multiprocessing start method.

        Yields:
            The result of `fn` for each chunk.

        Raises:
            RuntimeError: `shuffle` without `index_with_generator`, or on a
                `TensorDictParams` (parameters cannot cross processes).
            ValueError: both `chunksize` and `num_chunks`, or a bad count.
        """
        _refuse_params(self)
        d = normalize_dim(dim, self.batch_dims)
        if shuffle and not index_with_generator:
            raise RuntimeError("map_iter: shuffle=True needs index_with_generator=True")
        workers = num_workers if num_workers is not None else (os.cpu_count() or 1)
        if pool is None and workers <= 0:
            raise ValueError(f"map_iter: num_workers must be positive, got {workers}")
        size = self.batch_size[d]
        indices, _ = _chunk_indices(size, chunksize, num_chunks, workers)
        gen = generator if generator is not None else torch.Generator()
        if shuffle:
            order = torch.randperm(size, generator=gen)
            indices = [order[i] for i in indices]
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=gen).item())
        _share(self)
        lead = (slice(None),) * d
        chunks: Iterator[Any] = (self[lead + (i,)] for i in indices)
        if not index_with_generator:
            chunks = iter(list(chunks))
        return _map_iter(
            _Call(fn, by_value=max_tasks_per_child is not None),
            enumerate(chunks),
            len(indices),
            unordered=shuffle,
            pool=pool,
            workers=workers,
            seed=seed,
            max_tasks_per_child=max_tasks_per_child,
            worker_threads=worker_threads,
            pbar=pbar,
            mp_start_method=mp_start_method,
        )
