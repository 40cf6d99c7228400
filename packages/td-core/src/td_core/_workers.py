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
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch

from td_core._map import tensor_leaves
from td_core._utils import normalize_dim

if TYPE_CHECKING:
    from td_core._base import TensorDictBase

__all__ = ["map_td"]


class _WorkerFailure:
    """What a worker sends back instead of raising: the formatted traceback."""

    def __init__(self, index: int, text: str) -> None:
        self.index = index
        self.text = text


class _Call:
    """A picklable wrapper that runs `fn` on one chunk and catches its errors."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, job: tuple[int, TensorDictBase]) -> Any:
        index, chunk = job
        try:
            out = self.fn(chunk)
        except Exception:
            return _WorkerFailure(index, traceback.format_exc())
        return chunk if out is None else out


def _chunks(
    td: TensorDictBase, dim: int, chunksize: int | None, num_chunks: int | None, workers: int
) -> tuple[list[Any], bool]:
    """The pieces handed to workers, cut by basic indexing only.

    Slices (not `split`/`unbind`) keep memory-mapped leaves as memory-mapped
    views, which pickle as a file name and offset instead of as data.
    """
    size = td.batch_size[dim]
    if chunksize is not None and num_chunks is not None:
        raise ValueError("map: pass chunksize or num_chunks, not both")
    lead = (slice(None),) * dim
    if chunksize == 0:
        return [td[lead + (i,)] for i in range(size)], True
    if chunksize is not None:
        if chunksize < 0:
            raise ValueError(f"map: chunksize must be >= 0, got {chunksize}")
        step = chunksize
    else:
        count = num_chunks if num_chunks is not None else workers
        if count <= 0:
            raise ValueError(f"map: num_chunks must be positive, got {count}")
        step = max(1, math.ceil(size / count))
    return [td[lead + (slice(start, start + step),)] for start in range(0, size, step)], False


def _init_worker(threads: int) -> None:
    # A forked child inherits the parent's OpenMP state; running a multi-threaded
    # op there can deadlock (libgomp is not fork-safe). One intra-op thread per
    # worker avoids that and is what a pool of workers wants anyway.
    torch.set_num_threads(threads)


def _share(td: TensorDictBase) -> None:
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


def map_td(
    td: TensorDictBase,
    fn: Callable[[Any], Any],
    dim: int = 0,
    num_workers: int | None = None,
    *,
    chunksize: int | None = None,
    num_chunks: int | None = None,
    pool: Any = None,
    pbar: bool = False,
    mp_start_method: str | None = None,
    worker_threads: int = 1,
) -> TensorDictBase:
    """See `TensorDictBase.map`."""
    d = normalize_dim(dim, td.batch_dims)
    workers = num_workers if num_workers is not None else (os.cpu_count() or 1)
    if workers <= 0:
        raise ValueError(f"map: num_workers must be positive, got {workers}")
    _share(td)
    chunks, stacked = _chunks(td, d, chunksize, num_chunks, workers)
    call = _Call(fn)
    jobs = list(enumerate(chunks))
    if pool is not None:
        results = list(_progress(pool.imap(call, jobs), len(jobs), pbar))
    else:
        import torch.multiprocessing as mp

        context = mp.get_context(mp_start_method)
        with context.Pool(
            workers, initializer=_init_worker, initargs=(worker_threads,)
        ) as own_pool:
            results = list(_progress(own_pool.imap(call, jobs), len(jobs), pbar))
    for result in results:
        if isinstance(result, _WorkerFailure):
            raise RuntimeError(
                f"map: the function failed on chunk {result.index}; worker traceback:\n{result.text}"
            )
    # torch's stubs type stack/cat as tensor-only; TensorDicts route through __torch_function__
    out = torch.stack(results, d) if stacked else torch.cat(results, d)
    return cast("TensorDictBase", out)
