"""A memory-mapped 100k-row data set read by a `DataLoader` with 2 worker processes.

The memory-mapped TensorDict is the dataset itself: the loader calls its
`__getitems__` with a whole batch of indices (one indexing op on the mapped
files per batch) and the default collate returns that batch as is. Workers
started with `fork` inherit the mapping; with `spawn` the TensorDict is
pickled by file name and mapped again. Every row must arrive exactly once,
with its own values.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info

from td_core import TensorDict
from td_memmap import MemoryMappedTensor

ROWS = 100_000
BATCH = 2_000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> TensorDict:
    row = torch.arange(ROWS)
    data = TensorDict(
        row=row,
        image=(row.view(-1, 1, 1) % 251).to(torch.uint8).expand(ROWS, 4, 4).contiguous(),
        label=row % 10,
        meta={"weight": row.double() / ROWS},
        batch_size=[ROWS],
    )
    path: pathlib.Path = tmp_path_factory.mktemp("dataset")
    return data.memmap(path / "rows", num_threads=2)


def tag_worker(batch: TensorDict) -> TensorDict:
    """A collate that records which worker read the batch."""
    info = get_worker_info()
    batch["worker"] = torch.full(batch.batch_size, -1 if info is None else info.id)
    return batch


def check_rows(batches: list[TensorDict]) -> TensorDict:
    assert all(isinstance(b, TensorDict) and b.batch_size == (BATCH,) for b in batches)
    seen = torch.cat(batches)
    assert seen.batch_size == (ROWS,)
    # every row exactly once
    counts = torch.bincount(seen["row"], minlength=ROWS)
    assert bool((counts == 1).all()), f"{int((counts != 1).sum())} rows missing or repeated"
    # and each with its own values
    row = seen["row"]
    assert torch.equal(seen["image"][:, 0, 0], (row % 251).to(torch.uint8))
    assert torch.equal(seen["image"].amin((1, 2)), seen["image"].amax((1, 2)))
    assert torch.equal(seen["label"], row % 10)
    assert torch.equal(seen["meta", "weight"], row.double() / ROWS)
    return seen


def test_dataset_is_memory_mapped(dataset: TensorDict) -> None:
    assert len(dataset) == ROWS
    assert all(isinstance(v, MemoryMappedTensor) for v in dataset.values(True, True))
    batch = dataset.__getitems__([3, 99_999, 0])
    assert isinstance(batch, TensorDict) and batch["row"].tolist() == [3, 99_999, 0]


def loader(dataset: TensorDict, context: str, **kwargs: object) -> DataLoader:
    return DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=context,
        generator=torch.Generator().manual_seed(0),
        timeout=120,
        **kwargs,  # type: ignore[arg-type]
    )


def test_fork_workers_read_every_row_once(dataset: TensorDict) -> None:
    seen = check_rows(list(loader(dataset, "fork", collate_fn=tag_worker)))
    assert set(seen["worker"].tolist()) == {0, 1}  # both workers did read


def test_spawn_workers_read_every_row_once(dataset: TensorDict) -> None:
    # spawned workers get the data set pickled (as file names) and use the default collate
    check_rows(list(loader(dataset, "spawn")))
